/* Token + position embedding. */
#include "cuda_common.cuh"

/* One thread per output element. */
__global__ static void embedding_fwd_kernel(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                                            size_t BT, int T, int C) {
    size_t total = BT * (size_t)C;
    for (size_t i = zt_gtid(); i < total; i += zt_gstride()) {
        size_t bt = i / (size_t)C;
        int c = (int)(i % (size_t)C);
        int t = (int)(bt % (size_t)T);
        out[i] = wte[(size_t)tokens[bt] * C + c] + wpe[(size_t)t * C + c];
    }
}

/* dwte: tokens repeat, so each element dwte[v, c] must have one writer that
 * adds the positions with token v in (b, t) order, as the CPU kernel does (no
 * atomics; the same bits as the CPU). A block per tile of 32 channels; warp w
 * owns the vocabulary rows v with v % 32 == w and scans every position in
 * order, updating only its own rows (lane l: channel tile + l, coalesced).
 * That is 32 x C threads where one thread per channel gave only C. */
#define EMB_COLS 32
#define EMB_WARPS 32
__global__ static void __launch_bounds__(EMB_COLS * EMB_WARPS)
    embedding_bwd_wte_kernel(float *dwte, const float *dout, const int32_t *tokens, size_t BT, int C) {
    int lane = threadIdx.x % EMB_COLS, w = threadIdx.x / EMB_COLS;
    int c = blockIdx.x * EMB_COLS + lane;
    if (c >= C) return; /* lanes past C only skip work: no shuffles below */
    for (size_t bt = 0; bt < BT; bt++) {
        int v = tokens[bt];
        if (v % EMB_WARPS != w) continue;
        dwte[(size_t)v * C + c] += dout[bt * C + c];
    }
}

/* dwpe[t, c] += dout[b, t, c] for b in order: a thread per (t, c). */
__global__ static void embedding_bwd_wpe_kernel(float *dwpe, const float *dout, int B, int T, int C) {
    size_t total = (size_t)T * C;
    for (size_t i = zt_gtid(); i < total; i += zt_gstride()) {
        float acc = dwpe[i];
        for (int b = 0; b < B; b++) acc += dout[(size_t)b * total + i];
        dwpe[i] = acc;
    }
}

extern "C" void zt_cuda_embedding_fwd(zt_stream *s, float *out, const int32_t *tokens, const float *wte,
                                      const float *wpe, int B, int T, int C) {
    size_t n = (size_t)B * T * C;
    if (n == 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    embedding_fwd_kernel<<<zt_ew_blocks(n), ZT_EW_THREADS, 0, st>>>(out, tokens, wte, wpe, (size_t)B * T, T, C);
    ZT_CUDA_LAUNCHED(s, "embedding_fwd");
}

extern "C" void zt_cuda_embedding_bwd(zt_stream *s, float *dwte, float *dwpe, const float *dout,
                                      const int32_t *tokens, int B, int T, int C) {
    if ((size_t)B * T * C == 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    embedding_bwd_wte_kernel<<<(C + EMB_COLS - 1) / EMB_COLS, EMB_COLS * EMB_WARPS, 0, st>>>(dwte, dout, tokens,
                                                                                          (size_t)B * T, C);
    ZT_CUDA_LAUNCHED(s, "embedding_bwd (wte)");
    embedding_bwd_wpe_kernel<<<zt_ew_blocks((size_t)T * C), ZT_EW_THREADS, 0, st>>>(dwpe, dout, B, T, C);
    ZT_CUDA_LAUNCHED(s, "embedding_bwd (wpe)");
}
