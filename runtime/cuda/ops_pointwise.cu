/* Elementwise kernels (GELU, residual, casts, scaling) and the sum of squares.
 * The elementwise ones write the same expressions as the CPU kernels, which
 * with --fmad=false round the same way (tanhf aside: CUDA's differs from
 * glibc's by an ulp or two). */
#include "cuda_common.cuh"

#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */

template <typename S> __global__ static void gelu_fwd_kernel(S *out, const S *inp, size_t N) {
    for (size_t i = zt_gtid(); i < N; i += zt_gstride()) {
        float x = zt_ld(inp[i]);
        out[i] = zt_st<S>(0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x))));
    }
}

/* dinp = gelu'(inp) dout (overwritten): one rounding per element in 16 bits. */
template <typename S> __global__ static void gelu_bwd_kernel(S *dinp, const S *inp, const S *dout, size_t N) {
    for (size_t i = zt_gtid(); i < N; i += zt_gstride()) {
        float x = zt_ld(inp[i]);
        float u = GELU_K * (x + 0.044715f * x * x * x);
        float th = tanhf(u);
        float sech2 = 1.0f - th * th;
        float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = zt_st<S>(grad * zt_ld(dout[i]));
    }
}

template <typename S> __global__ static void residual_fwd_kernel(S *out, const S *a, const S *b, size_t N) {
    for (size_t i = zt_gtid(); i < N; i += zt_gstride()) out[i] = zt_st<S>(zt_ld(a[i]) + zt_ld(b[i]));
}

template <typename S> __global__ static void residual_bwd_kernel(S *da, S *db, const S *dout, size_t N) {
    for (size_t i = zt_gtid(); i < N; i += zt_gstride()) {
        float d = zt_ld(dout[i]);
        da[i] = zt_st<S>(zt_ld(da[i]) + d);
        db[i] = zt_st<S>(zt_ld(db[i]) + d);
    }
}

__global__ static void cast_kernel(void *dst, int dst_dt, const void *src, int src_dt, size_t n) {
    for (size_t i = zt_gtid(); i < n; i += zt_gstride()) store_dt(dst, dst_dt, i, load_dt(src, src_dt, i));
}

__global__ static void scale_kernel(float *x, float alpha, size_t n) {
    for (size_t i = zt_gtid(); i < n; i += zt_gstride()) x[i] *= alpha;
}

/* dst = src * alpha, or dst + src * alpha, rounded once (the CPU kernel's arithmetic). */
__global__ static void scaled_store_kernel(void *dst, int dt, const float *src, float alpha, int accumulate, size_t n) {
    for (size_t i = zt_gtid(); i < n; i += zt_gstride()) {
        float v = __fmul_rn(src[i], alpha);
        if (accumulate) v = __fadd_rn(load_dt(dst, dt, i), v);
        store_dt(dst, dt, i, v);
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

template <typename S> static void gelu_fwd(zt_stream *s, S *out, const S *inp, size_t N) {
    cudaStream_t st = zt_cuda_enter(s);
    void (*k)(S *, const S *, size_t) = gelu_fwd_kernel<S>;
    k<<<zt_ew_blocks(N), ZT_EW_THREADS, 0, st>>>(out, inp, N);
    ZT_CUDA_LAUNCHED(s, "gelu_fwd");
}

template <typename S> static void gelu_bwd(zt_stream *s, S *dinp, const S *inp, const S *dout, size_t N) {
    cudaStream_t st = zt_cuda_enter(s);
    void (*k)(S *, const S *, const S *, size_t) = gelu_bwd_kernel<S>;
    k<<<zt_ew_blocks(N), ZT_EW_THREADS, 0, st>>>(dinp, inp, dout, N);
    ZT_CUDA_LAUNCHED(s, "gelu_bwd");
}

template <typename S> static void residual_fwd(zt_stream *s, S *out, const S *a, const S *b, size_t N) {
    cudaStream_t st = zt_cuda_enter(s);
    void (*k)(S *, const S *, const S *, size_t) = residual_fwd_kernel<S>;
    k<<<zt_ew_blocks(N), ZT_EW_THREADS, 0, st>>>(out, a, b, N);
    ZT_CUDA_LAUNCHED(s, "residual_fwd");
}

template <typename S> static void residual_bwd(zt_stream *s, S *da, S *db, const S *dout, size_t N) {
    cudaStream_t st = zt_cuda_enter(s);
    void (*k)(S *, S *, const S *, size_t) = residual_bwd_kernel<S>;
    k<<<zt_ew_blocks(N), ZT_EW_THREADS, 0, st>>>(da, db, dout, N);
    ZT_CUDA_LAUNCHED(s, "residual_bwd");
}

extern "C" void zt_cuda_gelu_fwd(zt_stream *s, zt_dtype dt, void *out, const void *inp, size_t N) {
    if (N == 0) return;
    ZT_DISPATCH_DTYPE(dt, gelu_fwd<S>(s, (S *)out, (const S *)inp, N));
}

extern "C" void zt_cuda_gelu_bwd(zt_stream *s, zt_dtype dt, void *dinp, const void *inp, const void *dout, size_t N) {
    if (N == 0) return;
    ZT_DISPATCH_DTYPE(dt, gelu_bwd<S>(s, (S *)dinp, (const S *)inp, (const S *)dout, N));
}

extern "C" void zt_cuda_residual_fwd(zt_stream *s, zt_dtype dt, void *out, const void *a, const void *b, size_t N) {
    if (N == 0) return;
    ZT_DISPATCH_DTYPE(dt, residual_fwd<S>(s, (S *)out, (const S *)a, (const S *)b, N));
}

extern "C" void zt_cuda_residual_bwd(zt_stream *s, zt_dtype dt, void *da, void *db, const void *dout, size_t N) {
    if (N == 0) return;
    ZT_DISPATCH_DTYPE(dt, residual_bwd<S>(s, (S *)da, (S *)db, (const S *)dout, N));
}

extern "C" void zt_cuda_cast(zt_stream *s, void *dst, zt_dtype dst_dtype, const void *src, zt_dtype src_dtype,
                             size_t n) {
    if (n == 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    cast_kernel<<<zt_ew_blocks(n), ZT_EW_THREADS, 0, st>>>(dst, (int)dst_dtype, src, (int)src_dtype, n);
    ZT_CUDA_LAUNCHED(s, "cast");
}

__global__ static void cast_sr_kernel(uint16_t *dst, const float *src, size_t n, zt_sr_key key) {
    for (size_t i = zt_gtid(); i < n; i += zt_gstride()) dst[i] = zt_bf16_sround(src[i], zt_sr_bits(&key, key.first + i));
}

extern "C" void zt_cuda_cast_sr(zt_stream *s, uint16_t *dst, const float *src, size_t n, zt_sr_key key) {
    if (n == 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    cast_sr_kernel<<<zt_ew_blocks(n), ZT_EW_THREADS, 0, st>>>(dst, src, n, key);
    ZT_CUDA_LAUNCHED(s, "cast_sr");
}

extern "C" void zt_cuda_scaled_store(zt_stream *s, void *dst, zt_dtype dtype, const float *src, float alpha,
                                     int accumulate, size_t n) {
    if (n == 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    scaled_store_kernel<<<zt_ew_blocks(n), ZT_EW_THREADS, 0, st>>>(dst, (int)dtype, src, alpha, accumulate, n);
    ZT_CUDA_LAUNCHED(s, "scaled_store");
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
