#version 450
// Attention on the online softmax (vkcore.attention; contract: docs/attention.md).
//
// A workgroup takes a tile of QT query rows of one KV head (the rows of every query head
// of its group: grouped-query attention reads each key and value once for all of them)
// and one split of the keys: grid (splits, tiles, batch * Hkv). Keys go by blocks of KB
// keys per invocation: KL invocations share each key's dot products with the tile's queries (each
// keeps its share of the queries in registers and reads consecutive words of the key),
// the scores of the block sit in shared memory only (never in device memory), then each
// invocation adds the block to the dimensions of v it owns. Keys past the
// tile's last causal key are never visited (causal tiles skipped).
//
// `direct` (one split, last pass): the rows are normalized and written to `out`.
// Otherwise each workgroup writes its partial states (r, l, bad) and acc to `stats` and
// `parts`, which the next pass resumes (`resume`) or attention_merge.comp merges in
// split order.
//
// KV 0: k and v are float32 words. KV 1: float16 pairs in uint words. KV 2: int8 codes,
// four per word, with a float32 scale per row (dequantized value = scale * code).
// MASK 1: an additive float32 mask read through four element strides (0 broadcasts).
#extension GL_GOOGLE_include_directive : require
#include "attention_common.glsl"

#ifndef MARGIN
#define MARGIN 4.0
#endif

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint QT = 1u;      // query rows per workgroup
layout(constant_id = 2) const uint QWORDS = 1u;  // k words per row
layout(constant_id = 3) const uint DVS = 1u;     // dimensions of v per invocation
layout(constant_id = 4) const uint KL = 1u;      // invocations sharing one key's dot product
layout(constant_id = 5) const uint KB = 1u;      // keys per invocation in a block

#if KV == 0
const uint PER_WORD = 1u;
#elif KV == 1
const uint PER_WORD = 2u;
#else
const uint PER_WORD = 4u;
#endif
const uint WG = gl_WorkGroupSize.x;
const uint BK = WG * KB;                   // keys per block
const uint KPAR = WG / KL;                 // keys scored side by side (KL divides WG)
const uint WPL = (QWORDS + KL - 1u) / KL;  // k words per invocation of a key
const uint QPL = WPL * PER_WORD;           // query elements each invocation keeps

layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { uint k[]; };
layout(std430, binding = 2) readonly buffer V { uint v[]; };
layout(std430, binding = 3) readonly buffer KS { float k_scales[]; };
layout(std430, binding = 4) readonly buffer VS { float v_scales[]; };
layout(std430, binding = 5) readonly buffer M { float mask[]; };
layout(std430, binding = 6) writeonly buffer O { float out_rows[]; };
layout(std430, binding = 7) buffer ST { vec4 stats[]; };
layout(std430, binding = 8) buffer PA { float parts[]; };

layout(push_constant) uniform Push {
    uint lq, lk, d, dv;
    uint group;     // query heads per KV head
    uint hkv;       // KV heads
    uint kv_rows;   // rows per KV head in k and v (the cache's capacity)
    uint vwords;    // v words per row
    float scale;
    uint causal;
    uint chunk;     // keys per split
    uint nsplit;
    uint direct;
    uint m_b, m_h, m_i, m_j;  // mask strides in elements
    uint pass_begin;  // this pass's first key within each split
    uint pass_keys;   // keys per pass
    uint resume;      // 1: continue from the states the previous pass left in stats/parts
} pc;

shared float sh_s[QT * BK];           // the block's scores, then its weights
shared float sh_part[BK * QT * KL];   // partial dot products of the block's keys

float v_at(uint row, uint e) {
#if KV == 0
    return uintBitsToFloat(v[row * pc.vwords + e]);
#elif KV == 1
    vec2 h = unpackHalf2x16(v[row * pc.vwords + (e >> 1u)]);
    return (e & 1u) == 0u ? h.x : h.y;
#else
    int code = bitfieldExtract(int(v[row * pc.vwords + (e >> 2u)]), int(8u * (e & 3u)), 8);
    return v_scales[row] * float(code);
#endif
}

// The elements of k word `word` (int8: the codes; the row's scale comes after the sum:
// the same products as with the dequantized values, rounded once more at the end).
#if KV == 0
float k_elems(uint word) { return uintBitsToFloat(word); }
#elif KV == 1
vec2 k_elems(uint word) { return unpackHalf2x16(word); }
#else
vec4 k_elems(uint word) {
    return vec4(bitfieldExtract(int(word), 0, 8), bitfieldExtract(int(word), 8, 8),
                bitfieldExtract(int(word), 16, 8), bitfieldExtract(int(word), 24, 8));
}
#endif

