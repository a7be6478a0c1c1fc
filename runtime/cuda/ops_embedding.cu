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

/* dwte: tokens repeat, so a thread owns a whole column c of dwte and adds the
 * positions in (b, t) order, exactly as the CPU kernel does: no atomics, and
 * the same bits as the CPU. */
__global__ static void embedding_bwd_wte_kernel(float *dwte, const float *dout, const int32_t *tokens, size_t BT,
                                                int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (size_t bt = 0; bt < BT; bt++) {
        float *dst = dwte + (size_t)tokens[bt] * C + c;
        *dst += dout[bt * C + c];
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
    const int threads = 128;
    embedding_bwd_wte_kernel<<<(C + threads - 1) / threads, threads, 0, st>>>(dwte, dout, tokens, (size_t)B * T, C);
    ZT_CUDA_LAUNCHED(s, "embedding_bwd (wte)");
    embedding_bwd_wpe_kernel<<<zt_ew_blocks((size_t)T * C), ZT_EW_THREADS, 0, st>>>(dwpe, dout, B, T, C);
    ZT_CUDA_LAUNCHED(s, "embedding_bwd (wpe)");
}
