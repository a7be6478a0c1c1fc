/* LayerNorm over the last dimension, eps 1e-5. */
#include <math.h>

#include "cpu_ops.h"

void zt_cpu_layernorm_fwd(zt_stream *s, float *out, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, int N, int C) {
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C; /* [C] */
        float m = 0.0f;
        for (int c = 0; c < C; c++) m += x[c];
        m /= (float)C;
        float var = 0.0f;
        for (int c = 0; c < C; c++) {
            float d = x[c] - m;
            var += d * d;
        }
        var /= (float)C;
        float r = 1.0f / sqrtf(var + 1e-5f);
        float *o = out + (size_t)n * C; /* [C] */
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * r * w[c] + b[c];
        mean[n] = m;
        rstd[n] = r;
    }
}

void zt_cpu_layernorm_bwd(zt_stream *s, float *dinp, float *dw, float *db, const float *dout,
                          const float *inp, const float *w, const float *mean, const float *rstd,
                          int N, int C) {
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;  /* [C] */
        const float *dy = dout + (size_t)n * C; /* [C] */
        float *dx = dinp + (size_t)n * C;       /* [C] */
        float m = mean[n], r = rstd[n];
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - m) * r;
            float dnorm = w[c] * dy[c];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * xhat;
        }
        dnorm_mean /= (float)C;
        dnorm_norm_mean /= (float)C;
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - m) * r;
            float dnorm = w[c] * dy[c];
            dx[c] += (dnorm - dnorm_mean - xhat * dnorm_norm_mean) * r;
        }
    }
    /* Parameter gradients: threads own channels, rows summed in order. */
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (int c = 0; c < C; c++) {
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
}
