#version 450
// Attention on the online softmax, one key at a time (vkcore.attention; contract:
// docs/attention.md): the kernel a CPU device runs where k and v rows are whole uvec4s.
//
// Same grid, bindings, push constants and partial states as attention.comp: a workgroup
// takes a tile of QT query rows of one KV head and one split of the keys, by blocks of
// one key per invocation (lane). A lane scores its key against the tile's rows with
// the whole query in registers (no partial dot products to combine), the block's
// maximum comes from subgroup arithmetic (shared memory when the workgroup is more than
// one subgroup), each lane weighs its key and keeps its own share of the normalizer l,
// and the weights go through shared memory once so that every lane adds each key's
// value to the dimensions of v it owns. A CPU device runs a lane's loads one element at
// a time; here every element of k and v is loaded once, four words per load (through
// uniform texel buffers where the plan can: TEXEL, the driver's vector gathers), the
// exponentials of a block are one vector operation, and (SHUFFLE) the weights go from
// lane to lane by subgroupShuffle instead of shared memory.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "attention_common.glsl"
#include "workgroup_reduce.glsl"

// SHUFFLE 1 (the plan's choice where a workgroup is exactly one full subgroup): a
// block's weights pass between the lanes by subgroupShuffle, keyed by the subgroup
// invocation ID, instead of through shared memory between two barriers.
#ifndef SHUFFLE
#define SHUFFLE 0
#endif
#if SHUFFLE && !SUBGROUP
#error "SHUFFLE needs subgroup operations (SUBGROUP 1)"
#endif
#if SHUFFLE
#extension GL_KHR_shader_subgroup_shuffle : require
#endif

#ifndef MARGIN
#define MARGIN 4.0
#endif

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint QT = 1u;    // query rows per workgroup
layout(constant_id = 2) const uint Q4 = 1u;    // uvec4s per k row
layout(constant_id = 3) const uint V4 = 1u;    // uvec4s per v row

#if KV == 0
const uint PER_WORD = 1u;
#elif KV == 1
const uint PER_WORD = 2u;
#else
const uint PER_WORD = 4u;
#endif
const uint WG = gl_WorkGroupSize.x;
const uint QE = Q4 * 4u * PER_WORD;    // query elements per row (every lane keeps them all)
const uint VPL = (V4 + WG - 1u) / WG;  // v uvec4s per lane
const uint DE = VPL * 4u * PER_WORD;   // dimensions of v a lane owns

layout(std430, binding = 0) readonly buffer Q { float q[]; };
#if TEXEL
// Uniform texel buffers: the driver's texture path (vector gathers on a CPU device).
#extension GL_EXT_samplerless_texture_functions : require
layout(binding = 1) uniform utextureBuffer k_texels;
layout(binding = 2) uniform utextureBuffer v_texels;
#define K4(i) texelFetch(k_texels, int(i))
#define V4_AT(i) texelFetch(v_texels, int(i))
#else
layout(std430, binding = 1) readonly buffer K { uvec4 k4[]; };
layout(std430, binding = 2) readonly buffer V { uvec4 v4[]; };
#define K4(i) k4[i]
#define V4_AT(i) v4[i]
#endif
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

const uint QT4 = (QT + 3u) / 4u;
shared vec4 sh_p[QT4 * WG];  // the block's weights, four rows per key and load
shared float sh_w[QT * WG];  // the lanes' maxima (several subgroups), l and bad

// The PER_WORD elements of word c of a uvec4 (int8: the codes; the scale comes after).
void unpack4(uvec4 w, out float e[4u * PER_WORD]) {
    [[unroll]] for (uint c = 0u; c < 4u; ++c) {
#if KV == 0
        e[c] = uintBitsToFloat(w[c]);
#elif KV == 1
        vec2 h = unpackHalf2x16(w[c]);
        e[2u * c] = h.x;
        e[2u * c + 1u] = h.y;
#else
        [[unroll]] for (uint b = 0u; b < 4u; ++b) e[4u * c + b] = float(bitfieldExtract(int(w[c]), int(8u * b), 8));
#endif
    }
}

