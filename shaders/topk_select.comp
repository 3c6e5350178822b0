#version 450
// Top-k for small k (k <= KMAX, a specialization constant sizing private lists), and the
// fused softmax + top-k (FUSED 1): each invocation keeps a running top-k list and the
// running softmax statistics (Milakov & Gimelshein 2018, "Online normalizer calculation
// for softmax", the fused softmax + top-k algorithm). FLOOR_PASS 0 reads each element
// once; FLOOR_PASS 1 (the host's choice on CPU devices) first reads the chunk for the
// statistics and a key floor, then again, from cache, for the lists (see scan()).
//
// Each invocation scans a strided share of its workgroup's chunk, keeping its k best in a
// private heap (rank order: topk_common.glsl), sorted at the end. The workgroup's k best
// are then taken in k rounds:
// every invocation offers its list's head, the best head (largest key, then lowest index)
// is emitted and its owner moves on. Indices are distinct, so exactly one owner moves
// (empty slots all tie, but they only win once every list is exhausted).
//
// STAGE 0: one workgroup per row: lists, statistics and outputs in one dispatch.
// STAGE 1: a row split into `nchunks` chunks: each writes its k best and its (m, l, bad)
//          into `parts`.   STAGE 2: one workgroup per row merges the row's parts.
// Outputs: values (FUSED 0: x at the index; FUSED 1: its probability over the whole row),
// indices as int64 (two words: index, 0), and with want_status the row's (bad, M, L).
#extension GL_GOOGLE_include_directive : require
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint KMAX = 8u;
layout(constant_id = 3) const uint FLOOR_PASS = 1u;  // see scan()
#include "workgroup_reduce.glsl"
#include "topk_common.glsl"

// X(i): element i of the flat input; X4(i): elements i .. i + 3 (i a multiple of 4 when
// VEC4, which the host sets when the row length is a multiple of 4).
#if TEXEL
#extension GL_EXT_samplerless_texture_functions : require
layout(binding = 0) uniform textureBuffer x_texels;
#define X(i) texelFetch(x_texels, int(i)).x
#else
layout(std430, binding = 0) readonly buffer Xs { float x[]; };
#define X(i) x[i]
#endif
#if VEC4 && TEXEL
layout(binding = 5) uniform textureBuffer x4_texels;
#define X4(i) texelFetch(x4_texels, int((i) >> 2u))
#elif VEC4
layout(std430, binding = 5) readonly buffer X4s { vec4 x4[]; };
#define X4(i) x4[(i) >> 2u]
#else
#define X4(i) vec4(X(i), X((i) + 1u), X((i) + 2u), X((i) + 3u))
#endif
layout(std430, binding = 1) writeonly buffer Values { float values[]; };
layout(std430, binding = 2) writeonly buffer Indices { uint indices[]; };
layout(std430, binding = 3) buffer Parts { uint parts[]; };
layout(std430, binding = 4) writeonly buffer Status { uvec4 status[]; };

layout(push_constant) uniform Push {
    uint n;           // row length
    uint k;           // results per row, 1..KMAX
    uint row_offset;  // first row of this dispatch
    uint chunk;       // elements per workgroup (STAGE 1)
    uint nchunks;     // chunks per row (STAGE 1 and 2)
    uint want_status; // write status[row]
} pc;

shared uint sh_key[gl_WorkGroupSize.x];
shared uint sh_idx[gl_WorkGroupSize.x];
shared float sh_m[gl_WorkGroupSize.x];
shared float sh_l[gl_WorkGroupSize.x];

// Each invocation's k best so far: a heap whose root ranks last (the entry a better
// element replaces), so an insertion walks one path of at most log2(k) + 1 levels.
// llvmpipe ends an invocation's loops after 65,535 iterations in all (its loop limiter is
// shared by every loop of the shader), so no loop here may depend on the data beyond
// that depth: the host bounds the elements per invocation (topk_steps.select_plan).
uint list_key[KMAX];
uint list_idx[KMAX];

