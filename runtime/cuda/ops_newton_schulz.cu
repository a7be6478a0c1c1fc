/* Newton-Schulz orthogonalization on the device (zt_newton_schulz.h), the
 * CUDA backend's ops->newton_schulz: the CPU's steps, with its GEMMs as
 * fp32 cuBLAS GEMMs (CUBLAS_COMPUTE_32F, no TF32) and the norm summed by
 * sum_squares into the scratch's last double, so nothing waits on the host.
 * It agrees with the CPU's to fp32 rounding, not bit for bit (the GEMMs sum
 * in other orders). */
#include "cuda_common.cuh"
#include "zt_newton_schulz.h"

/* dst[cols, rows] = src[rows, cols]^T. */
__global__ static void transpose_kernel(float *dst, const float *src, size_t rows, size_t cols) {
    for (size_t i = zt_gtid(); i < rows * cols; i += zt_gstride()) {
        size_t r = i / cols, c = i % cols;
        dst[c * rows + r] = src[i];
    }
}

/* x[n] /= max(sqrt(*sq), eps), rounded as the CPU's: the norm to float first. */
__global__ static void normalize_kernel(float *x, size_t n, const double *sq, float eps) {
    float norm = (float)sqrt(*sq);
    if (norm < eps) norm = eps;
    for (size_t i = zt_gtid(); i < n; i += zt_gstride()) x[i] /= norm;
}

/* A GEMM of the iteration; its error becomes the stream's sticky one. */
static int gemm(zt_stream *s, int M, int N, int K, float alpha, const float *A, int lda, int trans_b, const float *B,
                int ldb, float beta, float *C, int ldc) {
    zt_error e;
    zt_error_clear(&e);
    if (zt_cuda_gemm_f32(s, 0, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, &e) == ZT_OK) return 0;
    zt_cuda_record(zt_cuda_impl_of(s), e.code, e.file, e.line, "newton_schulz: %s", e.msg);
    return 1;
}

static int place(zt_stream *s, float *dst, const float *src, size_t rows, size_t cols, int transposed) {
    cudaStream_t st = zt_cuda_enter(s);
    if (!transposed)
        return ZT_CUDA_RT(s, cudaMemcpyAsync(dst, src, rows * cols * sizeof(float), cudaMemcpyDeviceToDevice, st));
    transpose_kernel<<<zt_ew_blocks(rows * cols), ZT_EW_THREADS, 0, st>>>(dst, src, rows, cols);
    return ZT_CUDA_LAUNCHED(s, "newton_schulz (transpose)");
}

extern "C" void zt_cuda_newton_schulz(zt_stream *s, float *x, size_t rows, size_t cols, int steps, const float *coef,
                                      float eps, float *scratch) {
    if (rows == 0 || cols == 0) return;
    int tall = rows > cols;
    size_t m = tall ? cols : rows, n = tall ? rows : cols; /* X is [m, n], m <= n */
    float *X = scratch, *Y = X + m * n, *A = Y + m * n, *B = A + m * m;
    double *sq = (double *)(B + m * m); /* 8-aligned: 2(mn + m^2) floats before it */
    cudaStream_t st = zt_cuda_enter(s);
    if (place(s, X, x, rows, cols, tall)) return;
    zt_cuda_sum_squares(s, sq, X, m * n);
    normalize_kernel<<<zt_ew_blocks(m * n), ZT_EW_THREADS, 0, st>>>(X, m * n, sq, eps);
    if (ZT_CUDA_LAUNCHED(s, "newton_schulz (normalize)")) return;
    int M = (int)m, N = (int)n;
    for (int k = 0; k < steps; k++) {
        if (gemm(s, M, M, N, 1.0f, X, N, 1, X, N, 0.0f, A, M)) return; /* X X^T */
        if (ZT_CUDA_RT(s, cudaMemcpyAsync(B, A, m * m * sizeof(float), cudaMemcpyDeviceToDevice, st))) return;
        if (gemm(s, M, M, M, coef[2], A, M, 0, A, M, coef[1], B, M)) return;
        if (ZT_CUDA_RT(s, cudaMemcpyAsync(Y, X, m * n * sizeof(float), cudaMemcpyDeviceToDevice, st))) return;
        if (gemm(s, M, N, M, 1.0f, B, M, 0, X, N, coef[0], Y, N)) return;
        float *t = X;
        X = Y, Y = t;
    }
    place(s, x, X, m, n, tall);
}
