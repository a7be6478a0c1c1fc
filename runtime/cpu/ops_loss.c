/* Softmax cross-entropy over the vocabulary. */
#include <math.h>

#include "cpu_ops.h"

void zt_cpu_softmax_xent_fwd(zt_stream *s, float *losses, float *probs, const float *logits,
                             const int32_t *targets, int N, int V) {
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (int n = 0; n < N; n++) {
        const float *z = logits + (size_t)n * V; /* [V] */
        float *p = probs + (size_t)n * V;        /* [V] */
        float z_target = z[targets[n]]; /* read first: probs may alias logits */
        float maxv = -INFINITY;
        for (int i = 0; i < V; i++)
            if (z[i] > maxv) maxv = z[i];
        float sum = 0.0f;
        for (int i = 0; i < V; i++) {
            p[i] = expf(z[i] - maxv);
            sum += p[i];
        }
        float inv = 1.0f / sum;
        /* From log-sum-exp, not log(p): finite even when p underflows. */
        losses[n] = logf(sum) + maxv - z_target;
        for (int i = 0; i < V; i++) p[i] *= inv;
    }
}

void zt_cpu_softmax_xent_bwd(zt_stream *s, float *dlogits, const float *probs,
                             const int32_t *targets, int N, int V, float dloss) {
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (int n = 0; n < N; n++) {
        const float *p = probs + (size_t)n * V; /* [V] */
        float *d = dlogits + (size_t)n * V;     /* [V] */
        for (int i = 0; i < V; i++) d[i] = (p[i] - (i == targets[n] ? 1.0f : 0.0f)) * dloss;
    }
}
