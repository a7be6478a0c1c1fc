/* LayerNorm over the last dimension, eps 1e-5 (as the CPU kernel), in each
 * storage type S (cuda_common.cuh): inp, w, b, out, dout and dinp in S;
 * mean, rstd, dw and db fp32 in every dtype. */
#include "cuda_common.cuh"

#define LN_WARPS 8 /* rows per block: one warp per row */

/* One warp per row: the lanes take channels lane, lane+32, ... and the sums
 * are combined with a fixed butterfly. Two passes (mean, then the variance of
 * x - mean) as on the CPU. */
template <typename S>
__global__ static void layernorm_fwd_kernel(S *out, float *mean, float *rstd, const S *inp, const S *w, const S *b,
                                            int N, int C) {
    int lane = threadIdx.x & 31;
    int n = blockIdx.x * LN_WARPS + (threadIdx.x >> 5);
    if (n >= N) return; /* whole warps leave together: the shuffles stay full */
    const S *x = inp + (size_t)n * C;
    float sum = 0.0f;
    for (int c = lane; c < C; c += 32) sum += zt_ld(x[c]);
    float m = zt_warp_sum(sum) / (float)C;
    float var = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = zt_ld(x[c]) - m;
        var += d * d;
    }
    var = zt_warp_sum(var) / (float)C;
    float r = 1.0f / sqrtf(var + 1e-5f);
    S *o = out + (size_t)n * C;
    for (int c = lane; c < C; c += 32) o[c] = zt_st<S>((zt_ld(x[c]) - m) * r * zt_ld(w[c]) + zt_ld(b[c]));
    if (lane == 0) {
        mean[n] = m;
        rstd[n] = r;
    }
}

/* dinp: one warp per row, the same formula as the CPU kernel (one rounding
 * of dinp + the row's gradient in 16 bits). */
template <typename S>
__global__ static void layernorm_bwd_dinp_kernel(S *dinp, const S *dout, const S *inp, const S *w, const float *mean,
                                                 const float *rstd, int N, int C) {
    int lane = threadIdx.x & 31;
    int n = blockIdx.x * LN_WARPS + (threadIdx.x >> 5);
    if (n >= N) return;
    const S *x = inp + (size_t)n * C;
    const S *dy = dout + (size_t)n * C;
    S *dx = dinp + (size_t)n * C;
    float m = mean[n], r = rstd[n];
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float xhat = (zt_ld(x[c]) - m) * r;
        float dnorm = zt_ld(w[c]) * zt_ld(dy[c]);
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * xhat;
    }
    dnorm_mean = zt_warp_sum(dnorm_mean) / (float)C;
    dnorm_norm_mean = zt_warp_sum(dnorm_norm_mean) / (float)C;
    for (int c = lane; c < C; c += 32) {
        float xhat = (zt_ld(x[c]) - m) * r;
        float dnorm = zt_ld(w[c]) * zt_ld(dy[c]);
        dx[c] = zt_st<S>(zt_ld(dx[c]) + (dnorm - dnorm_mean - xhat * dnorm_norm_mean) * r);
    }
}

/* dw, db: a block per tile of 32 channels. Lane l of warp w sums rows w,
 * w + 32, ... of channel tile + l in order (a warp reads 32 adjacent floats
 * of a row: coalesced), then warp 0 adds the 32 partial sums of its channel
 * in warp order. One thread per channel looping over every row left the GPU
 * nearly idle (C threads for N x C work); this has 32 x C. Fixed launch
 * shape and order: the same bits every run, no atomics (not the CPU's bits:
 * its sum runs over the rows in one sequence). */
#define LN_COLS 32
#define LN_ROW_WARPS 32
template <typename S>
__global__ static void __launch_bounds__(LN_COLS * LN_ROW_WARPS)
    layernorm_bwd_params_kernel(float *dw, float *db, const S *dout, const S *inp, const float *mean,
                                const float *rstd, int N, int C) {
    __shared__ float part_w[LN_ROW_WARPS][LN_COLS + 1], part_b[LN_ROW_WARPS][LN_COLS + 1];
    int lane = threadIdx.x % LN_COLS, w = threadIdx.x / LN_COLS;
    int c = blockIdx.x * LN_COLS + lane;
    float gw = 0.0f, gb = 0.0f;
    if (c < C) {
        for (int n = w; n < N; n += LN_ROW_WARPS) {
            float xhat = (zt_ld(inp[(size_t)n * C + c]) - mean[n]) * rstd[n];
            float dy = zt_ld(dout[(size_t)n * C + c]);
            gw += xhat * dy;
            gb += dy;
        }
    }
    part_w[w][lane] = gw;
    part_b[w][lane] = gb;
    __syncthreads();
    if (w == 0 && c < C) {
        float tw = part_w[0][lane], tb = part_b[0][lane];
        for (int i = 1; i < LN_ROW_WARPS; i++) {
            tw += part_w[i][lane];
            tb += part_b[i][lane];
        }
        dw[c] += tw;
        db[c] += tb;
    }
}

template <typename S>
static void layernorm_fwd(zt_stream *s, S *out, float *mean, float *rstd, const S *inp, const S *w, const S *b, int N,
                          int C) {
    if (N <= 0 || C <= 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    void (*k)(S *, float *, float *, const S *, const S *, const S *, int, int) = layernorm_fwd_kernel<S>;
    k<<<(N + LN_WARPS - 1) / LN_WARPS, LN_WARPS * 32, 0, st>>>(out, mean, rstd, inp, w, b, N, C);
    ZT_CUDA_LAUNCHED(s, "layernorm_fwd");
}

template <typename S>
static void layernorm_bwd(zt_stream *s, S *dinp, float *dw, float *db, const S *dout, const S *inp, const S *w,
                          const float *mean, const float *rstd, int N, int C) {
    if (N <= 0 || C <= 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    void (*kx)(S *, const S *, const S *, const S *, const float *, const float *, int, int) =
        layernorm_bwd_dinp_kernel<S>;
    kx<<<(N + LN_WARPS - 1) / LN_WARPS, LN_WARPS * 32, 0, st>>>(dinp, dout, inp, w, mean, rstd, N, C);
    ZT_CUDA_LAUNCHED(s, "layernorm_bwd (dinp)");
    void (*kp)(float *, float *, const S *, const S *, const float *, const float *, int, int) =
        layernorm_bwd_params_kernel<S>;
    kp<<<(C + LN_COLS - 1) / LN_COLS, LN_COLS * LN_ROW_WARPS, 0, st>>>(dw, db, dout, inp, mean, rstd, N, C);
    ZT_CUDA_LAUNCHED(s, "layernorm_bwd (dw, db)");
}

extern "C" void zt_cuda_layernorm_fwd(zt_stream *s, zt_dtype dt, void *out, float *mean, float *rstd,
                                      const void *inp, const void *w, const void *b, int N, int C) {
    ZT_DISPATCH_DTYPE(dt, layernorm_fwd<S>(s, (S *)out, mean, rstd, (const S *)inp, (const S *)w, (const S *)b, N, C));
}

extern "C" void zt_cuda_layernorm_bwd(zt_stream *s, zt_dtype dt, void *dinp, float *dw, float *db, const void *dout,
                                      const void *inp, const void *w, const float *mean, const float *rstd, int N,
                                      int C) {
    ZT_DISPATCH_DTYPE(dt, layernorm_bwd<S>(s, (S *)dinp, dw, db, (const S *)dout, (const S *)inp, (const S *)w, mean,
                                           rstd, N, C));
}
