/* Causal multi-head self-attention without flash tiling, as the CPU kernel:
 * att[B,NH,T,T] keeps the probabilities for backward. qkv rows hold
 * [q (C) | k (C) | v (C)]; head h uses channels h*hs .. h*hs+hs-1.
 *
 * Forward: three steps on the stream, GEMMs through zt_cuda_gemm (cuBLASLt).
 *   1. For each batch b, one strided-batched GEMM over the NH heads (head
 *      stride hs elements, row stride 3C inside qkv):
 *        att[b,h] = scale * Q[b,h] K[b,h]^T, the full T x T block.
 *   2. A causal softmax over every row of att in place: a warp per row, each
 *      lane running over its columns in order and a warp butterfly combining
 *      the lanes (fixed order); entries above the diagonal become exactly 0.
 *   3. For each batch b, one strided-batched GEMM over the heads:
 *        out[b, :, h*hs:(h+1)*hs] = att[b,h] @ V[b,h]   (output row stride C)
 *      the zeros above the diagonal add nothing.
 * The GEMMs compute in fp32 (CUBLAS_COMPUTE_32F, no TF32), or with operands
 * rounded to bf16 (CUBLAS_COMPUTE_32F_FAST_16BF) when zt_backend.matmul_bf16
 * is set. In fp32 the values differ from the CPU's loops only by float
 * rounding: the dot products and the sums over positions run in cuBLAS's
 * order instead of the CPU's sequential one, and the softmax sums in the warp's.
 *
 * Backward, when the caller lends a scratch of at least NH*T*T floats: per
 * batch element, five steps (attention_bwd_gemm_b) with an [NH,T,T] block
 * X = dY V^T made into the softmax gradient in place, so dV, dQ and dK are
 * strided-batched GEMMs too. Without such scratch (datt alone is [B,NH,T])
 * it computes directly, one block per query row: every value the CPU
 * computes as a sequential loop (dot products over the head channels, the
 * accumulation of dq, dk, dv over positions) is a sequential loop here too,
 * in the same order; only the per-row sum of a * da is a block reduction
 * with a fixed tree. No atomics anywhere: each output element has exactly
 * one writer, and the GEMMs' algorithms are deterministic (ops_matmul.cu).
 *
 * bf16 and fp16 (storage type S, cuda_common.cuh): qkv, att, out, dout and
 * dqkv in S, datt fp32. The forward's scores have no fp32 home (att is
 * 16-bit and the kernel gets no scratch), so one block per query row
 * computes them in fp32 (sequential dot products over the head channels, as
 * the CPU), the causal softmax in fp32, and stores the probabilities in S;
 * out = att V is then a 16-bit GEMM per batch element (fp32 accumulation,
 * one rounding). The backward's GEMM path needs NH*T*T floats for X = dY V^T
 * and NH*T*T elements of S after them for dpre = A (X - D) scale, rounded
 * to S, since both operands of a GEMM have one type: scratch_bytes at least
 * NH*T*T*(4 + sizeof(S)). dq, dk and dv each receive one GEMM with beta 1:
 * one rounding per element per call. The row kernels (no or too small a
 * scratch) load S, sum in fp32 and round each element once at the end. */
#include "cuda_common.cuh"

#define ATT_THREADS 128
#define ATT_SMEM_PAD 4

/* Forward step 2: att rows (b, h, t) hold scale * q . k for all T keys; make
 * them the causal softmax probabilities in place. A warp per row: lane l
 * handles columns l, l + 32, ... in order, the butterflies combine the lanes;
 * each lane reads back only what it wrote itself, so no barrier is needed. */
#define SOFTMAX_WARPS 8
__global__ static void __launch_bounds__(SOFTMAX_WARPS * 32)
    causal_softmax_kernel(float *att, int T, size_t rows) {
    size_t row = (size_t)blockIdx.x * SOFTMAX_WARPS + threadIdx.x / 32;
    if (row >= rows) return; /* the whole warp: row is the same for its lanes */
    int lane = threadIdx.x % 32, t = (int)(row % (size_t)T);
    float *a = att + row * (size_t)T;
    float lmax = -INFINITY;
    for (int t2 = lane; t2 <= t; t2 += 32) lmax = fmaxf(lmax, a[t2]);
    float maxv = zt_warp_max(lmax);
    float lsum = 0.0f;
    for (int t2 = lane; t2 <= t; t2 += 32) {
        float e = expf(a[t2] - maxv);
        a[t2] = e;
        lsum += e;
    }
    float inv = 1.0f / zt_warp_sum(lsum);
    for (int t2 = lane; t2 < T; t2 += 32) a[t2] = t2 <= t ? a[t2] * inv : 0.0f;
}

