#version 450
// Batched products Y = W_hat X + b for X of b columns (vkcore.kernels.matvec_batch), over
// the weight layout of matvec.comp: rows padded to whole 16-byte blocks (16 int8/uint8
// codes, or 32 4-bit codes two per byte when PACKED: column 2k in the low nibble of byte
// k), or 16-float blocks for float32 weights; padding holds the last group's zero point.
//
// v_ij = Q_ij - z_ig for column j in scale group g (G groups of `group_cols` columns; the
// last one also takes the padding). Per column c of X:
// MODE 0: float activations:  y_ic = sum_g s_ig * (sum_{j in g} v_ij x_jc) + b_i   (float32)
// MODE 1: int8 activations:   acc_igc = sum_{j in g} v_ij qx_jc                   (int32, exact)
// MODE 2: uint8 activations:  acc_igc = sum_{j in g} v_ij (qx_jc - z_xc)          (int32, exact;
//         the same integer as sum v qx - z_x V_ig, with no row sums to keep)
//         Each block's 16 (32) products are summed in float32 (exact: integers below
//         2^24 in magnitude), converted to int32 and added to the int32 accumulator.
//         t_igc = float(s_ig * s_xc) * float(acc_igc), each step rounded once, and
//         y_ic = (...((t_i0c + t_i1c) + t_i2c) ... + t_i,G-1,c) + b_i  in increasing g.
// MODE 3: float32 weights:    y_ic = sum_j W_ij x_jc + b_i                         (the baseline)
//
// Activations (written by quantize_act.comp with BATCH 1): column c starts at texel
// c * act_stride; integer modes: one header texel (s_x bits, z_x) then the codes, 16 a
// texel; float modes: the floats, 4 a texel. Both are padded with zeros to the rows'
// stored length, so a block of weights meets whole texels of every column.
//
// A workgroup computes ROWS rows for every column, COLS columns at a time: its invocations
// stride over the 16-byte blocks of one group, unpack the ROWS rows' block once (to float)
// and use it for COLS columns; then each (row, column) sum is reduced over the workgroup.
// After the first tile of COLS columns the rows' weights come from the cache, not memory.
// The host may split the groups and the columns over several dispatches (each continues
// the sequential group sum stored in y), keeping every invocation's loop iterations
// bounded: llvmpipe ends the loops of an invocation after 65,535 iterations in all.
// (Measured on lavapipe: one invocation per row with every invocation reading the same
// activations was slower; its loads are per invocation either way.)
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;
#include "workgroup_reduce.glsl"
#include "float_controls.glsl"  // RTE 1 only in the integer modes, whose y is promised exact
layout(constant_id = 1) const int ROWS = 4;
layout(constant_id = 2) const int COLS = 8;

#ifndef PACKED
#define PACKED 0
#endif
#define INT_MODE (MODE == 1 || MODE == 2)
#if PACKED
#define CPB 32u  // columns per 16-byte block
#else
#define CPB 16u
#endif
#define VPB 8  // the most 4-column vectors per block (PACKED); NV of them are used
#if PACKED
#define NV 8
#else
#define NV 4
#endif

#if TEXEL
// The driver's texture path (vectorized on lavapipe; its storage-buffer loads are not).
#extension GL_EXT_samplerless_texture_functions : require
#if MODE == 3
layout(binding = 0) uniform textureBuffer w_texels;
#define WF(i) texelFetch(w_texels, int(i))
#else
layout(binding = 0) uniform utextureBuffer w_texels;
#define WQ(i) texelFetch(w_texels, int(i))
#endif
#if INT_MODE
layout(binding = 3) uniform utextureBuffer a_texels;
#define AQ(i) texelFetch(a_texels, int(i))
#else
layout(binding = 3) uniform textureBuffer a_texels;
#define AF(i) texelFetch(a_texels, int(i))
#endif
#else
#if MODE == 3
layout(std430, binding = 0) readonly buffer Wt { vec4 wf[]; };
#define WF(i) wf[i]
#else
layout(std430, binding = 0) readonly buffer Wt { uvec4 wq[]; };
#define WQ(i) wq[i]
#endif
#if INT_MODE
layout(std430, binding = 3) readonly buffer A { uvec4 aq[]; };
#define AQ(i) aq[i]
#else
layout(std430, binding = 3) readonly buffer A { vec4 af[]; };
#define AF(i) af[i]
#endif
#endif
layout(std430, binding = 1) readonly buffer S { float scale[]; };
layout(std430, binding = 2) readonly buffer Z { int zero_point[]; };
layout(std430, binding = 4) readonly buffer B { float bias[]; };
layout(std430, binding = 5) buffer Y { float y[]; };  // read back to continue the g sum

