/* Dense layers through cuBLAS (weights stored [OC, C], out = x W^T).
 *
 * cuBLAS is column-major. A row-major [R, K] matrix with row stride ld is,
 * read column-major, its transpose: a [K, R] matrix with leading dimension
 * ld. So the row-major product C[M,N] = op(A) op(B) is computed as the
 * column-major C^T[N,M] = op(B)^T op(A)^T: swap the operands and M/N, keep
 * each operand's own transpose flag and leading dimension. */
#include "cuda_common.cuh"

static cublasOperation_t op_of(int trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

/* Row-major GEMM on s; cuBLAS errors go into err with file:line. */
static zt_status gemm_rowmajor(zt_stream *s, int trans_a, int trans_b, int M, int N, int K, float alpha,
                               const void *A, cudaDataType a_type, int lda, const void *B, cudaDataType b_type,
                               int ldb, float beta, void *C, cudaDataType c_type, int ldc, zt_error *err) {
    if (M <= 0 || N <= 0) return ZT_OK;
    cudaStream_t st = zt_cuda_enter(s);
    cublasHandle_t h = zt_cuda_cublas_acquire(s, st);
    if (!h) return ZT_FAIL(err, ZT_ERR_INTERNAL, "cuBLAS: cannot bind the handle to the stream");
    cublasStatus_t rc;
    if (a_type == CUDA_R_32F && b_type == CUDA_R_32F && c_type == CUDA_R_32F)
        rc = cublasSgemm(h, op_of(trans_b), op_of(trans_a), N, M, K, &alpha, (const float *)B, ldb,
                         (const float *)A, lda, &beta, (float *)C, ldc);
    else
        rc = cublasGemmEx(h, op_of(trans_b), op_of(trans_a), N, M, K, &alpha, B, b_type, ldb, A, a_type, lda, &beta,
                          C, c_type, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    zt_cuda_cublas_release(s);
    if (rc != CUBLAS_STATUS_SUCCESS)
        return ZT_FAIL(err, rc == CUBLAS_STATUS_ALLOC_FAILED ? ZT_ERR_OOM : ZT_ERR_INTERNAL,
                       "cuBLAS: GEMM (M=%d N=%d K=%d trans_a=%d trans_b=%d) failed: %s", M, N, K, trans_a, trans_b,
                       cublasGetStatusString(rc));
    return ZT_OK;
}

extern "C" zt_status zt_cuda_gemm_f32(zt_stream *s, int trans_a, int trans_b, int M, int N, int K, float alpha,
                                      const float *A, int lda, const float *B, int ldb, float beta, float *C,
                                      int ldc, zt_error *err) {
    return gemm_rowmajor(s, trans_a, trans_b, M, N, K, alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb, beta, C,
                         CUDA_R_32F, ldc, err);
}

extern "C" zt_status zt_cuda_gemm_bf16(zt_stream *s, int trans_a, int trans_b, int M, int N, int K, float alpha,
                                       const zt_bf16 *A, int lda, const zt_bf16 *B, int ldb, float beta, void *C,
                                       zt_dtype c_dtype, int ldc, zt_error *err) {
    return gemm_rowmajor(s, trans_a, trans_b, M, N, K, alpha, A, CUDA_R_16BF, lda, B, CUDA_R_16BF, ldb, beta, C,
                         c_dtype == ZT_BF16 ? CUDA_R_16BF : CUDA_R_32F, ldc, err);
}

/* A GEMM inside a (void) zt_ops kernel: its error becomes the sticky one. */
static void gemm_or_record(zt_stream *s, int trans_a, int trans_b, int M, int N, int K, const float *A, int lda,
                           const float *B, int ldb, float beta, float *C, int ldc) {
    zt_error e;
    zt_error_clear(&e);
    if (zt_cuda_gemm_f32(s, trans_a, trans_b, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc, &e) != ZT_OK)
        zt_cuda_record(zt_cuda_impl_of(s), e.code, e.file, e.line, "%s", e.msg);
}

/* out[n, o] = bias[o]; the GEMM then adds with beta = 1 (as the CPU does). */
__global__ static void fill_bias_kernel(float *out, const float *bias, size_t N, int OC) {
    size_t total = N * (size_t)OC;
    for (size_t i = zt_gtid(); i < total; i += zt_gstride()) out[i] = bias[i % (size_t)OC];
}

/* dbias[o] += sum_n dout[n, o]: a thread per column, rows in order (the CPU
 * order; no atomics). */
__global__ static void bias_grad_kernel(float *dbias, const float *dout, int N, int OC) {
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= OC) return;
    float sum = 0.0f;
    for (int n = 0; n < N; n++) sum += dout[(size_t)n * OC + o];
    dbias[o] += sum;
}

extern "C" void zt_cuda_matmul_fwd(zt_stream *s, float *out, const float *inp, const float *w, const float *bias,
                                   int N, int C, int OC) {
    if (N <= 0 || OC <= 0) return;
    if (C <= 0 && !bias) { /* an empty sum */
        cudaStream_t st = zt_cuda_enter(s);
        ZT_CUDA_RT(s, cudaMemsetAsync(out, 0, (size_t)N * OC * sizeof(float), st));
        return;
    }
    float beta = 0.0f;
    if (bias) {
        cudaStream_t st = zt_cuda_enter(s);
        fill_bias_kernel<<<zt_ew_blocks((size_t)N * OC), ZT_EW_THREADS, 0, st>>>(out, bias, (size_t)N, OC);
        ZT_CUDA_LAUNCHED(s, "matmul_fwd (bias)");
        beta = 1.0f;
    }
    /* out[N,OC] = inp[N,C] @ w[OC,C]^T (+ out) */
    if (C > 0) gemm_or_record(s, 0, 1, N, OC, C, inp, C, w, C, beta, out, OC);
}

extern "C" void zt_cuda_matmul_bwd(zt_stream *s, float *dinp, float *dw, float *dbias, const float *dout,
                                   const float *inp, const float *w, int N, int C, int OC) {
    if (N <= 0 || C <= 0 || OC <= 0) return;
    /* dinp[N,C] += dout[N,OC] @ w[OC,C] */
    if (dinp) gemm_or_record(s, 0, 0, N, C, OC, dout, OC, w, C, 1.0f, dinp, C);
    /* dw[OC,C] += dout[N,OC]^T @ inp[N,C] */
    gemm_or_record(s, 1, 0, OC, C, N, dout, OC, inp, C, 1.0f, dw, C);
    if (dbias) {
        cudaStream_t st = zt_cuda_enter(s);
        const int threads = 128;
        bias_grad_kernel<<<(OC + threads - 1) / threads, threads, 0, st>>>(dbias, dout, N, OC);
        ZT_CUDA_LAUNCHED(s, "matmul_bwd (dbias)");
    }
}
