/* Element dtypes and their conversions to and from fp32 (round to nearest,
 * ties to even; NaN stays NaN, quiet). bf16 keeps fp32's exponent range with
 * 8 significant bits; fp16 has 11 significant bits but overflows above 65504
 * and goes subnormal below 6.1e-5, which is why fp16 training needs a loss
 * scale. */
#ifndef ZT_DTYPE_H
#define ZT_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum { ZT_FP32 = 0, ZT_BF16 = 1, ZT_FP16 = 2, ZT_NDTYPES } zt_dtype;

static inline size_t zt_dtype_size(zt_dtype d) { return d == ZT_FP32 ? 4 : 2; }
static inline const char *zt_dtype_name(zt_dtype d) {
    return d == ZT_BF16 ? "bf16" : d == ZT_FP16 ? "fp16" : "fp32";
}
/* "fp32", "bf16" or "fp16" -> *out; returns 0 for any other name. */
static inline int zt_dtype_parse(const char *name, zt_dtype *out) {
    for (int d = 0; d < ZT_NDTYPES; d++)
        if (strcmp(name, zt_dtype_name((zt_dtype)d)) == 0) return *out = (zt_dtype)d, 1;
    return 0;
}

typedef uint16_t zt_bf16;
typedef uint16_t zt_fp16;

static inline uint32_t zt_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float zt_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline zt_bf16 zt_f32_to_bf16(float f) {
    uint32_t u = zt_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (zt_bf16)((u >> 16) | 0x40u); /* quiet NaN */
    uint32_t rounding = 0x7fffu + ((u >> 16) & 1u); /* ties to even */
    return (zt_bf16)((u + rounding) >> 16);
}

static inline float zt_bf16_to_f32(zt_bf16 h) { return zt_f32_from_bits((uint32_t)h << 16); }

/* IEEE binary16: 1 sign, 5 exponent (bias 15), 10 fraction bits. */
static inline zt_fp16 zt_f32_to_fp16(float f) {
    uint32_t u = zt_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (zt_fp16)(sign | 0x7e00u);  /* NaN */
    if (a >= 0x477ff000u) return (zt_fp16)(sign | 0x7c00u); /* rounds past 65504: inf */
    if (a < 0x38800000u) {
        /* Below 2^-14: subnormal (or zero). Scaling by 2^-24's inverse in
         * float arithmetic would round twice, so shift the significand. */
        if (a < 0x33000000u) return sign; /* under half the smallest subnormal */
        uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14 .. 24 */
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (zt_fp16)(sign | q);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u); /* ties to even on the 13 dropped bits */
    return (zt_fp16)(sign | ((r - 0x38000000u) >> 13));
}

static inline float zt_fp16_to_f32(zt_fp16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu) return zt_f32_from_bits(sign | 0x7f800000u | (m << 13)); /* inf, NaN */
    if (e == 0) {
        /* Subnormal: m x 2^-24, exact in fp32. */
        float v = (float)m * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return zt_f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

/* Element i of p (dtype d) as fp32, and v stored there rounded. */
static inline float zt_dtype_load(const void *p, zt_dtype d, size_t i) {
    if (d == ZT_BF16) return zt_bf16_to_f32(((const zt_bf16 *)p)[i]);
    if (d == ZT_FP16) return zt_fp16_to_f32(((const zt_fp16 *)p)[i]);
    return ((const float *)p)[i];
}
static inline void zt_dtype_store(void *p, zt_dtype d, size_t i, float v) {
    if (d == ZT_BF16) ((zt_bf16 *)p)[i] = zt_f32_to_bf16(v);
    else if (d == ZT_FP16) ((zt_fp16 *)p)[i] = zt_f32_to_fp16(v);
    else ((float *)p)[i] = v;
}

#endif