layout(push_constant) uniform Push {
    uint blocks;      // 16-byte (MODE 3: 16-float) blocks per stored row
    uint rows;        // rows in this weight chunk
    uint vec_row0;    // row of the chunk's first row in the bound bias and y
    uint par_row0;    // row of the chunk's first row in the bound scales and zero points
    uint cols;        // b
    uint act_stride;  // activation texels per column
    uint groups;      // G: scale groups per row
    uint group_cols;  // columns per group
    uint per_channel; // 0: one scale and zero point for the tensor
    uint has_bias;
    uint g_begin;     // the groups this dispatch adds: [g_begin, g_end), continuing the
    uint g_end;       // sum stored in y when g_begin > 0, adding the bias when g_end = G
    uint c_begin;     // the columns it computes: [c_begin, c_end)
    uint c_end;
} pc;

#if INT_MODE
#define ACC_T int
#define ZERO 0
#else
#define ACC_T float
#define ZERO 0.0
#endif

shared ACC_T sh_acc[gl_WorkGroupSize.x];

// Sum over the workgroup, for any workgroup size (workgroup_reduce.glsl); every
// invocation gets it.
ACC_T workgroup_sum(ACC_T v) {
#if SUBGROUP
    if (one_subgroup()) return subgroupAdd(v);
#endif
    sh_acc[gl_LocalInvocationID.x] = v;
    barrier();
#define SUM_SLOT(a, b) sh_acc[a] += sh_acc[b]
    TREE_REDUCE(SUM_SLOT)
#undef SUM_SLOT
    ACC_T total = sh_acc[0];
    barrier();
    return total;
}

uint param(uint lr, uint g) {
    return pc.per_channel != 0u ? (pc.par_row0 + lr) * pc.groups + g : 0u;
}

#if MODE != 3
// Codes 4e..4e+3 of a 32-bit word as integers (4-bit: nibbles, 8-bit: bytes).
ivec4 codes4(uint word, uint e) {
#if PACKED
    int off = int(16u * e);
#if WSIGNED
    int s = int(word);
    return ivec4(bitfieldExtract(s, off, 4), bitfieldExtract(s, off + 4, 4),
                 bitfieldExtract(s, off + 8, 4), bitfieldExtract(s, off + 12, 4));
#else
    return ivec4(bitfieldExtract(word, off, 4), bitfieldExtract(word, off + 4, 4),
                 bitfieldExtract(word, off + 8, 4), bitfieldExtract(word, off + 12, 4));
#endif
#else
#if WSIGNED
    int s = int(word);
    return ivec4(bitfieldExtract(s, 0, 8), bitfieldExtract(s, 8, 8), bitfieldExtract(s, 16, 8),
                 bitfieldExtract(s, 24, 8));
#else
    return ivec4(bitfieldExtract(word, 0, 8), bitfieldExtract(word, 8, 8),
                 bitfieldExtract(word, 16, 8), bitfieldExtract(word, 24, 8));
#endif
#endif
}
#endif

