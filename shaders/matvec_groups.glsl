// main() of matvec.comp for GROUPED 1: parameters (s_ig, z_ig) per group of group_cols
// columns (the last group may be shorter; per channel is one group of n columns, per
// tensor the same with one parameter row), codes one per byte or, PACKED 1, two per byte
// (byte k: column 2k in bits 0-3, column 2k+1 in bits 4-7; symmetric codes are 4-bit two's
// complement, asymmetric ones unsigned). Padding codes equal the last group's zero point.
//
// Work: each group is cut into `parts` pieces of part_cols columns (whole 16-byte blocks
// where the groups are), the units u = g * parts + p. Lanes take units u = lane,
// lane + stride, ...; a unit's products for all ROWS rows reuse each loaded activation
// block. MODE 0 (float): acc_r += s_rg * (sum over the unit of v x), float32 in any order,
// then a workgroup sum. MODE 1, 2 (integer activations): a unit's int32 sum is exact; the
// units of a window of `stride` units go through shared memory to the invocation that owns
// the row (r % stride), which adds them in unit order, so group g's acc_g is complete at
// its last piece:
//     t_g = fl(fl(s_g * s_x) * fl(acc_g)),  y = fl(...fl(t_0 + t_1)... + t_{G-1}) + b
// in increasing g, one invocation per row: the reference's order, bit for bit. MODE 4
// (row sums): V_g = sum (Q - z) per group, by the same windows.
#if PACKED
#define CPB 32u  // codes per 16-byte block
#define CODE_BITS 4
#else
#define CPB 16u
#define CODE_BITS 8
#endif
#define CPW (CPB / 4u)  // codes per 32-bit word

#if MODE == 0
#define PART_T float
#define PART_ZERO 0.0
#else
#define PART_T int
#define PART_ZERO 0
#endif

// Code t of a stored word as the integer v = Q - z.
int code_of(uint word, uint t, int z) {
    int off = int(t) * CODE_BITS;
#if WSIGNED
    int q = bitfieldExtract(int(word), off, CODE_BITS);
#else
    int q = int(bitfieldExtract(word, off, CODE_BITS));
#endif
#if ASYM
    q -= z;
#endif
    return q;
}

// The codes of word `word` number 4h .. 4h+3 (h = 0, 1 for a packed word) as Q - z.
ivec4 codes4(uint word, int h, int z) {
#if PACKED
    int o = 16 * h;
#if WSIGNED
    int s = int(word);
    ivec4 v = ivec4(bitfieldExtract(s, o, 4), bitfieldExtract(s, o + 4, 4), bitfieldExtract(s, o + 8, 4),
                    bitfieldExtract(s, o + 12, 4));
#else
    ivec4 v = ivec4(bitfieldExtract(word, o, 4), bitfieldExtract(word, o + 4, 4),
                    bitfieldExtract(word, o + 8, 4), bitfieldExtract(word, o + 12, 4));
#endif
#if ASYM
    v -= ivec4(z);
#endif
    return v;
#else
    return weights4(word, z);
#endif
}

// Activation of column j (slow path): x_j, or the quantized code (MODE 1, 2), or 1 (MODE 4).
PART_T act_at(uint j) {
#if MODE == 0
    return xs[j];
#elif MODE == 4
    return 1;
#else
    uint word = QX(j / 16u)[(j / 4u) % 4u];
#if MODE == 1
    return bitfieldExtract(int(word), int(j % 4u) * 8, 8);
#else
    return int(bitfieldExtract(word, int(j % 4u) * 8, 8));
#endif
#endif
}

// Columns [a, e) one at a time, for every row (`wrow`: first word index of each row).
void columns(uint a, uint e, uint wrow[ROWS], int z[ROWS], inout PART_T part[ROWS]) {
    for (uint j = a; j < e; ++j) {
        PART_T xj = act_at(j);
        [[unroll]] for (int r = 0; r < ROWS; ++r) {
            uint word = WQ(wrow[r] + j / CPB)[(j % CPB) / CPW];
            part[r] += PART_T(code_of(word, j % CPW, z[r])) * xj;
        }
    }
}

