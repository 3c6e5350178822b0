#version 450
// RTN quantization of float32 weights; each invocation quantizes one stored block of
// 16 bytes of one row and stores it as one uvec4: 16 columns one byte each, or with
// PACKED 32 columns two per byte (column 2k in the low nibble of byte k, 2k + 1 in the
// high nibble; symmetric codes as 4-bit two's complement).
//
// q = clamp(roundEven(w / s) + z, qmin, qmax), with roundEven of the exact real quotient
// (see quant_common.glsl). The host passes each group's scale normalized into [1, 2)
// and two powers of two whose product normalizes it (multiplying by them is exact), so
// (w * f1 * f2) / s_norm = w / s. Columns past n (row padding up to the row stride)
// store the z of the row's last group, which dequantizes to 0.
//
// Parameters: row r's start at element (group_row0 + r) * group_stride (stride 0: one set
// for the tensor). GROUPED 0: one set per row. GROUPED 1: column c uses element
// min(c / group_cols, last_group) past that start (padding columns: the last group).
// GROUPED 2: the same where group_cols is a multiple of the block's columns, so a whole
// block shares one set (fetched and prepared once per block).
//
// The code is straight-line on purpose: a CPU driver (lavapipe) runs both sides of every
// branch and loads memory lane by lane, so fewer, wider loads and no branches win.
// VEC 1: the block lies inside the row and the row starts 16-byte aligned: vec4 loads.
// VEC 0: any block; columns are loaded one by one, clamped to the row.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "quant_common.glsl"

layout(local_size_x_id = 0) in;
// Rows per invocation: a specialization constant, so `vkcore tune` can choose it per device.
layout(constant_id = 1) const uint ROWS = 4u;
#if PACKED
const uint COLS = 32u;  // columns per stored block
#else
const uint COLS = 16u;
#endif

#if TEXEL
// W and the group parameters read through uniform texel buffers (rgba32f and rgba32ui
// views): the driver's texture path, which lavapipe vectorizes, where storage-buffer loads
// loop over the lanes.
#extension GL_EXT_samplerless_texture_functions : require
#endif
#if VEC && TEXEL
layout(binding = 0) uniform textureBuffer w_texels;
#define W4(i) texelFetch(w_texels, int(i))
#elif VEC
layout(std430, binding = 0) readonly buffer W { vec4 w4[]; };
#define W4(i) w4[i]
#else
layout(std430, binding = 0) readonly buffer W { float w[]; };
#endif
layout(std430, binding = 1) writeonly buffer Q { uvec4 q4[]; };
#if TEXEL
layout(binding = 2) uniform utextureBuffer group_texels;  // one rgba32ui texel per group
Group group_at(uint i) {
    uvec4 t = texelFetch(group_texels, int(i));
    return Group(uintBitsToFloat(t.x), uintBitsToFloat(t.y), uintBitsToFloat(t.z), int(t.w));
}
#else
layout(std430, binding = 2) readonly buffer P { Group groups[]; };
Group group_at(uint i) { return groups[i]; }
#endif

layout(push_constant) uniform Push {
    uint n;             // columns of W
    uint row_blocks;    // 16-byte blocks per stored row (row stride / 16)
    uint rows;          // rows in this dispatch
    uint w_first;       // index in W of this dispatch's first row (w_row0 * n + offset)
    uint q_row0;        // first row of this dispatch in the Q chunk
    uint group_row0;    // first row of this dispatch in the group parameters (bound per chunk)
    uint group_stride;  // parameter sets per row (G, or 1 per channel); 0: one for the tensor
    int qmin;
    int qmax;
    uint block0;        // first stored block (COLS columns) of this dispatch
    uint group_cols;    // GROUPED: columns per group
    uint last_group;    // GROUPED: G - 1
} pc;

// Stores code q of column i of the block into the packed words.
void put(inout uvec4 words, uint i, int q) {
#if PACKED
    words[i / 8u] |= (uint(q) & 0xfu) << (4u * (i % 8u));
#else
    words[i / 4u] |= (uint(q) & 0xffu) << (8u * (i % 4u));
#endif
}

void quantize_block(uint block, uint r) {
    uint first_group = (pc.group_row0 + r) * pc.group_stride;
#if GROUPED == 0
    Group g = group_at(first_group);
    Divisor d = divisor_of(g);
#elif GROUPED == 2
    Group g = group_at(first_group + block * COLS / pc.group_cols);
    Divisor d = divisor_of(g);
#endif
    uint col0 = block * COLS;
    uint w_base = pc.w_first + r * pc.n;
    float v[COLS];
#if VEC
    [[unroll]] for (uint i = 0u; i < COLS / 4u; ++i) {
        vec4 a = W4((w_base + col0) / 4u + i);
        v[4u * i] = a.x;
        v[4u * i + 1u] = a.y;
        v[4u * i + 2u] = a.z;
        v[4u * i + 3u] = a.w;
    }
#else
    [[unroll]] for (uint i = 0u; i < COLS; ++i) v[i] = w[w_base + min(col0 + i, pc.n - 1u)];
#endif
    uvec4 words = uvec4(0u);
    [[unroll]] for (uint i = 0u; i < COLS; ++i) {
#if GROUPED == 1
        Group g = group_at(first_group + min((col0 + i) / pc.group_cols, pc.last_group));
        Divisor d = divisor_of(g);
#endif
        int q = quantize_value(v[i], g, d, pc.qmin, pc.qmax);
#if !VEC
        q = col0 + i < pc.n ? q : g.z;  // VEC blocks lie inside the row
#endif
        put(words, i, q);
    }
    q4[(pc.q_row0 + r) * pc.row_blocks + block] = words;
}

void main() {
    uint block = pc.block0 + gl_GlobalInvocationID.x;
    if (block >= pc.row_blocks) return;
    uint r_end = min(pc.rows, (gl_WorkGroupID.y + 1u) * ROWS);
    // Several rows per invocation: lavapipe pays a fixed cost per workgroup.
    for (uint r = gl_WorkGroupID.y * ROWS; r < r_end; ++r) quantize_block(block, r);
}
