#version 450
// One token per row drawn from softmax(z), z = x * inv_t, with the Gumbel-max trick:
// argmax over the allowed tokens i of z_i + G_i, G_i a Gumbel draw (philox.glsl), is
// distributed exactly as the softmax restricted to those tokens. Greedy (temperature 0):
// argmax of x itself. Ties go to the lower token index.
//
// ROW 1, over whole rows of logits x (no top-k / top-p):
//   STAGE 0: one workgroup per row.   STAGE 1: chunks of `chunk` elements write their
//   best (value, index, status) into `parts`.   STAGE 2: one workgroup per row merges them.
// ROW 0 (STAGE 0), over `n` candidates per row sorted in rank order (topk_*.comp): x holds
// their logits, cand their int64 token indices, status the row's bad flag. With use_top_p
// only the nucleus takes part: the first c candidates, c the smallest count whose
// probabilities (over the candidates) sum to at least top_p.
// tokens[row] = (token, code): code 0 drawn, 1 the row has a NaN or +inf, 2 no finite logit.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x_id = 0) in;
#define SUBGROUP 0
#include "workgroup_reduce.glsl"
#include "topk_common.glsl"
#include "philox.glsl"

layout(std430, binding = 0) readonly buffer Xs { float x[]; };
layout(std430, binding = 1) readonly buffer Cand { uint cand[]; };
layout(std430, binding = 2) readonly buffer Status { uvec4 status[]; };
layout(std430, binding = 3) buffer Parts { uvec4 parts[]; };
layout(std430, binding = 4) writeonly buffer Tokens { uvec2 tokens[]; };

layout(push_constant) uniform Push {
    uint n;           // row length (ROW 1) or candidates per row (ROW 0)
    uint row_offset;  // first row of this dispatch
    uint chunk;       // ROW 1, STAGE 1: elements per workgroup
    uint nchunks;     // ROW 1, STAGE 1 and 2: chunks per row
    uint seed_lo;
    uint seed_hi;
    uint greedy;      // 1: temperature 0
    uint use_top_p;
    float inv_t;      // 1 / temperature (float32)
    float top_p;
} pc;

shared float sh_v[gl_WorkGroupSize.x];
shared uint sh_i[gl_WorkGroupSize.x];
shared uint sh_f[gl_WorkGroupSize.x];

// Candidate (v, i) beats (bv, bi): a larger value, or the same value and a lower index.
bool beats(float v, uint i, float bv, uint bi) { return v > bv || (v == bv && i < bi); }

#define BEST_SLOT(a, b)                                                        \
    if (beats(sh_v[b], sh_i[b], sh_v[a], sh_i[a])) { sh_v[a] = sh_v[b]; sh_i[a] = sh_i[b]; } \
    sh_f[a] |= sh_f[b]
#define SUM_SLOT(a, b) sh_v[a] += sh_v[b]
#define MIN_SLOT(a, b) sh_i[a] = min(sh_i[a], sh_i[b])

// The workgroup's best (v, i) and the OR of the flags; every invocation gets them.
void workgroup_best(inout float v, inout uint i, inout uint flags) {
    uint me = gl_LocalInvocationID.x;
    sh_v[me] = v; sh_i[me] = i; sh_f[me] = flags;
    barrier();
    TREE_REDUCE(BEST_SLOT)
    v = sh_v[0]; i = sh_i[0]; flags = sh_f[0];
    barrier();
}

uvec2 seed() { return uvec2(pc.seed_lo, pc.seed_hi); }

// The perturbed value of token t with logit v (NaN for a NaN logit: it never beats).
float perturbed(float v, uint t, uint row) {
    return pc.greedy != 0u ? v : v * pc.inv_t + gumbel(t, row, seed());
}

// flags: bit 0 a NaN or +inf seen, bit 1 a finite logit seen.
uint code_of(uint flags) { return (flags & 1u) != 0u ? 1u : ((flags & 2u) != 0u ? 0u : 2u); }

