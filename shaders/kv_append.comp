#version 450
// New tokens into a KV cache (vkcore.KVCache.append): one invocation per vector of D
// floats (one token of one head), written at its position in the cache.
//
// x: rows (b, h, t) of D floats, row (b * H + h) * T + t.
// cache: rows (b, h, position) of `words` uint words, row (b * H + h) * capacity + pos.
// KV 0: float32, one word per element. KV 1: float16, two per word (element 2i in the
// low half). KV 2: int8 codes, four per word (element 4i in the low byte), the row's
// scale in `scales`: symmetric RTN with the rules of quantize.comp (s = float32(max|x| /
// 127) correctly rounded, q = roundEven(x / s) exactly), so the codes and scales equal
// vkcore.reference.kv_quantize bit for bit. A row holding a NaN or an infinity gets codes
// 0 and a NaN scale: its dequantized values are NaN. Words past D hold zeros.
#extension GL_GOOGLE_include_directive : require
#include "float_controls.glsl"
#if KV == 2
#include "quant_common.glsl"
#endif

layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer C { uint cache[]; };
layout(std430, binding = 2) writeonly buffer S { float scales[]; };

layout(push_constant) uniform Push {
    uint rows;      // B * H * T
    uint tokens;    // T
    uint d;         // elements per vector
    uint words;     // words per cache row
    uint capacity;  // cache rows per (b, h)
    uint pos0;      // position of the first new token
} pc;

void main() {
    uint r = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * gl_WorkGroupSize.x
             + gl_LocalInvocationID.x;
    if (r >= pc.rows) return;
    uint head = r / pc.tokens;
    uint t = r - head * pc.tokens;
    uint src = r * pc.d;
    uint dst = (head * pc.capacity + pc.pos0 + t) * pc.words;
#if KV == 0
    for (uint i = 0u; i < pc.d; ++i) cache[dst + i] = floatBitsToUint(x[src + i]);
#elif KV == 1
    for (uint w = 0u; w < pc.words; ++w) {
        uint i = 2u * w;
        float hi = i + 1u < pc.d ? x[src + i + 1u] : 0.0;
        cache[dst + w] = packHalf2x16(vec2(x[src + i], hi));
    }
#else
    uint amax_bits = 0u;  // NaN and infinity compare above every number
    for (uint i = 0u; i < pc.d; ++i) amax_bits = max(amax_bits, floatBitsToUint(x[src + i]) & 0x7fffffffu);
    bool bad = amax_bits >= 0x7f800000u;
    uint s_bits = amax_bits < 0x800000u || bad ? 0x3f800000u : rounded_quotient_bits(amax_bits, 127u);
    Group g = group_of_scale(s_bits);
    Divisor dv = divisor_of(g);
    for (uint w = 0u; w < pc.words; ++w) {
        uint word = 0u;
        for (uint j = 0u; j < 4u; ++j) {
            uint i = 4u * w + j;
            int code = i < pc.d && !bad ? quantize_value(x[src + i], g, dv, -127, 127) : 0;
            word |= (uint(code) & 0xffu) << (8u * j);
        }
        cache[dst + w] = word;
    }
    scales[head * pc.capacity + pc.pos0 + t] = bad ? uintBitsToFloat(0x7fc00000u) : uintBitsToFloat(s_bits);
#endif
}
