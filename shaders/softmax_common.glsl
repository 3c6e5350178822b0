// Shared by softmax_online.comp and softmax_safe.comp.
//
// Layout: x and y are rows of `n` elements (in units of VT: vec4 when VEC4 == 1, which
// needs the row length to be a multiple of 4, else float). A workgroup handles `chunk`
// units of one row; the workgroups of a dispatch cover a row (one workgroup per row:
// everything in one dispatch). Row index = gl_WorkGroupID.y + row_offset. A row has
// `nparts` partial states in `parts`; a dispatch writes those from `part0` on, so a row
// longer than one binding is done piece by piece (one dispatch per piece) and merged.
//
// Semantics (same in both algorithms): -inf entries give 0; a row of only -inf gives
// all zeros; a NaN or +inf anywhere in a row makes the whole row NaN; rows never
// influence each other.
//
// Any workgroup size works (workgroup_reduce.glsl). Speed notes (lavapipe): the workgroup
// size is a specialization constant; a workgroup of exactly one subgroup needs no shared
// memory and no barrier, and lavapipe runs it several times faster than a larger one. Consecutive invocations load
// consecutive vec4s. The write pass multiplies by 1/L instead of dividing.
layout(local_size_x_id = 0) in;
#include "workgroup_reduce.glsl"

#if VEC4
#define VT vec4
#else
#define VT float
#endif

#if TEXEL
// x read through a uniform texel buffer (rgba32f or r32f view): the driver's texture path.
// On lavapipe (Mesa 22.3) it is vectorized, while storage-buffer loads loop over the lanes:
// measured 3-4x the read bandwidth.
#extension GL_EXT_samplerless_texture_functions : require
layout(binding = 0) uniform textureBuffer x_texels;
#else
layout(std430, binding = 0) readonly buffer X { VT x[]; };
#endif
layout(std430, binding = 1) writeonly buffer Y { VT y[]; };
struct Part { float m; float l; uint bad; uint pad; };
layout(std430, binding = 2) buffer P { Part parts[]; };

layout(push_constant) uniform Push {
    uint n;          // row length in VT units
    uint row_offset; // first row of this dispatch
    uint chunk;      // VT units per workgroup
    uint nparts;     // partial states per row in `parts`
    uint x_offset;   // where x starts in its buffer, in VT units (imported host memory)
    uint part0;      // the part this dispatch's first workgroup writes
} pc;

// Element i of the flat input (x may start inside its buffer).
#if TEXEL && VEC4
#define X(i) texelFetch(x_texels, int(pc.x_offset + (i)))
#elif TEXEL
#define X(i) texelFetch(x_texels, int(pc.x_offset + (i))).x
#else
#define X(i) x[pc.x_offset + (i)]
#endif

#define NEG_INF uintBitsToFloat(0xff800000u)
#define QNAN uintBitsToFloat(0x7fc00000u)
#ifndef LOG
#define LOG 0
#endif

shared float sh_m[gl_WorkGroupSize.x];
shared float sh_l[gl_WorkGroupSize.x];
shared uint sh_bad[gl_WorkGroupSize.x];

// 1 when v holds a NaN or +inf (by bits: no reliance on comparisons with NaN).
uint is_bad(float v) {
    uint b = floatBitsToUint(v);
    return uint((b & 0x7fffffffu) > 0x7f800000u || b == 0x7f800000u);
}
uint is_bad(vec4 v) {
    uvec4 b = floatBitsToUint(v);
    bvec4 nan = greaterThan(b & 0x7fffffffu, uvec4(0x7f800000u));
    bvec4 pinf = equal(b, uvec4(0x7f800000u));
    return uint(any(nan) || any(pinf));
}
float hmax(float v) { return v; }
float hmax(vec4 v) { return max(max(v.x, v.y), max(v.z, v.w)); }
float hsum(float v) { return v; }
float hsum(vec4 v) { return (v.x + v.y) + (v.z + v.w); }

// exp(v - m) with -inf entries mapped to exactly 0.
float shifted_exp(float v, float m) { return mix(exp(v - m), 0.0, v == NEG_INF); }
vec4 shifted_exp(vec4 v, float m) { return mix(exp(v - m), vec4(0.0), equal(v, vec4(NEG_INF))); }

// A finite stand-in for a maximum that is still -inf, so that exp(v - m) and
// exp(m_old - m) never see -inf - (-inf); only rows or parts with no finite entry
// have such a maximum, and their sums are discarded or multiplied by 0.
float finite_max(float m) { return m == NEG_INF ? 0.0 : m; }

// l expressed relative to a larger maximum M; a state that has seen only -inf is 0.
float rescale(float l, float m, float M) { return m == NEG_INF ? 0.0 : l * exp(m - finite_max(M)); }

