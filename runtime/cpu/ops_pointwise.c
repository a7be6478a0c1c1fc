/* The engine's elementwise operations: casts, scaling, sum of squares. */
#include <math.h>

#include "cpu_ops.h"
#include "zt_wire.h"

void zt_cpu_cast(zt_stream *s, void *dst, zt_dtype dst_dtype, const void *src, zt_dtype src_dtype, size_t n) {
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (size_t i = 0; i < n; i++) zt_dtype_store(dst, dst_dtype, i, zt_dtype_load(src, src_dtype, i));
}

void zt_cpu_cast_sr(zt_stream *s, uint16_t *dst, const float *src, size_t n, zt_sr_key key) {
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] = zt_bf16_sround(src[i], zt_sr_bits(&key, key.first + i));
}

void zt_cpu_wire_quantize(zt_stream *s, uint8_t *codes, float *scales, const void *x, zt_dtype x_dtype, void *feedback,
                          zt_dtype fb_dtype, size_t n, int bits, unsigned block) {
    zt_wire_quantize(codes, scales, x, x_dtype, feedback, fb_dtype, n, bits, block, s->nthreads);
}

void zt_cpu_wire_dequantize(zt_stream *s, void *out, zt_dtype dtype, const uint8_t *codes, const float *scales, size_t n,
                            int bits, unsigned block) {
    zt_wire_dequantize(out, dtype, codes, scales, n, bits, block, s->nthreads);
}

void zt_cpu_scale(zt_stream *s, float *x, float alpha, size_t n) {
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= alpha;
}

void zt_cpu_scaled_store(zt_stream *s, void *dst, zt_dtype dtype, const float *src, float alpha, int accumulate,
                         size_t n) {
    if (accumulate) {
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
        for (size_t i = 0; i < n; i++) zt_dtype_store(dst, dtype, i, zt_dtype_load(dst, dtype, i) + src[i] * alpha);
    } else {
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
        for (size_t i = 0; i < n; i++) zt_dtype_store(dst, dtype, i, src[i] * alpha);
    }
}

/* Partial sums over fixed 4096-element chunks, then the chunks in order: the
 * result does not depend on the thread count. */
#define SUMSQ_CHUNK 4096
void zt_cpu_sum_squares(zt_stream *s, double *out, const float *x, size_t n) {
    double total = 0.0;
    size_t nchunks = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
    for (size_t base = 0; base < nchunks; base += 256) {
        double partial[256];
        size_t count = nchunks - base < 256 ? nchunks - base : 256;
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
        for (size_t k = 0; k < count; k++) {
            size_t lo = (base + k) * SUMSQ_CHUNK;
            size_t hi = lo + SUMSQ_CHUNK < n ? lo + SUMSQ_CHUNK : n;
            double acc = 0.0;
            for (size_t i = lo; i < hi; i++) acc += (double)x[i] * (double)x[i];
            partial[k] = acc;
        }
        for (size_t k = 0; k < count; k++) total += partial[k];
    }
    *out = total;
}