/* Backward, part 1: one block per (b, h, t) query row.
 *   da[t2]  = dy[t] . v[t2]                 (t2 <= t)
 *   D[t]    = sum_t2 a[t,t2] da[t2]         -> datt[b,h,t] (read by part 2)
 *   dpre    = a (da - D) scale              (through softmax and scale)
 *   dq[t]  += sum_t2 dpre[t2] k[t2]         (t2 in order)
 * Shared: dpre for the row, T floats. */
template <typename S>
__global__ static void attention_bwd_dq_kernel(S *dqkv, float *datt, const S *dout, const S *qkv, const S *att, int T,
                                               int C, int NH, float scale) {
    extern __shared__ float dpre[];
    __shared__ float red[33];
    zt_att_row ix = zt_att_row_of(blockIdx.x, T, NH);
    int hs = C / NH, t = ix.t;
    size_t C3 = (size_t)C * 3, row0 = (size_t)ix.b * T, hoff = (size_t)ix.h * hs;
    const S *a = att + (ix.bh * T + t) * T;
    const S *dy = dout + (row0 + t) * C + hoff;

    float local = 0.0f;
    for (int t2 = threadIdx.x; t2 <= t; t2 += blockDim.x) {
        const S *v = qkv + (row0 + t2) * C3 + 2 * (size_t)C + hoff;
        float d = 0.0f;
        for (int i = 0; i < hs; i++) d += zt_ld(dy[i]) * zt_ld(v[i]);
        dpre[t2] = d;
        local += zt_ld(a[t2]) * d;
    }
    float D = zt_block_sum(local, red);
    if (threadIdx.x == 0) datt[ix.bh * T + t] = D;
    for (int t2 = threadIdx.x; t2 <= t; t2 += blockDim.x) dpre[t2] = zt_ld(a[t2]) * (dpre[t2] - D) * scale;
    __syncthreads();

    S *dq = dqkv + (row0 + t) * C3 + hoff;
    for (int i = threadIdx.x; i < hs; i += blockDim.x) {
        float acc = zt_ld(dq[i]);
        for (int t2 = 0; t2 <= t; t2++) acc += dpre[t2] * zt_ld(qkv[(row0 + t2) * C3 + C + hoff + i]);
        dq[i] = zt_st<S>(acc);
    }
}

/* Backward, part 2: one block per (b, h, t2) key/value row; sums over the
 * query rows t >= t2 in order (the CPU's order):
 *   dv[t2] += sum_t a[t,t2] dy[t]
 *   dk[t2] += sum_t dpre[t,t2] q[t],  dpre recomputed from D[t] of part 1
 * (same formula and inputs, so the same bits as part 1 used).
 * Shared: the column of a and of dpre, 2 (T - t2) floats. */
template <typename S>
__global__ static void attention_bwd_dkv_kernel(S *dqkv, const float *datt, const S *dout, const S *qkv, const S *att,
                                                int T, int C, int NH, float scale) {
    extern __shared__ float colbuf[];
    zt_att_row ix = zt_att_row_of(blockIdx.x, T, NH);
    int hs = C / NH, t2 = ix.t, len = T - t2;
    size_t C3 = (size_t)C * 3, row0 = (size_t)ix.b * T, hoff = (size_t)ix.h * hs;
    float *acol = colbuf, *pcol = colbuf + len;
    const S *v2 = qkv + (row0 + t2) * C3 + 2 * (size_t)C + hoff;

    for (int j = threadIdx.x; j < len; j += blockDim.x) {
        int t = t2 + j;
        float a = zt_ld(att[(ix.bh * T + t) * T + t2]);
        const S *dy = dout + (row0 + t) * C + hoff;
        float d = 0.0f;
        for (int i = 0; i < hs; i++) d += zt_ld(dy[i]) * zt_ld(v2[i]);
        acol[j] = a;
        pcol[j] = a * (d - datt[ix.bh * T + t]) * scale;
    }
    __syncthreads();

    S *dk = dqkv + (row0 + t2) * C3 + C + hoff;
    S *dv = dqkv + (row0 + t2) * C3 + 2 * (size_t)C + hoff;
    for (int i = threadIdx.x; i < hs; i += blockDim.x) {
        float ak = zt_ld(dk[i]), av = zt_ld(dv[i]);
        for (int j = 0; j < len; j++) {
            size_t r = row0 + t2 + j;
            av += acol[j] * zt_ld(dout[r * C + hoff + i]);
            ak += pcol[j] * zt_ld(qkv[r * C3 + hoff + i]);
        }
        dk[i] = zt_st<S>(ak);
        dv[i] = zt_st<S>(av);
    }
}

