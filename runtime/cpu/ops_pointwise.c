/* Elementwise kernels: GELU, residual, casts, scaling, sum of squares. */
#include <math.h>

#include "cpu_ops.h"

#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */

void zt_cpu_gelu_fwd(zt_stream *s, float *out, const float *inp, size_t N) {
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (size_t i = 0; i < N; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
    }
}

void zt_cpu_gelu_bwd(zt_stream *s, float *dinp, const float *inp, const float *dout, size_t N) {
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (size_t i = 0; i < N; i++) {
        float x = inp[i];
        float u = GELU_K * (x + 0.044715f * x * x * x);
        float th = tanhf(u);
        float sech2 = 1.0f - th * th;
        float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] += grad * dout[i];
    }
}

void zt_cpu_residual_fwd(zt_stream *s, float *out, const float *a, const float *b, size_t N) {
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (size_t i = 0; i < N; i++) out[i] = a[i] + b[i];
}

void zt_cpu_residual_bwd(zt_stream *s, float *da, float *db, const float *dout, size_t N) {
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (size_t i = 0; i < N; i++) {
        da[i] += dout[i];
        db[i] += dout[i];
    }
}

void zt_cpu_cast_f32_to_bf16(zt_stream *s, zt_bf16 *dst, const float *src, size_t n) {
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] = zt_f32_to_bf16(src[i]);
}

void zt_cpu_cast_bf16_to_f32(zt_stream *s, float *dst, const zt_bf16 *src, size_t n) {
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] = zt_bf16_to_f32(src[i]);
}

void zt_cpu_scale(zt_stream *s, float *x, float alpha, size_t n) {
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= alpha;
}

void zt_cpu_scaled_store_f32(zt_stream *s, float *dst, const float *src, float alpha, int accumulate, size_t n) {
    if (accumulate) {
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
        for (size_t i = 0; i < n; i++) dst[i] += src[i] * alpha;
    } else {
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
        for (size_t i = 0; i < n; i++) dst[i] = src[i] * alpha;
    }
}

void zt_cpu_scaled_store_bf16(zt_stream *s, zt_bf16 *dst, const float *src, float alpha, int accumulate, size_t n) {
    if (accumulate) {
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
        for (size_t i = 0; i < n; i++) dst[i] = zt_f32_to_bf16(zt_bf16_to_f32(dst[i]) + src[i] * alpha);
    } else {
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
        for (size_t i = 0; i < n; i++) dst[i] = zt_f32_to_bf16(src[i] * alpha);
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
