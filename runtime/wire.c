/* The host's block-wise wire codes (zt_wire.h), one block per loop
 * iteration: a block's codes are whole bytes, so blocks run in parallel. */
#include "zt_wire.h"

static float load_input(const void *x, zt_dtype xd, const void *fb, zt_dtype fbd, size_t i) {
    float v = zt_dtype_load(x, xd, i);
    return fb ? v + zt_dtype_load(fb, fbd, i) : v;
}

static void quantize_block(uint8_t *codes, float *scale_out, const void *x, zt_dtype xd, void *fb, zt_dtype fbd,
                           size_t lo, size_t hi, int bits) {
    float amax = 0.0f;
    for (size_t i = lo; i < hi; i++) {
        float a = fabsf(load_input(x, xd, fb, fbd, i));
        amax = a > amax || a != a ? a : amax; /* a NaN stays */
    }
    float scale = zt_wire_scale(amax, bits);
    *scale_out = scale;
    for (size_t i = lo; i < hi; i++) {
        float v = load_input(x, xd, fb, fbd, i);
        int q = zt_wire_code(v, scale, bits);
        if (bits == 8) codes[i] = (uint8_t)(int8_t)q;
        else if (i & 1) codes[i / 2] = (uint8_t)((codes[i / 2] & 15) | ((q & 15) << 4));
        else codes[i / 2] = (uint8_t)(q & 15);
        if (fb) zt_dtype_store(fb, fbd, i, scale == scale ? v - zt_wire_value(q, scale) : 0.0f);
    }
}

void zt_wire_quantize(uint8_t *codes, float *scales, const void *x, zt_dtype x_dtype, void *feedback,
                      zt_dtype fb_dtype, size_t n, int bits, unsigned block, int nthreads) {
    size_t nb = zt_wire_nblocks(n, block);
#pragma omp parallel for num_threads(nthreads > 0 ? nthreads : 1) schedule(static)
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * block, hi = lo + block < n ? lo + block : n;
        quantize_block(codes, scales + b, x, x_dtype, feedback, fb_dtype, lo, hi, bits);
    }
}

/* Block by block, one scale load each: the host's decode runs inside the
 * reduce-scatter's sum, on the step's path. */
void zt_wire_dequantize(void *out, zt_dtype dtype, const uint8_t *codes, const float *scales, size_t n, int bits,
                        unsigned block, int nthreads) {
    size_t nb = zt_wire_nblocks(n, block);
#pragma omp parallel for num_threads(nthreads > 0 ? nthreads : 1) schedule(static)
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * block, hi = lo + block < n ? lo + block : n;
        for (size_t i = lo; i < hi; i++)
            zt_dtype_store(out, dtype, i, zt_wire_value(zt_wire_get(codes, i, bits), scales[b]));
    }
}

void zt_wire_accumulate(float *out, const uint8_t *seg, size_t n, int bits, unsigned block, int first) {
    const float *scales = (const float *)(seg + zt_wire_scales_at(n, bits));
    for (size_t b = 0, nb = zt_wire_nblocks(n, block); b < nb; b++) {
        size_t lo = b * block, hi = lo + block < n ? lo + block : n;
        float scale = scales[b];
        for (size_t i = lo; i < hi; i++) {
            float v = zt_wire_value(zt_wire_get(seg, i, bits), scale);
            out[i] = first ? v : out[i] + v;
        }
    }
}
