/* Causal multi-head self-attention, computed directly (no flash tiling), as
 * the CPU kernel: att[B,NH,T,T] keeps the probabilities for backward. qkv
 * rows hold [q (C) | k (C) | v (C)]; head h uses channels h*hs .. h*hs+hs-1.
 *
 * Every value that the CPU computes as a sequential loop (dot products over
 * the head channels, the accumulation of out, dq, dk, dv over positions) is a
 * sequential loop here too, in the same order; only the softmax sums (and
 * backward's per-row sum of a * da) are block reductions with a fixed tree.
 * No atomics: each output element has exactly one writer. */
#include "cuda_common.cuh"

#define ATT_THREADS 128

struct att_index {
    int b, h, t;
    size_t bh; /* b * NH + h */
};

__device__ __forceinline__ att_index att_decode(unsigned int block, int T, int NH) {
    att_index ix;
    ix.t = (int)(block % (unsigned int)T);
    ix.bh = block / (unsigned int)T;
    ix.h = (int)(ix.bh % (size_t)NH);
    ix.b = (int)(ix.bh / (size_t)NH);
    return ix;
}

/* One block per (b, h, t) query row. */
__global__ static void attention_fwd_kernel(float *out, float *att, const float *qkv, int T, int C, int NH,
                                            float scale) {
    __shared__ float red[33];
    att_index ix = att_decode(blockIdx.x, T, NH);
    int hs = C / NH, t = ix.t;
    size_t C3 = (size_t)C * 3, row0 = (size_t)ix.b * T; /* first row of this batch */
    const float *q = qkv + (row0 + t) * C3 + (size_t)ix.h * hs;
    float *a = att + (ix.bh * T + t) * T;

    float lmax = -INFINITY;
    for (int t2 = threadIdx.x; t2 <= t; t2 += blockDim.x) {
        const float *k = qkv + (row0 + t2) * C3 + C + (size_t)ix.h * hs;
        float dot = 0.0f;
        for (int i = 0; i < hs; i++) dot += q[i] * k[i];
        dot *= scale;
        a[t2] = dot;
        lmax = fmaxf(lmax, dot);
    }
    float maxv = zt_block_max(lmax, red);
    float lsum = 0.0f;
    for (int t2 = threadIdx.x; t2 <= t; t2 += blockDim.x) {
        float e = expf(a[t2] - maxv);
        a[t2] = e;
        lsum += e;
    }
    float inv = 1.0f / zt_block_sum(lsum, red);
    for (int t2 = threadIdx.x; t2 < T; t2 += blockDim.x) a[t2] = t2 <= t ? a[t2] * inv : 0.0f;
    __syncthreads(); /* the row of probabilities is complete (global writes are visible block-wide) */

    float *o = out + (row0 + t) * C + (size_t)ix.h * hs;
    for (int i = threadIdx.x; i < hs; i += blockDim.x) {
        float acc = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) acc += a[t2] * qkv[(row0 + t2) * C3 + 2 * (size_t)C + (size_t)ix.h * hs + i];
        o[i] = acc;
    }
}

/* Backward, part 1: one block per (b, h, t) query row.
 *   da[t2]  = dy[t] . v[t2]                 (t2 <= t)
 *   D[t]    = sum_t2 a[t,t2] da[t2]         -> datt[b,h,t] (read by part 2)
 *   dpre    = a (da - D) scale              (through softmax and scale)
 *   dq[t]  += sum_t2 dpre[t2] k[t2]         (t2 in order)
 * Shared: dpre for the row, T floats. */
__global__ static void attention_bwd_dq_kernel(float *dqkv, float *datt, const float *dout, const float *qkv,
                                               const float *att, int T, int C, int NH, float scale) {
    extern __shared__ float dpre[];
    __shared__ float red[33];
    att_index ix = att_decode(blockIdx.x, T, NH);
    int hs = C / NH, t = ix.t;
    size_t C3 = (size_t)C * 3, row0 = (size_t)ix.b * T, hoff = (size_t)ix.h * hs;
    const float *a = att + (ix.bh * T + t) * T;
    const float *dy = dout + (row0 + t) * C + hoff;

    float local = 0.0f;
    for (int t2 = threadIdx.x; t2 <= t; t2 += blockDim.x) {
        const float *v = qkv + (row0 + t2) * C3 + 2 * (size_t)C + hoff;
        float d = 0.0f;
        for (int i = 0; i < hs; i++) d += dy[i] * v[i];
        dpre[t2] = d;
        local += a[t2] * d;
    }
    float D = zt_block_sum(local, red);
    if (threadIdx.x == 0) datt[ix.bh * T + t] = D;
    for (int t2 = threadIdx.x; t2 <= t; t2 += blockDim.x) dpre[t2] = a[t2] * (dpre[t2] - D) * scale;
    __syncthreads();

    float *dq = dqkv + (row0 + t) * C3 + hoff;
    for (int i = threadIdx.x; i < hs; i += blockDim.x) {
        float acc = dq[i];
        for (int t2 = 0; t2 <= t; t2++) acc += dpre[t2] * qkv[(row0 + t2) * C3 + C + hoff + i];
        dq[i] = acc;
    }
}

