/* The Llama kernels (RMSNorm, RoPE, SwiGLU, grouped-query attention's head
 * expansion), in each storage type S (cuda_common.cuh): activations in S,
 * rstd and dw fp32. Each performs the CPU kernel's fp32 operations
 * (runtime/cpu/ops_rmsnorm.inc, ops_rope.inc, ops_swiglu.inc, ops_gqa.inc);
 * the sums of RMSNorm run in another order (a warp's butterfly, per-warp
 * partials), and exp comes from CUDA's libm instead of SLEEF, so those
 * results agree with the CPU's to fp32 rounding, the copies and the GQA
 * sums bit for bit. */
#include "cuda_common.cuh"

/* ---- RMSNorm ------------------------------------------------------------ */

#define RMS_WARPS 8 /* rows per block: one warp per row */

template <typename S>
__global__ static void rmsnorm_fwd_kernel(S *out, float *rstd, const S *inp, const S *w, int N, int C, float eps) {
    int lane = threadIdx.x & 31;
    int n = blockIdx.x * RMS_WARPS + (threadIdx.x >> 5);
    if (n >= N) return; /* whole warps leave together: the shuffles stay full */
    const S *x = inp + (size_t)n * C; /* [C] */
    float ss = 0.0f;
    for (int c = lane; c < C; c += 32) ss += zt_ld(x[c]) * zt_ld(x[c]);
    float r = 1.0f / sqrtf(zt_warp_sum(ss) / (float)C + eps);
    S *o = out + (size_t)n * C; /* [C] */
    for (int c = lane; c < C; c += 32) o[c] = zt_st<S>(zt_ld(x[c]) * r * zt_ld(w[c]));
    if (lane == 0) rstd[n] = r;
}

/* dinp: one warp per row, the CPU kernel's formula (one rounding of dinp +
 * the row's gradient in 16 bits). */
template <typename S>
__global__ static void rmsnorm_bwd_dinp_kernel(S *dinp, const S *dout, const S *inp, const S *w, const float *rstd,
                                               int N, int C) {
    int lane = threadIdx.x & 31;
    int n = blockIdx.x * RMS_WARPS + (threadIdx.x >> 5);
    if (n >= N) return;
    const S *x = inp + (size_t)n * C;   /* [C] */
    const S *dy = dout + (size_t)n * C; /* [C] */
    S *dx = dinp + (size_t)n * C;       /* [C] */
    float r = rstd[n], gx = 0.0f;
    for (int c = lane; c < C; c += 32) gx += zt_ld(w[c]) * zt_ld(dy[c]) * (zt_ld(x[c]) * r);
    float gx_mean = zt_warp_sum(gx) / (float)C;
    for (int c = lane; c < C; c += 32) {
        float xhat = zt_ld(x[c]) * r;
        float g = zt_ld(w[c]) * zt_ld(dy[c]);
        dx[c] = zt_st<S>(zt_ld(dx[c]) + (g - xhat * gx_mean) * r);
    }
}

/* dw: a block per tile of 32 channels, as layernorm's dw (ops_layernorm.cu):
 * lane l of warp w sums rows w, w + 32, ... of channel tile + l in order,
 * then warp 0 adds the 32 partials in warp order. No atomics. */
#define RMS_COLS 32
#define RMS_ROW_WARPS 32
template <typename S>
__global__ static void __launch_bounds__(RMS_COLS * RMS_ROW_WARPS)
    rmsnorm_bwd_dw_kernel(float *dw, const S *dout, const S *inp, const float *rstd, int N, int C) {
    __shared__ float part[RMS_ROW_WARPS][RMS_COLS + 1];
    int lane = threadIdx.x % RMS_COLS, w = threadIdx.x / RMS_COLS;
    int c = blockIdx.x * RMS_COLS + lane;
    float gw = 0.0f;
    if (c < C)
        for (int n = w; n < N; n += RMS_ROW_WARPS)
            gw += zt_ld(inp[(size_t)n * C + c]) * rstd[n] * zt_ld(dout[(size_t)n * C + c]);
    part[w][lane] = gw;
    __syncthreads();
    if (w == 0 && c < C) {
        float total = part[0][lane];
        for (int i = 1; i < RMS_ROW_WARPS; i++) total += part[i][lane];
        dw[c] += total;
    }
}

