/* The bf16 GEMM peak of this GPU through cuBLAS (bf16 inputs, fp32
 * accumulate), the denominator of MFU in bench/gpu_check.sh.
 *   bench_gemm [M=N=K, default 8192] [iterations, default 50]
 * Prints "bf16_gemm_tflops <value>". */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call, what)                                                   \
    do {                                                                    \
        if ((call) != 0) {                                                  \
            fprintf(stderr, "bench_gemm: %s failed\n", what);               \
            return 1;                                                       \
        }                                                                   \
    } while (0)

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 8192, iters = argc > 2 ? atoi(argv[2]) : 50;
    if (n <= 0 || iters <= 0) return 2;
    size_t elems = (size_t)n * n;
    __nv_bfloat16 *a, *b, *c;
    CHECK(cudaMalloc((void **)&a, elems * 2), "cudaMalloc");
    CHECK(cudaMalloc((void **)&b, elems * 2), "cudaMalloc");
    CHECK(cudaMalloc((void **)&c, elems * 2), "cudaMalloc");
    CHECK(cudaMemset(a, 0, elems * 2), "cudaMemset");
    CHECK(cudaMemset(b, 0, elems * 2), "cudaMemset");
    cublasHandle_t h;
    CHECK(cublasCreate(&h), "cublasCreate");
    float alpha = 1.0f, beta = 0.0f;
    cudaEvent_t t0, t1;
    cudaEventCreate(&t0);
    cudaEventCreate(&t1);
    for (int warm = 0; warm < 3; warm++)
        CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n, &beta,
                           c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              "cublasGemmEx");
    cudaEventRecord(t0, 0);
    for (int i = 0; i < iters; i++)
        CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n, &beta,
                           c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              "cublasGemmEx");
    cudaEventRecord(t1, 0);
    CHECK(cudaEventSynchronize(t1), "cudaEventSynchronize");
    float ms = 0;
    cudaEventElapsedTime(&ms, t0, t1);
    double tflops = 2.0 * n * (double)n * n * iters / (ms * 1e-3) / 1e12;
    printf("bf16_gemm_tflops %.1f\n", tflops);
    cublasDestroy(h);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    return 0;
}