#include "kahan_sum.glsl"

#define MAX_SLOT(a, b) sh_m[a] = max(sh_m[a], sh_m[b]); sh_bad[a] |= sh_bad[b]
#define SUM_SLOT(a, b) sh_l[a] += sh_l[b]

// Merge of the (m, l, bad) states of all invocations; every invocation gets the result.
// The maximum first, then each sum rescaled to it once: one exp per state.
void workgroup_merge(inout float m, inout float l, inout uint bad) {
#if SUBGROUP
    if (one_subgroup()) {
        float M = subgroupMax(m);
        l = subgroupAdd(rescale(l, m, M));
        m = M;
        bad = subgroupOr(bad);
        return;
    }
#endif
    uint me = gl_LocalInvocationID.x;
    sh_m[me] = m;
    sh_bad[me] = bad;
    barrier();
    TREE_REDUCE(MAX_SLOT)
    float M = sh_m[0];
    sh_l[me] = rescale(l, m, M);
    barrier();
    TREE_REDUCE(SUM_SLOT)
    m = M; l = sh_l[0]; bad = sh_bad[0];
    barrier();  // slot 0 is read everywhere before a later merge writes it
}

// Merge of the partial states of one row written by the previous dispatches.
void merge_parts(uint row, out float M, out float L, out uint B) {
    M = NEG_INF; B = 0u;
    uint base = row * pc.nparts;
    for (uint c = 0u; c < pc.nparts; ++c) { M = max(M, parts[base + c].m); B |= parts[base + c].bad; }
    KahanSum acc = KahanSum(0.0, 0.0);  // thousands of parts when a row is very long
    for (uint c = 0u; c < pc.nparts; ++c) kahan_add(acc, rescale(parts[base + c].l, parts[base + c].m, M));
    L = acc.sum;
}

// Range [begin, end) of this workgroup's chunk, in VT units of the flat array.
void chunk_range(uint row, out uint begin, out uint end) {
    uint start = gl_WorkGroupID.x * pc.chunk;
    begin = row * pc.n + start;
    end = row * pc.n + min(start + pc.chunk, pc.n);
}

// LOG == 0: y = exp(x - M) / L, multiplied by k = 1 / L.
// LOG == 1: y = log_softmax(x) = (x - M) - log(L) with k = log(L); both roundings are at
// most half an ulp of the result (|x - M| and log(L) are both at most |y|), and a -inf
// entry gives -inf.
#if LOG
#define MASKED_ROW NEG_INF
float row_factor(float L) { return log(L); }
float written(float v, float M, float k) { return (v - M) - k; }
vec4 written(vec4 v, float M, float k) { return (v - M) - k; }
#else
#define MASKED_ROW 0.0
// 1/L from one Newton step on the division (Vulkan allows 2.5 ulp for 1.0 / L).
float row_factor(float L) {
    float q = 1.0 / L;
    precise float inv = fma(q, fma(-L, q, 1.0), q);
    return inv;
}
float written(float v, float M, float k) { return shifted_exp(v, M) * k; }
vec4 written(vec4 v, float M, float k) { return shifted_exp(v, M) * k; }
#endif

// The output (probabilities or their logarithms) over [begin, end), with the documented
// non-finite answers. M, L and bad are uniform in the workgroup, so each case is its own loop.
void write_probabilities(uint begin, uint end, float M, float L, uint bad) {
    uint step = gl_WorkGroupSize.x;
    uint first = begin + gl_LocalInvocationID.x;
    if (bad != 0u) {
        for (uint i = first; i < end; i += step) y[i] = VT(QNAN);
    } else if (M == NEG_INF) {  // every entry masked: probability 0, logarithm -inf
        for (uint i = first; i < end; i += step) y[i] = VT(MASKED_ROW);
    } else {
        float k = row_factor(L);
        uint i = first;
        // Four loads before four stores: a store between two loads keeps the next load
        // waiting (the compiler cannot tell the buffers apart); measured 10-20% faster.
        for (; i + 3u * step < end; i += 4u * step) {
            VT a0 = X(i), a1 = X(i + step), a2 = X(i + 2u * step), a3 = X(i + 3u * step);
            y[i] = written(a0, M, k);
            y[i + step] = written(a1, M, k);
            y[i + 2u * step] = written(a2, M, k);
            y[i + 3u * step] = written(a3, M, k);
        }
        for (; i < end; i += step) y[i] = written(X(i), M, k);  // up to three steps
    }
}

void store_part(uint row, float m, float l, uint bad) {
    if (gl_LocalInvocationID.x == 0u) {
        uint idx = row * pc.nparts + pc.part0 + gl_WorkGroupID.x;
        parts[idx].m = m; parts[idx].l = l; parts[idx].bad = bad; parts[idx].pad = 0u;
    }
}