void list_clear() {
    for (uint j = 0u; j < pc.k; ++j) { list_key[j] = 0u; list_idx[j] = NO_INDEX; }
}

// Puts (key, idx) at slot j of the heap [0, size) and moves it down to its place.
void sift_down(uint j, uint size, uint key, uint idx) {
    for (;;) {
        uint child = 2u * j + 1u;
        if (child >= size) break;
        // the child that ranks later moves up when it ranks after (key, idx)
        if (child + 1u < size &&
            ranks_before(list_key[child], list_idx[child], list_key[child + 1u], list_idx[child + 1u])) {
            ++child;
        }
        if (!ranks_before(key, idx, list_key[child], list_idx[child])) break;
        list_key[j] = list_key[child]; list_idx[j] = list_idx[child];
        j = child;
    }
    list_key[j] = key; list_idx[j] = idx;
}

// (key, idx) replaces the root when it ranks before it.
void list_offer(uint key, uint idx) {
    if (ranks_before(key, idx, list_key[0], list_idx[0])) sift_down(0u, pc.k, key, idx);
}

// The heap into rank order (best first): the root, ranking last, goes to the end each time.
void list_sort() {
    for (uint end = pc.k - 1u; end > 0u; --end) {
        uint key = list_key[end], idx = list_idx[end];
        list_key[end] = list_key[0]; list_idx[end] = list_idx[0];
        sift_down(0u, end, key, idx);
    }
}

#define BEST_SLOT(a, b)                                                                     \
    if (ranks_before(sh_key[b], sh_idx[b], sh_key[a], sh_idx[a])) {                         \
        sh_key[a] = sh_key[b]; sh_idx[a] = sh_idx[b];                                       \
    }
#define MAX_SLOT(a, b) sh_m[a] = max(sh_m[a], sh_m[b]); sh_idx[a] |= sh_idx[b]
#define SUM_SLOT(a, b) sh_l[a] += sh_l[b]

// The best (key, idx) over the workgroup; every invocation gets it.
void workgroup_best(bool single, uint key, uint idx, out uint best_key, out uint best_idx) {
#if SUBGROUP
    if (single) {
        best_key = subgroupMax(key);
        best_idx = subgroupMin(key == best_key ? idx : NO_INDEX);
        return;
    }
#endif
    uint me = gl_LocalInvocationID.x;
    sh_key[me] = key; sh_idx[me] = idx;
    barrier();
    TREE_REDUCE(BEST_SLOT)
    best_key = sh_key[0]; best_idx = sh_idx[0];
    barrier();
}

// Merge of the invocations' (m, l, bad); every invocation gets the workgroup's.
void workgroup_stats(bool single, inout float m, inout float l, inout uint bad) {
#if SUBGROUP
    if (single) {
        float M = subgroupMax(m);
        l = subgroupAdd(rescaled(l, m, M));
        m = M;
        bad = subgroupOr(bad);
        return;
    }
#endif
    uint me = gl_LocalInvocationID.x;
    sh_m[me] = m; sh_idx[me] = bad;
    barrier();
    TREE_REDUCE(MAX_SLOT)
    float M = sh_m[0];
    bad = sh_idx[0];
    sh_l[me] = rescaled(l, m, M);
    barrier();
    TREE_REDUCE(SUM_SLOT)
    l = sh_l[0]; m = M;
    barrier();
}

