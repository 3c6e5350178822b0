#version 450
// Per-tensor quantization of an activation vector on the device, in one workgroup:
// the range of x, then s_x (and z_x), then the packed values, all in one dispatch.
// BATCH 1 (vkcore.kernels.matvec_batch): the columns of an (n, b) matrix, each on its own
// (workgroup y = column, read with the strides given); each column's output (header, then
// its values) starts `col_words` words after the previous one: 4 header words (s_x, z_x,
// 0, 0), then the packed codes as in the vector layout. ACT 0 there copies the float bits
// of each column unchanged into that layout (no header), zero padded.
//
// ACT 1 (int8, symmetric):   s_x = max|x| * c,  c = float32(1/127),  q in [-127, 127]
// ACT 2 (uint8, asymmetric): lo = min(x, 0), hi = max(x, 0), s_x = hi * c - lo * c,
//                            c = float32(1/255), z_x = roundEven(-lo / s_x), q in [0, 255]
// q = clamp(roundEven(x / s_x) + z_x, qmin, qmax) with the exact quotient. Subnormal x
// count as 0; a range below 2^-96 gives s_x = 1, z_x = 0 and all q = 0. Padding words
// (columns past n) are 0. A NaN or infinity anywhere in x gives s_x = NaN, z_x = 0 and
// all q = 0, so every output of the matvec is NaN. Output: s_x, z_x, two pad words, then
// the packed values.
#extension GL_GOOGLE_include_directive : require
#include "quant_common.glsl"

layout(local_size_x_id = 0) in;
#include "workgroup_reduce.glsl"

#ifndef BATCH
#define BATCH 0
#endif
layout(std430, binding = 0) readonly buffer X { float x[]; };
#if BATCH
layout(std430, binding = 1) writeonly buffer QX { uint out_w[]; };
#else
layout(std430, binding = 1) writeonly buffer QX { float s_x; int z_x; int pad0; int pad1; uint qx[]; };
#endif

layout(push_constant) uniform Push {
    uint n;        // length of x
    uint words;    // packed words to write (row stride / 4); BATCH ACT 0: floats per column
    float c;       // float32(1/127) or float32(1/255), exact bits from the host
    float tiny;    // 2^-96
#if BATCH
    uint x_elem;    // floats between x[i] and x[i + 1] of one column
    uint x_col;     // floats between the first elements of two columns
    uint col_words; // output words per column (4 header words + `words`; ACT 0: `words`)
#endif
} pc;

#if BATCH
#define COL gl_WorkGroupID.y
#define XAT(i) x[COL * pc.x_col + (i) * pc.x_elem]
#define OUT_BASE (COL * pc.col_words)
#else
#define XAT(i) x[i]
#endif

shared float sh_lo[gl_WorkGroupSize.x];
shared float sh_hi[gl_WorkGroupSize.x];
shared uint sh_bad[gl_WorkGroupSize.x];
#define RANGE_SLOT(a, b) sh_lo[a] = min(sh_lo[a], sh_lo[b]); sh_hi[a] = max(sh_hi[a], sh_hi[b]); sh_bad[a] |= sh_bad[b]

// 1 for NaN and +-infinity, decided on the bits (min/max may ignore a NaN).
uint non_finite(float v) { return uint((floatBitsToUint(v) & 0x7f800000u) == 0x7f800000u); }

void main() {
    uint lane = gl_LocalInvocationID.x;
#if BATCH && ACT == 0
    // Float activations: the bits copied as they are (no arithmetic, so nothing is
    // flushed or rounded), the padding past n zero.
    for (uint i = lane; i < pc.words; i += gl_WorkGroupSize.x) {
        out_w[OUT_BASE + i] = i < pc.n ? floatBitsToUint(XAT(i)) : 0u;
    }
#else
    float lo = 0.0, hi = 0.0;
    uint bad = 0u;
    for (uint i = lane; i < pc.n; i += gl_WorkGroupSize.x) {
        float v = flush_subnormal(XAT(i));
        bad |= non_finite(v);
        lo = min(lo, v);
        hi = max(hi, v);
    }
    // Any workgroup size (workgroup_reduce.glsl); every invocation gets the result.
#if SUBGROUP
    if (one_subgroup()) {
        lo = subgroupMin(lo);
        hi = subgroupMax(hi);
        bad = subgroupOr(bad);
    } else
#endif
    {
        sh_lo[lane] = lo; sh_hi[lane] = hi; sh_bad[lane] = bad;
        barrier();
        TREE_REDUCE(RANGE_SLOT)
        lo = sh_lo[0]; hi = sh_hi[0]; bad = sh_bad[0];
    }

#if ACT == 1
    const int qmin = -127, qmax = 127;
    float amax = max(hi, -lo);
    precise float s = amax * pc.c;
    int z = 0;
    bool empty = amax < pc.tiny;
#else
    const int qmin = 0, qmax = 255;
    precise float s = hi * pc.c - lo * pc.c;
    bool empty = max(hi, -lo) < pc.tiny;
    int z = 0;
#endif
    if (bad != 0u) { lo = 0.0; hi = 0.0; empty = true; }
    if (empty) s = 1.0;
    // Normalize s into [1, 2); scaling both sides by 2^e keeps every quotient exact.
    int ex;
    float mant = frexp(s, ex);
    float s_norm = ldexp(mant, 1);
    int e = 1 - ex;
#if ACT == 2
    if (!empty) z = clamp(int(exact_round(ldexp(-lo, e), s_norm)), qmin, qmax);
#endif
    float s_out = bad != 0u ? uintBitsToFloat(0x7fc00000u) : s;
#if BATCH
    if (lane == 0u) {
        out_w[OUT_BASE] = floatBitsToUint(s_out);
        out_w[OUT_BASE + 1u] = uint(z);
        out_w[OUT_BASE + 2u] = 0u;
        out_w[OUT_BASE + 3u] = 0u;
    }
#else
    if (lane == 0u) { s_x = s_out; z_x = z; pad0 = 0; pad1 = 0; }
#endif
    for (uint word = lane; word < pc.words; word += gl_WorkGroupSize.x) {
        uint packed = 0u;
        for (uint k = 0u; k < 4u; ++k) {
            uint col = word * 4u + k;
            int v = 0;
            if (col < pc.n && !empty) {
                float xv = ldexp(flush_subnormal(XAT(col)), e);
                v = clamp(int(exact_round(xv, s_norm)) + z, qmin, qmax);
            }
            packed |= (uint(v) & 0xffu) << (8u * k);
        }
#if BATCH
        out_w[OUT_BASE + 4u + word] = packed;
#else
        qx[word] = packed;
#endif
    }
#endif
}
