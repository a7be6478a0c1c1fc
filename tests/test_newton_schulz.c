/* Newton-Schulz orthogonalization (optim/zt_newton_schulz.h), Muon's
 * transform. Inputs U diag(s) V^T with U, V random orthonormal (Gram-Schmidt
 * in double) and singular values s spread log-uniformly over [2e-3, 1]
 * (scaled so that ||s||_2 = 1: the transform's own Frobenius normalization
 * then leaves them there), for square, wide and tall shapes: after the
 * default 5 steps every singular value of the output lies in
 * [0.68, 1.21] +- 1e-3 (singular values from a Jacobi eigen-solve of the
 * output's Gram matrix in double). Also: the transform is deterministic
 * (twice the same bits), a tall matrix's result is the transpose of its
 * (wide) transpose's, and an all-zero update stays zero. */
#include <math.h>
#include <string.h>

#include "test_util.h"
#include "zt_newton_schulz.h"

static const float COEF[3] = {3.4445f, -4.7750f, 2.0315f};

/* q[n, k] (row-major double): k orthonormal columns of length n. */
static void orthonormal_columns(double *q, size_t n, size_t k) {
    for (size_t j = 0; j < k; j++) {
        for (size_t i = 0; i < n; i++) q[i * k + j] = rng_uniform(-1.0f, 1.0f);
        for (int pass = 0; pass < 2; pass++) /* twice: Gram-Schmidt loses orthogonality once */
            for (size_t p = 0; p < j; p++) {
                double dot = 0.0;
                for (size_t i = 0; i < n; i++) dot += q[i * k + j] * q[i * k + p];
                for (size_t i = 0; i < n; i++) q[i * k + j] -= dot * q[i * k + p];
            }
        double norm = 0.0;
        for (size_t i = 0; i < n; i++) norm += q[i * k + j] * q[i * k + j];
        for (size_t i = 0; i < n; i++) q[i * k + j] /= sqrt(norm);
    }
}

/* Eigenvalues of symmetric a[n, n] (destroyed) by cyclic Jacobi, into ev[n]. */
static void jacobi_eigenvalues(double *a, size_t n, double *ev) {
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0.0;
        for (size_t p = 0; p < n; p++)
            for (size_t q = p + 1; q < n; q++) off += a[p * n + q] * a[p * n + q];
        if (off < 1e-30) break;
        for (size_t p = 0; p < n; p++)
            for (size_t q = p + 1; q < n; q++) {
                if (fabs(a[p * n + q]) < 1e-300) continue;
                double theta = (a[q * n + q] - a[p * n + p]) / (2.0 * a[p * n + q]);
                double t = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1.0));
                double c = 1.0 / sqrt(t * t + 1.0), s = t * c;
                for (size_t k = 0; k < n; k++) { /* columns p, q */
                    double akp = a[k * n + p], akq = a[k * n + q];
                    a[k * n + p] = c * akp - s * akq;
                    a[k * n + q] = s * akp + c * akq;
                }
                for (size_t k = 0; k < n; k++) { /* rows p, q */
                    double apk = a[p * n + k], aqk = a[q * n + k];
                    a[p * n + k] = c * apk - s * aqk;
                    a[q * n + k] = s * apk + c * aqk;
                }
            }
    }
    for (size_t i = 0; i < n; i++) ev[i] = a[i * n + i];
}

/* x[rows, cols] = U diag(s) V^T with min(rows, cols) singular values. */
static void make_input(float *x, size_t rows, size_t cols) {
    size_t k = rows < cols ? rows : cols;
    double *u = malloc(rows * k * sizeof *u), *v = malloc(cols * k * sizeof *v), *s = malloc(k * sizeof *s);
    orthonormal_columns(u, rows, k);
    orthonormal_columns(v, cols, k);
    /* s[1..k-1] geometric from 2e-3 up to a top found by bisection so that
     * their squares add up to 1/2; s[0] = sqrt(1/2) makes ||s|| = 1 */
    double lo_top = 2e-3, hi_top = 1.0 / sqrt(2.0), sum = 0.0;
    for (int it = 0; it < 60; it++) {
        double top = 0.5 * (lo_top + hi_top);
        sum = 0.0;
        for (size_t i = 1; i < k; i++) {
            s[i] = 2e-3 * pow(top / 2e-3, (double)(i - 1) / (double)(k > 2 ? k - 2 : 1));
            sum += s[i] * s[i];
        }
        if (sum > 0.5) hi_top = top;
        else lo_top = top;
    }
    s[0] = sqrt(1.0 - sum); /* the largest: about sqrt(1/2) */
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            double acc = 0.0;
            for (size_t i = 0; i < k; i++) acc += u[r * k + i] * s[i] * v[c * k + i];
            x[r * cols + c] = (float)acc;
        }
    free(u), free(v), free(s);
}

