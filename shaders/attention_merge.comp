#version 450
// The partial states of attention.comp's key splits merged in split order, then
// normalized: one workgroup per query row, its invocations over the dimensions of v.
// R = max r_s, L = sum l_s e^(r_s - R), out = sum acc_s e^(r_s - R) / L; a split that
// attended no key (r = -inf) adds nothing, a row that attended none gives zeros, a NaN
// or +inf score in any split makes the row NaN.
#extension GL_GOOGLE_include_directive : require
#include "attention_common.glsl"

layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer ST { vec4 stats[]; };
layout(std430, binding = 1) readonly buffer PA { float parts[]; };
layout(std430, binding = 2) writeonly buffer O { float out_rows[]; };

layout(push_constant) uniform Push {
    uint rows;
    uint dv;
    uint nsplit;
} pc;

void main() {
    uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    if (row >= pc.rows) return;  // the grid's last line may run past the rows
    uint base = row * pc.nsplit;
    float R = NEG_INF;
    bool bad = false;
    for (uint s = 0u; s < pc.nsplit; ++s) {
        vec4 st = stats[base + s];
        R = max(R, st.x);
        bad = bad || st.z != 0.0;
    }
    KahanSum L = KahanSum(0.0, 0.0);
    for (uint s = 0u; s < pc.nsplit; ++s) {
        vec4 st = stats[base + s];
        kahan_add(L, st.x == NEG_INF ? 0.0 : st.y * rescale_factor(st.x, R));
    }
    float inv = R == NEG_INF ? 0.0 : reciprocal(L.sum);
    for (uint e = gl_LocalInvocationID.x; e < pc.dv; e += gl_WorkGroupSize.x) {
        KahanSum acc = KahanSum(0.0, 0.0);
        for (uint s = 0u; s < pc.nsplit; ++s) {
            float rs = stats[base + s].x;
            if (rs != NEG_INF) kahan_add(acc, parts[(base + s) * pc.dv + e] * rescale_factor(rs, R));
        }
        out_rows[row * pc.dv + e] = bad ? QNAN : acc.sum * inv;
    }
}
