#version 450
// W_hat = s * (q - z), one output float per invocation: a single correctly rounded
// multiply of the exact integer q - z, so the result equals numpy's float32 product.
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer Q { uint q[]; };
layout(std430, binding = 1) readonly buffer S { float scale[]; };
layout(std430, binding = 2) readonly buffer Z { int zero_point[]; };
layout(std430, binding = 3) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint n;             // columns
    uint row_words;     // words per stored row
    uint rows;          // rows in this dispatch
    uint q_row0;        // first row of this dispatch in the Q chunk
    uint row0;          // global index of the first row
    uint y_row0;        // first row of this dispatch in the output buffer
    uint group_stride;  // 1 per channel, 0 per tensor
    uint is_signed;     // 1: int8 storage, 0: uint8 storage
} pc;

void main() {
    uint col = gl_GlobalInvocationID.x;
    uint r = gl_GlobalInvocationID.y;
    if (col >= pc.n || r >= pc.rows) return;
    uint word = q[(pc.q_row0 + r) * pc.row_words + col / 4u];
    int offset = int(8u * (col % 4u));
    int v = pc.is_signed != 0u ? bitfieldExtract(int(word), offset, 8) : int(bitfieldExtract(word, offset, 8));
    uint g = (pc.row0 + r) * pc.group_stride;
    precise float value = scale[g] * float(v - zero_point[g]);
    y[(pc.y_row0 + r) * pc.n + col] = value;
}