// What a scan takes besides the lists: the softmax statistics (FUSED) or only the row's
// NaN/+inf flag; finish() hands them to the caller's (m, l, bad).
#if FUSED
#define RowStats Stats
RowStats row_stats() { return stats_empty(); }
void take4(inout RowStats s, vec4 v) { stats_add4(s, v); }
void take1(inout RowStats s, float v) { stats_add(s, v); }
void finish(RowStats s, inout float m, inout float l, inout uint bad) {
    m = s.m; l = stats_sum(s); bad = s.bad;
}
#else
struct RowStats { uint bad; };
RowStats row_stats() { return RowStats(0u); }
void take4(inout RowStats s, vec4 v) {
    s.bad |= is_bad(v.x) | is_bad(v.y) | is_bad(v.z) | is_bad(v.w);
}
void take1(inout RowStats s, float v) { s.bad |= is_bad(v); }
void finish(RowStats s, inout float m, inout float l, inout uint bad) { bad |= s.bad; }
#endif

// The 4 * BEST_QUADS largest keys seen (1, 2 or 4 quads: the host keeps as many as the
// floor needs), duplicates counted, sorted descending in uvec4s: slot j becomes
// max(s[j], min(s[j - 1], key)), a branch-free insertion with static indices only
// (llvmpipe runs a private array's dynamic indexing lane by lane, from memory). The
// quads past BEST_QUADS are constant after specialization, and their work folded away.
layout(constant_id = 2) const uint BEST_QUADS = 4u;
#define BEST_SLOTS (4u * BEST_QUADS)
struct Best { uvec4 a, b, c, d; };

void best_insert(inout Best s, uint key) {
    uvec4 k4 = uvec4(key);
    uvec4 below_a = uvec4(key, s.a.xyz), below_b = uvec4(s.a.w, s.b.xyz);
    uvec4 below_c = uvec4(s.b.w, s.c.xyz), below_d = uvec4(s.c.w, s.d.xyz);
    s.a = max(s.a, min(below_a, k4));
    if (BEST_QUADS > 1u) s.b = max(s.b, min(below_b, k4));
    if (BEST_QUADS > 2u) {
        s.c = max(s.c, min(below_c, k4));
        s.d = max(s.d, min(below_d, k4));
    }
}

// Slot j (0-based, below BEST_SLOTS), chosen by selects.
uint best_slot(Best s, uint j) {
    uvec4 quad = j < 8u ? (j < 4u ? s.a : s.b) : (j < 12u ? s.c : s.d);
    uint r = j % 4u;
    return r < 2u ? (r == 0u ? quad.x : quad.y) : (r == 2u ? quad.z : quad.w);
}

// The smallest key over the workgroup; every invocation gets it.
#define MIN_SLOT(a, b) sh_key[a] = min(sh_key[a], sh_key[b])
uint workgroup_min(bool single, uint key) {
#if SUBGROUP
    if (single) return subgroupMin(key);
#endif
    uint me = gl_LocalInvocationID.x;
    sh_key[me] = key;
    barrier();
    TREE_REDUCE(MIN_SLOT)
    uint least = sh_key[0];
    barrier();
    return least;
}

// First pass over elements [begin, end) of row `row`: the softmax statistics (FUSED) or
// the NaN/+inf flag, and a key floor with at least k elements at or above it. Each
// invocation keeps the 4 * BEST_QUADS largest of its blocks' maxima (one insertion per block of four)
// and single tail elements; its m-th largest, m = ceil(k / invocations), stands for m
// distinct elements, so the minimum over the workgroup has at least k at or above it
// (0, no floor, when m > 4 * BEST_QUADS).
uint first_pass(bool single, uint row, uint begin, uint blocks_end, uint end,
                inout float m, inout float l, inout uint bad) {
    uint base = row * pc.n;
    RowStats s = row_stats();
    Best best = Best(uvec4(0u), uvec4(0u), uvec4(0u), uvec4(0u));
    uint step = 4u * gl_WorkGroupSize.x;
    for (uint i = begin + 4u * gl_LocalInvocationID.x; i < blocks_end; i += step) {
        vec4 v = X4(base + i);
        take4(s, v);
        uvec4 key = rank_key(v);
        best_insert(best, max(max(key.x, key.y), max(key.z, key.w)));
    }
    for (uint i = blocks_end + gl_LocalInvocationID.x; i < end; i += gl_WorkGroupSize.x) {
        float v = X(base + i);
        take1(s, v);
        best_insert(best, rank_key(v));
    }
    finish(s, m, l, bad);
    uint slots = (pc.k + gl_WorkGroupSize.x - 1u) / gl_WorkGroupSize.x;
    uint mine = slots > BEST_SLOTS ? 0u : best_slot(best, slots - 1u);
    return workgroup_min(single, mine);
}

