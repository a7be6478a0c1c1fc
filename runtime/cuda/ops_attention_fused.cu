/* Memory-efficient causal attention (--attention fused) on the GPU: the
 * forward keeps lse[B,NH,T] (each causal row's log softmax normaliser)
 * instead of the [B,NH,T,T] probabilities, and the backward recomputes every
 * probability it needs as exp(scale q.k - lse). qkv rows hold
 * [q (C) | k (C) | v (C)]; head h uses channels h*hs .. h*hs+hs-1.
 *
 * Row kernels, like the no-scratch backward in ops_attention.cu, not tiled:
 * the point of this mode is the memory it saves, and a plain design keeps
 * the results deterministic and easy to check against the CPU kernel.
 *   forward     one block per query row (b, h, t): the t+1 scores into
 *               shared memory, a block max and a block sum of the
 *               exponentials (fixed-tree reductions), then each thread
 *               sums p[t2] v[t2, i] over t2 in order for its channels i.
 *   backward 1  one block per query row: D = dout[t] . out[t] (into datt),
 *               ds[t2] = p (dout[t] . v[t2] - D) scale into shared memory,
 *               dq[t] += sum over t2 in order of ds[t2] k[t2].
 *   backward 2  one block per key row t2: p and ds of the column t >= t2
 *               recomputed (D read from datt, written by part 1 earlier on
 *               the same stream), then dv[t2] += sum_t p dout[t] and
 *               dk[t2] += sum_t ds q[t], t in order.
 * Both backward parts get p and ds from the same device functions (and
 * CUDA code builds with --fmad=false), so they see the same bits. Every dot
 * product over the head channels is a sequential loop, as on the CPU; the
 * values differ from the CPU's only where the forward's softmax sums run as
 * block reductions instead of the CPU's online softmax. No atomics: every
 * output element has exactly one writer.
 *
 * Shared memory grows with T (T floats forward and in part 1, 2 (T - t2)
 * floats in part 2): beyond the device's per-block limit (T around 29000 on
 * an H200 for part 2) the launch fails and the sticky error reports it. */
#include "cuda_common.cuh"

#define FUSED_THREADS 128

/* a[hs] . b[hs], sequentially (the CPU's order). */
__device__ __forceinline__ float fused_dot(const float *a, const float *b, int hs) {
    float d = 0.0f;
    for (int i = 0; i < hs; i++) d += a[i] * b[i];
    return d;
}

/* The probability of key row k[hs] for query row q[hs] whose normaliser is
 * lse: exp(scale q.k - lse). Both backward parts call this, so the bits agree. */
__device__ __forceinline__ float fused_prob(const float *q, const float *k, int hs, float scale, float lse) {
    return expf(fused_dot(q, k, hs) * scale - lse);
}

/* The score gradient (softmax and scale undone): p (dout[t] . v[t2] - D) scale. */
__device__ __forceinline__ float fused_ds(float p, const float *dy, const float *v, int hs, float D, float scale) {
    return p * (fused_dot(dy, v, hs) - D) * scale;
}

/* Forward: one block per (b, h, t) query row. Shared: the row's scores, then
 * its unnormalised probabilities exp(s - max), t + 1 floats. */
