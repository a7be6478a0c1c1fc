/* The optimizers' updates on a contiguous span: AdamW (decoupled weight
 * decay) and SGD with momentum (coupled, as torch.optim.SGD). */
#include <math.h>

#include "cpu_ops.h"

void zt_cpu_adamw(zt_stream *s, float *p, const float *g, float *m, float *v, size_t n, float lr,
                  float beta1, float beta2, float eps, float wd, int t) {
    float bc1 = 1.0f - powf(beta1, (float)t);
    float bc2 = 1.0f - powf(beta2, (float)t);
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1;
        float vhat = vi / bc2;
        p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[i]);
    }
}

void zt_cpu_sgd(zt_stream *s, float *p, const float *g, float *m, size_t n, float lr, float momentum, int nesterov,
                float wd) {
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (size_t i = 0; i < n; i++) {
        float d = g[i] + wd * p[i];
        float mi = momentum * m[i] + d;
        m[i] = mi;
        p[i] -= lr * (nesterov ? d + momentum * mi : mi);
    }
}
