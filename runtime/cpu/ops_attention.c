/* Causal multi-head self-attention, computed directly (no flash tiling): the
 * probabilities att[B,NH,T,T] are kept for backward. qkv rows hold
 * [q (C) | k (C) | v (C)], head h uses channels h*hs .. h*hs+hs-1. */
#include <math.h>

#include "cpu_ops.h"

void zt_cpu_attention_fwd(zt_stream *s, float *out, float *att, const float *qkv, int B, int T,
                          int C, int NH) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    size_t C3 = (size_t)C * 3;
#pragma omp parallel for collapse(3) num_threads(s->nthreads) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                const float *q = qkv + ((size_t)b * T + t) * C3 + (size_t)h * hs; /* [hs] */
                float *a = att + (((size_t)b * NH + h) * T + t) * T;              /* [T] */
                float maxv = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = qkv + ((size_t)b * T + t2) * C3 + C + (size_t)h * hs; /* [hs] */
                    float dot = 0.0f;
                    for (int i = 0; i < hs; i++) dot += q[i] * k[i];
                    dot *= scale;
                    a[t2] = dot;
                    if (dot > maxv) maxv = dot;
                }
                float sum = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    float e = expf(a[t2] - maxv);
                    a[t2] = e;
                    sum += e;
                }
                float inv = 1.0f / sum;
                for (int t2 = 0; t2 < T; t2++) a[t2] = t2 <= t ? a[t2] * inv : 0.0f;
                float *o = out + ((size_t)b * T + t) * C + (size_t)h * hs; /* [hs] */
                for (int i = 0; i < hs; i++) o[i] = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *v = qkv + ((size_t)b * T + t2) * C3 + 2 * (size_t)C + (size_t)h * hs;
                    for (int i = 0; i < hs; i++) o[i] += a[t2] * v[i];
                }
            }
}

void zt_cpu_attention_bwd(zt_stream *s, float *dqkv, float *datt, const float *dout,
                          const float *qkv, const float *att, int B, int T, int C, int NH,
                          float *scratch, size_t scratch_numel) {
    (void)scratch, (void)scratch_numel; /* the row-by-row loop needs only datt */
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    size_t C3 = (size_t)C * 3;
    /* One task per (b, h): it alone writes that head's slices of dq, dk, dv. */
#pragma omp parallel for collapse(2) num_threads(s->nthreads) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            float *da = datt + ((size_t)b * NH + h) * T; /* [T] scratch */
            for (int t = 0; t < T; t++) {
                const float *a = att + (((size_t)b * NH + h) * T + t) * T;    /* [T] */
                const float *dy = dout + ((size_t)b * T + t) * C + (size_t)h * hs; /* [hs] */
                const float *q = qkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
                float *dq = dqkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
                float dot_a_da = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *v = qkv + ((size_t)b * T + t2) * C3 + 2 * (size_t)C + (size_t)h * hs;
                    float *dv = dqkv + ((size_t)b * T + t2) * C3 + 2 * (size_t)C + (size_t)h * hs;
                    float d = 0.0f;
                    for (int i = 0; i < hs; i++) {
                        d += dy[i] * v[i];
                        dv[i] += a[t2] * dy[i];
                    }
                    da[t2] = d;
                    dot_a_da += a[t2] * d;
                }
                for (int t2 = 0; t2 <= t; t2++) {
                    float dpre = a[t2] * (da[t2] - dot_a_da) * scale; /* through softmax and scale */
                    const float *k = qkv + ((size_t)b * T + t2) * C3 + C + (size_t)h * hs;
                    float *dk = dqkv + ((size_t)b * T + t2) * C3 + C + (size_t)h * hs;
                    for (int i = 0; i < hs; i++) {
                        dq[i] += dpre * k[i];
                        dk[i] += dpre * q[i];
                    }
                }
            }
        }
}
