#version 450
// Online softmax (Milakov & Gimelshein, Algorithm 1 of the online-softmax post): one
// pass computes the running maximum m and the running sum l, then a second pass writes
// exp(x - m) / l. Each invocation reads one vec4 per step and rescales its sum by
// exp(m_old - m_new) once per vec4, not per element, without a branch: the rescale costs
// one exp per four elements. Partial (m, l) states merge across invocations and across
// workgroups with l = l_a exp(m_a - M) + l_b exp(m_b - M).
//
// STAGE 0: one workgroup per row, stats + write in one dispatch.
// STAGE 1: partial (m, l) per chunk into `parts`.   STAGE 2: merge the row's parts, write.
#extension GL_GOOGLE_include_directive : require
#include "softmax_common.glsl"

void online_stats(uint begin, uint end, out float m, out float l, out uint bad) {
    m = NEG_INF; bad = 0u;
    KahanSum acc = KahanSum(0.0, 0.0);
    uint step = gl_WorkGroupSize.x;
    uint i = begin + gl_LocalInvocationID.x;
    // Four loads per step share one rescale: 17 exps per 16 elements instead of 20.
    for (; i + 3u * step < end; i += 4u * step) {
        VT v0 = X(i);
        VT v1 = X(i + step);
        VT v2 = X(i + 2u * step);
        VT v3 = X(i + 3u * step);
        bad |= is_bad(v0) | is_bad(v1) | is_bad(v2) | is_bad(v3);
        float M = max(max(m, max(hmax(v0), hmax(v1))), max(hmax(v2), hmax(v3)));
        // No branch on "did the maximum grow": the rescale factor is exp(0) = 1 when it
        // did not, and 0 while nothing finite has been seen (the sum is 0 then anyway).
        // A -inf entry adds exp(-inf) = 0 (a denormal at most where exp clamps).
        kahan_scale(acc, m == NEG_INF ? 0.0 : exp(m - finite_max(M)));
        float f = finite_max(M);
        kahan_add(acc, hsum((exp(v0 - f) + exp(v1 - f)) + (exp(v2 - f) + exp(v3 - f))));
        m = M;
    }
    for (; i < end; i += step) {  // the last up to three steps
        VT v = X(i);
        bad |= is_bad(v);
        float M = max(m, hmax(v));
        kahan_scale(acc, m == NEG_INF ? 0.0 : exp(m - finite_max(M)));
        kahan_add(acc, hsum(exp(v - finite_max(M))));
        m = M;
    }
    l = acc.sum;
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