/* A GEMM inside this (void) kernel: its error becomes the sticky one;
 * returns 1 on failure. */
static int gemm_failed(zt_stream *s, const zt_cuda_gemm_args *g) {
    zt_error e;
    zt_error_clear(&e);
    if (zt_cuda_gemm(s, g, &e) == ZT_OK) return 0;
    zt_cuda_record(zt_cuda_impl_of(s), e.code, e.file, e.line, "attention: %s", e.msg);
    return 1;
}

/* An operand of a per-head GEMM: base pointer, element type, row stride,
 * and the stride between heads (both in elements). */
typedef struct {
    const void *p;
    cudaDataType type;
    int64_t ld, head_stride;
} head_operand;

/* C_h = alpha op(A_h) @ op(B_h) + beta C_h for the NH heads h of one batch
 * element, one strided-batched GEMM with C of type c_type; 1 after
 * recording a failure. */
static int head_gemm(zt_stream *s, cublasComputeType_t compute, int trans_a, int trans_b, int M, int N, int K,
                     float alpha, head_operand A, head_operand Bm, float beta, void *Cm, cudaDataType c_type,
                     int64_t ldc, int64_t c_head_stride, int NH) {
    zt_cuda_gemm_args g;
    memset(&g, 0, sizeof g);
    g.trans_a = trans_a, g.trans_b = trans_b, g.M = M, g.N = N, g.K = K, g.batch = NH;
    g.alpha = alpha, g.beta = beta;
    g.A = A.p, g.a_type = A.type, g.lda = A.ld, g.stride_a = A.head_stride;
    g.B = Bm.p, g.b_type = Bm.type, g.ldb = Bm.ld, g.stride_b = Bm.head_stride;
    g.C = Cm, g.c_type = c_type, g.ldc = ldc, g.stride_c = c_head_stride;
    g.compute = compute;
    return gemm_failed(s, &g);
}

/* The compute type of the attention GEMMs in storage type S: fp32 follows
 * matmul_bf16; 16-bit operands accumulate in fp32. */
template <typename S> static cublasComputeType_t att_compute(zt_stream *s) { return zt_cuda_matmul_compute(s); }
template <> cublasComputeType_t att_compute<zt_dev_bf16>(zt_stream *) { return CUBLAS_COMPUTE_32F; }
template <> cublasComputeType_t att_compute<zt_dev_fp16>(zt_stream *) { return CUBLAS_COMPUTE_32F; }

/* 16-bit forward, steps 1-2 in one kernel: a block per (b, h, t) query row.
 * Thread j takes keys t2 = j, j + blockDim, ...: the fp32 score
 * scale (q . k) summed over the channels in order, kept in shared p[T];
 * then the block's max and sum (fixed trees), and the row stored in S,
 * exactly 0 above the diagonal. Each thread reads back only the p it wrote. */
template <typename S>
__global__ static void attention_probs_kernel(S *att, const S *qkv, int T, int C, int NH, float scale) {
    extern __shared__ float p[];
    __shared__ float red[33];
    zt_att_row ix = zt_att_row_of(blockIdx.x, T, NH);
    int hs = C / NH, t = ix.t;
    size_t C3 = (size_t)C * 3, row0 = (size_t)ix.b * T, hoff = (size_t)ix.h * hs;
    const S *q = qkv + (row0 + t) * C3 + hoff;
    float lmax = -INFINITY;
    for (int t2 = threadIdx.x; t2 <= t; t2 += blockDim.x) {
        const S *k = qkv + (row0 + t2) * C3 + C + hoff;
        float dot = 0.0f;
        for (int i = 0; i < hs; i++) dot += zt_ld(q[i]) * zt_ld(k[i]);
        dot *= scale;
        p[t2] = dot;
        lmax = fmaxf(lmax, dot);
    }
    float maxv = zt_block_max(lmax, red);
    float lsum = 0.0f;
    for (int t2 = threadIdx.x; t2 <= t; t2 += blockDim.x) {
        float e = expf(p[t2] - maxv);
        p[t2] = e;
        lsum += e;
    }
    float inv = 1.0f / zt_block_sum(lsum, red);
    S *a = att + (ix.bh * T + t) * T;
    for (int t2 = threadIdx.x; t2 < T; t2 += blockDim.x) a[t2] = zt_st<S>(t2 <= t ? p[t2] * inv : 0.0f);
}

