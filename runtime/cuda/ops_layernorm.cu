/* LayerNorm over the last dimension, eps 1e-5 (as the CPU kernel). */
#include "cuda_common.cuh"

#define LN_WARPS 8 /* rows per block: one warp per row */

/* One warp per row: the lanes take channels lane, lane+32, ... and the sums
 * are combined with a fixed butterfly. Two passes (mean, then the variance of
 * x - mean) as on the CPU. */
__global__ static void layernorm_fwd_kernel(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                            const float *b, int N, int C) {
    int lane = threadIdx.x & 31;
    int n = blockIdx.x * LN_WARPS + (threadIdx.x >> 5);
    if (n >= N) return; /* whole warps leave together: the shuffles stay full */
    const float *x = inp + (size_t)n * C;
    float sum = 0.0f;
    for (int c = lane; c < C; c += 32) sum += x[c];
    float m = zt_warp_sum(sum) / (float)C;
    float var = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = x[c] - m;
        var += d * d;
    }
    var = zt_warp_sum(var) / (float)C;
    float r = 1.0f / sqrtf(var + 1e-5f);
    float *o = out + (size_t)n * C;
    for (int c = lane; c < C; c += 32) o[c] = (x[c] - m) * r * w[c] + b[c];
    if (lane == 0) {
        mean[n] = m;
        rstd[n] = r;
    }
}

/* dinp: one warp per row, the same formula as the CPU kernel. */
__global__ static void layernorm_bwd_dinp_kernel(float *dinp, const float *dout, const float *inp, const float *w,
                                                 const float *mean, const float *rstd, int N, int C) {
    int lane = threadIdx.x & 31;
    int n = blockIdx.x * LN_WARPS + (threadIdx.x >> 5);
    if (n >= N) return;
    const float *x = inp + (size_t)n * C;
    const float *dy = dout + (size_t)n * C;
    float *dx = dinp + (size_t)n * C;
    float m = mean[n], r = rstd[n];
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float xhat = (x[c] - m) * r;
        float dnorm = w[c] * dy[c];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * xhat;
    }
    dnorm_mean = zt_warp_sum(dnorm_mean) / (float)C;
    dnorm_norm_mean = zt_warp_sum(dnorm_norm_mean) / (float)C;
    for (int c = lane; c < C; c += 32) {
        float xhat = (x[c] - m) * r;
        float dnorm = w[c] * dy[c];
        dx[c] += (dnorm - dnorm_mean - xhat * dnorm_norm_mean) * r;
    }
}

/* dw, db: a thread owns channel c and sums the rows in order (the CPU order,
 * so the same bits as the CPU; no atomics). Adjacent threads read adjacent
 * channels of a row: the loads coalesce. */
__global__ static void layernorm_bwd_params_kernel(float *dw, float *db, const float *dout, const float *inp,
                                                   const float *mean, const float *rstd, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float gw = 0.0f, gb = 0.0f;
    for (int n = 0; n < N; n++) {
        float xhat = (inp[(size_t)n * C + c] - mean[n]) * rstd[n];
        float dy = dout[(size_t)n * C + c];
        gw += xhat * dy;
        gb += dy;
    }
    dw[c] += gw;
    db[c] += gb;
}

extern "C" void zt_cuda_layernorm_fwd(zt_stream *s, float *out, float *mean, float *rstd, const float *inp,
                                      const float *w, const float *b, int N, int C) {
    if (N <= 0 || C <= 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    layernorm_fwd_kernel<<<(N + LN_WARPS - 1) / LN_WARPS, LN_WARPS * 32, 0, st>>>(out, mean, rstd, inp, w, b, N, C);
    ZT_CUDA_LAUNCHED(s, "layernorm_fwd");
}

extern "C" void zt_cuda_layernorm_bwd(zt_stream *s, float *dinp, float *dw, float *db, const float *dout,
                                      const float *inp, const float *w, const float *mean, const float *rstd,
                                      int N, int C) {
    if (N <= 0 || C <= 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    layernorm_bwd_dinp_kernel<<<(N + LN_WARPS - 1) / LN_WARPS, LN_WARPS * 32, 0, st>>>(dinp, dout, inp, w, mean,
                                                                                     rstd, N, C);
    ZT_CUDA_LAUNCHED(s, "layernorm_bwd (dinp)");
    const int threads = 128;
    layernorm_bwd_params_kernel<<<(C + threads - 1) / threads, threads, 0, st>>>(dw, db, dout, inp, mean, rstd, N,
                                                                                  C);
    ZT_CUDA_LAUNCHED(s, "layernorm_bwd (dw, db)");
}
