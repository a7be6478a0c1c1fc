/* Adafactor's kernels (zt_backend.h): the factored statistics of a matrix's
 * gradients, the preconditioned gradient, and the update, each with the CPU
 * kernel's expressions term for term (--fmad=false, IEEE division and sqrt). */
#include "cuda_common.cuh"

/* The statistics are sums in element order, as the CPU's single pass takes
 * them (zt_backend.h: pieces of a range add up as the whole would). Each sum
 * is one thread's loop: a thread per row of the range adds that row's
 * elements left to right, a thread per column adds down the rows, each
 * starting from the value the row or column holds. The range [at, at + n)
 * may begin and end inside a row. */
__global__ static void factor_rows_kernel(float *row, const float *g, size_t n, size_t at, size_t cols, float eps1,
                                          size_t r0, size_t nrows) {
    for (size_t r = zt_gtid(); r < nrows; r += zt_gstride()) {
        size_t i = r0 + r;
        size_t e0 = i * cols > at ? i * cols : at, e1 = (i + 1) * cols < at + n ? (i + 1) * cols : at + n;
        float acc = row[i];
        for (size_t e = e0; e < e1; e++) {
            float gk = g[e - at];
            acc += gk * gk + eps1;
        }
        row[i] = acc;
    }
}

__global__ static void factor_cols_kernel(float *col, const float *g, size_t n, size_t at, size_t cols,
                                          float eps1) {
    for (size_t j = zt_gtid(); j < cols; j += zt_gstride()) {
        size_t e = at - at % cols + j; /* column j's first element at or after `at` */
        if (e < at) e += cols;
        if (e >= at + n) continue; /* a range shorter than a row may miss column j */
        float acc = col[j];
        for (; e < at + n; e += cols) {
            float gk = g[e - at];
            acc += gk * gk + eps1;
        }
        col[j] = acc;
    }
}

extern "C" void zt_cuda_factor_stats(zt_stream *s, float *row, float *col, const float *g, size_t n, size_t at,
                                     size_t cols, float eps1) {
    if (n == 0) return;
    size_t r0 = at / cols, nrows = (at + n - 1) / cols - r0 + 1;
    cudaStream_t st = zt_cuda_enter(s);
    factor_rows_kernel<<<zt_ew_blocks(nrows), ZT_EW_THREADS, 0, st>>>(row, g, n, at, cols, eps1, r0, nrows);
    if (ZT_CUDA_LAUNCHED(s, "factor_stats rows")) return;
    factor_cols_kernel<<<zt_ew_blocks(cols), ZT_EW_THREADS, 0, st>>>(col, g, n, at, cols, eps1);
    ZT_CUDA_LAUNCHED(s, "factor_stats cols");
}

/* Factored: u = g rfac[i] cfac[j] for element (i, j). */
__global__ static void precondition_factored_kernel(float *u, const float *g, const float *rfac, const float *cfac,
                                                    size_t n, size_t at, size_t cols) {
    for (size_t k = zt_gtid(); k < n; k += zt_gstride()) {
        size_t e = at + k;
        u[k] = g[k] * rfac[e / cols] * cfac[e % cols];
    }
}

/* Unfactored: w = beta2t v + (1 - beta2t)(g^2 + eps1), u = g / sqrt(w). */
__global__ static void precondition_full_kernel(float *u, const float *g, float *v, size_t n, float beta2t,
                                                float eps1, int store_v) {
    for (size_t k = zt_gtid(); k < n; k += zt_gstride()) {
        float w = beta2t * v[k] + (1.0f - beta2t) * (g[k] * g[k] + eps1);
        if (store_v) v[k] = w;
        u[k] = g[k] / sqrtf(w);
    }
}

extern "C" void zt_cuda_adafactor_precondition(zt_stream *s, float *u, const float *g, float *v, const float *rfac,
                                               const float *cfac, size_t n, size_t at, size_t cols, float beta2t,
                                               float eps1, int store_v) {
    if (n == 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    if (rfac) precondition_factored_kernel<<<zt_ew_blocks(n), ZT_EW_THREADS, 0, st>>>(u, g, rfac, cfac, n, at, cols);
    else precondition_full_kernel<<<zt_ew_blocks(n), ZT_EW_THREADS, 0, st>>>(u, g, v, n, beta2t, eps1, store_v);
    ZT_CUDA_LAUNCHED(s, "adafactor_precondition");
}

/* x = step u; with m, m = beta1 m + (1 - beta1) x and x = m; p = (p - decay p) - x. */
__global__ static void adafactor_apply_kernel(float *p, const float *u, float *m, size_t n, float step, float beta1,
                                              float decay) {
    for (size_t k = zt_gtid(); k < n; k += zt_gstride()) {
        float x = step * u[k];
        if (m) {
            x = beta1 * m[k] + (1.0f - beta1) * x;
            m[k] = x;
        }
        p[k] = (p[k] - decay * p[k]) - x;
    }
}

extern "C" void zt_cuda_adafactor_apply(zt_stream *s, float *p, const float *u, float *m, size_t n, float step,
                                        float beta1, float decay) {
    if (n == 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    adafactor_apply_kernel<<<zt_ew_blocks(n), ZT_EW_THREADS, 0, st>>>(p, u, m, n, step, beta1, decay);
    ZT_CUDA_LAUNCHED(s, "adafactor_apply");
}
