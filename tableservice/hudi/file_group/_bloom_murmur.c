/*
 * Setting the bits of many record keys in Hudi's bloom filters (Murmur hashing), compiled: the hot loop of
 * writing a base file's filter. Loaded with ctypes by bloom_kernel.py; it uses no Python API. bloom_hash.py holds
 * the same computation in numpy (the fallback, and the reference the tests compare this with).
 *
 * A key's positions are h_0 = murmur(key, 0), h_i = murmur(key, h_{i-1}), position |h_i| mod vectorSize (Java's
 * Math.abs of the signed remainder, which is the remainder of the magnitude). Murmur is Hadoop's MurmurHash 2
 * port: little-endian 4-byte blocks, then the 1 to 3 tail bytes sign-extended as Java bytes.
 *
 * Keys are hashed LANES at a time, one hash pass for all lanes before the next: each lane's passes depend on each
 * other, the lanes do not, so the passes of many lanes run side by side in vector registers. The seed-independent
 * mixing of each key's blocks is done once per key. The remainder is taken through a double-precision quotient
 * (exact after one correction for vector sizes up to 2^30), which vectorises where an integer division does not.
 *
 * Bit vectors are packed as Hudi serializes them: bit p is bit (p % 8) of byte p / 8.
 */
#include <stdint.h>
#include <string.h>

#define MURMUR_M 0x5BD1E995u
#define LANES 64
#define MAX_WORDS 64 /* keys of up to 256 bytes (+ 3 tail bytes); longer keys are left to the numpy path */
#define MAX_VECTOR_SIZE (1u << 30)

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define VECTOR_CLONES
#endif

/* The calling convention's version: bloom_kernel.py refuses a library that answers another (a stale build). */
#define KERNEL_ABI 1

/* Error codes (0 is success): nothing has been written when one is returned. */
#define ERR_ARGUMENT -1    /* a count, size or length out of range */
#define ERR_KEY_LENGTH -2  /* keys longer than this kernel takes: use the numpy path */
#define ERR_TARGET -3      /* a key's row index outside [0, row_count) */

VECTOR_CLONES
static void set_lanes(const uint8_t *data, const int64_t *starts, int32_t length, int lanes, int32_t nb_hash,
                      uint32_t vector_size, uint8_t *const *row_of_lane) {
    const int32_t words = length >> 2, left = length & 3;
    const double inverse = 1.0 / (double)vector_size;
    uint32_t mixed[MAX_WORDS][LANES];
    uint32_t tail[LANES], h[LANES], x[LANES], position[LANES];

    memset(mixed, 0, sizeof(uint32_t) * LANES * (size_t)words);
    for (int l = 0; l < LANES; l++) {
        tail[l] = 0;
        h[l] = 0;
    }
    for (int l = 0; l < lanes; l++) {
        const uint8_t *key = data + starts[l];
        for (int32_t w = 0; w < words; w++) {
            uint32_t k;
            memcpy(&k, key + 4 * w, 4);
            k = (uint32_t)((uint32_t)(k * MURMUR_M) ^ ((uint32_t)(k * MURMUR_M) >> 24)) * MURMUR_M;
            mixed[w][l] = k;
        }
        uint32_t t = 0; /* Java bytes are signed: a byte >= 0x80 sets the bits above it */
        if (left >= 3) t ^= (uint32_t)(int32_t)(int8_t)key[length - 3] << 16;
        if (left >= 2) t ^= (uint32_t)(int32_t)(int8_t)key[length - 2] << 8;
        if (left >= 1) t ^= (uint32_t)(int32_t)(int8_t)key[length - 1];
        tail[l] = t;
    }
    for (int32_t pass = 0; pass < nb_hash; pass++) {
        for (int l = 0; l < LANES; l++) x[l] = h[l] ^ (uint32_t)length;
        for (int32_t w = 0; w < words; w++)
            for (int l = 0; l < LANES; l++) x[l] = (x[l] * MURMUR_M) ^ mixed[w][l];
        if (left)
            for (int l = 0; l < LANES; l++) x[l] = (x[l] ^ tail[l]) * MURMUR_M;
        for (int l = 0; l < LANES; l++) {
            uint32_t y = x[l];
            y ^= y >> 13;
            y *= MURMUR_M;
            y ^= y >> 15;
            h[l] = y;
            int32_t signed_h = (int32_t)y;
            uint32_t magnitude = signed_h < 0 ? (uint32_t)0 - y : y; /* |Integer.MIN_VALUE| = 2^31: exact */
            /* magnitude / vector_size truncated, or one less: the product's two roundings (each under 2^-53
             * relative) move the quotient q by under q * 2^-52, less than the 1 / vector_size between a quotient
             * that is not an integer and the integers around it (as magnitude < 2^52). So it never reaches the
             * next integer, but it can fall just short of one it equals (a multiple of the vector size). The
             * remainder then comes out as vector_size, and vector_size <= 2^30 keeps it exact in 32 bits. */
            uint32_t quotient = (uint32_t)(__builtin_fabs((double)signed_h) * inverse);
            uint32_t rest = magnitude - quotient * vector_size;
            rest -= rest >= vector_size ? vector_size : 0;
            position[l] = rest;
        }
        for (int l = 0; l < lanes; l++) {
            uint32_t p = position[l];
            row_of_lane[l][p >> 3] |= (uint8_t)(1u << (p & 7));
        }
    }
}

/*
 * Set the bits of `n` keys of `length` bytes each, key i being the bytes of `data` (of `data_size` bytes) from
 * starts[i], in the packed bit vectors `rows` (each of (vector_size + 7) / 8 bytes): key i's in rows[targets[i]],
 * or in rows[0] when `targets` is NULL. Returns 0, or one of the error codes above having written nothing.
 */
int tableservice_bloom_murmur_set(const uint8_t *data, int64_t data_size, const int64_t *starts, int64_t n,
                                  int32_t length, int32_t nb_hash, uint32_t vector_size, uint8_t *const *rows,
                                  int64_t row_count, const int64_t *targets) {
    if (n < 0 || length <= 0 || nb_hash <= 0 || vector_size == 0 || vector_size > MAX_VECTOR_SIZE || row_count <= 0)
        return ERR_ARGUMENT;
    if ((length >> 2) > MAX_WORDS) return ERR_KEY_LENGTH;
    for (int64_t i = 0; i < n; i++)
        if (starts[i] < 0 || starts[i] > data_size - length) return ERR_ARGUMENT;
    if (targets != NULL)
        for (int64_t i = 0; i < n; i++)
            if (targets[i] < 0 || targets[i] >= row_count) return ERR_TARGET;
    uint8_t *row_of_lane[LANES];
    for (int64_t start = 0; start < n; start += LANES) {
        int lanes = n - start < LANES ? (int)(n - start) : LANES;
        for (int l = 0; l < lanes; l++) row_of_lane[l] = rows[targets != NULL ? targets[start + l] : 0];
        set_lanes(data, starts + start, length, lanes, nb_hash, vector_size, row_of_lane);
    }
    return 0;
}

int tableservice_bloom_kernel_abi(void) { return KERNEL_ABI; }