__global__ static void attention_fused_fwd_kernel(float *out,       /* [B,T,C] */
                                                  float *lse,       /* [B,NH,T] */
                                                  const float *qkv, /* [B,T,3C] */
                                                  int T, int C, int NH, float scale) {
    extern __shared__ float e[];
    __shared__ float red[33];
    zt_att_row r = zt_att_row_of(blockIdx.x, T, NH);
    int hs = C / NH, t = r.t;
    size_t C3 = (size_t)C * 3, row0 = (size_t)r.b * T, hoff = (size_t)r.h * hs;
    const float *q = qkv + (row0 + t) * C3 + hoff; /* [hs] */

    float lmax = -INFINITY;
    for (int t2 = threadIdx.x; t2 <= t; t2 += blockDim.x) {
        const float *k = qkv + (row0 + t2) * C3 + C + hoff; /* [hs] */
        float sc = fused_dot(q, k, hs) * scale;
        e[t2] = sc;
        lmax = fmaxf(lmax, sc);
    }
    float m = zt_block_max(lmax, red);
    /* Each thread rewrites only the entries it wrote above. */
    float lsum = 0.0f;
    for (int t2 = threadIdx.x; t2 <= t; t2 += blockDim.x) {
        float x = expf(e[t2] - m);
        e[t2] = x;
        lsum += x;
    }
    /* The block sum's barriers also publish every thread's e[] entries. */
    float l = zt_block_sum(lsum, red);
    float inv = 1.0f / l;

    float *o = out + (row0 + t) * C + hoff; /* [hs] */
    for (int i = threadIdx.x; i < hs; i += blockDim.x) {
        float acc = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) acc += e[t2] * qkv[(row0 + t2) * C3 + 2 * (size_t)C + hoff + i];
        o[i] = acc * inv;
    }
    if (threadIdx.x == 0) lse[r.bh * T + t] = m + logf(l);
}

/* Backward, part 1: one block per (b, h, t) query row. Shared: ds for the
 * row, t + 1 floats. */
__global__ static void attention_fused_bwd_dq_kernel(float *dqkv,       /* [B,T,3C], += */
                                                     float *datt,       /* [B,NH,T], D out */
                                                     const float *dout, /* [B,T,C] */
                                                     const float *qkv,  /* [B,T,3C] */
                                                     const float *out,  /* [B,T,C] */
                                                     const float *lse,  /* [B,NH,T] */
                                                     int T, int C, int NH, float scale) {
    extern __shared__ float ds[];
    zt_att_row r = zt_att_row_of(blockIdx.x, T, NH);
    int hs = C / NH, t = r.t;
    size_t C3 = (size_t)C * 3, row0 = (size_t)r.b * T, hoff = (size_t)r.h * hs;
    const float *q = qkv + (row0 + t) * C3 + hoff;  /* [hs] */
    const float *dy = dout + (row0 + t) * C + hoff; /* [hs] */
    const float *y = out + (row0 + t) * C + hoff;   /* [hs] */
    float l = lse[r.bh * T + t];

    /* Every thread computes D itself (same loop, same bits); one stores it. */
    float D = fused_dot(dy, y, hs);
    if (threadIdx.x == 0) datt[r.bh * T + t] = D;
    for (int t2 = threadIdx.x; t2 <= t; t2 += blockDim.x) {
        const float *k = qkv + (row0 + t2) * C3 + C + hoff;              /* [hs] */
        const float *v = qkv + (row0 + t2) * C3 + 2 * (size_t)C + hoff; /* [hs] */
        ds[t2] = fused_ds(fused_prob(q, k, hs, scale, l), dy, v, hs, D, scale);
    }
    __syncthreads();

    float *dq = dqkv + (row0 + t) * C3 + hoff; /* [hs] */
    for (int i = threadIdx.x; i < hs; i += blockDim.x) {
        float acc = dq[i];
        for (int t2 = 0; t2 <= t; t2++) acc += ds[t2] * qkv[(row0 + t2) * C3 + C + hoff + i];
        dq[i] = acc;
    }
}

/* Backward, part 2: one block per (b, h, t2) key/value row, summing over the
 * query rows t = t2 .. T-1 in order. Shared: the columns of p and ds,
 * 2 (T - t2) floats. */
