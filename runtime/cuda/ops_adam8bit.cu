/* 8-bit AdamW (zt_quant.h): one CUDA block per quantization block of
 * ZT_QBLOCK values, ZT_A8_PER_THREAD of them per thread, kept in registers
 * between the update and the quantization that needs the block's new
 * maxima. The code maps are built in shared memory from their exact
 * definition (zt_qmap_value, in double), so they hold the host's entries. */
#include "cuda_common.cuh"
#include "zt_quant.h"

#define ZT_A8_THREADS 256
#define ZT_A8_PER_THREAD (ZT_QBLOCK / ZT_A8_THREADS)
static_assert(ZT_QBLOCK % ZT_A8_THREADS == 0, "a quantization block splits evenly over the threads");
static_assert(ZT_A8_THREADS >= ZT_QMAP_LEN, "one thread per code map entry");

/* Blocks of the grid (a block-stride loop covers the rest). */
#define ZT_A8_MAX_BLOCKS 65535

/* The CPU kernel's expressions, term for term (--fmad=false, IEEE division
 * and sqrt), element i of a block at thread t + k ZT_A8_THREADS (coalesced).
 * The maxima start at 0 and grow only by `>`, as the CPU's, so they are +0
 * or positive and NaNs never enter them: the block's max is the same
 * whatever order the reduction combines them in. */
__global__ static void __launch_bounds__(ZT_A8_THREADS)
    adam8bit_kernel(float *p, const float *g, uint8_t *m8, uint8_t *v8, float *mscale, float *vscale, size_t n,
                    float lr, float beta1, float beta2, float eps, float wd, float bc1, float bc2) {
    __shared__ float map_m[ZT_QMAP_LEN], map_v[ZT_QMAP_LEN];
    __shared__ float red[33];
    if (threadIdx.x < ZT_QMAP_LEN) {
        map_m[threadIdx.x] = zt_qmap_entry(1, (int)threadIdx.x);
        map_v[threadIdx.x] = zt_qmap_entry(0, (int)threadIdx.x);
    }
    __syncthreads();
    size_t nb = zt_qblocks(n);
    for (size_t b = blockIdx.x; b < nb; b += gridDim.x) {
        size_t lo = b * ZT_QBLOCK, len = n - lo < ZT_QBLOCK ? n - lo : ZT_QBLOCK;
        float ms = mscale[b], vs = vscale[b]; /* read by every thread before thread 0 writes them */
        float mw[ZT_A8_PER_THREAD], vw[ZT_A8_PER_THREAD]; /* the new m, v before quantization */
        float mmax = 0.0f, vmax = 0.0f;
#pragma unroll
        for (int k = 0; k < ZT_A8_PER_THREAD; k++) {
            size_t i = threadIdx.x + (size_t)k * ZT_A8_THREADS;
            if (i >= len) break;
            size_t e = lo + i;
            float gi = g[e];
            float mi = beta1 * (map_m[m8[e]] * ms) + (1.0f - beta1) * gi;
            float rv = map_v[v8[e]] * vs; /* sqrt(v), as stored */
            float vi = beta2 * (rv * rv) + (1.0f - beta2) * gi * gi;
            float ri = sqrtf(vi);
            mw[k] = mi;
            vw[k] = ri;
            float mhat = mi / bc1;
            float vhat = vi / bc2;
            p[e] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[e]);
            if (fabsf(mi) > mmax) mmax = fabsf(mi);
            if (ri > vmax) vmax = ri;
        }
        mmax = zt_block_max(mmax, red);
        vmax = zt_block_max(vmax, red);
        if (threadIdx.x == 0) {
            mscale[b] = mmax;
            vscale[b] = vmax;
        }
#pragma unroll
        for (int k = 0; k < ZT_A8_PER_THREAD; k++) {
            size_t i = threadIdx.x + (size_t)k * ZT_A8_THREADS;
            if (i >= len) break;
            m8[lo + i] = zt_qmap_encode(map_m, mmax > 0.0f ? mw[k] / mmax : 0.0f);
            v8[lo + i] = zt_qmap_encode(map_v, vmax > 0.0f ? vw[k] / vmax : 0.0f);
        }
    }
}

extern "C" void zt_cuda_adam8bit(zt_stream *s, float *p, const float *g, uint8_t *m8, uint8_t *v8, float *mscale,
                                 float *vscale, size_t n, float lr, float beta1, float beta2, float eps, float wd,
                                 int t) {
    if (n == 0) return;
    /* Bias corrections on the host with the host's powf, as the CPU kernel. */
    float bc1 = 1.0f - powf(beta1, (float)t);
    float bc2 = 1.0f - powf(beta2, (float)t);
    size_t nb = zt_qblocks(n);
    unsigned int grid = (unsigned int)(nb > ZT_A8_MAX_BLOCKS ? ZT_A8_MAX_BLOCKS : nb);
    cudaStream_t st = zt_cuda_enter(s);
    adam8bit_kernel<<<grid, ZT_A8_THREADS, 0, st>>>(p, g, m8, v8, mscale, vscale, n, lr, beta1, beta2, eps, wd, bc1,
                                                    bc2);
    ZT_CUDA_LAUNCHED(s, "adam8bit");
}
