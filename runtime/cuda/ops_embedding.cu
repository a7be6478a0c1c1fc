/* Token + position embedding, in each storage type S (cuda_common.cuh):
 * wte, wpe and out in S, the gradients dwte, dwpe fp32. Without a position
 * table (wpe, dwpe NULL: a Llama's RoPE encodes positions) the token's row
 * is copied bit for bit and no position gradient is summed. */
#include "cuda_common.cuh"

/* One thread per output element; the sum in fp32, rounded once. */
template <typename S>
__global__ static void embedding_fwd_kernel(S *out, const int32_t *tokens, const S *wte, const S *wpe, size_t BT,
                                            int T, int C) {
    size_t total = BT * (size_t)C;
    for (size_t i = zt_gtid(); i < total; i += zt_gstride()) {
        size_t bt = i / (size_t)C;
        int c = (int)(i % (size_t)C);
        int t = (int)(bt % (size_t)T);
        const S te = wte[(size_t)tokens[bt] * C + c];
        out[i] = wpe ? zt_st<S>(zt_ld(te) + zt_ld(wpe[(size_t)t * C + c])) : te;
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
template <typename S>
__global__ static void __launch_bounds__(EMB_COLS * EMB_WARPS)
    embedding_bwd_wte_kernel(float *dwte, const S *dout, const int32_t *tokens, size_t BT, int C) {
    int lane = threadIdx.x % EMB_COLS, w = threadIdx.x / EMB_COLS;
    int c = blockIdx.x * EMB_COLS + lane;
    if (c >= C) return; /* lanes past C only skip work: no shuffles below */
    for (size_t bt = 0; bt < BT; bt++) {
        int v = tokens[bt];
        if (v % EMB_WARPS != w) continue;
        dwte[(size_t)v * C + c] += zt_ld(dout[bt * C + c]);
    }
}

/* dwpe[t, c] += dout[b, t, c] for b in order: a thread per (t, c). */
template <typename S>
__global__ static void embedding_bwd_wpe_kernel(float *dwpe, const S *dout, int B, int T, int C) {
    size_t total = (size_t)T * C;
    for (size_t i = zt_gtid(); i < total; i += zt_gstride()) {
        float acc = dwpe[i];
        for (int b = 0; b < B; b++) acc += zt_ld(dout[(size_t)b * total + i]);
        dwpe[i] = acc;
    }
}

template <typename S>
static void embedding_fwd(zt_stream *s, S *out, const int32_t *tokens, const S *wte, const S *wpe, int B, int T,
                          int C) {
    size_t n = (size_t)B * T * C;
    if (n == 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    void (*k)(S *, const int32_t *, const S *, const S *, size_t, int, int) = embedding_fwd_kernel<S>;
    k<<<zt_ew_blocks(n), ZT_EW_THREADS, 0, st>>>(out, tokens, wte, wpe, (size_t)B * T, T, C);
    ZT_CUDA_LAUNCHED(s, "embedding_fwd");
}

template <typename S>
static void embedding_bwd(zt_stream *s, float *dwte, float *dwpe, const S *dout, const int32_t *tokens, int B, int T,
                          int C) {
    if ((size_t)B * T * C == 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    void (*kte)(float *, const S *, const int32_t *, size_t, int) = embedding_bwd_wte_kernel<S>;
    kte<<<(C + EMB_COLS - 1) / EMB_COLS, EMB_COLS * EMB_WARPS, 0, st>>>(dwte, dout, tokens, (size_t)B * T, C);
    ZT_CUDA_LAUNCHED(s, "embedding_bwd (wte)");
    if (!dwpe) return;
    void (*kpe)(float *, const S *, int, int, int) = embedding_bwd_wpe_kernel<S>;
    kpe<<<zt_ew_blocks((size_t)T * C), ZT_EW_THREADS, 0, st>>>(dwpe, dout, B, T, C);
    ZT_CUDA_LAUNCHED(s, "embedding_bwd (wpe)");
}

extern "C" void zt_cuda_embedding_fwd(zt_stream *s, zt_dtype dt, void *out, const int32_t *tokens, const void *wte,
                                      const void *wpe, int B, int T, int C) {
    ZT_DISPATCH_DTYPE(dt, embedding_fwd<S>(s, (S *)out, tokens, (const S *)wte, (const S *)wpe, B, T, C));
}

extern "C" void zt_cuda_embedding_bwd(zt_stream *s, zt_dtype dt, float *dwte, float *dwpe, const void *dout,
                                      const int32_t *tokens, int B, int T, int C) {
    ZT_DISPATCH_DTYPE(dt, embedding_bwd<S>(s, dwte, dwpe, (const S *)dout, tokens, B, T, C));
}
