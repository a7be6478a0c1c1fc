/* Softmax cross-entropy over the vocabulary, in each storage type S
 * (cuda_common.cuh): logits and probabilities in S, the losses fp32. */
#include "cuda_common.cuh"

#define XENT_THREADS 512

/* One block per row. probs may alias logits: the target logit is read before
 * the first barrier, and afterwards each thread overwrites only the elements
 * it has read itself. Max and sum are block reductions with a fixed tree.
 * fp32 keeps exp(z - max) in probs and scales it; 16 bits compute the
 * exponential again rather than round the unnormalised value (as the CPU). */
template <typename S>
__global__ static void softmax_xent_fwd_kernel(float *losses, S *probs, const S *logits, const int32_t *targets,
                                               int V) {
    __shared__ float red[33];
    const bool f32 = sizeof(S) == sizeof(float);
    size_t n = blockIdx.x;
    const S *z = logits + n * V;
    S *p = probs + n * V;
    float z_target = zt_ld(z[targets[n]]); /* every thread reads it; before any write */
    float lmax = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) lmax = fmaxf(lmax, zt_ld(z[i]));
    float maxv = zt_block_max(lmax, red); /* barrier: all reads of z_target are done */
    float lsum = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float e = expf(zt_ld(z[i]) - maxv);
        if (f32) p[i] = zt_st<S>(e);
        lsum += e;
    }
    float sum = zt_block_sum(lsum, red);
    float inv = 1.0f / sum;
    /* From log-sum-exp, not log(p): finite even when p underflows. */
    if (threadIdx.x == 0) losses[n] = logf(sum) + maxv - z_target;
    for (int i = threadIdx.x; i < V; i += blockDim.x)
        p[i] = zt_st<S>(f32 ? zt_ld(p[i]) * inv : expf(zt_ld(z[i]) - maxv) * inv);
}

/* dlogits = (probs - onehot(target)) * dloss, overwritten; a thread per element. */
template <typename S>
__global__ static void softmax_xent_bwd_kernel(S *dlogits, const S *probs, const int32_t *targets, size_t N, int V,
                                               float dloss) {
    size_t total = N * (size_t)V;
    for (size_t i = zt_gtid(); i < total; i += zt_gstride()) {
        size_t n = i / (size_t)V;
        int v = (int)(i % (size_t)V);
        dlogits[i] = zt_st<S>((zt_ld(probs[i]) - (v == targets[n] ? 1.0f : 0.0f)) * dloss);
    }
}

template <typename S>
static void softmax_xent_fwd(zt_stream *s, float *losses, S *probs, const S *logits, const int32_t *targets, int N,
                             int V) {
    if (N <= 0 || V <= 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    void (*k)(float *, S *, const S *, const int32_t *, int) = softmax_xent_fwd_kernel<S>;
    k<<<(unsigned int)N, XENT_THREADS, 0, st>>>(losses, probs, logits, targets, V);
    ZT_CUDA_LAUNCHED(s, "softmax_xent_fwd");
}

template <typename S>
static void softmax_xent_bwd(zt_stream *s, S *dlogits, const S *probs, const int32_t *targets, int N, int V,
                             float dloss) {
    size_t total = (size_t)(N > 0 ? N : 0) * (size_t)(V > 0 ? V : 0);
    if (total == 0) return;
    cudaStream_t st = zt_cuda_enter(s);
    void (*k)(S *, const S *, const int32_t *, size_t, int, float) = softmax_xent_bwd_kernel<S>;
    k<<<zt_ew_blocks(total), ZT_EW_THREADS, 0, st>>>(dlogits, probs, targets, (size_t)N, V, dloss);
    ZT_CUDA_LAUNCHED(s, "softmax_xent_bwd");
}

extern "C" void zt_cuda_softmax_xent_fwd(zt_stream *s, zt_dtype dt, float *losses, void *probs, const void *logits,
                                         const int32_t *targets, int N, int V) {
    ZT_DISPATCH_DTYPE(dt, softmax_xent_fwd<S>(s, losses, (S *)probs, (const S *)logits, targets, N, V));
}

extern "C" void zt_cuda_softmax_xent_bwd(zt_stream *s, zt_dtype dt, void *dlogits, const void *probs,
                                         const int32_t *targets, int N, int V, float dloss) {
    ZT_DISPATCH_DTYPE(dt, softmax_xent_bwd<S>(s, (S *)dlogits, (const S *)probs, targets, N, V, dloss));
}
