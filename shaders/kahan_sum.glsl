// Compensated (Kahan) running sum: one invocation adds thousands of terms (a long row's
// parts, a split's blocks), and a plain float sum would lose about sqrt(terms) ulps.
// `precise` keeps the compiler from simplifying the correction away.
#ifndef KAHAN_SUM_GLSL
#define KAHAN_SUM_GLSL
struct KahanSum { float sum; float carry; };
void kahan_add(inout KahanSum k, float term) {
    precise float t = term - k.carry;
    precise float s = k.sum + t;
    precise float lost = s - k.sum;
    k.carry = lost - t;
    k.sum = s;
}
// Both parts scale together when the running maximum grows.
void kahan_scale(inout KahanSum k, float factor) { k.sum *= factor; k.carry *= factor; }
#endif
