/* The optimizers' updates on a contiguous span: AdamW (decoupled weight
 * decay) and SGD with momentum (coupled, as torch.optim.SGD). */
#include "cuda_common.cuh"

/* The same expression as the CPU kernel, term for term; with --fmad=false and
 * IEEE division and sqrt (nvcc's defaults) each element gets the CPU's bits. */
__global__ static void adamw_kernel(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                                    float beta2, float eps, float wd, float bc1, float bc2) {
    for (size_t i = zt_gtid(); i < n; i += zt_gstride()) {
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

extern "C" void zt_cuda_adamw(zt_stream *s, float *p, const float *g, float *m, float *v, size_t n, float lr,
                              float beta1, float beta2, float eps, float wd, int t) {
    if (n == 0) return;
    /* Bias corrections on the host with the host's powf, as the CPU kernel. */
    float bc1 = 1.0f - powf(beta1, (float)t);
    float bc2 = 1.0f - powf(beta2, (float)t);
    cudaStream_t st = zt_cuda_enter(s);
    adamw_kernel<<<zt_ew_blocks(n), ZT_EW_THREADS, 0, st>>>(p, g, m, v, n, lr, beta1, beta2, eps, wd, bc1, bc2);
    ZT_CUDA_LAUNCHED(s, "adamw");
}

/* The CPU kernel's expression, term for term. */
__global__ static void sgd_kernel(float *p, const float *g, float *m, size_t n, float lr, float momentum, int nesterov,
                                  float wd) {
    for (size_t i = zt_gtid(); i < n; i += zt_gstride()) {
        float d = g[i] + wd * p[i];
        float mi = momentum * m[i] + d;
        m[i] = mi;
        p[i] -= lr * (nesterov ? d + momentum * mi : mi);
    }
}

extern "C" void zt_cuda_sgd(zt_stream *s, float *p, const float *g, float *m, size_t n, float lr, float momentum,
                            int nesterov, float wd) {
    if (n == 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    sgd_kernel<<<zt_ew_blocks(n), ZT_EW_THREADS, 0, st>>>(p, g, m, n, lr, momentum, nesterov, wd);
    ZT_CUDA_LAUNCHED(s, "sgd");
}
