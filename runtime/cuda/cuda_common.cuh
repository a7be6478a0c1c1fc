/* Device helpers shared by the kernel files (CUDA C++ only). */
#ifndef ZT_CUDA_COMMON_CUH
#define ZT_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <math.h>

#include "cuda_ops.h"

/* ---- storage types ------------------------------------------------------
 * The model kernels are templates over the type their activations and
 * parameters are stored in: float, or one of the two 16-bit types below
 * (distinct structs, so bf16 and fp16 instantiate different code although
 * both are 16 bits). Every kernel loads with zt_ld, computes in fp32, and
 * stores with zt_st<S>: for float both are the identity, so the fp32
 * kernels are the untemplated ones, bit for bit; for the 16-bit types they
 * are zt_dtype.h's conversions, bit for bit (round to nearest even, NaN
 * kept quiet). Parameter gradients, statistics and losses stay float. */
struct zt_dev_bf16 {
    uint16_t bits;
};
struct zt_dev_fp16 {
    uint16_t bits;
};

/* Bit for bit zt_f32_to_bf16. */
__device__ __forceinline__ uint16_t f32_to_bf16_rne(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* Bit for bit zt_f32_to_fp16 (see zt_dtype.h for the cases). */
__device__ __forceinline__ uint16_t f32_to_fp16_rne(float f) {
    uint32_t u = __float_as_uint(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) {
        if (a < 0x33000000u) return sign;
        uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, shift = 126u - e;
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

__device__ __forceinline__ float bf16_to_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

/* Bit for bit zt_fp16_to_f32 (subnormals are m x 2^-24, exact). */
__device__ __forceinline__ float fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        float v = __fmul_rn((float)m, 5.9604644775390625e-8f);
        return sign ? -v : v;
    }
    return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
}

__device__ __forceinline__ float zt_ld(float x) { return x; }
/* Element i of a buffer whose dtype is known only at run time. */
__device__ __forceinline__ float load_dt(const void *p, int dt, size_t i) {
    if (dt == ZT_BF16) return bf16_to_f32(((const uint16_t *)p)[i]);
    if (dt == ZT_FP16) return fp16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

__device__ __forceinline__ void store_dt(void *p, int dt, size_t i, float v) {
    if (dt == ZT_BF16) ((uint16_t *)p)[i] = f32_to_bf16_rne(v);
    else if (dt == ZT_FP16) ((uint16_t *)p)[i] = f32_to_fp16_rne(v);
    else ((float *)p)[i] = v;
}

__device__ __forceinline__ float zt_ld(zt_dev_bf16 x) { return bf16_to_f32(x.bits); }
__device__ __forceinline__ float zt_ld(zt_dev_fp16 x) { return fp16_to_f32(x.bits); }

template <typename S> struct zt_store;
template <> struct zt_store<float> {
    __device__ static __forceinline__ float of(float v) { return v; }
};
template <> struct zt_store<zt_dev_bf16> {
    __device__ static __forceinline__ zt_dev_bf16 of(float v) {
        zt_dev_bf16 h;
        h.bits = f32_to_bf16_rne(v);
        return h;
    }
};
template <> struct zt_store<zt_dev_fp16> {
    __device__ static __forceinline__ zt_dev_fp16 of(float v) {
        zt_dev_fp16 h;
        h.bits = f32_to_fp16_rne(v);
        return h;
    }
};
/* v as an S, rounded to nearest even. */
template <typename S> __device__ __forceinline__ S zt_st(float v) { return zt_store<S>::of(v); }

/* The cuBLAS(Lt) type of S. */
template <typename S> struct zt_cublas_type;
template <> struct zt_cublas_type<float> {
    static const cudaDataType value = CUDA_R_32F;
};
template <> struct zt_cublas_type<zt_dev_bf16> {
    static const cudaDataType value = CUDA_R_16BF;
};
template <> struct zt_cublas_type<zt_dev_fp16> {
    static const cudaDataType value = CUDA_R_16F;
};

/* Runs `call_with_S` with the typedef S the storage type of dtype dt (the
 * host side of every launcher: one switch, three instantiations). */
#define ZT_DISPATCH_DTYPE(dt, call_with_S)              \
    do {                                                \
        switch (dt) {                                   \
        case ZT_BF16: {                                 \
            typedef zt_dev_bf16 S;                      \
            call_with_S;                                \
            break;                                      \
        }                                               \
        case ZT_FP16: {                                 \
            typedef zt_dev_fp16 S;                      \
            call_with_S;                                \
            break;                                      \
        }                                               \
        default: {                                      \
            typedef float S;                            \
            call_with_S;                                \
            break;                                      \
        }                                               \
        }                                               \
    } while (0)

/* Threads per block of the elementwise kernels, and the cap on their grid
 * (grid-stride loops cover the rest). */
#define ZT_EW_THREADS 256
#define ZT_EW_MAX_BLOCKS 65535

static inline unsigned int zt_ew_blocks(size_t n) {
    size_t want = (n + ZT_EW_THREADS - 1) / ZT_EW_THREADS;
    return (unsigned int)(want > ZT_EW_MAX_BLOCKS ? ZT_EW_MAX_BLOCKS : (want ? want : 1));
}

/* Grid-stride index helpers (size_t: tensors may exceed 2^31 elements). */
__device__ __forceinline__ size_t zt_gtid() { return (size_t)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ size_t zt_gstride() { return (size_t)gridDim.x * blockDim.x; }

/* Butterfly reductions within a warp. Each step combines two values with a
 * commutative operation, so all lanes end with the same bits, and the
 * combining tree is fixed: the result does not depend on timing. */
__device__ __forceinline__ float zt_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double zt_warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float zt_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Block reductions: every thread of the block must call them (blockDim.x a
 * multiple of 32, at most 1024). Warps reduce, then warp 0 combines the warp
 * results in a fixed tree; every thread gets the result. `sh` is 33 slots of
 * shared memory; the leading barrier lets consecutive calls reuse it. */
template <typename T, typename Warp>
__device__ __forceinline__ T zt_block_reduce(T v, T identity, T *sh, Warp warp_op) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    v = warp_op(v);
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    if (wid == 0) {
        T w = lane < nw ? sh[lane] : identity;
        w = warp_op(w);
        if (lane == 0) sh[32] = w;
    }
    __syncthreads();
    return sh[32];
}

struct zt_sum_f {
    __device__ float operator()(float v) const { return zt_warp_sum(v); }
};
struct zt_sum_d {
    __device__ double operator()(double v) const { return zt_warp_sum_d(v); }
};
struct zt_max_f {
    __device__ float operator()(float v) const { return zt_warp_max(v); }
};

__device__ __forceinline__ float zt_block_sum(float v, float *sh) { return zt_block_reduce(v, 0.0f, sh, zt_sum_f()); }
__device__ __forceinline__ double zt_block_sum_d(double v, double *sh) {
    return zt_block_reduce(v, 0.0, sh, zt_sum_d());
}
/* The attention kernels run one block per row (b, h, t) of a [B,NH,T]
 * grid, t fastest. */
struct zt_att_row {
    int b, h, t;
    size_t bh; /* b * NH + h */
};
__device__ __forceinline__ zt_att_row zt_att_row_of(unsigned int block, int T, int NH) {
    zt_att_row r;
    r.t = (int)(block % (unsigned int)T);
    r.bh = block / (unsigned int)T;
    r.h = (int)(r.bh % (size_t)NH);
    r.b = (int)(r.bh / (size_t)NH);
    return r;
}

/* Without an opt-in, a block's static and dynamic shared memory together
 * may not exceed 48 KiB; above that, dynamic shared memory needs the
 * kernel's MaxDynamicSharedMemorySize attribute (static + the attribute at
 * most the device's opt-in limit, 227 KiB on an H200). 1 after recording a
 * failure (the launch must not follow), at the caller's file and line. */
static inline int zt_allow_smem_at(zt_stream *s, const void *kernel, size_t bytes, const char *file, int line) {
    if (bytes == 0) return 0;
    struct cudaFuncAttributes fa;
    if (zt_cuda_check_rt(s, cudaFuncGetAttributes(&fa, kernel), "cudaFuncGetAttributes", file, line)) return 1;
    if (fa.sharedSizeBytes + bytes <= 48 * 1024) return 0;
    return zt_cuda_check_rt(s, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
                            "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)", file, line);
}
#define ZT_ALLOW_SMEM(s, kernel, bytes) zt_allow_smem_at((s), (const void *)(kernel), (bytes), __FILE__, __LINE__)

__device__ __forceinline__ float zt_block_max(float v, float *sh) {
    return zt_block_reduce(v, -INFINITY, sh, zt_max_f());
}

#endif