// Whole blocks [b0, b1): each activation block is loaded once for all rows.
void blocks(uint b0, uint b1, uint wrow[ROWS], int z[ROWS], inout PART_T part[ROWS]) {
    for (uint b = b0; b < b1; ++b) {
#if MODE == 0
        vec4 xk[CPW];
        [[unroll]] for (uint k = 0u; k < CPW; ++k) xk[k] = XV(CPW * b + k);
#elif MODE == 1 || MODE == 2
        ivec4 ak[CPW];
#if PACKED
        uvec4 a0 = QX(2u * b), a1 = QX(2u * b + 1u);
        ak[0] = acts4(a0.x); ak[1] = acts4(a0.y); ak[2] = acts4(a0.z); ak[3] = acts4(a0.w);
        ak[4] = acts4(a1.x); ak[5] = acts4(a1.y); ak[6] = acts4(a1.z); ak[7] = acts4(a1.w);
#elif DOT
        uvec4 a = QX(b);
        int as4 = 0;
#if ASYM
        as4 = act_sum(a.x) + act_sum(a.y) + act_sum(a.z) + act_sum(a.w);
#endif
#else
        uvec4 a = QX(b);
        ak[0] = acts4(a.x); ak[1] = acts4(a.y); ak[2] = acts4(a.z); ak[3] = acts4(a.w);
#endif
#endif
        [[unroll]] for (int r = 0; r < ROWS; ++r) {
            uvec4 w = WQ(wrow[r] + b);
#if (MODE == 1 || MODE == 2) && DOT && !PACKED
            part[r] += dot_block(w, a, z[r], as4);
#else
            PART_T s = PART_ZERO;
            [[unroll]] for (int k = 0; k < int(CPW); ++k) {
                uint word = w[k / int(CPW / 4u)];
                ivec4 v = codes4(word, k % int(CPW / 4u), z[r]);
#if MODE == 0
                s += dot(vec4(v), xk[k]);
#elif MODE == 4
                s += SUM4(v);
#else
                s += SUM4(v * ak[k]);
#endif
            }
            part[r] += s;
#endif
        }
    }
}

// Columns [c0, c1) of every row: the columns before the first whole block and after the
// last one one by one, whole blocks in between.
void columns_range(uint c0, uint c1, uint wrow[ROWS], int z[ROWS], inout PART_T part[ROWS]) {
    uint head = min(c1, (c0 + CPB - 1u) / CPB * CPB);
    columns(c0, head, wrow, z, part);
    if (head == c1) return;
    uint b1 = c1 / CPB;
    blocks(head / CPB, b1, wrow, z, part);
    columns(max(b1 * CPB, head), c1, wrow, z, part);
}

// The columns of unit u (group g = u / parts, piece u % parts), empty past the group.
uvec2 unit_columns(uint u) {
    uint g = u / pc.parts;
    uint g0 = g * pc.group_cols, g1 = min(pc.n, g0 + pc.group_cols);
    uint c0 = min(g1, g0 + (u % pc.parts) * pc.part_cols);
    uint c1 = min(g1, c0 + pc.part_cols);
#if MODE != 0
    // Integer modes read whole blocks to the row's end: padding codes give v = 0 and the
    // quantized activations are padded in their buffer (float x is not: read to n only).
    if (c1 == pc.n && c0 < c1) c1 = pc.blocks * CPB;
#endif
    return uvec2(c0, c1);
}

