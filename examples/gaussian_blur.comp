#version 450
// A Gaussian blur of a WIDTH x HEIGHT float image, one invocation per output pixel: the
// compute pipeline of the cold-vs-warm experiment this project started from. RADIUS (a
// #define) sets the kernel's half-width; the weights come from a buffer so that the host
// decides them (normalized, sigma = RADIUS / 2). Borders clamp to the edge.
//
//   vkcore coldwarm --shader examples/gaussian_blur.comp \
//       --define WIDTH=512 --define HEIGHT=512 --define RADIUS=4 --elements 262144

#ifndef WIDTH
#define WIDTH 512
#endif
#ifndef HEIGHT
#define HEIGHT 512
#endif
#ifndef RADIUS
#define RADIUS 4
#endif

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Src { float src[]; };
layout(std430, binding = 1) readonly buffer Weights { float weights[]; };  // 2 RADIUS + 1
layout(std430, binding = 2) writeonly buffer Dst { float dst[]; };

float at(int x, int y) {
    return src[clamp(y, 0, HEIGHT - 1) * WIDTH + clamp(x, 0, WIDTH - 1)];
}

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= uint(WIDTH * HEIGHT)) return;
    int x = int(i % uint(WIDTH));
    int y = int(i / uint(WIDTH));
    float sum = 0.0;
    for (int dy = -RADIUS; dy <= RADIUS; ++dy) {
        float row = 0.0;
        for (int dx = -RADIUS; dx <= RADIUS; ++dx) {
            row += weights[dx + RADIUS] * at(x + dx, y + dy);
        }
        sum += weights[dy + RADIUS] * row;
    }
    dst[i] = sum;
}
