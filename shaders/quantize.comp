#version 450
// RTN quantization of float32 weights; each invocation writes WORDS packed words
// (4 bytes each) of one row.
//
// q = clamp(roundEven(w / s) + z, qmin, qmax), with roundEven of the exact real quotient
// (see quant_common.glsl). The host passes each group's scale normalized into [1, 2)
// and two powers of two whose product normalizes it (multiplying by them is exact), so
// (w * f1 * f2) / s_norm = w / s. Columns past n (row padding up to the row stride)
// store z, which dequantizes to 0.
#extension GL_GOOGLE_include_directive : require
#include "quant_common.glsl"

layout(local_size_x_id = 0) in;

#define WORDS 4

layout(std430, binding = 0) readonly buffer W { float w[]; };
layout(std430, binding = 1) writeonly buffer Q { uint q[]; };
struct Group { float s_norm; float f1; float f2; int z; };
layout(std430, binding = 2) readonly buffer P { Group groups[]; };

layout(push_constant) uniform Push {
    uint n;             // columns of W
    uint row_words;     // words per stored row (row stride / 4)
    uint rows;          // rows in this dispatch
    uint w_row0;        // first row of this dispatch in the W slice
    uint q_row0;        // first row of this dispatch in the Q chunk
    uint group_row0;    // global index of the first row (for the group lookup)
    uint group_stride;  // 1: a group per row, 0: one group for the tensor
    int qmin;
    int qmax;
} pc;

void main() {
    uint first_word = gl_GlobalInvocationID.x * WORDS;
    uint r = gl_GlobalInvocationID.y;
    if (first_word >= pc.row_words || r >= pc.rows) return;
    Group g = groups[(pc.group_row0 + r) * pc.group_stride];
    float inv = 1.0 / g.s_norm;  // only for candidates: exact_round corrects them
    uint w_base = (pc.w_row0 + r) * pc.n;
    uint q_base = (pc.q_row0 + r) * pc.row_words;
    uint last_word = min(first_word + WORDS, pc.row_words);
    for (uint word = first_word; word < last_word; ++word) {
        uint packed = 0u;
        for (uint i = 0u; i < 4u; ++i) {
            uint col = word * 4u + i;
            int v = g.z;
            if (col < pc.n) {
                precise float x = flush_subnormal(w[w_base + col]) * g.f1 * g.f2;
                v = clamp(int(fast_exact_round(x, g.s_norm, inv)) + g.z, pc.qmin, pc.qmax);
            }
            packed |= (uint(v) & 0xffu) << (8u * i);
        }
        q[q_base + word] = packed;
    }
}
