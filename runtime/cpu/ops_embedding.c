/* Token + position embedding. */
#include "cpu_ops.h"

void zt_cpu_embedding_fwd(zt_stream *s, float *out, const int32_t *tokens, const float *wte,
                          const float *wpe, int B, int T, int C) {
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        int t = bt % T;
        const float *te = wte + (size_t)tokens[bt] * C; /* [C] */
        const float *pe = wpe + (size_t)t * C;          /* [C] */
        float *o = out + (size_t)bt * C;                /* [C] */
        for (int c = 0; c < C; c++) o[c] = te[c] + pe[c];
    }
}

void zt_cpu_embedding_bwd(zt_stream *s, float *dwte, float *dwpe, const float *dout,
                          const int32_t *tokens, int B, int T, int C) {
    /* Tokens repeat, so threads split the channels, not the positions: each
     * thread owns columns of dwte and adds in (b, t) order. */
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (int c = 0; c < C; c++) {
        for (int bt = 0; bt < B * T; bt++) {
            float d = dout[(size_t)bt * C + c];
            dwte[(size_t)tokens[bt] * C + c] += d;
            dwpe[(size_t)(bt % T) * C + c] += d;
        }
    }
}
