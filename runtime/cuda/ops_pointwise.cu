/* Elementwise kernels (GELU, residual, casts, scaling) and the sum of squares.
 * The elementwise ones write the same expressions as the CPU kernels, which
 * with --fmad=false round the same way (tanhf aside: CUDA's differs from
 * glibc's by an ulp or two). */
#include "cuda_common.cuh"

#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */

__global__ static void gelu_fwd_kernel(float *out, const float *inp, size_t N) {
    for (size_t i = zt_gtid(); i < N; i += zt_gstride()) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
    }
}

__global__ static void gelu_bwd_kernel(float *dinp, const float *inp, const float *dout, size_t N) {
    for (size_t i = zt_gtid(); i < N; i += zt_gstride()) {
        float x = inp[i];
        float u = GELU_K * (x + 0.044715f * x * x * x);
        float th = tanhf(u);
        float sech2 = 1.0f - th * th;
        float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] += grad * dout[i];
    }
}

__global__ static void residual_fwd_kernel(float *out, const float *a, const float *b, size_t N) {
    for (size_t i = zt_gtid(); i < N; i += zt_gstride()) out[i] = a[i] + b[i];
}

__global__ static void residual_bwd_kernel(float *da, float *db, const float *dout, size_t N) {
    for (size_t i = zt_gtid(); i < N; i += zt_gstride()) {
        da[i] += dout[i];
        db[i] += dout[i];
    }
}

/* Round to nearest even, NaN kept quiet: bit for bit zt_f32_to_bf16. */
__global__ static void cast_f32_to_bf16_kernel(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = zt_gtid(); i < n; i += zt_gstride()) {
        uint32_t u = __float_as_uint(src[i]);
        if ((u & 0x7fffffffu) > 0x7f800000u) {
            dst[i] = (uint16_t)((u >> 16) | 0x40u);
        } else {
            uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
            dst[i] = (uint16_t)((u + rounding) >> 16);
        }
    }
}

__global__ static void cast_bf16_to_f32_kernel(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = zt_gtid(); i < n; i += zt_gstride()) dst[i] = __uint_as_float((uint32_t)src[i] << 16);
}

__global__ static void scale_kernel(float *x, float alpha, size_t n) {
    for (size_t i = zt_gtid(); i < n; i += zt_gstride()) x[i] *= alpha;
}

