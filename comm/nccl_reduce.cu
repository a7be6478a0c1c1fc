#include "nccl_reduce.h"

/* One thread per element; the rank loop is sequential, so every element is
 * summed in rank order whatever the launch shape. */
__global__ static void ordered_sum_kernel(float *out, const float *staging, size_t count, int world) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        float acc = staging[i];
        for (int r = 1; r < world; r++) acc += staging[(size_t)r * count + i];
        out[i] = acc;
    }
}

extern "C" cudaError_t zt_nccl_ordered_sum(float *out, const float *staging, size_t count, int world,
                                           cudaStream_t stream) {
    if (count == 0) return cudaSuccess;
    int threads = 256;
    size_t want = (count + threads - 1) / threads;
    int blocks = want > 65535 ? 65535 : (int)want;
    ordered_sum_kernel<<<blocks, threads, 0, stream>>>(out, staging, count, world);
    return cudaGetLastError();
}
