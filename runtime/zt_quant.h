/* 8-bit block-wise dynamic quantization of optimizer state (8-bit Adam's m
 * and v, after bitsandbytes' scheme; v is stored as sqrt(v), so the map's
 * seven decades cover seven of |g| rather than three and a half, and a
 * block's small gradients do not see their v round to 0, which would make
 * their step m / eps): a block of up to ZT_QBLOCK values is
 * stored as one byte per value, the index of the nearest entry of a fixed
 * code map, times the block's absolute maximum (its fp32 scale).
 *
 * The maps are "dynamic": their entries are spread over seven decades, with
 * twice as many entries in each decade as in the one below, so small values
 * keep a relative precision that a linear 8-bit code would lose:
 *   signed (m):   0 and +-x for 127 magnitudes; decade d = 0..6 holds 2^d of
 *                 them, evenly spaced over (10^(d-7), 10^(d-6)], ending at 1
 *   unsigned (v): 0 and 254 magnitudes; decade d holds 2^(d+1) of them
 * 255 entries each (code 255 is never produced). Every entry is an exact
 * function of its code, so the host and a GPU build the same map. Both maps
 * contain +-1, so the block maximum itself is stored exactly: quantizing
 * dequantized values gives back the same codes and scale. */
#ifndef ZT_QUANT_H
#define ZT_QUANT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define ZT_HD __host__ __device__
#else
#define ZT_HD
#endif

#define ZT_QBLOCK 2048  /* values per quantization block (one fp32 scale each) */
#define ZT_QCODES 255   /* entries of a code map */
#define ZT_QMAP_LEN 256 /* a map's table: its entries, then a sentinel above them all */
#define ZT_QMAP_SENTINEL 3.0e38f

/* Entry `code` (0..ZT_QCODES-1) of the map, ascending in code. */
static inline ZT_HD float zt_qmap_value(int is_signed, int code) {
    const double decade[7] = {1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0};
    int j; /* magnitude index, ascending */
    int sign = 1;
    if (is_signed) {
        if (code == 127) return 0.0f;
        j = code > 127 ? code - 128 : 126 - code;
        sign = code > 127 ? 1 : -1;
        int d = 0;
        while ((2 << d) - 1 <= j) d++; /* decade d holds indices [2^d - 1, 2^(d+1) - 1) */
        int k = j - ((1 << d) - 1), cnt = 1 << d;
        return (float)(sign * decade[d] * (0.1 + 0.9 * (double)(k + 1) / cnt));
    }
    if (code == 0) return 0.0f;
    j = code - 1;
    int d = 0;
    while ((4 << d) - 2 <= j) d++; /* decade d holds indices [2^(d+1) - 2, 2^(d+2) - 2) */
    int k = j - ((2 << d) - 2), cnt = 2 << d;
    return (float)(decade[d] * (0.1 + 0.9 * (double)(k + 1) / cnt));
}

/* Entry i of the table: the map's entries ascending, then the sentinel. */
static inline ZT_HD float zt_qmap_entry(int is_signed, int i) {
    return i < ZT_QCODES ? zt_qmap_value(is_signed, i) : ZT_QMAP_SENTINEL;
}

/* The table: map[ZT_QMAP_LEN]. */
static inline ZT_HD void zt_qmap_fill(float *map, int is_signed) {
    for (int i = 0; i < ZT_QMAP_LEN; i++) map[i] = zt_qmap_entry(is_signed, i);
}

/* The code whose entry is nearest to x (a tie goes to the lower code), of
 * a table from zt_qmap_fill. Eight halving steps without branches: lo ends
 * as the last entry <= x (0 when x is below them all). */
static inline ZT_HD uint8_t zt_qmap_encode(const float *map, float x) {
    int lo = 0;
    for (int step = ZT_QMAP_LEN / 2; step > 0; step >>= 1) lo += map[lo + step] <= x ? step : 0;
    if (lo > ZT_QCODES - 1) lo = ZT_QCODES - 1; /* x at or above the sentinel */
    return (uint8_t)(lo < ZT_QCODES - 1 && map[lo + 1] - x < x - map[lo] ? lo + 1 : lo);
}

/* Quantization blocks of an n-value segment. */
static inline ZT_HD size_t zt_qblocks(size_t n) { return (n + ZT_QBLOCK - 1) / ZT_QBLOCK; }

/* codes[n] and scales[zt_qblocks(n)] from x[n], block by block (host). */
void zt_quantize(const float *map, const float *x, size_t n, uint8_t *codes, float *scales);
/* x[n] = map[codes] x the block's scale (host). */
void zt_dequantize(const float *map, const uint8_t *codes, const float *scales, size_t n, float *x);

#endif
