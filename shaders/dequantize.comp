#version 450
// W_hat = s * (q - z): one invocation dequantizes one stored 16-byte block of each of
// ROWS consecutive rows: 16 columns one byte each, or with PACKED 32 columns two per byte
// (column 2k in the low nibble of byte k; symmetric nibbles sign-extended). Each value is
// a single correctly rounded float32 multiply of the exact integer q - z, so the result
// equals numpy's float32 product bit for bit.
//
// Parameters: row r's start at element (row0 + r) * group_stride (stride 0: one set for
// the tensor). GROUPED 0: one set per row; GROUPED 1: column c uses element
// min(c / group_cols, last_group) past that start; GROUPED 2: the same where group_cols
// is a multiple of the block's columns, so the whole block shares one set.
//
// TEXEL 1: the blocks are read through a uniform texel buffer (rgba32ui view), the
// driver's vectorized texture path on lavapipe. VEC 1 (row length a multiple of 4): the
// block is written as four vec4 stores; VEC 0: as 16 float stores. Columns past the row
// end (the padding of the last block) are not written.
#extension GL_GOOGLE_include_directive : require
#include "float_controls.glsl"
layout(local_size_x_id = 0) in;
// Rows per invocation: a specialization constant, so `vkcore tune` can choose it per device.
layout(constant_id = 1) const uint ROWS = 4u;
#if PACKED
const uint COLS = 32u;  // columns per stored block
#else
const uint COLS = 16u;
#endif

#if TEXEL
#extension GL_EXT_samplerless_texture_functions : require
layout(binding = 0) uniform utextureBuffer q_texels;
#define QBLOCK(i) texelFetch(q_texels, int(i))
#else
layout(std430, binding = 0) readonly buffer Q { uvec4 q4[]; };
#define QBLOCK(i) q4[i]
#endif
layout(std430, binding = 1) readonly buffer S { float scale[]; };
layout(std430, binding = 2) readonly buffer Z { int zero_point[]; };
#if VEC
layout(std430, binding = 3) writeonly buffer Y { vec4 y4[]; };
#else
layout(std430, binding = 3) writeonly buffer Y { float y[]; };
#endif

layout(push_constant) uniform Push {
    uint n;             // columns
    uint row_blocks;    // 16-byte blocks per stored row
    uint rows;          // rows in this dispatch
    uint q_row0;        // first row of this dispatch in the Q chunk
    uint row0;          // global index of the first row
    uint y_row0;        // first row of this dispatch in the output buffer
    uint group_stride;  // parameter sets per row (G, or 1 per channel); 0 per tensor
    uint is_signed;     // 1: int8 (or signed nibble) storage, 0: unsigned
    uint group_cols;    // GROUPED: columns per group
    uint last_group;    // GROUPED: G - 1
} pc;

// The four bytes of a word as integers, sign-extended for int8 storage.
ivec4 bytes_of(uint word) {
    ivec4 u = ivec4(word & 0xffu, (word >> 8u) & 0xffu, (word >> 16u) & 0xffu, word >> 24u);
    return pc.is_signed != 0u ? u - (ivec4(greaterThan(u, ivec4(127))) << 8) : u;
}

// The codes of columns 4k .. 4k + 3 of a block.
ivec4 codes_of(uvec4 words, uint k) {
#if PACKED
    uint word = words[k / 2u] >> (16u * (k % 2u));
    uvec4 u = uvec4(word & 0xfu, (word >> 4u) & 0xfu, (word >> 8u) & 0xfu, (word >> 12u) & 0xfu);
    ivec4 c = ivec4(u);
    return pc.is_signed != 0u ? c - (ivec4(greaterThan(c, ivec4(7))) << 4) : c;
#else
    return bytes_of(words[k]);
#endif
}

void dequantize_block(uint block, uint r) {
    uint g = (pc.row0 + r) * pc.group_stride;
#if GROUPED == 2
    g += block * COLS / pc.group_cols;
#endif
#if GROUPED != 1
    float s = scale[g];
    int z = zero_point[g];
#endif
    uvec4 words = QBLOCK((pc.q_row0 + r) * pc.row_blocks + block);
    uint col0 = block * COLS;
    uint base = (pc.y_row0 + r) * pc.n + col0;  // in floats
    for (uint k = 0u; k < COLS / 4u; ++k) {
#if GROUPED == 1
        vec4 s;
        ivec4 z;
        for (uint j = 0u; j < 4u; ++j) {
            uint e = g + min((col0 + 4u * k + j) / pc.group_cols, pc.last_group);
            s[j] = scale[e];
            z[j] = zero_point[e];
        }
#endif
        precise vec4 v = s * vec4(codes_of(words, k) - z);
#if VEC
        if (col0 + 4u * k < pc.n) y4[base / 4u + k] = v;
#else
        for (uint j = 0u; j < 4u; ++j) {
            if (col0 + 4u * k + j < pc.n) y[base + 4u * k + j] = v[j];
        }
#endif
    }
}

void main() {
    uint block = gl_GlobalInvocationID.x;
    if (block >= pc.row_blocks) return;
    uint r_end = min(pc.rows, (gl_WorkGroupID.y + 1u) * ROWS);
    // Several rows per invocation: lavapipe pays a fixed cost per workgroup.
    for (uint r = gl_WorkGroupID.y * ROWS; r < r_end; ++r) dequantize_block(block, r);
}
