/* Softmax cross-entropy over the vocabulary. */
#include "cuda_common.cuh"

#define XENT_THREADS 512

/* One block per row. probs may alias logits: the target logit is read before
 * the first barrier, and afterwards each thread overwrites only the elements
 * it has read itself. Max and sum are block reductions with a fixed tree. */
__global__ static void softmax_xent_fwd_kernel(float *losses, float *probs, const float *logits,
                                               const int32_t *targets, int V) {
    __shared__ float red[33];
    size_t n = blockIdx.x;
    const float *z = logits + n * V;
    float *p = probs + n * V;
    float z_target = z[targets[n]]; /* every thread reads it; before any write */
    float lmax = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) lmax = fmaxf(lmax, z[i]);
    float maxv = zt_block_max(lmax, red); /* barrier: all reads of z_target are done */
    float lsum = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float e = expf(z[i] - maxv);
        p[i] = e;
        lsum += e;
    }
    float sum = zt_block_sum(lsum, red);
    float inv = 1.0f / sum;
    /* From log-sum-exp, not log(p): finite even when p underflows. */
    if (threadIdx.x == 0) losses[n] = logf(sum) + maxv - z_target;
    for (int i = threadIdx.x; i < V; i += blockDim.x) p[i] *= inv;
}

/* dlogits = (probs - onehot(target)) * dloss, overwritten; a thread per element. */
__global__ static void softmax_xent_bwd_kernel(float *dlogits, const float *probs, const int32_t *targets, size_t N,
                                               int V, float dloss) {
    size_t total = N * (size_t)V;
    for (size_t i = zt_gtid(); i < total; i += zt_gstride()) {
        size_t n = i / (size_t)V;
        int v = (int)(i % (size_t)V);
        dlogits[i] = (probs[i] - (v == targets[n] ? 1.0f : 0.0f)) * dloss;
    }
}

extern "C" void zt_cuda_softmax_xent_fwd(zt_stream *s, float *losses, float *probs, const float *logits,
                                         const int32_t *targets, int N, int V) {
    if (N <= 0 || V <= 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    softmax_xent_fwd_kernel<<<(unsigned int)N, XENT_THREADS, 0, st>>>(losses, probs, logits, targets, V);
    ZT_CUDA_LAUNCHED(s, "softmax_xent_fwd");
}

extern "C" void zt_cuda_softmax_xent_bwd(zt_stream *s, float *dlogits, const float *probs, const int32_t *targets,
                                         int N, int V, float dloss) {
    size_t total = (size_t)(N > 0 ? N : 0) * (size_t)(V > 0 ? V : 0);
    if (total == 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    softmax_xent_bwd_kernel<<<zt_ew_blocks(total), ZT_EW_THREADS, 0, st>>>(dlogits, probs, targets, (size_t)N, V,
                                                                          dloss);
    ZT_CUDA_LAUNCHED(s, "softmax_xent_bwd");
}