// The dimension of v of slot i of a lane's.
uint elem_of(uint lid, uint i) {
    uint per4 = 4u * PER_WORD;
    return ((lid + WG * (i / per4)) * 4u) * PER_WORD + i % per4;
}

void main() {
    uint lid = gl_LocalInvocationID.x;
    uint split = gl_WorkGroupID.x;
    uint z = gl_WorkGroupID.z;          // b * hkv + kv head
    uint b = z / pc.hkv;
    uint kvh = z - b * pc.hkv;
    uint rows = pc.group * pc.lq;       // query rows of this KV head
    uint row0 = gl_WorkGroupID.y * QT;  // first row of the tile
    uint kv_base = z * pc.kv_rows;
#if SUBGROUP
    bool alone = one_subgroup();
#else
    bool alone = false;
#endif

    float qreg[QT * QE];  // the same in every lane (zero past D and past the tile's rows)
    [[unroll]] for (uint t = 0u; t < QT; ++t) {
        [[unroll]] for (uint e = 0u; e < QE; ++e) {
            bool live = row0 + t < rows && e < pc.d;
            qreg[t * QE + e] = live ? q[(z * rows + row0 + t) * pc.d + e] : 0.0;
        }
    }
    uint last_row = min(row0 + QT, rows) - 1u;
    uint kbegin = split * pc.chunk + pc.pass_begin;
    uint kend = min(split * pc.chunk + min(pc.pass_begin + pc.pass_keys, pc.chunk), pc.lk);
    if (pc.causal != 0u) {
        uint hi_pos = row0 / pc.lq == last_row / pc.lq ? last_row % pc.lq : pc.lq - 1u;
        kend = min(kend, uint(max(0, int(hi_pos + pc.lk) - int(pc.lq) + 1)));
    }

    // Each row's last attended key (-1: none, past the tile's rows) and the start of its
    // mask row, worked out once: a block would otherwise divide by lq for every row.
    int last_key[QT];
    uint mask_row[QT];
    [[unroll]] for (uint t = 0u; t < QT; ++t) {
        uint row = row0 + t;
        uint g = row / pc.lq, i = row - g * pc.lq;
        last_key[t] = row >= rows ? -1 : pc.causal != 0u ? int(i + pc.lk) - int(pc.lq) : int(pc.lk);
        mask_row[t] = b * pc.m_b + (kvh * pc.group + g) * pc.m_h + i * pc.m_i;
    }
    float r[QT];      // the same in every lane
    KahanSum l[QT];   // this lane's keys' share
    uint bad[QT];     // this lane's keys'
    KahanSum acc[QT * DE];
    [[unroll]] for (uint t = 0u; t < QT; ++t) { r[t] = NEG_INF; l[t] = KahanSum(0.0, 0.0); bad[t] = 0u; }
    [[unroll]] for (uint c = 0u; c < QT * DE; ++c) acc[c] = KahanSum(0.0, 0.0);
    if (pc.resume != 0u) {
        [[unroll]] for (uint t = 0u; t < QT; ++t) {
            uint row = min(row0 + t, rows - 1u);
            uint part = (z * rows + row) * pc.nsplit + split;
            vec4 st = stats[part];
            r[t] = st.x;
            if (lid == 0u) { l[t].sum = st.y; bad[t] = uint(st.z); }  // lane 0 carries them
            [[unroll]] for (uint i = 0u; i < DE; ++i) {
                uint e = min(elem_of(lid, i), pc.dv - 1u);
                acc[t * DE + i].sum = parts[part * pc.dv + e];
            }
        }
        barrier();  // every state is read before an invocation writes its own below
    }

#if SHUFFLE
    uint key_lane = gl_SubgroupInvocationID;  // the lane a shuffle reads key kb + x from
#else
    uint key_lane = lid;
#endif
    for (uint kb = kbegin; kb < kend; kb += WG) {
        uint j = kb + key_lane;  // this lane's key
        bool live = j < kend;
        float s[QT];
        [[unroll]] for (uint t = 0u; t < QT; ++t) s[t] = 0.0;
        if (live) {
            [[unroll]] for (uint w4 = 0u; w4 < Q4; ++w4) {
                float e[4u * PER_WORD];
                unpack4(K4((kv_base + j) * Q4 + w4), e);
                [[unroll]] for (uint t = 0u; t < QT; ++t) {
                    float dot4 = 0.0;
                    [[unroll]] for (uint x = 0u; x < 4u * PER_WORD; ++x) dot4 += qreg[t * QE + w4 * 4u * PER_WORD + x] * e[x];
                    s[t] += dot4;
                }
            }
#if KV == 2
            float kscale = k_scales[kv_base + j];
            [[unroll]] for (uint t = 0u; t < QT; ++t) s[t] *= kscale;
#endif
        }
        float sx[QT];
        float top[QT];
        [[unroll]] for (uint t = 0u; t < QT; ++t) {
            float add = 0.0;
            bool attended = live && int(j) <= last_key[t];
#if MASK
            if (attended) {
                add = mask[mask_row[t] + j * pc.m_j];
                attended = add != NEG_INF;  // masked whatever the key holds
            }
#endif
            sx[t] = attended ? s[t] * pc.scale + add : NEG_INF;
            uint sx_bad = is_bad(sx[t]);
            bad[t] |= sx_bad;
            top[t] = sx_bad != 0u ? NEG_INF : sx[t];
        }
        // The block's largest (finite) score per row, the same in every lane. With SHUFFLE
        // the workgroup is one subgroup by construction: no run-time choice, whose other
        // branch a CPU device would run too, under a mask.
#if SHUFFLE
        [[unroll]] for (uint t = 0u; t < QT; ++t) top[t] = subgroupMax(top[t]);
#else
        if (alone) {
#if SUBGROUP
            [[unroll]] for (uint t = 0u; t < QT; ++t) top[t] = subgroupMax(top[t]);
#endif
        } else {
            [[unroll]] for (uint t = 0u; t < QT; ++t) sh_w[t * WG + lid] = top[t];
            barrier();
            [[unroll]] for (uint t = 0u; t < QT; ++t) {
                float m = NEG_INF;
                for (uint x = 0u; x < WG; ++x) m = max(m, sh_w[t * WG + x]);
                top[t] = m;
            }
            barrier();
        }
#endif
        // One reference per row, moved only when the block exceeds it by more than MARGIN.
        float weights[QT];
        [[unroll]] for (uint t = 0u; t < QT; ++t) {
            if (top[t] > r[t] + MARGIN) {
                float factor = rescale_factor(r[t], top[t]);
                r[t] = top[t];
                kahan_scale(l[t], factor);
                [[unroll]] for (uint c = 0u; c < DE; ++c) kahan_scale(acc[t * DE + c], factor);
            }
            // Masked keys (-inf) weigh exactly 0; NaN and +inf ones too (the row is NaN).
            float p = sx[t] == NEG_INF || is_bad(sx[t]) != 0u ? 0.0 : exp(sx[t] - finite_ref(r[t]));
            kahan_add(l[t], p);
            weights[t] = p;
        }
        vec4 lane_w[QT4];  // this lane's key's weights, four rows per vec4
        [[unroll]] for (uint g4 = 0u; g4 < QT4; ++g4) {
            vec4 w = vec4(0.0);
            [[unroll]] for (uint c = 0u; c < 4u; ++c) if (4u * g4 + c < QT) w[c] = weights[4u * g4 + c];
            lane_w[g4] = w;
#if !SHUFFLE
            sh_p[g4 * WG + lid] = w;
#endif
        }
#if !SHUFFLE
        barrier();
#endif
        float sums[QT * DE];
        [[unroll]] for (uint c = 0u; c < QT * DE; ++c) sums[c] = 0.0;
#if SHUFFLE
        // Every key of the block, unrolled: a key past kend weighs 0 in every row (its
        // lane was not live) and reads the last key's value, which the select below
        // keeps out of the sums, so no loop mask and no skip are needed.
        [[unroll]] for (uint x = 0u; x < WG; ++x) {
            uint key = min(kb + x, kend - 1u);
#else
        uint n = min(WG, kend - kb);
        for (uint x = 0u; x < n; ++x) {
            uint key = kb + x;
#endif
            float p[QT];
            [[unroll]] for (uint g4 = 0u; g4 < QT4; ++g4) {
#if SHUFFLE
                vec4 w = subgroupShuffle(lane_w[g4], x);
#else
                vec4 w = sh_p[g4 * WG + x];
#endif
                [[unroll]] for (uint c = 0u; c < 4u; ++c) if (4u * g4 + c < QT) p[4u * g4 + c] = w[c];
            }
#if !SHUFFLE
            bool any_weight = false;
            [[unroll]] for (uint t = 0u; t < QT; ++t) any_weight = any_weight || p[t] != 0.0;
            if (!any_weight) continue;  // a masked key's value is never read
#endif
#if KV == 2
            float vscale = v_scales[kv_base + key];
#endif
            [[unroll]] for (uint i = 0u; i < VPL; ++i) {
                uint w4 = lid + WG * i;
                uvec4 w = uvec4(0u);
                if (V4 % WG == 0u || w4 < V4) w = V4_AT((kv_base + key) * V4 + w4);
                float e[4u * PER_WORD];
                unpack4(w, e);
                [[unroll]] for (uint y = 0u; y < 4u * PER_WORD; ++y) {
#if KV == 2
                    float val = vscale * e[y];
#else
                    float val = e[y];
#endif
                    [[unroll]] for (uint t = 0u; t < QT; ++t) {
                        uint c = t * DE + i * 4u * PER_WORD + y;
                        sums[c] += p[t] != 0.0 ? p[t] * val : 0.0;
                    }
                }
            }
        }
        [[unroll]] for (uint c = 0u; c < QT * DE; ++c) kahan_add(acc[c], sums[c]);
#if !SHUFFLE
        barrier();  // the block's weights are read everywhere before the next block's
#endif
    }

    // The lanes' shares of l and bad, summed in lane order: the same in every lane.
    float lsum[QT];
    uint rbad[QT];
    [[unroll]] for (uint t = 0u; t < QT; ++t) sh_w[t * WG + lid] = l[t].sum;
    barrier();
    [[unroll]] for (uint t = 0u; t < QT; ++t) {
        KahanSum total = KahanSum(0.0, 0.0);
        for (uint x = 0u; x < WG; ++x) kahan_add(total, sh_w[t * WG + x]);
        lsum[t] = total.sum;
    }
    barrier();
    [[unroll]] for (uint t = 0u; t < QT; ++t) sh_w[t * WG + lid] = float(bad[t]);
    barrier();
    [[unroll]] for (uint t = 0u; t < QT; ++t) {
        uint any_bad = 0u;
        for (uint x = 0u; x < WG; ++x) any_bad |= uint(sh_w[t * WG + x] != 0.0);
        rbad[t] = any_bad;
    }

    [[unroll]] for (uint t = 0u; t < QT; ++t) {
        uint row = row0 + t;
        if (row >= rows) break;
        uint out_row = z * rows + row;
        if (pc.direct != 0u) {
            float inv = r[t] == NEG_INF ? 0.0 : reciprocal(lsum[t]);
            [[unroll]] for (uint i = 0u; i < DE; ++i) {
                uint e = elem_of(lid, i);
                if (e < pc.dv) out_rows[out_row * pc.dv + e] = rbad[t] != 0u ? QNAN : acc[t * DE + i].sum * inv;
            }
        } else {
            uint part = out_row * pc.nsplit + split;
            if (lid == 0u) stats[part] = vec4(r[t], lsum[t], float(rbad[t]), 0.0);
            [[unroll]] for (uint i = 0u; i < DE; ++i) {
                uint e = elem_of(lid, i);
                if (e < pc.dv) parts[part * pc.dv + e] = acc[t * DE + i].sum;
            }
        }
    }
}
