#version 450
// Matrix-vector products over row-major weights whose rows are padded to whole 16-byte
// blocks (int8/uint8 weights) or 16-float blocks (float32 weights), padding = the row's
// zero point, so padded columns contribute exactly 0.
//
// MODE 0: float activations:    y_i = s_i * sum_j (Q_ij - z_i) x_j + b_i   (float32 sums)
// MODE 1: int8 activations:     acc_i = sum_j (Q_ij - z_i) qx_j             (int32, exact)
// MODE 2: uint8 activations:    acc_i = sum_j (Q_ij - z_i) qx_j - z_x V_i   (int32, exact)
//         and then y_i = float(s_i * s_x) * float(acc_i) + b_i, each step rounded once.
// MODE 3: float32 weights:      y_i = sum_j W_ij x_j + b_i                   (the baseline)
// MODE 4: row sums:             V_i = sum_j (Q_ij - z_i), stored in `rowsum`.
//
// A workgroup computes ROWS consecutive rows; its invocations stride over the row's
// 16-element blocks, loading each activation block once for all ROWS rows (lavapipe loads
// memory lane by lane, so rows per activation load is what pays). Each row keeps one scalar
// accumulator per invocation (a vec4 one per row spills registers at ROWS = 16), and the
// row loops are unrolled so that those accumulators stay in registers. Integer
// results are exact as long as the true value fits in int32 (wrap-around arithmetic);
// the host refuses shapes where it might not.
//
// GROUPED 1 (matvec_groups.glsl): parameters per group of columns, and/or PACKED 1
// (two 4-bit codes per byte); the main() of that file replaces the one below.
// DOT 1 (8-bit storage, MODE 1 and 2): products of four packed bytes by OpSDot / OpUDot /
// OpSUDot (SPV_KHR_integer_dot_product) instead of bitfieldExtract; the host asks for it
// only where the device reports the feature.
#extension GL_EXT_control_flow_attributes : require
#ifndef GROUPED
#define GROUPED 0
#endif
#ifndef PACKED
#define PACKED 0
#endif
#ifndef DOT
#define DOT 0
#endif

layout(local_size_x_id = 0) in;
#extension GL_GOOGLE_include_directive : require
#include "workgroup_reduce.glsl"
#include "float_controls.glsl"  // RTE 1 only in the integer modes, whose y is promised exact
// Rows per workgroup: a specialization constant, so `vkcore tune` can choose it per device.
layout(constant_id = 1) const int ROWS = 16;

#if TEXEL
// Weights (and float activations) read through uniform texel buffers: the driver's texture
// path, vectorized on lavapipe, where storage-buffer loads loop over the lanes.
#extension GL_EXT_samplerless_texture_functions : require
#if MODE == 3
layout(binding = 0) uniform textureBuffer w_texels;
#define WF(i) texelFetch(w_texels, int(i))
#else
layout(binding = 0) uniform utextureBuffer w_texels;
#define WQ(i) texelFetch(w_texels, int(i))
#endif
#elif MODE == 3
layout(std430, binding = 0) readonly buffer Wt { vec4 wf[]; };
#define WF(i) wf[i]
#else
layout(std430, binding = 0) readonly buffer Wt { uvec4 wq[]; };
#define WQ(i) wq[i]
#endif
#if GROUPED && TEXEL
// Per-group parameters through texel buffers too: one gather per row and unit.
layout(binding = 1) uniform textureBuffer s_texels;
layout(binding = 2) uniform utextureBuffer z_texels;
#define SCALE(i) texelFetch(s_texels, int(i)).x
#define ZERO_POINT(i) int(texelFetch(z_texels, int(i)).x)
#else
layout(std430, binding = 1) readonly buffer S { float scale[]; };
layout(std430, binding = 2) readonly buffer Z { int zero_point[]; };
#define SCALE(i) scale[i]
#define ZERO_POINT(i) zero_point[i]
#endif
#if MODE == 4
layout(std430, binding = 3) writeonly buffer V { int rowsum[]; };
#else
layout(std430, binding = 3) readonly buffer V { int rowsum[]; };
#endif
#if MODE == 1 || MODE == 2
// Quantized activations: s_x and z_x, then the packed values (written by quantize_act).
#if TEXEL
layout(binding = 4) uniform utextureBuffer qx_texels;  // texel 0: s_x, z_x; then the blocks
#define QX(b) texelFetch(qx_texels, int(b) + 1)
#define S_X uintBitsToFloat(texelFetch(qx_texels, 0).x)
#define Z_X int(texelFetch(qx_texels, 0).y)
#else
layout(std430, binding = 4) readonly buffer QX { float s_x; int z_x; int pad0; int pad1; uvec4 qx[]; };
#define QX(b) qx[b]
#define S_X s_x
#define Z_X z_x
#endif
#else
layout(std430, binding = 4) readonly buffer XS { float xs[]; };
#endif
#if TEXEL && (MODE == 0 || MODE == 3)
layout(binding = 5) uniform textureBuffer x_texels;
#define XV(i) texelFetch(x_texels, int(i))
#else
layout(std430, binding = 5) readonly buffer XV { vec4 xv[]; };
#define XV(i) xv[i]
#endif
layout(std430, binding = 6) readonly buffer B { float bias[]; };
layout(std430, binding = 7) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint blocks;        // 16-byte blocks per stored row
    uint n;             // true row length
    uint rows;          // rows in this dispatch
    uint row0;          // index in y, bias (and row sums) of the first row
    uint group_stride;  // 1: scale per row, 0: one scale (GROUPED: parameters per row)
    uint has_bias;
    uint out_acc;       // 1: store the int32 accumulators (bit cast) instead of y
