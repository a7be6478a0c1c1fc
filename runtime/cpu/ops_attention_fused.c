/* Memory-efficient causal attention (--attention fused): the forward keeps
 * only lse[B,NH,T], each row's log softmax normaliser, and the backward
 * recomputes the probabilities from q, k and lse: FlashAttention's
 * arithmetic (Dao et al., 2022) without its tiling, which a CPU row in cache
 * does not need. No scratch at all: the forward runs the online softmax (a
 * running max, with the sum and the output rescaled when it grows), the
 * backward recomputes each score where it uses it. qkv rows hold
 * [q (C) | k (C) | v (C)]; head h uses channels h*hs .. h*hs+hs-1. */
#include <math.h>

#include "cpu_ops.h"

static float dot(const float *a, const float *b, int n) {
    float d = 0.0f;
    for (int i = 0; i < n; i++) d += a[i] * b[i];
    return d;
}

void zt_cpu_attention_fused_fwd(zt_stream *s, float *out, float *lse, const float *qkv, int B, int T, int C,
                                int NH) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    size_t C3 = (size_t)C * 3;
#pragma omp parallel for collapse(3) num_threads(s->nthreads) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                const float *qkv_b = qkv + (size_t)b * T * C3;
                const float *q = qkv_b + (size_t)t * C3 + (size_t)h * hs;  /* [hs] */
                float *o = out + ((size_t)b * T + t) * C + (size_t)h * hs; /* [hs] */
                /* Invariant after key t2: m = max of the scores so far,
                 * l = sum exp(score - m), o = sum exp(score - m) v. */
                float m = -INFINITY, l = 0.0f;
                for (int i = 0; i < hs; i++) o[i] = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = qkv_b + (size_t)t2 * C3 + C + (size_t)h * hs;
                    const float *v = qkv_b + (size_t)t2 * C3 + 2 * (size_t)C + (size_t)h * hs;
                    float sc = dot(q, k, hs) * scale;
                    if (sc > m) { /* rescale what was summed against the old max */
                        float r = expf(m - sc); /* 0 on the first key (m = -inf) */
                        l *= r;
                        for (int i = 0; i < hs; i++) o[i] *= r;
                        m = sc;
                    }
                    float e = expf(sc - m);
                    l += e;
                    for (int i = 0; i < hs; i++) o[i] += e * v[i];
                }
                float inv = 1.0f / l;
                for (int i = 0; i < hs; i++) o[i] *= inv;
                lse[((size_t)b * NH + h) * T + t] = m + logf(l);
            }
}

void zt_cpu_attention_fused_bwd(zt_stream *s, float *dqkv, float *datt, const float *dout, const float *qkv,
                                const float *out, const float *lse, int B, int T, int C, int NH) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    size_t C3 = (size_t)C * 3;
    /* One task per (b, h): it alone writes that head's slices of dq, dk, dv.
     * Per query row t, with p = exp(scale q[t].k[t2] - lse[t]):
     *   D       = dout[t] . out[t]        (= sum_t2 p dout[t] . v[t2])
     *   dv[t2] += p dout[t]
     *   ds      = p (dout[t] . v[t2] - D) scale
     *   dq[t]  += ds k[t2],  dk[t2] += ds q[t] */
#pragma omp parallel for collapse(2) num_threads(s->nthreads) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *qkv_b = qkv + (size_t)b * T * C3;
            float *dqkv_b = dqkv + (size_t)b * T * C3;
            float *D = datt + ((size_t)b * NH + h) * T; /* [T] */
            for (int t = 0; t < T; t++) {
                const float *q = qkv_b + (size_t)t * C3 + (size_t)h * hs;          /* [hs] */
                const float *dy = dout + ((size_t)b * T + t) * C + (size_t)h * hs; /* [hs] */
                const float *y = out + ((size_t)b * T + t) * C + (size_t)h * hs;   /* [hs] */
                float *dq = dqkv_b + (size_t)t * C3 + (size_t)h * hs;
                float l = lse[((size_t)b * NH + h) * T + t];
                float d = dot(dy, y, hs);
                D[t] = d;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = qkv_b + (size_t)t2 * C3 + C + (size_t)h * hs;
                    const float *v = qkv_b + (size_t)t2 * C3 + 2 * (size_t)C + (size_t)h * hs;
                    float *dk = dqkv_b + (size_t)t2 * C3 + C + (size_t)h * hs;
                    float *dv = dqkv_b + (size_t)t2 * C3 + 2 * (size_t)C + (size_t)h * hs;
                    float p = expf(dot(q, k, hs) * scale - l);
                    float dp = 0.0f;
                    for (int i = 0; i < hs; i++) {
                        dp += dy[i] * v[i];
                        dv[i] += p * dy[i];
                    }
                    float ds = p * (dp - d) * scale;
                    for (int i = 0; i < hs; i++) {
                        dq[i] += ds * k[i];
                        dk[i] += ds * q[i];
                    }
                }
            }
        }
}
