/* Newton-Schulz orthogonalization on the host (zt_newton_schulz.h), and
 * the CPU backend's op. */
#include "zt_newton_schulz.h"

#include "cpu_ops.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

size_t zt_newton_schulz_scratch(size_t rows, size_t cols) {
    size_t m = rows < cols ? rows : cols;
    return 2 * rows * cols + 2 * m * m + 2;
}

double zt_newton_schulz_flops(size_t rows, size_t cols, int steps) {
    double m = (double)(rows < cols ? rows : cols), n = (double)(rows < cols ? cols : rows);
    /* per step: X X^T (2 m m n), A A (2 m^3), B X (2 m m n) */
    return (double)steps * (4.0 * m * m * n + 2.0 * m * m * m);
}

/* dst[cols, rows] = src[rows, cols]^T. */
static void transpose(float *dst, const float *src, size_t rows, size_t cols) {
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) dst[c * rows + r] = src[r * cols + c];
}

void zt_newton_schulz(float *x, size_t rows, size_t cols, int steps, const float coef[3], float eps,
                      float *scratch) {
    int tall = rows > cols;
    size_t m = tall ? cols : rows, n = tall ? rows : cols; /* X is [m, n], m <= n */
    float *X = scratch, *Y = X + m * n, *A = Y + m * n, *B = A + m * m;
    if (tall) transpose(X, x, rows, cols);
    else memcpy(X, x, m * n * sizeof *X);
    double sq = 0.0;
    for (size_t i = 0; i < m * n; i++) sq += (double)X[i] * (double)X[i];
    float norm = (float)sqrt(sq);
    if (norm < eps) norm = eps; /* an all-zero update stays zero */
    for (size_t i = 0; i < m * n; i++) X[i] /= norm;
    int M = (int)m, N = (int)n;
    for (int k = 0; k < steps; k++) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, M, N, 1.0f, X, N, X, N, 0.0f, A, M); /* X X^T */
        memcpy(B, A, m * m * sizeof *B);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, M, M, coef[2], A, M, A, M, coef[1], B, M);
        memcpy(Y, X, m * n * sizeof *Y);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, M, 1.0f, B, M, X, N, coef[0], Y, N);
        float *t = X;
        X = Y, Y = t;
    }
    if (tall) transpose(x, X, m, n);
    else memcpy(x, X, m * n * sizeof *x);
}

void zt_cpu_newton_schulz(zt_stream *s, float *x, size_t rows, size_t cols, int steps, const float *coef, float eps,
                          float *scratch) {
    (void)s;
    zt_newton_schulz(x, rows, cols, steps, coef, eps, scratch);
}
