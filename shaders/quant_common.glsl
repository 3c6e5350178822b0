// Exact round-to-nearest-even of a real quotient w / s, using only operations that the
// Vulkan spec makes exact or correctly rounded (OpFMul, OpFAdd, OpFSub, ldexp, compares).
// Division is only used for a candidate, which the exact comparisons then correct.
// These integers do not depend on the rounding mode (products of at most 24 significant
// bits are exact, and a rounded difference keeps the exact one's sign); the kernels still
// request round-to-nearest-even where offered for their other float steps.
//
// Contract of exact_round(w, s): s is normalized into [1, 2), |w / s| < 1024, w normal or
// zero. The result is the integer nearest to the real quotient w / s, ties to even.
//
// Why it is exact: with s = s_hi + s_lo (12 significant bits each) and h = k +- 0.5
// (at most 11 significant bits), h * s_hi and h * s_lo are exact float32 products, and
// w - h * s_hi is exact by Sterbenz's lemma whenever the comparison is close; when it is
// not close, its rounding cannot change the sign of w - h * s.

#include "float_controls.glsl"

// Sign of w - h * s, exactly: -1, 0 or 1.
int sign_of_residual(float w, float h, float s_hi, float s_lo) {
    precise float a = h * s_hi;
    precise float b = h * s_lo;
    precise float d = w - a;
    precise float e = d - b;
    return e > 0.0 ? 1 : (e < 0.0 ? -1 : 0);
}

// Of the integers `lower` and `lower + 1`, the even one (integer test: no division).
float even_of(float lower) {
    return (int(lower) & 1) == 0 ? lower : lower + 1.0;
}

float exact_round_from(float w, float s, float k) {
    float s_hi = uintBitsToFloat(floatBitsToUint(s) & 0xfffff000u);
    precise float s_lo = s - s_hi;
    int up = sign_of_residual(w, k + 0.5, s_hi, s_lo);
    int down = sign_of_residual(w, k - 0.5, s_hi, s_lo);
    // Selects rather than branches (a SIMD driver runs every branch anyway); later
    // lines win: above the upper midpoint, on it, on the lower one, below it.
    float r = k;
    r = down == 0 ? even_of(k - 1.0) : r;
    r = down < 0 ? k - 1.0 : r;
    r = up == 0 ? even_of(k) : r;
    r = up > 0 ? k + 1.0 : r;
    return r;
}

float exact_round(float w, float s) {
    return exact_round_from(w, s, roundEven(w * (1.0 / s)));  // candidate off by at most one
}

// The same result, faster: with |w / s| <= 512 the candidate t = w * inv (inv within a
// few ulps of 1 / s) is within 2^-11 of w / s, so when t is at least 2^-10 away from a
// midpoint k + 1/2, roundEven(t) is already the answer; only near-midpoints check exactly.
float fast_exact_round(float w, float s, float inv) {
    float t = w * inv;
    float k = roundEven(t);
    if (abs(abs(t - k) - 0.5) >= 0.0009765625) return k;
    return exact_round_from(w, s, k);
}

// The same result with one exact comparison and no branch (a SIMD driver pays for both
// sides of a branch): with |w / s| <= 512 the candidate t = w * inv is within 2^-11 of
// w / s, so of the midpoints k +- 1/2 around k = roundEven(t) only the one on t's side,
// h, can lie between t and w / s. The exact sign of w - h * s decides: beyond h, the
// next integer; on it, the even neighbour of h (roundEven of the exact h); before it, k.
// s = s_hi + s_lo as in exact_round_from.
float exact_round_near(float w, float inv, float s_hi, float s_lo) {
    float t = w * inv;
    float k = roundEven(t);
    bool up = t >= k;
    float half_step = up ? 0.5 : -0.5;
    float h = k + half_step;  // exact: k has at most 10 significant bits
    precise float a = h * s_hi;
    precise float b = h * s_lo;
    precise float d = w - a;
    precise float e = d - b;
    bool beyond = up ? e > 0.0 : e < 0.0;
    float r = beyond ? h + half_step : k;
    return e == 0.0 ? roundEven(h) : r;
}

// Subnormal inputs count as zero on every device (some Vulkan devices flush them).
float flush_subnormal(float v) {
    return (floatBitsToUint(v) & 0x7f800000u) == 0u ? 0.0 : v;
}

// One group's scale as the quantize kernels take it: s_norm in [1, 2), two normal powers
// of two with f1 * f2 = s_norm / s (multiplying by them is exact), and the zero point.
struct Group { float s_norm; float f1; float f2; int z; };

// What exact_round_near needs of s_norm, computed once per group.
struct Divisor { float inv; float s_hi; float s_lo; };
Divisor divisor_of(Group g) {
    float s_hi = uintBitsToFloat(floatBitsToUint(g.s_norm) & 0xfffff000u);
    precise float s_lo = g.s_norm - s_hi;
    return Divisor(1.0 / g.s_norm, s_hi, s_lo);  // 1 / s_norm only gives candidates
}

// q = clamp(roundEven(w / s) + z, qmin, qmax) with the exact quotient.
int quantize_value(float w, Group g, Divisor d, int qmin, int qmax) {
    precise float x = flush_subnormal(w) * g.f1 * g.f2;
    return clamp(int(exact_round_near(x, d.inv, d.s_hi, d.s_lo)) + g.z, qmin, qmax);
}

// float32(a / qmax) rounded to nearest even, as bits, for a normal positive a and
// 1 <= qmax <= 127. With a = ma * 2^(ea - 23): t = floor(ma * 2^k / qmax) has exactly
// 25 bits (k in 1..8, so ma * 2^k < 2^32); the result lies in [2^e, 2^(e + 1)) and keeps
// 24 bits, fewer when it is subnormal; the rest of t and the remainder decide the rounding.
uint rounded_quotient_bits(uint a_bits, uint qmax) {
    uint ma = (a_bits & 0x7fffffu) | 0x800000u;
    int ea = int(a_bits >> 23) - 127;
    int k = 24 - findMSB(ma / qmax);
    uint num = ma << uint(k);
    uint t = num / qmax;
    bool inexact = num % qmax != 0u;
    int e = ea + 1 - k;
    int kept = e >= -126 ? 24 : 150 + e;  // significant bits of the result
    uint drop = uint(25 - kept);           // 1..9 here: a / qmax >= 2^-133
    uint keep = t >> drop;
    uint rest = t & ((1u << drop) - 1u);
    uint half_ulp = 1u << (drop - 1u);
    bool up = rest > half_ulp || (rest == half_ulp && (inexact || (keep & 1u) == 1u));
    keep += up ? 1u : 0u;
    // A carry out of the 24 bits lands in the exponent field, as it should.
    return e >= -126 ? (uint(e + 127) << 23) + (keep - 0x800000u) : keep;
}

// The scale as quantize.comp takes it: s_norm in [1, 2) and two normal powers of two
// f1 * f2 = s_norm / s (host: quant.device_params).
Group group_of_scale(uint s_bits) {
    float s_norm;
    int e;
    if (s_bits >= 0x800000u) {
        s_norm = uintBitsToFloat((s_bits & 0x7fffffu) | 0x3f800000u);
        e = 127 - int(s_bits >> 23);
    } else {
        int msb = findMSB(s_bits);
        s_norm = uintBitsToFloat(((s_bits << uint(23 - msb)) & 0x7fffffu) | 0x3f800000u);
        e = 149 - msb;
    }
    int e1 = clamp(e, -126, 127);
    return Group(s_norm, uintBitsToFloat(uint(e1 + 127) << 23),
                 uintBitsToFloat(uint(e - e1 + 127) << 23), 0);
}
