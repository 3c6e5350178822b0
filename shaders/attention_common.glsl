// Shared by attention.comp and attention_merge.comp: the partial state of one query
// row over a range of keys, and the exact-zero rules of the online softmax.
//
// A state is (r, l, acc): l = sum of exp(s_j - r) and acc = sum of exp(s_j - r) v_j over
// the range's attended keys, against a reference r that is at most MARGIN below their
// largest score (so every term is below e^MARGIN and l >= 1 once a key is attended), and
// r = -inf, l = 0, acc = 0 while none is. `bad` is 1 once a score was NaN or +inf.

#define NEG_INF uintBitsToFloat(0xff800000u)
#define QNAN uintBitsToFloat(0x7fc00000u)

// 1 when v is NaN or +inf (by bits: no reliance on comparisons with NaN).
uint is_bad(float v) {
    uint b = floatBitsToUint(v);
    return uint((b & 0x7fffffffu) > 0x7f800000u || b == 0x7f800000u);
}

// A finite stand-in for a reference that is still -inf: exp(s - r) and exp(r_old - r)
// never see -inf - (-inf); a state that has seen only -inf is multiplied by 0.
float finite_ref(float r) { return r == NEG_INF ? 0.0 : r; }
float rescale_factor(float r_old, float r_new) {
    return r_old == NEG_INF ? 0.0 : exp(r_old - finite_ref(r_new));
}

#include "kahan_sum.glsl"  // a split may add thousands of blocks

// 1 / L refined by one Newton step (Vulkan allows 2.5 ulp for a division).
float reciprocal(float L) {
    float q = 1.0 / L;
    precise float inv = fma(q, fma(-L, q, 1.0), q);
    return inv;
}
