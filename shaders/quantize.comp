#version 450
// RTN quantization of float32 weights, one output word (4 packed bytes) per invocation.
//
// q = clamp(roundEven(w / s) + z, qmin, qmax), with roundEven of the exact real quotient
// (see quant_common.glsl). The host passes each group's scale normalized into [1, 2)
// together with the power of two that normalizes it, so w * 2^e / (s * 2^e) = w / s.
// Columns past n (row padding up to the row stride) store z, which dequantizes to 0.
#extension GL_GOOGLE_include_directive : require
#include "quant_common.glsl"

layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer W { float w[]; };
layout(std430, binding = 1) writeonly buffer Q { uint q[]; };
struct Group { float s_norm; int e; int z; int pad; };
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
    uint word = gl_GlobalInvocationID.x;
    uint r = gl_GlobalInvocationID.y;
    if (word >= pc.row_words || r >= pc.rows) return;
    Group g = groups[(pc.group_row0 + r) * pc.group_stride];
    uint packed = 0u;
    for (uint i = 0u; i < 4u; ++i) {
        uint col = word * 4u + i;
        int v = g.z;
        if (col < pc.n) {
            float x = ldexp(flush_subnormal(w[(pc.w_row0 + r) * pc.n + col]), g.e);
            v = clamp(int(exact_round(x, g.s_norm)) + g.z, pc.qmin, pc.qmax);
        }
        packed |= (uint(v) & 0xffu) << (8u * i);
    }
    q[(pc.q_row0 + r) * pc.row_words + word] = packed;
}