#if ROW
void scan_row(uint row, uint begin, uint end, out float bv, out uint bi, out uint flags) {
    bv = NEG_INF; bi = NO_INDEX; flags = 0u;
    for (uint i = begin + gl_LocalInvocationID.x; i < end; i += gl_WorkGroupSize.x) {
        float v = x[row * pc.n + i];
        uint bad = is_bad(v);
        flags |= bad | (uint(bad == 0u && v != NEG_INF) << 1u);
        float s = perturbed(v, i, row);
        if (s > bv || (bi == NO_INDEX && s == bv)) { bv = s; bi = i; }  // increasing i
    }
}

void main() {
    uint row = gl_WorkGroupID.y + pc.row_offset;
    float bv; uint bi, flags;
#if STAGE == 0
    scan_row(row, 0u, pc.n, bv, bi, flags);
#elif STAGE == 1
    uint begin = gl_WorkGroupID.x * pc.chunk;
    scan_row(row, begin, min(begin + pc.chunk, pc.n), bv, bi, flags);
#else
    bv = NEG_INF; bi = NO_INDEX; flags = 0u;
    for (uint c = gl_LocalInvocationID.x; c < pc.nchunks; c += gl_WorkGroupSize.x) {
        uvec4 p = parts[row * pc.nchunks + c];
        if (beats(uintBitsToFloat(p.x), p.y, bv, bi)) { bv = uintBitsToFloat(p.x); bi = p.y; }
        flags |= p.z;
    }
#endif
    workgroup_best(bv, bi, flags);
    if (gl_LocalInvocationID.x == 0u) {
#if STAGE == 1
        parts[row * pc.nchunks + gl_WorkGroupID.x] = uvec4(floatBitsToUint(bv), bi, flags, 0u);
#else
        tokens[row] = uvec2(bi, code_of(flags));
#endif
    }
}

#else  // candidates
float logit(uint row, uint j) { return x[row * pc.n + j]; }
uint token(uint row, uint j) { return cand[2u * (row * pc.n + j)]; }

// The nucleus size: blocks of consecutive candidates per invocation, their sums, and the
// first position where the running sum reaches top_p times the total.
uint nucleus(uint row, float m) {
    uint me = gl_LocalInvocationID.x;
    uint block = (pc.n + gl_WorkGroupSize.x - 1u) / gl_WorkGroupSize.x;
    uint begin = min(me * block, pc.n), end = min(begin + block, pc.n);
    float sum = 0.0;
    for (uint j = begin; j < end; ++j) sum += exp(logit(row, j) * pc.inv_t - m);
    sh_v[me] = sum;
    barrier();
    if (me == 0u) {  // exclusive prefix sums of the blocks, in order (one loop of <= 1024)
        float run = 0.0;
        for (uint t = 0u; t < gl_WorkGroupSize.x; ++t) { float s = sh_v[t]; sh_v[t] = run; run += s; }
        sh_f[0] = floatBitsToUint(run);
    }
    barrier();
    float target = pc.top_p * uintBitsToFloat(sh_f[0]);
    float run = sh_v[me];
    uint c = NO_INDEX;
    for (uint j = begin; j < end; ++j) {
        run += exp(logit(row, j) * pc.inv_t - m);
        if (run >= target) { c = j + 1u; break; }
    }
    barrier();
    sh_i[me] = c;
    barrier();
    TREE_REDUCE(MIN_SLOT)
    c = sh_i[0];
    barrier();
    return min(c, pc.n);  // rounding never reached the target: every candidate
}

void main() {
    uint row = gl_WorkGroupID.y + pc.row_offset;
    float top = logit(row, 0u);  // the largest logit
    uint flags = status[row].x | (uint(top != NEG_INF) << 1u);
    uint count = pc.n;
    if (pc.use_top_p != 0u && pc.greedy == 0u && code_of(flags) == 0u) {
        count = nucleus(row, top * pc.inv_t);
    }
    float bv = NEG_INF; uint bi = NO_INDEX;
    for (uint j = gl_LocalInvocationID.x; j < count; j += gl_WorkGroupSize.x) {
        uint t = token(row, j);
        float s = perturbed(logit(row, j), t, row);
        if (beats(s, t, bv, bi)) { bv = s; bi = t; }
    }
    workgroup_best(bv, bi, flags);
    if (gl_LocalInvocationID.x == 0u) tokens[row] = uvec2(bi, code_of(flags));
}
#endif
