#version 450
// Top-k for any k: a bitonic sort of each row's (key, index) pairs, padded to a power of
// two `p` with empty slots (key 0, index NO_INDEX: after every element), in rank order
// (topk_common.glsl); the first k pairs are the result.
//
// STAGE 0: the row's pairs into `pairs`.   STAGE 1: one compare-exchange step of the
// network (block `size`, distance `stride`).   STAGE 2: the first k as values (FUSED 1:
// probabilities from the row statistics in `status`, written by topk_select.comp) and
// int64 indices; with want_status (FUSED 0) the row's bad flag: a sorted row has +inf
// first and NaN (key 0) last among its n elements.
// Every invocation handles items gl_GlobalInvocationID.x, + the grid's width, ...: the
// host sizes the grid so that no invocation loops more than a few thousand times.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x_id = 0) in;
#include "topk_common.glsl"

layout(std430, binding = 0) readonly buffer Xs { float x[]; };
layout(std430, binding = 1) writeonly buffer Values { float values[]; };
layout(std430, binding = 2) writeonly buffer Indices { uint indices[]; };
layout(std430, binding = 3) buffer Pairs { uvec2 pairs[]; };  // p per row of the dispatch
layout(std430, binding = 4) buffer Status { uvec4 status[]; };

layout(push_constant) uniform Push {
    uint n;           // row length
    uint k;           // results per row
    uint p;           // padded row length, a power of two >= n
    uint row_offset;  // first row of this dispatch
    uint size;        // STAGE 1: bitonic block size
    uint stride;      // STAGE 1: compare distance
    uint want_status; // STAGE 2, FUSED 0: write status[row].x
} pc;

void main() {
    uint row = gl_WorkGroupID.y + pc.row_offset;
    uint width = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint base = gl_WorkGroupID.y * pc.p;  // pairs hold this dispatch's rows only
#if STAGE == 0
    for (uint t = gl_GlobalInvocationID.x; t < pc.p; t += width) {
        pairs[base + t] = t < pc.n ? uvec2(rank_key(x[row * pc.n + t]), t) : uvec2(0u, NO_INDEX);
    }
#elif STAGE == 1
    uint j = pc.stride;
    for (uint t = gl_GlobalInvocationID.x; t < pc.p / 2u; t += width) {
        uint i = ((t & ~(j - 1u)) << 1u) | (t & (j - 1u));  // j is a power of two
        uvec2 a = pairs[base + i], b = pairs[base + i + j];
        bool first_ranks_first = (i & pc.size) == 0u;  // the block's order: rank or reverse
        bool swap = first_ranks_first ? ranks_before(b.x, b.y, a.x, a.y)
                                      : ranks_before(a.x, a.y, b.x, b.y);
        if (swap) { pairs[base + i] = b; pairs[base + i + j] = a; }
    }
#else
    for (uint r = gl_GlobalInvocationID.x; r < pc.k; r += width) {
        uvec2 e = pairs[base + r];
        float v = x[row * pc.n + e.y];
        uint o = row * pc.k + r;
#if FUSED
        uvec4 st = status[row];
        values[o] = probability(v, uintBitsToFloat(st.y), reciprocal(uintBitsToFloat(st.z)), st.x);
#else
        values[o] = v;
#endif
        indices[2u * o] = e.y;
        indices[2u * o + 1u] = 0u;
    }
#if !FUSED
    if (pc.want_status != 0u && gl_GlobalInvocationID.x == 0u) {
        uint bad = uint(pairs[base].x == KEY_POS_INF || pairs[base + pc.n - 1u].x == 0u);
        status[row] = uvec4(bad, 0u, 0u, 0u);
    }
#endif
#endif
}