/* Singular values of x[rows, cols] into sv[min(rows, cols)]. */
static void singular_values(const float *x, size_t rows, size_t cols, double *sv) {
    size_t k = rows < cols ? rows : cols;
    double *g = calloc(k * k, sizeof *g);
    for (size_t i = 0; i < k; i++)
        for (size_t j = 0; j < k; j++) {
            double acc = 0.0;
            if (rows <= cols)
                for (size_t c = 0; c < cols; c++) acc += (double)x[i * cols + c] * x[j * cols + c];
            else
                for (size_t r = 0; r < rows; r++) acc += (double)x[r * cols + i] * x[r * cols + j];
            g[i * k + j] = acc;
        }
    jacobi_eigenvalues(g, k, sv);
    for (size_t i = 0; i < k; i++) sv[i] = sqrt(sv[i] > 0 ? sv[i] : 0);
    free(g);
}

static void check_shape(size_t rows, size_t cols) {
    size_t n = rows * cols, k = rows < cols ? rows : cols;
    float *x = malloc(n * sizeof *x), *again = malloc(n * sizeof *again), *t = malloc(n * sizeof *t);
    float *scratch = malloc(zt_newton_schulz_scratch(rows, cols) * sizeof *scratch);
    double *sv = malloc(k * sizeof *sv), lo = 1e9, hi = 0.0;
    make_input(x, rows, cols);
    for (size_t r = 0; r < rows; r++) /* its transpose, for the tall/wide symmetry */
        for (size_t c = 0; c < cols; c++) t[c * rows + r] = x[r * cols + c];
    memcpy(again, x, n * sizeof *x);
    zt_newton_schulz(x, rows, cols, 5, COEF, 1e-7f, scratch);
    zt_newton_schulz(again, rows, cols, 5, COEF, 1e-7f, scratch);
    zt_newton_schulz(t, cols, rows, 5, COEF, 1e-7f, scratch);
    CHECK(memcmp(x, again, n * sizeof *x) == 0, "[%zu, %zu]: two transforms of one input differ", rows, cols);
    size_t transposed_differ = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) transposed_differ += x[r * cols + c] != t[c * rows + r];
    CHECK(rows == cols || transposed_differ == 0, "[%zu, %zu]: the transpose's result is not the transpose (%zu values)", rows, cols,
          transposed_differ);
    singular_values(x, rows, cols, sv);
    for (size_t i = 0; i < k; i++) {
        if (sv[i] < lo) lo = sv[i];
        if (sv[i] > hi) hi = sv[i];
    }
    CHECK(lo >= 0.68 - 1e-3 && hi <= 1.21 + 1e-3, "[%zu, %zu]: singular values in [%.4f, %.4f], outside [0.68, 1.21]",
          rows, cols, lo, hi);
    printf("ok [%zu, %zu]: output singular values in [%.4f, %.4f]\n", rows, cols, lo, hi);
    free(x), free(again), free(t), free(scratch), free(sv);
}

static void check_zero(void) {
    float x[6 * 4] = {0}, scratch[96];
    if (zt_newton_schulz_scratch(6, 4) > 96) { CHECK(0, "scratch for [6, 4] grew"); return; }
    zt_newton_schulz(x, 6, 4, 5, COEF, 1e-7f, scratch);
    int nonzero = 0;
    for (int i = 0; i < 24; i++) nonzero += x[i] != 0.0f;
    CHECK(nonzero == 0, "an all-zero update became %d nonzero values", nonzero);
}

int main(void) {
    const size_t shapes[][2] = {{32, 32}, {24, 72}, {96, 16}, {64, 64}, {8, 128}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) check_shape(shapes[i][0], shapes[i][1]);
    check_zero();
    printf("%ld checks, %d failures\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