void main() {
    uint wg = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    uint first = wg * uint(ROWS);
    if (first >= pc.rows) return;  // whole workgroup: uniform
    uint lane = gl_LocalInvocationID.x;
    uint stride = gl_WorkGroupSize.x;
    uint units = pc.groups * pc.parts;
    uint wrow[ROWS];   // first weight block of each row
    uint prow[ROWS];   // first parameter of each row
    uint vrow[ROWS];   // index of each row in y, bias, row sums
    int z[ROWS];
    PART_T part[ROWS];
    [[unroll]] for (int r = 0; r < ROWS; ++r) {
        uint lr = min(first + uint(r), pc.rows - 1u);  // rows past the end redo the last one
        wrow[r] = (pc.wrow0 + lr) * pc.blocks;
        prow[r] = (pc.prow0 + lr) * pc.group_stride;
        vrow[r] = pc.row0 + lr;
        z[r] = 0;
    }
#if MODE == 0
    float acc[ROWS];
    [[unroll]] for (int r = 0; r < ROWS; ++r) acc[r] = 0.0;
    for (uint u = lane; u < units; u += stride) {
        uint g = u / pc.parts;
        [[unroll]] for (int r = 0; r < ROWS; ++r) {
#if ASYM
            z[r] = ZERO_POINT(prow[r] + g);
#endif
            part[r] = 0.0;
        }
        uvec2 cols = unit_columns(u);
        columns_range(cols.x, cols.y, wrow, z, part);
        [[unroll]] for (int r = 0; r < ROWS; ++r) acc[r] += SCALE(prow[r] + g) * part[r];
    }
    for (int r = 0; r < ROWS; ++r) {
        float t = workgroup_sum(acc[r], uint(r));
        if (lane != 0u || first + uint(r) >= pc.rows) continue;
        float b = pc.has_bias != 0u ? bias[vrow[r]] : 0.0;
        precise float out_v = t + b;
        y[vrow[r]] = out_v;
    }
#else
    // Row r belongs to invocation r % stride (slot r / stride): the slots' loops below are
    // uniform, so every invocation adds the unit sums of its rows at once, in unit order.
    const uint slots = (uint(ROWS) + stride - 1u) / stride;
    int gacc[ROWS];  // per slot: the running int32 sum of the current group
    float yr[ROWS];  // per slot: the running float sum of the group terms
    [[unroll]] for (int r = 0; r < ROWS; ++r) {
        gacc[r] = 0;
        yr[r] = 0.0;
    }
    for (uint base = 0u; base < units; base += stride) {  // uniform: barriers inside
        uint u = base + lane;
        [[unroll]] for (int r = 0; r < ROWS; ++r) part[r] = 0;
        if (u < units) {
#if ASYM
            uint g = u / pc.parts;
            [[unroll]] for (int r = 0; r < ROWS; ++r) z[r] = ZERO_POINT(prow[r] + g);
#endif
            uvec2 cols = unit_columns(u);
            columns_range(cols.x, cols.y, wrow, z, part);
        }
        [[unroll]] for (int r = 0; r < ROWS; ++r) sh_acc[r][lane] = part[r];
        barrier();
        [[unroll]] for (uint k = 0u; k < slots; ++k) {
            uint r = min(lane + k * stride, uint(ROWS) - 1u);
            uint lr = min(first + r, pc.rows - 1u);
            bool live = lane + k * stride < uint(ROWS) && first + r < pc.rows;
            uint vr = pc.row0 + lr, pr = (pc.prow0 + lr) * pc.group_stride;
            for (uint l = 0u; l < stride && base + l < units; ++l) {
                uint uu = base + l;
                gacc[k] += sh_acc[r][l];
                if (uu % pc.parts != pc.parts - 1u) continue;
                uint g = uu / pc.parts;  // group g is complete
                int total = gacc[k];
                gacc[k] = 0;
                uint at = vr * pc.groups + g;
#if MODE == 4
                if (live) rowsum[at] = total;
#else
#if MODE == 2
                total -= Z_X * rowsum[at];
#endif
                precise float sxy = SCALE(pr + g) * S_X;
                precise float tg = sxy * float(total);
                precise float sum = yr[k] + tg;
                yr[k] = g == 0u ? tg : sum;
                if (live && pc.out_acc != 0u) y[at] = intBitsToFloat(total);
#endif
            }
        }
        barrier();
    }
#if MODE != 4
    [[unroll]] for (uint k = 0u; k < slots; ++k) {
        uint r = lane + k * stride;
        if (r >= uint(ROWS) || first + r >= pc.rows || pc.out_acc != 0u) continue;
        uint vr = pc.row0 + first + r;
        float b = pc.has_bias != 0u ? bias[vr] : 0.0;
        precise float out_v = yr[k] + b;
        y[vr] = out_v;
    }
#endif
#endif
}
