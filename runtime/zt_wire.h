/* Block-wise integer codes for what travels between ranks (ZeRO++'s qwZ
 * and qgZ): a segment of n values is cut into blocks of `block` values from
 * its start, each stored as one fp32 scale (its absolute maximum over qmax:
 * 127 for int8, 7 for int4) and one signed code per value, round(v / scale)
 * to nearest even, so each value is off by at most half a scale. int4
 * packs two codes per byte, the even index in the low nibble.
 *
 * A segment's bytes: the codes (rounded up to 4 bytes), then its scales.
 * A block holding inf or NaN is sent as codes 0 and a NaN scale, so every
 * value of it arrives as NaN and the non-finite guard after the sum sees
 * it; nothing is refused on the wire.
 *
 * The same inline functions run on the host and in CUDA kernels, with the
 * division and product rounded as IEEE says on both, so both produce the
 * same codes for the same values. */
#ifndef ZT_WIRE_H
#define ZT_WIRE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "zt_dtype.h"

#ifdef __CUDACC__
#define ZT_WIRE_HD __host__ __device__
#else
#define ZT_WIRE_HD
#endif

/* How a buffer travels: plain values in `dtype`, or block-wise codes of
 * `bits` 8 or 4 (what they stand for is then in `dtype`: the uncompressed
 * size counts it). */
typedef struct {
    zt_dtype dtype;
    int bits;       /* 0: plain; 8 or 4: codes */
    unsigned block; /* values per scale, even (int4 packs a block's codes in whole bytes) */
} zt_wire;

/* The plain wire of a dtype. */
static inline zt_wire zt_wire_plain(zt_dtype dtype) {
    zt_wire w = {dtype, 0, 0};
    return w;
}

#define ZT_WIRE_BLOCK_MIN 16
#define ZT_WIRE_BLOCK_MAX 65536

static inline ZT_WIRE_HD int zt_wire_qmax(int bits) { return bits == 4 ? 7 : 127; }
static inline ZT_WIRE_HD size_t zt_wire_nblocks(size_t n, unsigned block) { return (n + block - 1) / block; }
/* Where a segment's scales start: after its codes, 4-byte aligned. */
static inline ZT_WIRE_HD size_t zt_wire_scales_at(size_t n, int bits) {
    size_t codes = bits == 4 ? (n + 1) / 2 : n;
    return (codes + 3) / 4 * 4;
}

/* Bytes of n values on the wire. */
static inline size_t zt_wire_bytes(const zt_wire *w, size_t n) {
    if (!w->bits) return n * zt_dtype_size(w->dtype);
    return zt_wire_scales_at(n, w->bits) + 4 * zt_wire_nblocks(n, w->block);
}

/* A block's scale from its absolute maximum: NaN where that is not finite. */
static inline ZT_WIRE_HD float zt_wire_scale(float amax, int bits) {
    if (!(amax <= 3.40282347e38f)) return NAN;
#ifdef __CUDA_ARCH__
    return __fdiv_rn(amax, (float)zt_wire_qmax(bits));
#else
    return amax / (float)zt_wire_qmax(bits);
#endif
}

/* v's code at `scale`: 0 where the scale is 0 or NaN. */
static inline ZT_WIRE_HD int zt_wire_code(float v, float scale, int bits) {
    if (!(scale > 0.0f)) return 0;
#ifdef __CUDA_ARCH__
    float q = rintf(__fdiv_rn(v, scale));
#else
    float q = rintf(v / scale);
#endif
    int qmax = zt_wire_qmax(bits);
    return q > (float)qmax ? qmax : q < (float)-qmax ? -qmax : (int)q;
}

static inline ZT_WIRE_HD float zt_wire_value(int code, float scale) {
    /* A block holding NaN decodes to its scale's own NaN: x86 keeps a NaN
     * operand's bits through the product, a GPU returns its canonical NaN. */
    if (scale != scale) return scale;
#ifdef __CUDA_ARCH__
    return __fmul_rn((float)code, scale);
#else
    return (float)code * scale;
#endif
}

/* Code i of a segment's codes. */
static inline ZT_WIRE_HD int zt_wire_get(const uint8_t *codes, size_t i, int bits) {
    if (bits == 8) return (int)(int8_t)codes[i];
    int nib = (i & 1) ? codes[i / 2] >> 4 : codes[i / 2] & 15;
    return nib >= 8 ? nib - 16 : nib;
}

/* Value i of a segment (codes, then scales at zt_wire_scales_at). */
static inline ZT_WIRE_HD float zt_wire_load(const uint8_t *seg, size_t n, size_t i, int bits, unsigned block) {
    const float *scales = (const float *)(seg + zt_wire_scales_at(n, bits));
    return zt_wire_value(zt_wire_get(seg, i, bits), scales[i / block]);
}

/* Host: codes and scales of x[n] (x_dtype) plus feedback[n] (fb_dtype;
 * NULL: none), which then holds what the codes lost (0 in a non-finite
 * block, so one bad step does not poison the next). Blocks from x[0]. */
void zt_wire_quantize(uint8_t *codes, float *scales, const void *x, zt_dtype x_dtype, void *feedback,
                      zt_dtype fb_dtype, size_t n, int bits, unsigned block, int nthreads);
/* Host: out[n] (dtype) = the values of codes and scales. */
void zt_wire_dequantize(void *out, zt_dtype dtype, const uint8_t *codes, const float *scales, size_t n, int bits,
                        unsigned block, int nthreads);
/* Host: out[n] = (first ? 0 : out) + the values of segment seg (codes,
 * then scales), added in fp32; first stores them as they are. */
void zt_wire_accumulate(float *out, const uint8_t *seg, size_t n, int bits, unsigned block, int first);

#endif
