/* The block-wise wire codes on the device (zt_wire.h): one thread block per
 * quantization block finds its absolute maximum (a max, exact in any
 * order), then its threads write the codes, int4 two per byte, so the
 * codes equal the host's. */
#include "cuda_common.cuh"
#include "zt_wire.h"

#define WIRE_THREADS 256

__device__ static float wire_input(const void *x, int xd, const void *fb, int fbd, size_t i) {
    float v = load_dt(x, xd, i);
    return fb ? __fadd_rn(v, load_dt(fb, fbd, i)) : v;
}

__global__ static void wire_quantize_kernel(uint8_t *codes, float *scales, const void *x, int xd, void *fb, int fbd,
                                            size_t n, int bits, unsigned block) {
    __shared__ float partial[WIRE_THREADS];
    size_t lo = (size_t)blockIdx.x * block, hi = lo + block < n ? lo + block : n;
    float amax = 0.0f;
    for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        float a = fabsf(wire_input(x, xd, fb, fbd, i));
        amax = a > amax || a != a ? a : amax;
    }
    partial[threadIdx.x] = amax;
    __syncthreads();
    for (int half = WIRE_THREADS / 2; half > 0; half >>= 1) {
        if ((int)threadIdx.x < half) {
            float o = partial[threadIdx.x + half], m = partial[threadIdx.x];
            partial[threadIdx.x] = o > m || o != o ? o : m;
        }
        __syncthreads();
    }
    float scale = zt_wire_scale(partial[0], bits);
    if (threadIdx.x == 0) scales[blockIdx.x] = scale;
    size_t step = bits == 4 ? 2 : 1; /* int4: a thread writes a whole byte */
    for (size_t i = lo + threadIdx.x * step; i < hi; i += blockDim.x * step) {
        for (size_t j = i; j < i + step && j < hi; j++) {
            float v = wire_input(x, xd, fb, fbd, j);
            int q = zt_wire_code(v, scale, bits);
            if (bits == 8) codes[j] = (uint8_t)(int8_t)q;
            else if (j & 1) codes[j / 2] = (uint8_t)((codes[j / 2] & 15) | ((q & 15) << 4));
            else codes[j / 2] = (uint8_t)(q & 15);
            if (fb) store_dt(fb, fbd, j, scale == scale ? __fadd_rn(v, -zt_wire_value(q, scale)) : 0.0f);
        }
    }
}

__global__ static void wire_dequantize_kernel(void *out, int dt, const uint8_t *codes, const float *scales, size_t n,
                                              int bits, unsigned block) {
    for (size_t i = zt_gtid(); i < n; i += zt_gstride())
        store_dt(out, dt, i, zt_wire_value(zt_wire_get(codes, i, bits), scales[i / block]));
}

extern "C" void zt_cuda_wire_quantize(zt_stream *s, uint8_t *codes, float *scales, const void *x, zt_dtype x_dtype,
                                      void *feedback, zt_dtype fb_dtype, size_t n, int bits, unsigned block) {
    if (n == 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    size_t nb = zt_wire_nblocks(n, block);
    wire_quantize_kernel<<<(unsigned)nb, WIRE_THREADS, 0, st>>>(codes, scales, x, (int)x_dtype, feedback,
                                                                 (int)fb_dtype, n, bits, block);
    ZT_CUDA_LAUNCHED(s, "wire_quantize");
}

extern "C" void zt_cuda_wire_dequantize(zt_stream *s, void *out, zt_dtype dtype, const uint8_t *codes,
                                        const float *scales, size_t n, int bits, unsigned block) {
    if (n == 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    wire_dequantize_kernel<<<zt_ew_blocks(n), ZT_EW_THREADS, 0, st>>>(out, (int)dtype, codes, scales, n, bits, block);
    ZT_CUDA_LAUNCHED(s, "wire_dequantize");
}
