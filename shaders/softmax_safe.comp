#version 450
// Safe (three-pass) softmax, the baseline: pass 1 finds the row maximum M, pass 2 sums
// exp(x - M), pass 3 writes exp(x - M) / L. Each pass reads the row again.
//
// STAGE 0: one workgroup per row, the three passes in one dispatch.
// STAGE 1: partial max per chunk.  STAGE 2: row max from the parts, partial sums.
// STAGE 3: merge the row's parts, write.
#extension GL_GOOGLE_include_directive : require
#include "softmax_common.glsl"

void chunk_max(uint begin, uint end, out float m, out uint bad) {
    m = NEG_INF; bad = 0u;
    for (uint i = begin + gl_LocalInvocationID.x; i < end; i += gl_WorkGroupSize.x) {
        VT v = X(i);
        bad |= is_bad(v);
        m = max(m, hmax(v));
    }
    float l = 0.0;
    workgroup_merge(m, l, bad);
}

float chunk_sum(uint begin, uint end, float M) {
    KahanSum acc = KahanSum(0.0, 0.0);
    if (M != NEG_INF) {
        for (uint i = begin + gl_LocalInvocationID.x; i < end; i += gl_WorkGroupSize.x)
            kahan_add(acc, hsum(shifted_exp(X(i), M)));
    }
    float l = acc.sum;
    float m = M; uint bad = 0u;
    workgroup_merge(m, l, bad);
    return l;
}

void main() {
    uint row = gl_WorkGroupID.y + pc.row_offset;
    uint begin, end;
    chunk_range(row, begin, end);
#if STAGE == 0
    float M; uint bad;
    chunk_max(begin, end, M, bad);
    float L = chunk_sum(begin, end, M);
    write_probabilities(begin, end, M, L, bad);
#elif STAGE == 1
    float M; uint bad;
    chunk_max(begin, end, M, bad);
    store_part(row, M, 0.0, bad);
#elif STAGE == 2
    float M, L; uint B;
    merge_parts(row, M, L, B);  // L is 0 here: only the maximum is merged
    float l = chunk_sum(begin, end, M);
    store_part(row, M, l, B);
#else
    float M, L; uint B;
    merge_parts(row, M, L, B);
    write_probabilities(begin, end, M, L, B);
#endif
}