__global__ static void attention_fused_bwd_dkv_kernel(float *dqkv,       /* [B,T,3C], += */
                                                      const float *datt, /* [B,NH,T], D from part 1 */
                                                      const float *dout, /* [B,T,C] */
                                                      const float *qkv,  /* [B,T,3C] */
                                                      const float *lse,  /* [B,NH,T] */
                                                      int T, int C, int NH, float scale) {
    extern __shared__ float cols[];
    zt_att_row r = zt_att_row_of(blockIdx.x, T, NH);
    int hs = C / NH, t2 = r.t, len = T - t2;
    size_t C3 = (size_t)C * 3, row0 = (size_t)r.b * T, hoff = (size_t)r.h * hs;
    float *pcol = cols, *dscol = cols + len;                         /* [len] each */
    const float *k = qkv + (row0 + t2) * C3 + C + hoff;              /* [hs] */
    const float *v = qkv + (row0 + t2) * C3 + 2 * (size_t)C + hoff; /* [hs] */

    for (int j = threadIdx.x; j < len; j += blockDim.x) {
        int t = t2 + j;
        const float *q = qkv + (row0 + t) * C3 + hoff;  /* [hs] */
        const float *dy = dout + (row0 + t) * C + hoff; /* [hs] */
        float p = fused_prob(q, k, hs, scale, lse[r.bh * T + t]);
        pcol[j] = p;
        dscol[j] = fused_ds(p, dy, v, hs, datt[r.bh * T + t], scale);
    }
    __syncthreads();

    float *dk = dqkv + (row0 + t2) * C3 + C + hoff;              /* [hs] */
    float *dv = dqkv + (row0 + t2) * C3 + 2 * (size_t)C + hoff; /* [hs] */
    for (int i = threadIdx.x; i < hs; i += blockDim.x) {
        float ak = dk[i], av = dv[i];
        for (int j = 0; j < len; j++) {
            size_t rt = row0 + t2 + j;
            av += pcol[j] * dout[rt * C + hoff + i];
            ak += dscol[j] * qkv[rt * C3 + hoff + i];
        }
        dk[i] = ak;
        dv[i] = av;
    }
}

extern "C" void zt_cuda_attention_fused_fwd(zt_stream *s, float *out, float *lse, const float *qkv, int B, int T,
                                            int C, int NH) {
    size_t blocks = (size_t)B * NH * T;
    if (blocks == 0 || C <= 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    float scale = 1.0f / sqrtf((float)(C / NH));
    size_t smem = (size_t)T * sizeof(float);
    if (ZT_ALLOW_SMEM(s, attention_fused_fwd_kernel, smem)) return;
    attention_fused_fwd_kernel<<<(unsigned int)blocks, FUSED_THREADS, smem, st>>>(out, lse, qkv, T, C, NH, scale);
    ZT_CUDA_LAUNCHED(s, "attention_fused_fwd");
}

extern "C" void zt_cuda_attention_fused_bwd(zt_stream *s, float *dqkv, float *datt, const float *dout,
                                            const float *qkv, const float *out, const float *lse, int B, int T,
                                            int C, int NH) {
    size_t blocks = (size_t)B * NH * T;
    if (blocks == 0 || C <= 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    float scale = 1.0f / sqrtf((float)(C / NH));
    size_t smem_q = (size_t)T * sizeof(float), smem_kv = 2 * (size_t)T * sizeof(float);
    if (ZT_ALLOW_SMEM(s, attention_fused_bwd_dq_kernel, smem_q)) return;
    attention_fused_bwd_dq_kernel<<<(unsigned int)blocks, FUSED_THREADS, smem_q, st>>>(dqkv, datt, dout, qkv, out,
                                                                                      lse, T, C, NH, scale);
    if (ZT_CUDA_LAUNCHED(s, "attention_fused_bwd (dq)")) return;
    if (ZT_ALLOW_SMEM(s, attention_fused_bwd_dkv_kernel, smem_kv)) return;
    attention_fused_bwd_dkv_kernel<<<(unsigned int)blocks, FUSED_THREADS, smem_kv, st>>>(dqkv, datt, dout, qkv,
                                                                                        lse, T, C, NH, scale);
    ZT_CUDA_LAUNCHED(s, "attention_fused_bwd (dk, dv)");
}
