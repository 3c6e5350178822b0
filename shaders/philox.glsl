// Philox4x32-10 (Salmon, Moraes, Dror & Shaw, "Parallel random numbers: as easy as 1, 2,
// 3", SC 2011): a counter-based generator, so draw i of row r needs no state. The same
// function is vkcore.reference.philox4x32 (checked against Random123's known answers).
const uint PHILOX_M0 = 0xD2511F53u, PHILOX_M1 = 0xCD9E8D57u;
const uint PHILOX_W0 = 0x9E3779B9u, PHILOX_W1 = 0xBB67AE85u;

// Rounds written out: llvmpipe counts loop iterations against one limit per invocation.
#define PHILOX_ROUND(c, key)                                                   \
    {                                                                          \
        uint hi0, lo0, hi1, lo1;                                               \
        umulExtended(PHILOX_M0, c.x, hi0, lo0);                                \
        umulExtended(PHILOX_M1, c.z, hi1, lo1);                                \
        c = uvec4(hi1 ^ c.y ^ key.x, lo1, hi0 ^ c.w ^ key.y, lo0);             \
    }
#define PHILOX_BUMPED_ROUND(c, key) key += uvec2(PHILOX_W0, PHILOX_W1); PHILOX_ROUND(c, key)

uvec4 philox4x32(uvec4 c, uvec2 key) {
    PHILOX_ROUND(c, key)
    PHILOX_BUMPED_ROUND(c, key) PHILOX_BUMPED_ROUND(c, key) PHILOX_BUMPED_ROUND(c, key)
    PHILOX_BUMPED_ROUND(c, key) PHILOX_BUMPED_ROUND(c, key) PHILOX_BUMPED_ROUND(c, key)
    PHILOX_BUMPED_ROUND(c, key) PHILOX_BUMPED_ROUND(c, key) PHILOX_BUMPED_ROUND(c, key)
    return c;
}

// The Gumbel draw of token `index` in row `row`: u = ((w >> 9) + 0.5) / 2^23 from the first
// word w of philox4x32((index, row, 0, 0), seed), then -log(-log(u)). u is exact in
// float32 and within [2^-24, 1 - 2^-24], so the draw is finite (within -2.8 .. 16.7).
float gumbel(uint index, uint row, uvec2 seed) {
    uint w = philox4x32(uvec4(index, row, 0u, 0u), seed).x;
    float u = (float(w >> 9u) + 0.5) * (1.0 / 8388608.0);
    return -log(-log(u));
}