#if GROUPED
    uint groups;        // G: parameter groups per row
    uint group_cols;    // columns per group (the last one may be shorter)
    uint parts;         // P: pieces each group is cut into (units = G * P)
    uint part_cols;     // columns per piece
    uint prow0;         // index in the parameter buffers (rows of G) of the first row
    uint wrow0;         // row in the weight buffer of the first row
#endif
} pc;

#if MODE == 0 || MODE == 3
#define ACC_T float
#define ZERO 0.0
#define SUM4(v) (((v).x + (v).y) + ((v).z + (v).w))
#else
#define ACC_T int
#define ZERO 0
#define SUM4(v) (((v).x + (v).y) + ((v).z + (v).w))
#endif

shared ACC_T sh_acc[ROWS][gl_WorkGroupSize.x];

#if DOT
#extension GL_EXT_spirv_intrinsics : require
// OpSDot (4450), OpUDot (4451), OpSUDot (4452) on two 32-bit words of four 8-bit lanes
// (PackedVectorFormat4x8Bit = 0); capabilities DotProduct (6019) and
// DotProductInput4x8BitPacked (6018). OpSUDot: the first word signed, the second unsigned.
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot4x8(uint a, uint b, spirv_literal int fmt);
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4451)
uint udot4x8(uint a, uint b, spirv_literal int fmt);
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4452)
int sudot4x8(uint a, uint b, spirv_literal int fmt);

// sum_k W_k A_k of one weight word and one activation word (raw codes, no zero point).
int dot_word(uint w, uint a) {
#if MODE == 1 && WSIGNED
    return sdot4x8(w, a, 0);
#elif MODE == 1
    return sudot4x8(a, w, 0);
#elif WSIGNED
    return sudot4x8(w, a, 0);
#else
    return int(udot4x8(w, a, 0));
#endif
}

// sum_k (W_k - z) A_k over a 16-byte block: the raw dot products minus z times the sum
// of the activations (asum, 0 for symmetric weights); exact in int32 arithmetic, which
// wraps, as long as the caller's true total fits.
int dot_block(uvec4 w, uvec4 a, int z, int asum) {
    int d = (dot_word(w.x, a.x) + dot_word(w.y, a.y)) + (dot_word(w.z, a.z) + dot_word(w.w, a.w));
#if ASYM
    d -= z * asum;
#endif
    return d;
}

int act_sum(uint a) {
#if MODE == 1
    return sdot4x8(a, 0x01010101u, 0);
#else
    return int(udot4x8(a, 0x01010101u, 0));
#endif
}
#endif

// The 4 weights of one packed word as signed integers Q - z.
ivec4 weights4(uint word, int z) {
#if WSIGNED
    int s = int(word);
    ivec4 v = ivec4(bitfieldExtract(s, 0, 8), bitfieldExtract(s, 8, 8), bitfieldExtract(s, 16, 8),
                    bitfieldExtract(s, 24, 8));
#else
    ivec4 v = ivec4(bitfieldExtract(word, 0, 8), bitfieldExtract(word, 8, 8), bitfieldExtract(word, 16, 8),
                    bitfieldExtract(word, 24, 8));
#endif
#if ASYM
    v -= ivec4(z);
#endif
    return v;
}

ivec4 acts4(uint word) {
#if MODE == 1
    int s = int(word);
    return ivec4(bitfieldExtract(s, 0, 8), bitfieldExtract(s, 8, 8), bitfieldExtract(s, 16, 8),
                 bitfieldExtract(s, 24, 8));
#else
    return ivec4(bitfieldExtract(word, 0, 8), bitfieldExtract(word, 8, 8), bitfieldExtract(word, 16, 8),
                 bitfieldExtract(word, 24, 8));
#endif
}

int group_of(uint row) { return int(row * pc.group_stride); }

