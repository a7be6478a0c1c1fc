/* Device helpers shared by the kernel files (CUDA C++ only). */
#ifndef ZT_CUDA_COMMON_CUH
#define ZT_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <math.h>

#include "cuda_ops.h"

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