#if INT_MODE
// The 4 activation codes of a word minus z_x, as floats (exact small integers).
vec4 acts4(uint word, float zx) {
#if MODE == 1
    int s = int(word);
    return vec4(ivec4(bitfieldExtract(s, 0, 8), bitfieldExtract(s, 8, 8), bitfieldExtract(s, 16, 8),
                      bitfieldExtract(s, 24, 8)));
#else
    return vec4(uvec4(bitfieldExtract(word, 0, 8), bitfieldExtract(word, 8, 8),
                      bitfieldExtract(word, 16, 8), bitfieldExtract(word, 24, 8))) - vec4(zx);
#endif
}
#endif

void main() {
    uint tile = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    uint first = tile * uint(ROWS);
    if (first >= pc.rows) return;  // whole workgroup: uniform
    uint lane = gl_LocalInvocationID.x;
    uint stride = gl_WorkGroupSize.x;
    // Groups that do not start on a block boundary share blocks: codes of the block
    // outside the group being summed are masked to 0 (and, MODE 0, their activations to a
    // signed zero, so that an inf or NaN there never meets a masked 0).
    bool masked = pc.groups > 1u && pc.group_cols % CPB != 0u;
    uint lr[ROWS];
    [[unroll]] for (int r = 0; r < ROWS; ++r) {
        lr[r] = min(first + uint(r), pc.rows - 1u);  // rows past the end redo the last one
    }
    for (uint c0 = pc.c_begin; c0 < pc.c_end; c0 += uint(COLS)) {
        uint col[COLS];
#if INT_MODE
        float sx[COLS];
        float zx[COLS];
#endif
        [[unroll]] for (int c = 0; c < COLS; ++c) {
            col[c] = min(c0 + uint(c), pc.c_end - 1u);  // columns past the end redo the last
#if INT_MODE
            uvec4 head = AQ(col[c] * pc.act_stride);
            sx[c] = uintBitsToFloat(head.x);
            zx[c] = float(int(head.y));
#endif
        }
        float yv[ROWS][COLS];
        if (pc.g_begin > 0u) {  // the sum of the groups before, stored by the last dispatch
            [[unroll]] for (int r = 0; r < ROWS; ++r) {
                [[unroll]] for (int c = 0; c < COLS; ++c) {
                    yv[r][c] = y[(pc.vec_row0 + lr[r]) * pc.cols + col[c]];
                }
            }
        }
        for (uint g = pc.g_begin; g < pc.g_end; ++g) {
            uint lo = g * pc.group_cols;
            uint hi = g + 1u == pc.groups ? pc.blocks * CPB : lo + pc.group_cols;
            int z[ROWS];
            ACC_T acc[ROWS][COLS];
            [[unroll]] for (int r = 0; r < ROWS; ++r) {
#if ASYM
                z[r] = zero_point[param(lr[r], g)];
#else
                z[r] = 0;
#endif
                [[unroll]] for (int c = 0; c < COLS; ++c) acc[r][c] = ZERO;
            }
            for (uint blk = lo / CPB + lane; blk < (hi + CPB - 1u) / CPB; blk += stride) {
#if MODE != 3
                // Masked columns: the block's columns inside [lo, hi) (`masked` only).
                bvec4 inside[NV];
                if (masked) {  // uniform
                    [[unroll]] for (int v = 0; v < NV; ++v) {
                        uvec4 j = uvec4(blk * CPB + uint(4 * v)) + uvec4(0u, 1u, 2u, 3u);
                        inside[v] = bvec4(uvec4(greaterThanEqual(j, uvec4(lo))) &
                                          uvec4(lessThan(j, uvec4(hi))));
                    }
                }
#endif
                // The block of every row, as v = Q - z (MODE 3: the floats).
                vec4 wv[ROWS][NV];
                [[unroll]] for (int r = 0; r < ROWS; ++r) {
#if MODE == 3
                    uint base = (lr[r] * pc.blocks + blk) * 4u;
                    [[unroll]] for (int v = 0; v < NV; ++v) wv[r][v] = WF(base + uint(v));
#else
                    uvec4 w = WQ(lr[r] * pc.blocks + blk);
                    [[unroll]] for (int v = 0; v < NV; ++v) {
                        ivec4 q = codes4(w[v * 4 / NV], uint(v % (NV / 4)));
#if ASYM
                        q -= ivec4(z[r]);
#endif
                        if (masked) q *= ivec4(inside[v]);  // uniform; exact integers
                        wv[r][v] = vec4(q);
                    }
#endif
                }
                [[unroll]] for (int c = 0; c < COLS; ++c) {
                    vec4 av[NV];
#if INT_MODE
                    uint abase = col[c] * pc.act_stride + 1u + blk * uint(NV / 4);  // after the header
                    [[unroll]] for (int t = 0; t < NV / 4; ++t) {
                        uvec4 a = AQ(abase + uint(t));
                        av[4 * t] = acts4(a.x, zx[c]);
                        av[4 * t + 1] = acts4(a.y, zx[c]);
                        av[4 * t + 2] = acts4(a.z, zx[c]);
                        av[4 * t + 3] = acts4(a.w, zx[c]);
                    }
#else
                    uint abase = col[c] * pc.act_stride + blk * uint(NV);
                    [[unroll]] for (int v = 0; v < NV; ++v) av[v] = AF(abase + uint(v));
#if MODE == 0
                    // A masked weight is 0, and 0 * inf or 0 * NaN would put a NaN into this
                    // group's sum for an x_j of another group. Masked activations keep only
                    // their sign bit: 0 * (+-0) gives the same signed zero as 0 * x_j for a
                    // finite x_j, so finite results are unchanged bit for bit.
                    if (masked) {  // uniform
                        [[unroll]] for (int v = 0; v < NV; ++v) {
                            uvec4 keep = mix(uvec4(0x80000000u), uvec4(0xffffffffu), inside[v]);
                            av[v] = uintBitsToFloat(floatBitsToUint(av[v]) & keep);
                        }
                    }
#endif
#endif
                    // Integer modes: every product and partial sum here is an integer below
                    // 2^24 in magnitude (at most 32 terms of |v a| <= 255 * 255), so these
                    // float32 sums are exact in any order and rounding mode.
                    [[unroll]] for (int r = 0; r < ROWS; ++r) {
                        vec4 s = wv[r][0] * av[0];
                        [[unroll]] for (int v = 1; v < NV; ++v) s += wv[r][v] * av[v];
                        acc[r][c] += ACC_T((s.x + s.y) + (s.z + s.w));
                    }
                }
            }
            // The group's sums, then its terms added in increasing g.
            [[unroll]] for (int r = 0; r < ROWS; ++r) {
#if MODE == 3
                float s_rg = 1.0;
#else
                float s_rg = scale[param(lr[r], g)];
#endif
                [[unroll]] for (int c = 0; c < COLS; ++c) {
                    ACC_T t = workgroup_sum(acc[r][c]);
#if INT_MODE
                    precise float sxy = s_rg * sx[c];
                    precise float term = sxy * float(t);
#else
                    precise float term = s_rg * t;
#endif
                    if (g == 0u) {
                        yv[r][c] = term;
                    } else {
                        precise float sum = yv[r][c] + term;
                        yv[r][c] = sum;
                    }
                }
            }
        }
        // Only invocation 0 writes, after its own reads of these entries (y is per row, and
        // a workgroup's rows are its own).
        if (lane == 0u) {
            bool done = pc.g_end == pc.groups;
            [[unroll]] for (int r = 0; r < ROWS; ++r) {
                uint row = pc.vec_row0 + first + uint(r);
                float b = pc.has_bias != 0u && first + uint(r) < pc.rows ? bias[row] : 0.0;
                [[unroll]] for (int c = 0; c < COLS; ++c) {
                    precise float out_v = yv[r][c] + b;
                    if (first + uint(r) < pc.rows && c0 + uint(c) < pc.c_end) {
                        y[row * pc.cols + c0 + uint(c)] = done ? out_v : yv[r][c];
                    }
                }
            }
        }
    }
}
