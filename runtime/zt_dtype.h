/* Storage dtypes and the fp32 <-> bf16 conversions (round-to-nearest-even). */
#ifndef ZT_DTYPE_H
#define ZT_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum { ZT_FP32 = 0, ZT_BF16 = 1 } zt_dtype;

static inline size_t zt_dtype_size(zt_dtype d) { return d == ZT_BF16 ? 2 : 4; }
static inline const char *zt_dtype_name(zt_dtype d) { return d == ZT_BF16 ? "bf16" : "fp32"; }

typedef uint16_t zt_bf16;

static inline zt_bf16 zt_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (zt_bf16)((u >> 16) | 0x40u); /* quiet NaN */
    uint32_t rounding = 0x7fffu + ((u >> 16) & 1u); /* ties to even */
    return (zt_bf16)((u + rounding) >> 16);
}

static inline float zt_bf16_to_f32(zt_bf16 h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#endif