/* Backward, part 2: one block per (b, h, t2) key/value row; sums over the
 * query rows t >= t2 in order (the CPU's order):
 *   dv[t2] += sum_t a[t,t2] dy[t]
 *   dk[t2] += sum_t dpre[t,t2] q[t],  dpre recomputed from D[t] of part 1
 * (same formula and inputs, so the same bits as part 1 used).
 * Shared: the column of a and of dpre, 2 (T - t2) floats. */
__global__ static void attention_bwd_dkv_kernel(float *dqkv, const float *datt, const float *dout, const float *qkv,
                                                const float *att, int T, int C, int NH, float scale) {
    extern __shared__ float colbuf[];
    att_index ix = att_decode(blockIdx.x, T, NH);
    int hs = C / NH, t2 = ix.t, len = T - t2;
    size_t C3 = (size_t)C * 3, row0 = (size_t)ix.b * T, hoff = (size_t)ix.h * hs;
    float *acol = colbuf, *pcol = colbuf + len;
    const float *v2 = qkv + (row0 + t2) * C3 + 2 * (size_t)C + hoff;

    for (int j = threadIdx.x; j < len; j += blockDim.x) {
        int t = t2 + j;
        float a = att[(ix.bh * T + t) * T + t2];
        const float *dy = dout + (row0 + t) * C + hoff;
        float d = 0.0f;
        for (int i = 0; i < hs; i++) d += dy[i] * v2[i];
        acol[j] = a;
        pcol[j] = a * (d - datt[ix.bh * T + t]) * scale;
    }
    __syncthreads();

    float *dk = dqkv + (row0 + t2) * C3 + C + hoff;
    float *dv = dqkv + (row0 + t2) * C3 + 2 * (size_t)C + hoff;
    for (int i = threadIdx.x; i < hs; i += blockDim.x) {
        float ak = dk[i], av = dv[i];
        for (int j = 0; j < len; j++) {
            size_t r = row0 + t2 + j;
            av += acol[j] * dout[r * C + hoff + i];
            ak += pcol[j] * qkv[r * C3 + hoff + i];
        }
        dk[i] = ak;
        dv[i] = av;
    }
}

/* Dynamic shared memory above the default 48 KiB needs an opt-in per kernel. */
static void allow_smem(zt_stream *s, const void *kernel, size_t bytes) {
    if (bytes > 48 * 1024)
        ZT_CUDA_RT(s, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

extern "C" void zt_cuda_attention_fwd(zt_stream *s, float *out, float *att, const float *qkv, int B, int T, int C,
                                      int NH) {
    size_t blocks = (size_t)B * NH * T;
    if (blocks == 0 || C <= 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    float scale = 1.0f / sqrtf((float)(C / NH));
    attention_fwd_kernel<<<(unsigned int)blocks, ATT_THREADS, 0, st>>>(out, att, qkv, T, C, NH, scale);
    ZT_CUDA_LAUNCHED(s, "attention_fwd");
}

extern "C" void zt_cuda_attention_bwd(zt_stream *s, float *dqkv, float *datt, const float *dout, const float *qkv,
                                      const float *att, int B, int T, int C, int NH) {
    size_t blocks = (size_t)B * NH * T;
    if (blocks == 0 || C <= 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    float scale = 1.0f / sqrtf((float)(C / NH));
    size_t smem_q = (size_t)T * sizeof(float), smem_kv = 2 * (size_t)T * sizeof(float);
    allow_smem(s, (const void *)attention_bwd_dq_kernel, smem_q);
    attention_bwd_dq_kernel<<<(unsigned int)blocks, ATT_THREADS, smem_q, st>>>(dqkv, datt, dout, qkv, att, T, C, NH,
                                                                              scale);
    ZT_CUDA_LAUNCHED(s, "attention_bwd (dq)");
    allow_smem(s, (const void *)attention_bwd_dkv_kernel, smem_kv);
    attention_bwd_dkv_kernel<<<(unsigned int)blocks, ATT_THREADS, smem_kv, st>>>(dqkv, datt, dout, qkv, att, T, C,
                                                                                NH, scale);
    ZT_CUDA_LAUNCHED(s, "attention_bwd (dk, dv)");
}
