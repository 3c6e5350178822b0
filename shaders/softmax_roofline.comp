#version 450
// The load/store roofline of the softmax kernels on this device: y = x with the same
// access pattern (one vec4 per invocation per step, consecutive invocations on
// consecutive vec4s, `chunk` vec4s per workgroup). The bench divides the bytes it moves
// by its device time; no softmax pass over the same data can beat it.
layout(local_size_x_id = 0) in;

#if TEXEL
#extension GL_EXT_samplerless_texture_functions : require
layout(binding = 0) uniform textureBuffer x_texels;  // as the softmax kernels read x
#define X(i) texelFetch(x_texels, int(i))
#else
layout(std430, binding = 0) readonly buffer X { vec4 x[]; };
#define X(i) x[i]
#endif
layout(std430, binding = 1) writeonly buffer Y { vec4 y[]; };

layout(push_constant) uniform Push {
    uint n;      // vec4s in all
    uint chunk;  // vec4s per workgroup
} pc;

void main() {
    uint begin = gl_WorkGroupID.x * pc.chunk;
    uint end = min(begin + pc.chunk, pc.n);
    for (uint i = begin + gl_LocalInvocationID.x; i < end; i += gl_WorkGroupSize.x) y[i] = X(i);
}