void main() {
    uint lid = gl_LocalInvocationID.x;
    uint split = gl_WorkGroupID.x;
    uint z = gl_WorkGroupID.z;          // b * hkv + kv head
    uint b = z / pc.hkv;
    uint kvh = z - b * pc.hkv;
    uint rows = pc.group * pc.lq;       // query rows of this KV head
    uint row0 = gl_WorkGroupID.y * QT;  // first row of the tile
    uint kv_base = z * pc.kv_rows;

    // This invocation's share of the tile's queries: the elements of the k words
    // kl, kl + KL, ... (zero past D and past the tile's rows).
    uint kl = lid % KL, kp = lid / KL;
    float qreg[QT * QPL];
    for (uint t = 0u; t < QT; ++t) {
        for (uint i = 0u; i < QPL; ++i) {
            uint e = (kl + KL * (i / PER_WORD)) * PER_WORD + i % PER_WORD;
            bool live = row0 + t < rows && e < pc.d;
            qreg[t * QPL + i] = live ? q[(z * rows + row0 + t) * pc.d + e] : 0.0;
        }
    }
    uint last_row = min(row0 + QT, rows) - 1u;
    // A split may take several passes (llvmpipe ends a loop after 65,535 iterations
    // over an invocation): this pass's keys of the split.
    uint kbegin = split * pc.chunk + pc.pass_begin;
    uint kend = min(split * pc.chunk + min(pc.pass_begin + pc.pass_keys, pc.chunk), pc.lk);
    if (pc.causal != 0u) {
        // Keys j <= i + lk - lq for the tile's largest position i (rows are (head, i)).
        uint hi_pos = row0 / pc.lq == last_row / pc.lq ? last_row % pc.lq : pc.lq - 1u;
        kend = min(kend, uint(max(0, int(hi_pos + pc.lk) - int(pc.lq) + 1)));
    }

    float r[QT];
    KahanSum l[QT];
    uint bad[QT];
    KahanSum acc[QT * DVS];
    for (uint t = 0u; t < QT; ++t) { r[t] = NEG_INF; l[t] = KahanSum(0.0, 0.0); bad[t] = 0u; }
    for (uint c = 0u; c < QT * DVS; ++c) acc[c] = KahanSum(0.0, 0.0);
    if (pc.resume != 0u) {
        for (uint t = 0u; t < QT; ++t) {
            uint row = min(row0 + t, rows - 1u);
            uint part = (z * rows + row) * pc.nsplit + split;
            vec4 st = stats[part];
            r[t] = st.x; l[t].sum = st.y; bad[t] = uint(st.z);
            for (uint c = 0u; c < DVS; ++c) {
                uint e = min(lid + c * WG, pc.dv - 1u);
                acc[t * DVS + c].sum = parts[part * pc.dv + e];
            }
        }
        barrier();  // every state is read before an invocation writes its own below
    }

    for (uint kb = kbegin; kb < kend; kb += BK) {
        // KL invocations per key, each over its words: contiguous loads.
        for (uint x = kp; x < BK; x += KPAR) {
            float part[QT];
            for (uint t = 0u; t < QT; ++t) part[t] = 0.0;
            if (kb + x < kend) {
                uint base = (kv_base + kb + x) * QWORDS;
                for (uint i = 0u; i < WPL; ++i) {
                    uint w = kl + KL * i;
                    if (w >= QWORDS) break;
#if KV == 0
                    float kv = k_elems(k[base + w]);
                    for (uint t = 0u; t < QT; ++t) part[t] += qreg[t * QPL + i] * kv;
#elif KV == 1
                    vec2 kv = k_elems(k[base + w]);
                    for (uint t = 0u; t < QT; ++t) {
                        uint e = t * QPL + 2u * i;
                        part[t] += qreg[e] * kv.x + qreg[e + 1u] * kv.y;
                    }
#else
                    vec4 kv = k_elems(k[base + w]);
                    for (uint t = 0u; t < QT; ++t) {
                        uint e = t * QPL + 4u * i;
                        part[t] += (qreg[e] * kv.x + qreg[e + 1u] * kv.y)
                                 + (qreg[e + 2u] * kv.z + qreg[e + 3u] * kv.w);
                    }
#endif
                }
            }
            for (uint t = 0u; t < QT; ++t) sh_part[(x * QT + t) * KL + kl] = part[t];
        }
        barrier();
        for (uint m = 0u; m < KB; ++m) {
        uint xj = lid + WG * m;  // this invocation's key of the block
        uint j = kb + xj;
        float s[QT];
        for (uint t = 0u; t < QT; ++t) {
            float sum = 0.0;
            for (uint i = 0u; i < KL; ++i) sum += sh_part[(xj * QT + t) * KL + i];
            s[t] = sum;
        }
#if KV == 2
        if (j < kend) for (uint t = 0u; t < QT; ++t) s[t] *= k_scales[kv_base + j];
#endif
        for (uint t = 0u; t < QT; ++t) {
            uint row = row0 + t;
            uint g = row / pc.lq, i = row - g * pc.lq;
            float add = 0.0;
            bool attended = j < kend && row < rows;
            if (attended && pc.causal != 0u) attended = int(j) <= int(i + pc.lk) - int(pc.lq);
#if MASK
            if (attended) {
                uint hq = kvh * pc.group + g;
                add = mask[b * pc.m_b + hq * pc.m_h + i * pc.m_i + j * pc.m_j];
                attended = add != NEG_INF;  // masked whatever the key holds
            }
#endif
            sh_s[t * BK + xj] = attended ? s[t] * pc.scale + add : NEG_INF;
        }
        }
        barrier();
        // Every invocation folds the block's scores into the same (r, bad): one reference
        // per row, moved only when the block exceeds it by more than MARGIN.
        float factor[QT];
        for (uint t = 0u; t < QT; ++t) {
            float top = NEG_INF;
            for (uint x = 0u; x < BK; ++x) {
                float sx = sh_s[t * BK + x];
                bad[t] |= is_bad(sx);
                top = max(top, sx);
            }
            factor[t] = 1.0;
            if (top > r[t] + MARGIN) {
                factor[t] = rescale_factor(r[t], top);
                r[t] = top;
            }
        }
        barrier();
        for (uint t = 0u; t < QT; ++t) {
            for (uint m = 0u; m < KB; ++m) {
                uint x = t * BK + lid + WG * m;
                float sx = sh_s[x];
                // Masked keys (-inf) weigh exactly 0; NaN and +inf ones too (the row is NaN).
                sh_s[x] = sx == NEG_INF || is_bad(sx) != 0u ? 0.0 : exp(sx - finite_ref(r[t]));
            }
        }
        barrier();
        for (uint t = 0u; t < QT; ++t) {
            if (factor[t] != 1.0) {
                kahan_scale(l[t], factor[t]);
                for (uint c = 0u; c < DVS; ++c) kahan_scale(acc[t * DVS + c], factor[t]);
            }
            float block = 0.0;
            for (uint x = 0u; x < BK; ++x) block += sh_s[t * BK + x];
            kahan_add(l[t], block);
        }
        float sums[QT * DVS];
        for (uint c = 0u; c < QT * DVS; ++c) sums[c] = 0.0;
        uint n = min(BK, kend - kb);
        for (uint x = 0u; x < n; ++x) {
            float p[QT];
            bool any_weight = false;
            for (uint t = 0u; t < QT; ++t) {
                p[t] = sh_s[t * BK + x];
                any_weight = any_weight || p[t] != 0.0;
            }
            if (!any_weight) continue;  // a masked key's value is never read
            for (uint c = 0u; c < DVS; ++c) {
                uint e = lid + c * WG;
                float val = e < pc.dv ? v_at(kv_base + kb + x, e) : 0.0;
                for (uint t = 0u; t < QT; ++t) sums[t * DVS + c] += p[t] != 0.0 ? p[t] * val : 0.0;
            }
        }
        for (uint c = 0u; c < QT * DVS; ++c) kahan_add(acc[c], sums[c]);
        barrier();  // the block's weights are read everywhere before the next block's scores
    }

    for (uint t = 0u; t < QT; ++t) {
        uint row = row0 + t;
        if (row >= rows) break;
        uint out_row = z * rows + row;
        if (pc.direct != 0u) {
            float inv = r[t] == NEG_INF ? 0.0 : reciprocal(l[t].sum);
            for (uint c = 0u; c < DVS; ++c) {
                uint e = lid + c * WG;
                if (e < pc.dv) out_rows[out_row * pc.dv + e] = bad[t] != 0u ? QNAN : acc[t * DVS + c].sum * inv;
            }
        } else {
            uint part = out_row * pc.nsplit + split;
            if (lid == 0u) stats[part] = vec4(r[t], l[t].sum, float(bad[t]), 0.0);
            for (uint c = 0u; c < DVS; ++c) {
                uint e = lid + c * WG;
                if (e < pc.dv) parts[part * pc.dv + e] = acc[t * DVS + c].sum;
            }
        }
    }
}
