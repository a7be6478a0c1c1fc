/* Adafactor's kernels: the factored statistics of a matrix's gradients,
 * the preconditioned gradient, and the update (zt_backend.h). */
#include <math.h>

#include "cpu_ops.h"

void zt_cpu_factor_stats(zt_stream *s, float *row, float *col, const float *g, size_t n, size_t at, size_t cols,
                         float eps1) {
    (void)s; /* one pass in element order, row by row: every row and column sum in that order */
    if (n == 0) return;
    for (size_t i = at / cols, last = (at + n - 1) / cols; i <= last; i++) {
        size_t a = i * cols > at ? i * cols : at, b = (i + 1) * cols < at + n ? (i + 1) * cols : at + n;
        const float *gi = g + (a - at);
        float *c = col + (a - i * cols), sum = row[i];
        for (size_t k = 0; k < b - a; k++) {
            float sq = gi[k] * gi[k] + eps1;
            sum += sq;
            c[k] += sq;
        }
        row[i] = sum;
    }
}

void zt_cpu_adafactor_precondition(zt_stream *s, float *u, const float *g, float *v, const float *rfac,
                                   const float *cfac, size_t n, size_t at, size_t cols, float beta2t, float eps1,
                                   int store_v) {
    if (rfac) {
        if (n == 0) return;
        size_t first = at / cols, last = (at + n - 1) / cols;
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
        for (size_t i = first; i <= last; i++) { /* row i's part of the range */
            size_t a = i * cols > at ? i * cols : at, b = (i + 1) * cols < at + n ? (i + 1) * cols : at + n;
            const float *gi = g + (a - at), *c = cfac + (a - i * cols);
            float *ui = u + (a - at), r = rfac[i];
            for (size_t k = 0; k < b - a; k++) ui[k] = gi[k] * r * c[k];
        }
        return;
    }
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (size_t k = 0; k < n; k++) {
        float w = beta2t * v[k] + (1.0f - beta2t) * (g[k] * g[k] + eps1);
        if (store_v) v[k] = w;
        u[k] = g[k] / sqrtf(w);
    }
}

void zt_cpu_adafactor_apply(zt_stream *s, float *p, const float *u, float *m, size_t n, float step, float beta1,
                            float decay) {
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (size_t k = 0; k < n; k++) {
        float x = step * u[k];
        if (m) {
            m[k] = beta1 * m[k] + (1.0f - beta1) * x;
            x = m[k];
        }
        p[k] = (p[k] - decay * p[k]) - x;
    }
}