__device__ static uint16_t f32_to_bf16_rne(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* dst = src * alpha, or dst += src * alpha (the CPU kernel's arithmetic). */
__global__ static void scaled_store_f32_kernel(float *dst, const float *src, float alpha, int accumulate, size_t n) {
    for (size_t i = zt_gtid(); i < n; i += zt_gstride()) {
        float v = __fmul_rn(src[i], alpha);
        dst[i] = accumulate ? __fadd_rn(dst[i], v) : v;
    }
}

__global__ static void scaled_store_bf16_kernel(uint16_t *dst, const float *src, float alpha, int accumulate,
                                                size_t n) {
    for (size_t i = zt_gtid(); i < n; i += zt_gstride()) {
        float v = __fmul_rn(src[i], alpha);
        if (accumulate) v = __fadd_rn(__uint_as_float((uint32_t)dst[i] << 16), v);
        dst[i] = f32_to_bf16_rne(v);
    }
}

/* Sum of squares in double, in a fixed order independent of the GPU: a fixed
 * grid of ZT_CUDA_SUMSQ_BLOCKS x ZT_CUDA_SUMSQ_THREADS threads, each summing
 * its grid-stride elements in order; each block combines its threads with the
 * fixed tree into partial[block]; one block then combines the partials. */
__global__ static void sumsq_partial_kernel(double *partial, const float *x, size_t n) {
    __shared__ double red[33];
    double acc = 0.0;
    for (size_t i = zt_gtid(); i < n; i += zt_gstride()) acc += (double)x[i] * (double)x[i];
    double total = zt_block_sum_d(acc, red);
    if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

__global__ static void sumsq_final_kernel(double *out, const double *partial, int nparts) {
    __shared__ double red[33];
    double acc = 0.0;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) acc += partial[i];
    double total = zt_block_sum_d(acc, red);
    if (threadIdx.x == 0) *out = total;
}

extern "C" void zt_cuda_gelu_fwd(zt_stream *s, float *out, const float *inp, size_t N) {
    if (N == 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    gelu_fwd_kernel<<<zt_ew_blocks(N), ZT_EW_THREADS, 0, st>>>(out, inp, N);
    ZT_CUDA_LAUNCHED(s, "gelu_fwd");
}

extern "C" void zt_cuda_gelu_bwd(zt_stream *s, float *dinp, const float *inp, const float *dout, size_t N) {
    if (N == 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    gelu_bwd_kernel<<<zt_ew_blocks(N), ZT_EW_THREADS, 0, st>>>(dinp, inp, dout, N);
    ZT_CUDA_LAUNCHED(s, "gelu_bwd");
}

extern "C" void zt_cuda_residual_fwd(zt_stream *s, float *out, const float *a, const float *b, size_t N) {
    if (N == 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    residual_fwd_kernel<<<zt_ew_blocks(N), ZT_EW_THREADS, 0, st>>>(out, a, b, N);
    ZT_CUDA_LAUNCHED(s, "residual_fwd");
}

extern "C" void zt_cuda_residual_bwd(zt_stream *s, float *da, float *db, const float *dout, size_t N) {
    if (N == 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    residual_bwd_kernel<<<zt_ew_blocks(N), ZT_EW_THREADS, 0, st>>>(da, db, dout, N);
    ZT_CUDA_LAUNCHED(s, "residual_bwd");
}

extern "C" void zt_cuda_cast_f32_to_bf16(zt_stream *s, zt_bf16 *dst, const float *src, size_t n) {
    if (n == 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    cast_f32_to_bf16_kernel<<<zt_ew_blocks(n), ZT_EW_THREADS, 0, st>>>(dst, src, n);
    ZT_CUDA_LAUNCHED(s, "cast_f32_to_bf16");
}

extern "C" void zt_cuda_cast_bf16_to_f32(zt_stream *s, float *dst, const zt_bf16 *src, size_t n) {
    if (n == 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    cast_bf16_to_f32_kernel<<<zt_ew_blocks(n), ZT_EW_THREADS, 0, st>>>(dst, src, n);
    ZT_CUDA_LAUNCHED(s, "cast_bf16_to_f32");
}

extern "C" void zt_cuda_scaled_store_f32(zt_stream *s, float *dst, const float *src, float alpha, int accumulate,
                                         size_t n) {
    if (n == 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    scaled_store_f32_kernel<<<zt_ew_blocks(n), ZT_EW_THREADS, 0, st>>>(dst, src, alpha, accumulate, n);
    ZT_CUDA_LAUNCHED(s, "scaled_store_f32");
}

extern "C" void zt_cuda_scaled_store_bf16(zt_stream *s, zt_bf16 *dst, const float *src, float alpha, int accumulate,
                                          size_t n) {
    if (n == 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    scaled_store_bf16_kernel<<<zt_ew_blocks(n), ZT_EW_THREADS, 0, st>>>(dst, src, alpha, accumulate, n);
    ZT_CUDA_LAUNCHED(s, "scaled_store_bf16");
}

extern "C" void zt_cuda_scale(zt_stream *s, float *x, float alpha, size_t n) {
    if (n == 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    scale_kernel<<<zt_ew_blocks(n), ZT_EW_THREADS, 0, st>>>(x, alpha, n);
    ZT_CUDA_LAUNCHED(s, "scale");
}

/* Whether the caller can read `p` on the host (then the result is copied
 * back and waited for). Device memory is written in place, asynchronously. */
static int is_device_pointer(zt_stream *s, const void *p) {
    cudaPointerAttributes attr;
    cudaError_t rc = cudaPointerGetAttributes(&attr, p);
    if (rc != cudaSuccess) {
        (void)cudaGetLastError(); /* older drivers refuse plain host pointers */
        return 0;
    }
    (void)s;
    return attr.type == cudaMemoryTypeDevice;
}

extern "C" void zt_cuda_sum_squares(zt_stream *s, double *out, const float *x, size_t n) {
    zt_cuda_impl *im = zt_cuda_impl_of(s);
    cudaStream_t st = zt_cuda_enter(s);
    int on_device = is_device_pointer(s, out);
    if (!on_device) *out = NAN; /* stays NaN if anything below fails */
    double *partial = im->sumsq_scratch;
    double *result = on_device ? out : im->sumsq_scratch + ZT_CUDA_SUMSQ_BLOCKS;
    /* n == 0 runs too: the partials are all 0 and the result is 0. */
    sumsq_partial_kernel<<<ZT_CUDA_SUMSQ_BLOCKS, ZT_CUDA_SUMSQ_THREADS, 0, st>>>(partial, x, n);
    if (ZT_CUDA_LAUNCHED(s, "sum_squares (partials)")) return;
    sumsq_final_kernel<<<1, ZT_CUDA_SUMSQ_THREADS, 0, st>>>(result, partial, ZT_CUDA_SUMSQ_BLOCKS);
    if (ZT_CUDA_LAUNCHED(s, "sum_squares (final)") || on_device) return;
    double host = NAN;
    if (ZT_CUDA_RT(s, cudaMemcpyAsync(&host, result, sizeof host, cudaMemcpyDeviceToHost, st))) return;
    if (ZT_CUDA_RT(s, cudaStreamSynchronize(st))) return;
    *out = host;
}