/* Forward, fp32: steps 1-3 of the file comment. */
static void attention_fwd_f32(zt_stream *s, float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    size_t rows = (size_t)B * NH * T;
    int hs = C / NH;
    int64_t C3 = 3 * (int64_t)C, TT = (int64_t)T * T;
    float scale = 1.0f / sqrtf((float)hs);
    cublasComputeType_t compute = zt_cuda_matmul_compute(s);

    /* 1. att[b,h] = scale * Q K^T: row-major [T,T] = [T,hs] @ ([T,hs])^T */
    for (int b = 0; b < B; b++) {
        const float *qkv_b = qkv + (size_t)b * T * C3;
        head_operand q = {qkv_b, CUDA_R_32F, C3, hs}, k = {qkv_b + C, CUDA_R_32F, C3, hs};
        if (head_gemm(s, compute, 0, 1, T, T, hs, scale, q, k, 0.0f, att + (size_t)b * NH * TT, CUDA_R_32F, T, TT,
                      NH))
            return;
    }

    /* 2. causal softmax of every row, in place */
    cudaStream_t st = zt_cuda_enter(s);
    size_t blocks = (rows + SOFTMAX_WARPS - 1) / SOFTMAX_WARPS;
    causal_softmax_kernel<<<(unsigned int)blocks, SOFTMAX_WARPS * 32, 0, st>>>(att, T, rows);
    if (ZT_CUDA_LAUNCHED(s, "attention_fwd (softmax)")) return;

    /* 3. out[b, :, h] = att[b,h] @ V: row-major [T,hs] = [T,T] @ [T,hs] */
    for (int b = 0; b < B; b++) {
        head_operand a = {att + (size_t)b * NH * TT, CUDA_R_32F, T, TT};
        head_operand v = {qkv + (size_t)b * T * C3 + 2 * (int64_t)C, CUDA_R_32F, C3, hs};
        if (head_gemm(s, compute, 0, 0, T, hs, T, 1.0f, a, v, 0.0f, out + (size_t)b * T * C, CUDA_R_32F, C, hs, NH))
            return;
    }
}

/* Forward, 16 bits: the probabilities row by row, then out = att V as
 * 16-bit GEMMs (see the file comment). */
template <typename S>
static void attention_fwd_16(zt_stream *s, S *out, S *att, const S *qkv, int B, int T, int C, int NH) {
    size_t rows = (size_t)B * NH * T;
    int hs = C / NH;
    int64_t C3 = 3 * (int64_t)C, TT = (int64_t)T * T;
    float scale = 1.0f / sqrtf((float)hs);
    const cudaDataType t = zt_cublas_type<S>::value;
    cudaStream_t st = zt_cuda_enter(s);
    size_t smem = (size_t)T * sizeof(float);
    void (*k)(S *, const S *, int, int, int, float) = attention_probs_kernel<S>;
    if (ZT_ALLOW_SMEM(s, k, smem)) return;
    k<<<(unsigned int)rows, ATT_THREADS, smem, st>>>(att, qkv, T, C, NH, scale);
    if (ZT_CUDA_LAUNCHED(s, "attention_fwd (probabilities)")) return;
    for (int b = 0; b < B; b++) {
        head_operand a = {att + (size_t)b * NH * TT, t, T, TT};
        head_operand v = {qkv + (size_t)b * T * C3 + 2 * (int64_t)C, t, C3, hs};
        if (head_gemm(s, CUBLAS_COMPUTE_32F, 0, 0, T, hs, T, 1.0f, a, v, 0.0f, out + (size_t)b * T * C, t, C, hs, NH))
            return;
    }
}

template <typename S>
static void attention_fwd(zt_stream *s, S *out, S *att, const S *qkv, int B, int T, int C, int NH) {
    attention_fwd_16(s, out, att, qkv, B, T, C, NH);
}
template <>
void attention_fwd<float>(zt_stream *s, float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    attention_fwd_f32(s, out, att, qkv, B, T, C, NH);
}