// Sum of the accumulator over the workgroup, for any workgroup size
// (workgroup_reduce.glsl); valid in invocation 0.
ACC_T workgroup_sum(ACC_T v, uint r) {
#if SUBGROUP
    if (one_subgroup()) return subgroupAdd(v);
#endif
    sh_acc[r][gl_LocalInvocationID.x] = v;
    barrier();
#define SUM_SLOT(a, b) sh_acc[r][a] += sh_acc[r][b]
    TREE_REDUCE(SUM_SLOT)
#undef SUM_SLOT
    ACC_T total = sh_acc[r][0];
    barrier();
    return total;
}

#if GROUPED
#include "matvec_groups.glsl"
#else
void main() {
    uint group = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    uint first = group * uint(ROWS);
    if (first >= pc.rows) return;  // whole workgroup: uniform
    uint lane = gl_LocalInvocationID.x;
    uint stride = gl_WorkGroupSize.x;
    int z[ROWS];
    ACC_T acc[ROWS];
    [[unroll]] for (int r = 0; r < ROWS; ++r) {
        uint lr = min(first + uint(r), pc.rows - 1u);  // rows past the end redo the last one
        z[r] = zero_point[group_of(pc.row0 + lr)];
        acc[r] = ZERO;
    }
    uint full = pc.blocks;
#if MODE == 0 || MODE == 3
    full = pc.n / 16u;  // the partial last block reads x element by element
#endif
    for (uint b = lane; b < full; b += stride) {
#if MODE == 0 || MODE == 3
        vec4 x0 = XV(4u * b), x1 = XV(4u * b + 1u), x2 = XV(4u * b + 2u), x3 = XV(4u * b + 3u);
#elif (MODE == 1 || MODE == 2) && DOT
        uvec4 a = QX(b);
        int as4 = 0;
#if ASYM
        as4 = act_sum(a.x) + act_sum(a.y) + act_sum(a.z) + act_sum(a.w);
#endif
#elif MODE == 1 || MODE == 2
        uvec4 a = QX(b);
        ivec4 a0 = acts4(a.x), a1 = acts4(a.y), a2 = acts4(a.z), a3 = acts4(a.w);
#endif
        [[unroll]] for (int r = 0; r < ROWS; ++r) {
            uint lr = min(first + uint(r), pc.rows - 1u);
#if MODE == 3
            uint base = (lr * pc.blocks + b) * 4u;
            acc[r] += SUM4(WF(base) * x0 + WF(base + 1u) * x1 + WF(base + 2u) * x2 + WF(base + 3u) * x3);
#else
            uvec4 w = WQ(lr * pc.blocks + b);
#if MODE == 0
            acc[r] += SUM4(vec4(weights4(w.x, z[r])) * x0 + vec4(weights4(w.y, z[r])) * x1
                         + vec4(weights4(w.z, z[r])) * x2 + vec4(weights4(w.w, z[r])) * x3);
#elif MODE == 4
            acc[r] += SUM4(weights4(w.x, z[r]) + weights4(w.y, z[r]) + weights4(w.z, z[r]) + weights4(w.w, z[r]));
#elif DOT
            acc[r] += dot_block(w, a, z[r], as4);
#else
            acc[r] += SUM4(weights4(w.x, z[r]) * a0 + weights4(w.y, z[r]) * a1 + weights4(w.z, z[r]) * a2
                         + weights4(w.w, z[r]) * a3);
#endif
#endif
        }
    }
#if MODE == 0 || MODE == 3
    // The partial last block: one invocation, element by element.
    if (full < pc.blocks && lane == full % stride) {
        for (uint j = full * 16u; j < pc.n; ++j) {
            float xj = xs[j];
            [[unroll]] for (int r = 0; r < ROWS; ++r) {
                uint lr = min(first + uint(r), pc.rows - 1u);
#if MODE == 3
                float wj = WF((lr * pc.blocks * 16u + j) / 4u)[j % 4u];
#else
                uint word = WQ(lr * pc.blocks + j / 16u)[(j / 4u) % 4u];
                float wj = float(weights4(word, z[r])[j % 4u]);
#endif
                acc[r] += wj * xj;
            }
        }
    }
#endif
    for (int r = 0; r < ROWS; ++r) {
        ACC_T t = workgroup_sum(acc[r], uint(r));
        uint lr = first + uint(r);
        if (lane != 0u || lr >= pc.rows) continue;
        uint row = pc.row0 + lr;
        float b = pc.has_bias != 0u ? bias[row] : 0.0;
#if MODE == 0
        precise float out_v = scale[group_of(row)] * t + b;
        y[row] = out_v;
#elif MODE == 3
        precise float out_v = t + b;
        y[row] = out_v;
#elif MODE == 4
        rowsum[row] = t;
#else
        int total = t;
#if MODE == 2
        total -= Z_X * rowsum[row];
#endif
        precise float sxy = scale[group_of(row)] * S_X;
        precise float prod = sxy * float(total);
        precise float out_v = prod + b;
        y[row] = pc.out_acc != 0u ? intBitsToFloat(total) : out_v;
#endif
    }
}
#endif
