/* The bf16 GEMM peak of this GPU through cuBLAS (bf16 inputs, fp32
 * accumulate), the denominator of MFU in bench/gpu_check.sh, and the shape
 * of the model's --dtype bf16 matmuls (the CUDA backend's bf16 table passes
 * bf16 A and B with CUBLAS_COMPUTE_32F through cuBLASLt, which cublasGemmEx
 * uses underneath); and, for comparison, the fp32 table's path with
 * zt_backend.matmul_bf16 set: fp32 A, B, C with CUBLAS_COMPUTE_32F_FAST_16BF
 * (operands rounded to bf16 inside the kernel, fp32 accumulate). The MFU
 * denominator stays the bf16 peak.
 *   bench_gemm [M=N=K, default 8192] [iterations, default 50]
 * Prints "bf16_gemm_tflops <value>", then "fast16bf_f32io_gemm_tflops <value>". */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call, what)                                                   \
    do {                                                                    \
        if ((call) != 0) {                                                  \
            fprintf(stderr, "bench_gemm: %s failed\n", what);               \
            return 1;                                                       \
        }                                                                   \
    } while (0)

/* Random operands in [-1, 1) from a hash of the index (bf16: the fp32
 * value's top 16 bits). Not zeros: tensor cores multiplying zeros draw less
 * power and hold a higher clock, which overstates the peak (the notes on the
 * lent H200 machines record an 8192^3 bf16 product through PyTorch at 894
 * TFLOP/s on zeros and 788 on random data; not a zerotrain measurement). */
__global__ static void fill_random(void *dst, size_t n, int bf16) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u + (uint32_t)(i >> 32);
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        float x = (float)(h >> 8) / 8388608.0f - 1.0f;
        if (bf16) ((uint16_t *)dst)[i] = (uint16_t)(__float_as_uint(x) >> 16);
        else ((float *)dst)[i] = x;
    }
}

/* Fills both operands on a stream of its own and waits: cuBLAS then runs on
 * the default stream, after the data is there. */
static int fill_operands(void *a, void *b, size_t n, int bf16) {
    cudaStream_t st;
    if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess) return 1;
    fill_random<<<1024, 256, 0, st>>>(a, n, bf16);
    fill_random<<<1024, 256, 0, st>>>(b, n, bf16);
    int bad = cudaGetLastError() != cudaSuccess || cudaStreamSynchronize(st) != cudaSuccess;
    cudaStreamDestroy(st);
    return bad;
}

/* Seconds per call of `iters` back-to-back GEMMs (after 3 warm-up calls),
 * all of them M=N=K=n with the given types; negative on a failure. */
static double time_gemm(cublasHandle_t h, int n, int iters, const void *a, const void *b, void *c, cudaDataType ab_type,
                        cudaDataType c_type, cublasComputeType_t compute) {
    float alpha = 1.0f, beta = 0.0f;
    cudaEvent_t t0, t1;
    if (cudaEventCreate(&t0) != cudaSuccess || cudaEventCreate(&t1) != cudaSuccess) return -1.0;
    double secs = -1.0;
    for (int i = -3; i < iters; i++) {
        if (i == 0 && cudaEventRecord(t0, 0) != cudaSuccess) goto out;
        if (cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, ab_type, n, b, ab_type, n, &beta, c, c_type,
                         n, compute, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
            goto out;
    }
    if (cudaEventRecord(t1, 0) == cudaSuccess && cudaEventSynchronize(t1) == cudaSuccess) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, t0, t1) == cudaSuccess) secs = ms * 1e-3 / iters;
    }
out:
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    return secs;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 8192, iters = argc > 2 ? atoi(argv[2]) : 50;
    if (n <= 0 || iters <= 0) return 2;
    size_t elems = (size_t)n * n;
    double flops = 2.0 * n * (double)n * n;
    cublasHandle_t h;
    CHECK(cublasCreate(&h), "cublasCreate");

    /* bf16 in, bf16 out, fp32 accumulate: the peak. */
    __nv_bfloat16 *a, *b, *c;
    CHECK(cudaMalloc((void **)&a, elems * 2), "cudaMalloc");
    CHECK(cudaMalloc((void **)&b, elems * 2), "cudaMalloc");
    CHECK(cudaMalloc((void **)&c, elems * 2), "cudaMalloc");
    CHECK(fill_operands(a, b, elems, 1), "filling the bf16 operands");
    double secs = time_gemm(h, n, iters, a, b, c, CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F);
    CHECK(secs <= 0.0, "bf16 cublasGemmEx");
    printf("bf16_gemm_tflops %.1f\n", flops / secs / 1e12);
    fflush(stdout);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);

    /* fp32 in and out, bf16 tensor-core math: the fp32 table with matmul_bf16. */
    float *fa, *fb, *fc;
    CHECK(cudaMalloc((void **)&fa, elems * 4), "cudaMalloc");
    CHECK(cudaMalloc((void **)&fb, elems * 4), "cudaMalloc");
    CHECK(cudaMalloc((void **)&fc, elems * 4), "cudaMalloc");
    CHECK(fill_operands(fa, fb, elems, 0), "filling the fp32 operands");
    secs = time_gemm(h, n, iters, fa, fb, fc, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_16BF);
    CHECK(secs <= 0.0, "fp32 cublasGemmEx (CUBLAS_COMPUTE_32F_FAST_16BF)");
    printf("fast16bf_f32io_gemm_tflops %.1f\n", flops / secs / 1e12);
    cudaFree(fa);
    cudaFree(fb);
    cudaFree(fc);
    cublasDestroy(h);
    return 0;
}
