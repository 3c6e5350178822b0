// Rank order of top-k: keys that order float32 values as unsigned integers, and the
// online softmax state (running maximum and sum) of the fused kernel.
//
// rank_key(v): a larger key ranks first. -0 and +0 share a key; NaN has key 0, below
// every other value (-inf is 0x007fffff), so NaN ranks last. Equal keys rank by the lower
// index: exactly numpy's np.argsort(-x, kind="stable").
#define NEG_INF uintBitsToFloat(0xff800000u)
#define QNAN uintBitsToFloat(0x7fc00000u)
#define KEY_POS_INF 0xff800000u
// A list slot holding nothing ranks after every element (key 0 and a larger index).
#define NO_INDEX 0xffffffffu

uint rank_key(float v) {  // selects, no branches
    uint b = floatBitsToUint(v);
    uint key = (b & 0x80000000u) != 0u ? ~b : (b | 0x80000000u);
    key = b == 0x80000000u ? 0x80000000u : key;     // -0 ranks as +0
    return (b & 0x7fffffffu) > 0x7f800000u ? 0u : key;  // NaN
}

uvec4 rank_key(vec4 v) {
    uvec4 b = floatBitsToUint(v);
    uvec4 key = mix(b | 0x80000000u, ~b, notEqual(b & 0x80000000u, uvec4(0u)));
    key = mix(key, uvec4(0x80000000u), equal(b, uvec4(0x80000000u)));
    return mix(key, uvec4(0u), greaterThan(b & 0x7fffffffu, uvec4(0x7f800000u)));
}

bool ranks_before(uint ka, uint ia, uint kb, uint ib) { return ka > kb || (ka == kb && ia < ib); }

// 1 when v is NaN or +inf (these make a row's softmax NaN).
uint is_bad(float v) {
    uint b = floatBitsToUint(v);
    return uint((b & 0x7fffffffu) > 0x7f800000u || b == 0x7f800000u);
}

// -------------------------------------------------------------- online softmax statistics
// Each invocation sums exp(v - r) against a reference r moved only when a value exceeds
// it by more than MARGIN (so rescales, and their rounding, are rare), as the softmax
// kernel does; the maximum m itself is exact.
#define MARGIN 4.0
struct Stats { float m; float r; float sum; float carry; uint bad; };

Stats stats_empty() { return Stats(NEG_INF, NEG_INF, 0.0, 0.0, 0u); }

void kahan_add(inout Stats s, float term) {  // thousands of terms per invocation
    precise float t = term - s.carry;
    precise float total = s.sum + t;
    precise float lost = total - s.sum;
    s.carry = lost - t;
    s.sum = total;
}

// Moves the reference to a block maximum M more than MARGIN above it (false for NaN).
void stats_reference(inout Stats s, float M) {
    s.m = max(s.m, M);
    if (M > s.r + MARGIN) {
        float f = s.r == NEG_INF ? 0.0 : exp(s.r - M);
        s.sum *= f; s.carry *= f;
        s.r = M;
    }
}

float finite_reference(Stats s) { return s.r == NEG_INF ? 0.0 : s.r; }

void stats_add(inout Stats s, float v) {
    s.bad |= is_bad(v);
    stats_reference(s, v);
    kahan_add(s, exp(v - finite_reference(s)));  // exp(-inf) = 0 for a -inf entry
}

void stats_add4(inout Stats s, vec4 v) {
    s.bad |= is_bad(v.x) | is_bad(v.y) | is_bad(v.z) | is_bad(v.w);
    stats_reference(s, max(max(v.x, v.y), max(v.z, v.w)));
    vec4 e = exp(v - finite_reference(s));
    kahan_add(s, (e.x + e.y) + (e.z + e.w));
}

// The sum l of exp(v - m) against the state's own maximum.
float stats_sum(Stats s) { return s.r == NEG_INF ? 0.0 : s.sum * exp(s.r - s.m); }

// l (against m) expressed against a larger maximum M.
float rescaled(float l, float m, float M) {
    return m == NEG_INF ? 0.0 : l * exp(m - (M == NEG_INF ? 0.0 : M));
}

// 1 / L with one Newton step (Vulkan allows 2.5 ulp for a division).
float reciprocal(float L) {
    float q = 1.0 / L;
    precise float inv = fma(q, fma(-L, q, 1.0), q);
    return inv;
}

// A probability exp(v - M) / L from the row's statistics (bad rows are NaN, rows of only
// -inf have probability 0 everywhere, -inf entries exactly 0).
float probability(float v, float M, float invL, uint bad) {
    if (bad != 0u) return QNAN;
    if (M == NEG_INF || v == NEG_INF) return 0.0;
    return exp(v - M) * invL;
}