// Any invocation's root key bounds the k-th best from below (that invocation holds k
// elements at least as good), so a smaller key cannot enter any list: the floor rises to
// the largest root key over the subgroup's active invocations (or the invocation's own).
uint raised_floor(uint floor_key) {
#if SUBGROUP
    return max(floor_key, subgroupMax(list_key[0]));
#else
    return max(floor_key, list_key[0]);
#endif
}

// True when a block whose best key is `best` may change this invocation's list: at the
// floor or above it, and better than the root (or the list not yet full: equal keys
// rank by index, and this invocation's later indices never beat its own root's).
bool may_enter(uint best, uint floor_key) {
    return best >= floor_key && (best > list_key[0] || list_idx[0] == NO_INDEX);
}

// Offers the four elements of the block at index i (relative to the row).
void offer_block(uint base, uint i) {
    uvec4 key = rank_key(X4(base + i));
    list_offer(key.x, i);
    list_offer(key.y, i + 1u);
    list_offer(key.z, i + 2u);
    list_offer(key.w, i + 3u);
}

// Second pass over the same elements: those at the floor or above into the list,
// blocks of four consecutive elements per invocation, then the rest. llvmpipe runs both
// sides of an `if` under a mask but leaves a loop once no invocation is still in it, so
// the inner loop only reads: it queues up to 8 blocks that may enter (block indices held
// in two uvec4s, shifted in with static indices) and stops at the 8th; the outer loop
// then offers the queued blocks, so the common block costs no heap access. Lanes whose
// queues fill at different blocks drift apart (the host's loop budget counts that:
// topk_steps.max_elements_per_invocation).
// Without FLOOR_PASS this is the only pass (floor 0): it also takes the statistics.
void list_pass(uint row, uint begin, uint blocks_end, uint end, uint floor_key,
               inout float m, inout float l, inout uint bad) {
    uint base = row * pc.n;
    uint step = 4u * gl_WorkGroupSize.x;
    bool stats = FLOOR_PASS == 0u;
    RowStats s = row_stats();
    uint i = begin + 4u * gl_LocalInvocationID.x;
    while (i < blocks_end) {
        uvec4 q0 = uvec4(0u), q1 = uvec4(0u);
        uint queued = 0u;
        for (; i < blocks_end; i += step) {
            vec4 v = X4(base + i);
            if (stats) take4(s, v);
            uvec4 key = rank_key(v);
            if (may_enter(max(max(key.x, key.y), max(key.z, key.w)), floor_key)) {
                q1 = uvec4(q0.w, q1.xyz);
                q0 = uvec4(i, q0.xyz);
                ++queued;
            }
            if (queued == 8u) { i += step; break; }
        }
        for (; queued > 0u; --queued) {  // oldest first: the shifts put it last
            offer_block(base, queued > 4u ? q1[queued - 5u] : q0[queued - 1u]);
        }
        floor_key = raised_floor(floor_key);
    }
    for (uint i = blocks_end + gl_LocalInvocationID.x; i < end; i += gl_WorkGroupSize.x) {
        float v = X(base + i);
        if (stats) take1(s, v);
        list_offer(rank_key(v), i);
    }
    if (stats) finish(s, m, l, bad);
}

