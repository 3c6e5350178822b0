#version 450
// Online softmax (Milakov & Gimelshein, Algorithm 1 of the online-softmax post): one
// pass computes the running maximum m and the running sum l, then a second pass writes
// exp(x - M) / L. Partial (m, l) states merge across invocations and workgroups with
// l = l_a exp(m_a - M) + l_b exp(m_b - M).
//
// Rescaling the sum whenever the maximum grows adds the error of one exp each time, and
// an ascending row grows it at every step (2^22 ascending floats summed to 1 +- 7.5e-5).
// So each invocation sums exp(v - r) against a reference r that moves only when a value
// exceeds it by more than MARGIN: terms stay below e^MARGIN (finite), and each rescale
// shrinks the older sum by at least e^-MARGIN, so older rescale errors fade instead of
// adding up. At the end the sum is expressed against the true maximum, one exp.
//
// STAGE 0: one workgroup per row, stats + write in one dispatch.
// STAGE 1: partial (m, l) per chunk into `parts`.   STAGE 2: merge the row's parts, write.
#extension GL_GOOGLE_include_directive : require
#include "softmax_common.glsl"

#ifndef MARGIN
#define MARGIN 4.0
#endif

// Adds the block (maximum M) to the sum against the reference r, moving r first when M
// is more than MARGIN above it (false while M is -inf or NaN: a NaN row is discarded).
#define ONLINE_BLOCK(M)                                                        \
    m = max(m, M);                                                             \
    if (M > r + MARGIN) {                                                      \
        kahan_scale(acc, r == NEG_INF ? 0.0 : exp(r - M));                     \
        r = M;                                                                 \
    }                                                                          \
    float f = finite_max(r);

void online_stats(uint begin, uint end, out float m, out float l, out uint bad) {
    m = NEG_INF; bad = 0u;
    float r = NEG_INF;  // the reference maximum of the sum
    KahanSum acc = KahanSum(0.0, 0.0);
    uint step = gl_WorkGroupSize.x;
    uint i = begin + gl_LocalInvocationID.x;
    for (; i + 3u * step < end; i += 4u * step) {
        VT v0 = X(i);
        VT v1 = X(i + step);
        VT v2 = X(i + 2u * step);
        VT v3 = X(i + 3u * step);
        bad |= is_bad(v0) | is_bad(v1) | is_bad(v2) | is_bad(v3);
        float M = max(max(hmax(v0), hmax(v1)), max(hmax(v2), hmax(v3)));
        ONLINE_BLOCK(M)
        // A -inf entry adds exp(-inf) = 0 (a denormal at most where exp clamps).
        kahan_add(acc, hsum((exp(v0 - f) + exp(v1 - f)) + (exp(v2 - f) + exp(v3 - f))));
    }
    for (; i < end; i += step) {  // the last up to three steps
        VT v = X(i);
        bad |= is_bad(v);
        float M = hmax(v);
        ONLINE_BLOCK(M)
        kahan_add(acc, hsum(exp(v - f)));
    }
    l = rescale(acc.sum, r, m);
    workgroup_merge(m, l, bad);
}

void main() {
    uint row = gl_WorkGroupID.y + pc.row_offset;
    uint begin, end;
    chunk_range(row, begin, end);
#if STAGE == 0
    float m, l; uint bad;
    online_stats(begin, end, m, l, bad);
    write_probabilities(begin, end, m, l, bad);
#elif STAGE == 1
    float m, l; uint bad;
    online_stats(begin, end, m, l, bad);
    store_part(row, m, l, bad);
#else
    float M, L; uint B;
    merge_parts(row, M, L, B);
    write_probabilities(begin, end, M, L, B);
#endif
}
