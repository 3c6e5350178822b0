#version 450
// Symmetric per-channel RTN quantization with the scales found on the device: one
// workgroup per row. Pass 1 reads the row for max|w| (and any NaN or infinity); the
// scale s = float32(max|w| / qmax) comes from exact integer arithmetic (the correctly
// rounded quotient, as the host computes it in float64 and rounds once); pass 2 quantizes
// the row, which pass 1 left in the cache, with the same per-element code as quantize.comp.
// Integers and scales equal the host path's bit for bit.
//
// Needs rows of a multiple of 4 floats starting 16-byte aligned (vec4 loads). Output per
// row: the stored blocks (the last one padded with 0 = z): 16 codes one byte each, or
// with PACKED (bits <= 4) 32 codes two per byte (column 2k in the low nibble of byte k,
// as 4-bit two's complement), and in `rowinfo` the scale's
// bits and a flag for a NaN or infinity in the row (the host then raises its error).
#extension GL_GOOGLE_include_directive : require
#include "quant_common.glsl"

layout(local_size_x_id = 0) in;
#include "workgroup_reduce.glsl"

#if TEXEL
#extension GL_EXT_samplerless_texture_functions : require
layout(binding = 0) uniform textureBuffer w_texels;  // rgba32f view: the texture path
#define W4(i) texelFetch(w_texels, int(i))
#else
layout(std430, binding = 0) readonly buffer W { vec4 w4[]; };
#define W4(i) w4[i]
#endif
layout(std430, binding = 1) writeonly buffer Q { uvec4 q4[]; };
layout(std430, binding = 2) writeonly buffer RowInfo { uvec2 rowinfo[]; };  // (s bits, bad)

layout(push_constant) uniform Push {
    uint n4;          // vec4s per row (columns / 4)
    uint rows;        // rows in this dispatch
    uint row_blocks;  // 16-byte blocks per stored row
    uint w_first;     // vec4 index in W of this dispatch's first row
    uint q_row0;      // first row of this dispatch in the Q chunk
    uint info_row0;   // first row of this dispatch in rowinfo
    uint qmax;        // 2^(bits-1) - 1
} pc;

shared uint sh_max[gl_WorkGroupSize.x];

#define MAX_SLOT(a, b) sh_max[a] = max(sh_max[a], sh_max[b])

// Any workgroup size (workgroup_reduce.glsl); every invocation gets the maximum.
uint workgroup_max(uint v) {
#if SUBGROUP
    if (one_subgroup()) return subgroupMax(v);
#endif
    sh_max[gl_LocalInvocationID.x] = v;
    barrier();
    TREE_REDUCE(MAX_SLOT)
    uint m = sh_max[0];
    barrier();  // slot 0 is read everywhere before the next row writes it
    return m;
}

// rounded_quotient_bits and group_of_scale: quant_common.glsl.

#if PACKED
const uint CODE_BITS = 4u;
const uint CODE_MASK = 0xfu;
#else
const uint CODE_BITS = 8u;
const uint CODE_MASK = 0xffu;
#endif
const uint VEC4_PER_WORD = 32u / (4u * CODE_BITS);  // 2 packed, 1 unpacked

// The codes of four columns, in the low 4 * CODE_BITS bits.
uint quantize_vec4(vec4 a, Group g, Divisor d, int qmax) {
    uint bits = 0u;
    for (uint j = 0u; j < 4u; ++j) {
        bits |= (uint(quantize_value(a[j], g, d, -qmax, qmax)) & CODE_MASK) << (CODE_BITS * j);
    }
    return bits;
}

void main() {
    uint r = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    if (r >= pc.rows) return;  // the grid's last line may run past the rows: whole workgroups
    uint lane = gl_LocalInvocationID.x;
    uint step = gl_WorkGroupSize.x;
    uint base = pc.w_first + r * pc.n4;

    // Pass 1: the largest magnitude as bits (NaN and infinity compare above every number).
    uvec4 big = uvec4(0u);
    for (uint i = lane; i < pc.n4; i += step) big = max(big, floatBitsToUint(W4(base + i)) & 0x7fffffffu);
    uint amax_bits = workgroup_max(max(max(big.x, big.y), max(big.z, big.w)));
    uint bad = uint(amax_bits >= 0x7f800000u);
    // Subnormal magnitudes count as 0; a row of zeros gets s = 1.
    uint s_bits = amax_bits < 0x800000u || bad != 0u ? 0x3f800000u
                                                     : rounded_quotient_bits(amax_bits, pc.qmax);
    if (lane == 0u) rowinfo[pc.info_row0 + r] = uvec2(s_bits, bad);

    // Pass 2: one stored block per step; the last block's columns past the row give q = 0.
    Group g = group_of_scale(s_bits);
    Divisor d = divisor_of(g);
    int qmax = int(pc.qmax);
    uint q_base = (pc.q_row0 + r) * pc.row_blocks;
    for (uint b = lane; b < pc.row_blocks; b += step) {
        uvec4 packed;
        for (uint k = 0u; k < 4u; ++k) {
            uint word = 0u;
            for (uint h = 0u; h < VEC4_PER_WORD; ++h) {
                uint v = (4u * b + k) * VEC4_PER_WORD + h;
                uint part = quantize_vec4(W4(base + min(v, pc.n4 - 1u)), g, d, qmax);
                word |= (v < pc.n4 ? part : 0u) << (16u * h);
            }
            packed[k] = word;
        }
        q4[q_base + b] = packed;
    }
}