/* GEMM backward, step 3: rows (h, t) of X[NH,T,T] (fp32) hold dY[t] . V[t2]
 * for every key t2; write dpre = a (X - D) scale to xo (S; in fp32 xo is x
 * and each lane rewrites only what it read), with D[t] = sum_{t2 <= t}
 * a[t2] X[t2] (into datt[b,h,t], as the row kernels do), and exact zeros
 * above the diagonal so the GEMMs of steps 4-5 can run over full T x T
 * blocks. A warp per row, lanes in a fixed order. */
template <typename S>
__global__ static void __launch_bounds__(SOFTMAX_WARPS * 32)
    softmax_bwd_rows_kernel(const float *x, S *xo, float *datt_b, const S *att_b, int T, size_t rows, float scale) {
    size_t row = (size_t)blockIdx.x * SOFTMAX_WARPS + threadIdx.x / 32;
    if (row >= rows) return;
    int lane = threadIdx.x % 32, t = (int)(row % (size_t)T);
    const float *xr = x + row * (size_t)T;
    S *xw = xo + row * (size_t)T;
    const S *a = att_b + row * (size_t)T;
    float local = 0.0f;
    for (int t2 = lane; t2 <= t; t2 += 32) local += zt_ld(a[t2]) * xr[t2];
    float D = zt_warp_sum(local);
    if (lane == 0) datt_b[row] = D;
    for (int t2 = lane; t2 < T; t2 += 32) xw[t2] = zt_st<S>(t2 <= t ? zt_ld(a[t2]) * (xr[t2] - D) * scale : 0.0f);
}

/* Scratch the GEMM backward needs in storage type S: X in fp32, and in 16
 * bits dpre in S after it. */
template <typename S> static size_t att_gemm_scratch_bytes(int T, int NH) {
    size_t tt = (size_t)NH * T * T;
    return tt * sizeof(float) + (sizeof(S) == sizeof(float) ? 0 : tt * sizeof(S));
}

/* One batch element's backward as strided-batched GEMMs over its NH heads
 * (head h at column offset h*hs of the q | k | v and dq | dk | dv rows):
 *   1. dV  += A^T dY          [T,hs] += [T,T]^T [T,hs]
 *   2. X    = dY V^T          [T,T]   = [T,hs] [T,hs]^T   (x: [NH,T,T] fp32 scratch)
 *   3. P    = A (X - D) scale  (softmax_bwd_rows_kernel; xo: P in S, x itself in fp32)
 *   4. dQ  += P K             [T,hs] += [T,T] [T,hs]
 *   5. dK  += P^T Q           [T,hs] += [T,T]^T [T,hs]
 * Returns 1 after recording a failure. */
template <typename S>
static int attention_bwd_gemm_b(zt_stream *s, S *dqkv, float *datt, const S *dout, const S *qkv, const S *att, int b,
                                int T, int C, int NH, float *x, S *xo) {
    int hs = C / NH;
    int64_t C3 = 3 * (int64_t)C, TT = (int64_t)T * T;
    const S *q = qkv + (size_t)b * T * C3, *k = q + C, *v = q + 2 * (size_t)C;
    S *dq = dqkv + (size_t)b * T * C3, *dk = dq + C, *dv = dq + 2 * (size_t)C;
    const S *dy = dout + (size_t)b * T * C, *a = att + (size_t)b * NH * TT;
    float scale = 1.0f / sqrtf((float)hs);
    const cudaDataType t = zt_cublas_type<S>::value;
    cublasComputeType_t compute = att_compute<S>(s);
    head_operand A = {a, t, T, TT}, P = {xo, t, T, TT}, dY = {dy, t, C, hs};
    head_operand Q = {q, t, C3, hs}, K = {k, t, C3, hs}, V = {v, t, C3, hs};

    /* 1. dv[h] += a[h]^T @ dy[h] */
    if (head_gemm(s, compute, 1, 0, T, hs, T, 1.0f, A, dY, 1.0f, dv, t, C3, hs, NH)) return 1;
    /* 2. x[h] = dy[h] @ v[h]^T (fp32) */
    if (head_gemm(s, compute, 0, 1, T, T, hs, 1.0f, dY, V, 0.0f, x, CUDA_R_32F, T, TT, NH)) return 1;
    /* 3. through softmax and scale */
    size_t rows = (size_t)NH * T;
    cudaStream_t st = zt_cuda_enter(s);
    void (*kr)(const float *, S *, float *, const S *, int, size_t, float) = softmax_bwd_rows_kernel<S>;
    kr<<<(unsigned int)((rows + SOFTMAX_WARPS - 1) / SOFTMAX_WARPS), SOFTMAX_WARPS * 32, 0, st>>>(
        x, xo, datt + (size_t)b * NH * T, a, T, rows, scale);
    if (ZT_CUDA_LAUNCHED(s, "attention_bwd (softmax rows)")) return 1;
    /* 4. dq[h] += p[h] @ k[h] */
    if (head_gemm(s, compute, 0, 0, T, hs, T, 1.0f, P, K, 1.0f, dq, t, C3, hs, NH)) return 1;
    /* 5. dk[h] += p[h]^T @ q[h] */
    return head_gemm(s, compute, 1, 0, T, hs, T, 1.0f, P, Q, 1.0f, dk, t, C3, hs, NH);
}