// Elements [begin, end) of row `row` (indices relative to the row) into the list and the
// statistics. FLOOR_PASS 1 (the host's choice for devices that run branches under a
// mask, topk_steps.uses_floor_pass): two passes over the workgroup's chunk, the second
// from cache, where the floor of the first leaves the second few insertions; 0: one pass
// that reads each element once, the floor rising as the lists fill.
void scan(bool single, uint row, uint begin, uint end, inout float m, inout float l,
          inout uint bad) {
    uint step = 4u * gl_WorkGroupSize.x;
    uint blocks_end = begin + (end - begin) / step * step;
    uint floor_key = 0u;
    if (FLOOR_PASS != 0u) floor_key = first_pass(single, row, begin, blocks_end, end, m, l, bad);
    list_pass(row, begin, blocks_end, end, floor_key, m, l, bad);
}

uint part_base(uint row, uint c) { return (row * pc.nchunks + c) * (4u + 2u * pc.k); }

// Merges the parts of `row` (STAGE 2): candidates into the list, statistics merged.
void scan_parts(uint row, inout float m, inout float l, inout uint bad) {
    for (uint c = gl_LocalInvocationID.x; c < pc.nchunks; c += gl_WorkGroupSize.x) {
        uint p = part_base(row, c);
        float pm = uintBitsToFloat(parts[p]);
        float M = max(m, pm);
        l = rescaled(l, m, M) + rescaled(uintBitsToFloat(parts[p + 1u]), pm, M);
        m = M;
        bad |= parts[p + 2u];
    }
    uint total = pc.nchunks * pc.k;
    for (uint c = gl_LocalInvocationID.x; c < total; c += gl_WorkGroupSize.x) {
        uint p = part_base(row, c / pc.k) + 4u + 2u * (c % pc.k);
        list_offer(parts[p], parts[p + 1u]);
    }
}

void main() {
    uint row = gl_WorkGroupID.y + pc.row_offset;
    bool single = false;
#if SUBGROUP
    single = one_subgroup();
#endif
    float m = NEG_INF, l = 0.0;
    uint bad = 0u;
    list_clear();
#if STAGE == 0
    scan(single, row, 0u, pc.n, m, l, bad);
#elif STAGE == 1
    uint begin = gl_WorkGroupID.x * pc.chunk;
    scan(single, row, begin, min(begin + pc.chunk, pc.n), m, l, bad);
#else
    scan_parts(row, m, l, bad);
#endif
    list_sort();
    workgroup_stats(single, m, l, bad);
#if STAGE == 1
    uint out_base = part_base(row, gl_WorkGroupID.x);
    if (gl_LocalInvocationID.x == 0u) {
        parts[out_base] = floatBitsToUint(m);
        parts[out_base + 1u] = floatBitsToUint(l);
        parts[out_base + 2u] = bad;
        parts[out_base + 3u] = 0u;
    }
#else
    float invL = reciprocal(l);
    if (pc.want_status != 0u && gl_LocalInvocationID.x == 0u) {
        status[row] = uvec4(bad, floatBitsToUint(m), floatBitsToUint(l), 0u);
    }
#endif
    uint head = 0u;
    for (uint r = 0u; r < pc.k; ++r) {
        uint key = head < pc.k ? list_key[head] : 0u;
        uint idx = head < pc.k ? list_idx[head] : NO_INDEX;
        uint best_key, best_idx;
        workgroup_best(single, key, idx, best_key, best_idx);
        if (key == best_key && idx == best_idx) ++head;
        if (gl_LocalInvocationID.x == 0u) {
#if STAGE == 1
            parts[out_base + 4u + 2u * r] = best_key;
            parts[out_base + 5u + 2u * r] = best_idx;
#else
            uint o = row * pc.k + r;
            float v = X(row * pc.n + best_idx);
#if FUSED
            values[o] = probability(v, m, invL, bad);
#else
            values[o] = v;
#endif
            indices[2u * o] = best_idx;
            indices[2u * o + 1u] = 0u;
#endif
        }
    }
}