template <typename S>
static void rmsnorm_fwd(zt_stream *s, S *out, float *rstd, const S *inp, const S *w, int N, int C, float eps) {
    if (N <= 0 || C <= 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    void (*k)(S *, float *, const S *, const S *, int, int, float) = rmsnorm_fwd_kernel<S>;
    k<<<(N + RMS_WARPS - 1) / RMS_WARPS, RMS_WARPS * 32, 0, st>>>(out, rstd, inp, w, N, C, eps);
    ZT_CUDA_LAUNCHED(s, "rmsnorm_fwd");
}

template <typename S>
static void rmsnorm_bwd(zt_stream *s, S *dinp, float *dw, const S *dout, const S *inp, const S *w, const float *rstd,
                        int N, int C) {
    if (N <= 0 || C <= 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    void (*kx)(S *, const S *, const S *, const S *, const float *, int, int) = rmsnorm_bwd_dinp_kernel<S>;
    kx<<<(N + RMS_WARPS - 1) / RMS_WARPS, RMS_WARPS * 32, 0, st>>>(dinp, dout, inp, w, rstd, N, C);
    ZT_CUDA_LAUNCHED(s, "rmsnorm_bwd (dinp)");
    void (*kw)(float *, const S *, const S *, const float *, int, int) = rmsnorm_bwd_dw_kernel<S>;
    kw<<<(C + RMS_COLS - 1) / RMS_COLS, RMS_COLS * RMS_ROW_WARPS, 0, st>>>(dw, dout, inp, rstd, N, C);
    ZT_CUDA_LAUNCHED(s, "rmsnorm_bwd (dw)");
}

/* ---- RoPE --------------------------------------------------------------- */

/* One thread per (token, frequency i < HD/2): the angle of zt_ops.rope_fwd's
 * formula, step by step as the CPU computes it, then the pair (i, i + HD/2)
 * of every q and k head rotated by it; sign -1 negates sin (exactly) for the
 * transposed rotation. Adjacent threads take adjacent i: coalesced. */
template <typename S>
__global__ static void rope_kernel(S *qkv, size_t BT, int T, int NH, int NKV, int HD, float theta, float sign) {
    int half = HD / 2;
    size_t total = BT * (size_t)half, row = (size_t)(NH + 2 * NKV) * HD;
    for (size_t idx = zt_gtid(); idx < total; idx += zt_gstride()) {
        size_t bt = idx / (size_t)half;
        int i = (int)(idx % (size_t)half), t = (int)(bt % (size_t)T);
        float e = (float)(2 * i) / (float)HD;
        float f = (float)(1.0 / pow((double)theta, (double)e));
        float a = (float)t * f;
        float cs = (float)cos((double)a), sn = (float)sin((double)a) * sign;
        for (int h = 0; h < NH + NKV; h++) {
            S *x = qkv + bt * row + (size_t)h * HD + i;
            float x0 = zt_ld(x[0]), x1 = zt_ld(x[half]);
            x[0] = zt_st<S>(x0 * cs - x1 * sn);
            x[half] = zt_st<S>(x1 * cs + x0 * sn);
        }
    }
}

template <typename S>
static void rope(zt_stream *s, S *qkv, int B, int T, int NH, int NKV, int HD, float theta, float sign,
                 const char *what) {
    size_t n = (size_t)B * T * (size_t)(HD / 2);
    if (n == 0 || NH + NKV <= 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    void (*k)(S *, size_t, int, int, int, int, float, float) = rope_kernel<S>;
    k<<<zt_ew_blocks(n), ZT_EW_THREADS, 0, st>>>(qkv, (size_t)B * T, T, NH, NKV, HD, theta, sign);
    ZT_CUDA_LAUNCHED(s, what);
}

/* ---- SwiGLU ------------------------------------------------------------- */

/* One thread per output element (n, c) of [N,F]. */
template <typename S> __global__ static void swiglu_fwd_kernel(S *out, const S *gate_up, size_t N, int F) {
    size_t total = N * (size_t)F;
    for (size_t idx = zt_gtid(); idx < total; idx += zt_gstride()) {
        size_t n = idx / (size_t)F, c = idx % (size_t)F;
        const S *gate = gate_up + n * 2 * F; /* [2F] */
        float g = zt_ld(gate[c]);
        float d = 1.0f + expf(-g);
        out[idx] = zt_st<S>(g / d * zt_ld(gate[F + c]));
    }
}

/* dgate_up[N,2F] overwritten: silu' = sig (1 + g (1 - sig)), sig = 1 / d. */
template <typename S>
__global__ static void swiglu_bwd_kernel(S *dgate_up, const S *gate_up, const S *dout, size_t N, int F) {
    size_t total = N * (size_t)F;
    for (size_t idx = zt_gtid(); idx < total; idx += zt_gstride()) {
        size_t n = idx / (size_t)F, c = idx % (size_t)F;
        const S *gate = gate_up + n * 2 * F; /* [2F] */
        S *dgate = dgate_up + n * 2 * F;     /* [2F] */
        float g = zt_ld(gate[c]), dy = zt_ld(dout[idx]);
        float d = 1.0f + expf(-g);
        float sig = 1.0f / d;
        float dsilu = sig * (1.0f + g * (1.0f - sig));
        dgate[c] = zt_st<S>(dy * zt_ld(gate[F + c]) * dsilu);
        dgate[F + c] = zt_st<S>(dy * (g / d));
    }
}

template <typename S> static void swiglu_fwd(zt_stream *s, S *out, const S *gate_up, int N, int F) {
    size_t n = (size_t)N * F;
    if (n == 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    void (*k)(S *, const S *, size_t, int) = swiglu_fwd_kernel<S>;
    k<<<zt_ew_blocks(n), ZT_EW_THREADS, 0, st>>>(out, gate_up, (size_t)N, F);
    ZT_CUDA_LAUNCHED(s, "swiglu_fwd");
}

template <typename S>
static void swiglu_bwd(zt_stream *s, S *dgate_up, const S *gate_up, const S *dout, int N, int F) {
    size_t n = (size_t)N * F;
    if (n == 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    void (*k)(S *, const S *, const S *, size_t, int) = swiglu_bwd_kernel<S>;
    k<<<zt_ew_blocks(n), ZT_EW_THREADS, 0, st>>>(dgate_up, gate_up, dout, (size_t)N, F);
    ZT_CUDA_LAUNCHED(s, "swiglu_bwd");
}

/* ---- grouped-query attention's heads ------------------------------------- */

/* One thread per element of qkv_full[N,3C], C = NH*HD: its source in
 * qkv[N,C+2*NKV*HD] (query head h reads key/value head h / G). */
template <typename S>
__global__ static void gqa_expand_kernel(S *qkv_full, const S *qkv, size_t N, int NH, int NKV, int HD) {
    size_t C = (size_t)NH * HD, kvC = (size_t)NKV * HD, total = N * 3 * C;
    int G = NH / NKV;
    for (size_t idx = zt_gtid(); idx < total; idx += zt_gstride()) {
        size_t n = idx / (3 * C), c = idx % (3 * C);
        const S *src = qkv + n * (C + 2 * kvC); /* [C + 2 kvC] */
        if (c < C) {
            qkv_full[idx] = src[c];
            continue;
        }
        size_t part = (c - C) / C, within = (c - C) % C; /* 0: k, 1: v */
        size_t h = within / (size_t)HD, d = within % (size_t)HD;
        qkv_full[idx] = src[C + part * kvC + (h / (size_t)G) * HD + d];
    }
}

/* One thread per element of dqkv[N,C+2*NKV*HD]: the q part adds its
 * element; a key/value element adds the fp32 sum over its G query heads in
 * head order, once (the CPU's operations and order). */
template <typename S>
__global__ static void gqa_reduce_kernel(S *dqkv, const S *dqkv_full, size_t N, int NH, int NKV, int HD) {
    size_t C = (size_t)NH * HD, kvC = (size_t)NKV * HD, row = C + 2 * kvC, total = N * row;
    int G = NH / NKV;
    for (size_t idx = zt_gtid(); idx < total; idx += zt_gstride()) {
        size_t n = idx / row, c = idx % row;
        const S *full = dqkv_full + n * 3 * C; /* [3C] */
        if (c < C) {
            dqkv[idx] = zt_st<S>(zt_ld(dqkv[idx]) + zt_ld(full[c]));
            continue;
        }
        size_t part = (c - C) / kvC, within = (c - C) % kvC; /* 0: k, 1: v */
        size_t j = within / (size_t)HD, d = within % (size_t)HD;
        const S *src = full + C + part * C + j * (size_t)G * HD + d; /* query head j*G's element d */
        float sum = 0.0f;
        for (int g = 0; g < G; g++) sum += zt_ld(src[(size_t)g * HD]);
        dqkv[idx] = zt_st<S>(zt_ld(dqkv[idx]) + sum);
    }
}

template <typename S> static void gqa_expand(zt_stream *s, S *qkv_full, const S *qkv, int N, int NH, int NKV, int HD) {
    size_t n = (size_t)N * 3 * NH * HD;
    if (n == 0 || NKV <= 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    void (*k)(S *, const S *, size_t, int, int, int) = gqa_expand_kernel<S>;
    k<<<zt_ew_blocks(n), ZT_EW_THREADS, 0, st>>>(qkv_full, qkv, (size_t)N, NH, NKV, HD);
    ZT_CUDA_LAUNCHED(s, "gqa_expand");
}

template <typename S>
static void gqa_reduce(zt_stream *s, S *dqkv, const S *dqkv_full, int N, int NH, int NKV, int HD) {
    size_t n = (size_t)N * (NH + 2 * NKV) * HD;
    if (n == 0 || NKV <= 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    void (*k)(S *, const S *, size_t, int, int, int) = gqa_reduce_kernel<S>;
    k<<<zt_ew_blocks(n), ZT_EW_THREADS, 0, st>>>(dqkv, dqkv_full, (size_t)N, NH, NKV, HD);
    ZT_CUDA_LAUNCHED(s, "gqa_reduce");
}

/* ---- the launchers (cuda_ops.h) ------------------------------------------ */

extern "C" void zt_cuda_rmsnorm_fwd(zt_stream *s, zt_dtype dt, void *out, float *rstd, const void *inp, const void *w,
                                    int N, int C, float eps) {
    ZT_DISPATCH_DTYPE(dt, rmsnorm_fwd<S>(s, (S *)out, rstd, (const S *)inp, (const S *)w, N, C, eps));
}

extern "C" void zt_cuda_rmsnorm_bwd(zt_stream *s, zt_dtype dt, void *dinp, float *dw, const void *dout,
                                    const void *inp, const void *w, const float *rstd, int N, int C) {
    ZT_DISPATCH_DTYPE(dt, rmsnorm_bwd<S>(s, (S *)dinp, dw, (const S *)dout, (const S *)inp, (const S *)w, rstd, N, C));
}

extern "C" void zt_cuda_rope_fwd(zt_stream *s, zt_dtype dt, void *qkv, int B, int T, int NH, int NKV, int HD,
                                 float theta) {
    ZT_DISPATCH_DTYPE(dt, rope<S>(s, (S *)qkv, B, T, NH, NKV, HD, theta, 1.0f, "rope_fwd"));
}

extern "C" void zt_cuda_rope_bwd(zt_stream *s, zt_dtype dt, void *dqkv, int B, int T, int NH, int NKV, int HD,
                                 float theta) {
    ZT_DISPATCH_DTYPE(dt, rope<S>(s, (S *)dqkv, B, T, NH, NKV, HD, theta, -1.0f, "rope_bwd"));
}

extern "C" void zt_cuda_swiglu_fwd(zt_stream *s, zt_dtype dt, void *out, const void *gate_up, int N, int F) {
    ZT_DISPATCH_DTYPE(dt, swiglu_fwd<S>(s, (S *)out, (const S *)gate_up, N, F));
}

extern "C" void zt_cuda_swiglu_bwd(zt_stream *s, zt_dtype dt, void *dgate_up, const void *gate_up, const void *dout,
                                   int N, int F) {
    ZT_DISPATCH_DTYPE(dt, swiglu_bwd<S>(s, (S *)dgate_up, (const S *)gate_up, (const S *)dout, N, F));
}

extern "C" void zt_cuda_gqa_expand(zt_stream *s, zt_dtype dt, void *qkv_full, const void *qkv, int N, int NH,
                                   int NKV, int HD) {
    ZT_DISPATCH_DTYPE(dt, gqa_expand<S>(s, (S *)qkv_full, (const S *)qkv, N, NH, NKV, HD));
}

extern "C" void zt_cuda_gqa_reduce(zt_stream *s, zt_dtype dt, void *dqkv, const void *dqkv_full, int N, int NH,
                                   int NKV, int HD) {
    ZT_DISPATCH_DTYPE(dt, gqa_reduce<S>(s, (S *)dqkv, (const S *)dqkv_full, N, NH, NKV, HD));
}