template <typename S>
static void attention_bwd(zt_stream *s, S *dqkv, float *datt, const S *dout, const S *qkv, const S *att, int B, int T,
                          int C, int NH, void *scratch, size_t scratch_bytes) {
    size_t blocks = (size_t)B * NH * T;
    if (blocks == 0 || C <= 0) return;
    /* Tensor cores through GEMMs when the caller lent enough scratch. */
    if (scratch && scratch_bytes >= att_gemm_scratch_bytes<S>(T, NH)) {
        float *x = (float *)scratch;
        S *xo = sizeof(S) == sizeof(float) ? (S *)scratch : (S *)(x + (size_t)NH * T * T);
        for (int b = 0; b < B; b++)
            if (attention_bwd_gemm_b(s, dqkv, datt, dout, qkv, att, b, T, C, NH, x, xo)) return;
        return;
    }
    cudaStream_t st = zt_cuda_enter(s);
    float scale = 1.0f / sqrtf((float)(C / NH));
    /* ATT_SMEM_PAD floats past the row: nvcc unrolls the dq kernel's loop
     * over dpre with wide shared loads that reach up to 3 floats past t
     * (compute-sanitizer's memcheck on an H200: a 12-byte read at T = 1). */
    size_t smem_q = ((size_t)T + ATT_SMEM_PAD) * sizeof(float);
    size_t smem_kv = (2 * (size_t)T + ATT_SMEM_PAD) * sizeof(float);
    void (*kq)(S *, float *, const S *, const S *, const S *, int, int, int, float) = attention_bwd_dq_kernel<S>;
    if (ZT_ALLOW_SMEM(s, kq, smem_q)) return;
    kq<<<(unsigned int)blocks, ATT_THREADS, smem_q, st>>>(dqkv, datt, dout, qkv, att, T, C, NH, scale);
    ZT_CUDA_LAUNCHED(s, "attention_bwd (dq)");
    void (*kkv)(S *, const float *, const S *, const S *, const S *, int, int, int, float) =
        attention_bwd_dkv_kernel<S>;
    if (ZT_ALLOW_SMEM(s, kkv, smem_kv)) return;
    kkv<<<(unsigned int)blocks, ATT_THREADS, smem_kv, st>>>(dqkv, datt, dout, qkv, att, T, C, NH, scale);
    ZT_CUDA_LAUNCHED(s, "attention_bwd (dk, dv)");
}

extern "C" void zt_cuda_attention_fwd(zt_stream *s, zt_dtype dt, void *out, void *att, const void *qkv, int B, int T,
                                      int C, int NH) {
    if ((size_t)B * NH * T == 0 || C <= 0) return;
    ZT_DISPATCH_DTYPE(dt, attention_fwd<S>(s, (S *)out, (S *)att, (const S *)qkv, B, T, C, NH));
}

extern "C" void zt_cuda_attention_bwd(zt_stream *s, zt_dtype dt, void *dqkv, float *datt, const void *dout,
                                      const void *qkv, const void *att, int B, int T, int C, int NH, void *scratch,
                                      size_t scratch_bytes) {
    ZT_DISPATCH_DTYPE(dt, attention_bwd<S>(s, (S *)dqkv, datt, (const S *)dout, (const S *)qkv, (const S *)att, B, T,
                                           C, NH, scratch, scratch_bytes));
}
