#include <stdint.h>

#include "nccl_reduce.h"
#include "zt_wire.h"

/* One thread per element; the rank loop is sequential, so every element is
 * summed in rank order whatever the launch shape. */
__device__ static float load(const void *p, int dtype, size_t i) {
    if (dtype == 0) return ((const float *)p)[i];
    uint32_t h = ((const uint16_t *)p)[i];
    if (dtype == 1) return __uint_as_float(h << 16); /* bf16 */
    uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu; /* fp16 */
    if (e == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (m << 13));
    if (e == 0) return sign ? -__fmul_rn((float)m, 5.9604644775390625e-8f) : __fmul_rn((float)m, 5.9604644775390625e-8f);
    return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
}

__global__ static void ordered_sum_kernel(float *out, const void *staging, int dtype, size_t count, int world) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        float acc = load(staging, dtype, i);
        for (int r = 1; r < world; r++) acc = __fadd_rn(acc, load(staging, dtype, (size_t)r * count + i));
        out[i] = acc;
    }
}

__global__ static void ordered_sum_coded_kernel(float *out, const uint8_t *staging, size_t count, size_t chunk,
                                                int bits, unsigned block, int world) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        float acc = zt_wire_load(staging, count, i, bits, block);
        for (int r = 1; r < world; r++)
            acc = __fadd_rn(acc, zt_wire_load(staging + (size_t)r * chunk, count, i, bits, block));
        out[i] = acc;
    }
}

static int sum_blocks(size_t count, int threads) {
    size_t want = (count + threads - 1) / threads;
    return want > 65535 ? 65535 : (int)want;
}

extern "C" cudaError_t zt_nccl_ordered_sum(float *out, const void *staging, int dtype, size_t count, int world,
                                           cudaStream_t stream) {
    if (count == 0) return cudaSuccess;
    ordered_sum_kernel<<<sum_blocks(count, 256), 256, 0, stream>>>(out, staging, dtype, count, world);
    return cudaGetLastError();
}

extern "C" cudaError_t zt_nccl_ordered_sum_coded(float *out, const void *staging, size_t count, int bits,
                                                 unsigned block, int world, cudaStream_t stream) {
    if (count == 0) return cudaSuccess;
    zt_wire w = {ZT_FP32, bits, block};
    ordered_sum_coded_kernel<<<sum_blocks(count, 256), 256, 0, stream>>>(out, (const uint8_t *)staging, count,
                                                                         zt_wire_bytes(&w, count), bits, block, world);
    return cudaGetLastError();
}
