#version 450
// Safe (three-pass) softmax, the baseline: pass 1 finds the row maximum M, pass 2 sums
// exp(x - M), pass 3 writes exp(x - M) / L. Each pass reads the row again. Its loops get
// the same treatment as the online kernel's (four loads per step), so that the benchmark
// compares the algorithms, not the loop shapes.
//
// STAGE 0: one workgroup per row, the three passes in one dispatch.
// STAGE 1: partial max per chunk.  STAGE 2: row max from the parts, partial sums.
// STAGE 3: merge the row's parts, write.
#extension GL_GOOGLE_include_directive : require
#include "softmax_common.glsl"

void chunk_max(uint begin, uint end, out float m, out uint bad) {
    m = NEG_INF; bad = 0u;
    uint step = gl_WorkGroupSize.x;
    uint i = begin + gl_LocalInvocationID.x;
    for (; i + 3u * step < end; i += 4u * step) {
        VT v0 = X(i), v1 = X(i + step), v2 = X(i + 2u * step), v3 = X(i + 3u * step);
        bad |= is_bad(v0) | is_bad(v1) | is_bad(v2) | is_bad(v3);
        m = max(max(m, max(hmax(v0), hmax(v1))), max(hmax(v2), hmax(v3)));
    }
    for (; i < end; i += step) {
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
        uint step = gl_WorkGroupSize.x;
        uint i = begin + gl_LocalInvocationID.x;
        for (; i + 3u * step < end; i += 4u * step) {
            VT v0 = X(i), v1 = X(i + step), v2 = X(i + 2u * step), v3 = X(i + 3u * step);
            kahan_add(acc, hsum((shifted_exp(v0, M) + shifted_exp(v1, M)) + (shifted_exp(v2, M) + shifted_exp(v3, M))));
        }
        for (; i < end; i += step) kahan_add(acc, hsum(shifted_exp(X(i), M)));
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
