/* The compute backend. Operations are issued on streams and are asynchronous
 * in spirit: a caller may only rely on a result after an explicit sync point
 * (zt_stream_sync, or an event another stream waits on). The CPU backend runs
 * every operation at once, so its syncs are no-ops; the CUDA backend (later)
 * enqueues them. Kernels never allocate: callers pass every buffer. */
#ifndef ZT_BACKEND_H
#define ZT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "zt_dtype.h"
#include "zt_sround.h"
#include "zt_error.h"
#include "zt_mem.h"

typedef enum { ZT_DEVICE_CPU = 0, ZT_DEVICE_CUDA = 1 } zt_device;

struct zt_backend;

typedef struct {
    struct zt_backend *be;
    void *handle;  /* cudaStream_t on CUDA; unused on CPU */
    int nthreads;  /* CPU: threads the kernels on this stream may use */
} zt_stream;

/* H2H: between host buffers the device reads (the host pool), off the link. */
typedef enum { ZT_COPY_H2D, ZT_COPY_D2H, ZT_COPY_D2D, ZT_COPY_H2H } zt_copy_kind;

/* Kernel table of one compute dtype (`dtype`). The model's tensors, its
 * activations, their gradients and the gathered parameters, are `void *` in
 * that dtype; parameter gradients (`float *` dw, db, dbias, dwte, dwpe),
 * layernorm mean/rstd, rmsnorm rstd, attention log-sum-exp, its datt
 * scratch and the losses are fp32 in every dtype, and every kernel
 * accumulates in fp32. All tensors are contiguous on the backend's device.
 * Backward kernels ACCUMULATE (+=) into parameter gradients and into input
 * gradients, so callers zero those buffers once, except where a comment
 * says "overwritten" (matmul's dinp, gelu_bwd, swiglu_bwd, the in-place
 * rope_bwd); forward kernels overwrite their outputs. Shapes are in the
 * comments: B batch, T sequence, C channels, NH query heads, NKV key/value
 * heads, HD head size, F hidden size of the MLP, V vocabulary, N rows. The
 * engine's operations at the end (adamw .. sum_squares) are the same in
 * every table. */
typedef struct {
    zt_dtype dtype;
    /* out[B,T,C] = wte[tokens[b,t], :] + wpe[t, :]; wpe[T,C] may be NULL
     * (no position embedding: a Llama encodes positions with RoPE), then
     * out = wte[tokens[b,t], :], copied bit for bit */
    void (*embedding_fwd)(zt_stream *s, void *out, const int32_t *tokens, const void *wte, const void *wpe, int B,
                          int T, int C);
    /* dwte[V,C] += scatter(dout), dwpe[T,C] += sum_b dout (dwpe may be NULL:
     * no position embedding) */
    void (*embedding_bwd)(zt_stream *s, float *dwte, float *dwpe, const void *dout, const int32_t *tokens, int B,
                          int T, int C);
    /* out[N,C] = (inp - mean) * rstd * w + b; mean[N], rstd[N] saved for backward */
    void (*layernorm_fwd)(zt_stream *s, void *out, float *mean, float *rstd, const void *inp, const void *w,
                          const void *b, int N, int C);
    /* dinp[N,C], dw[C], db[C] += ... */
    void (*layernorm_bwd)(zt_stream *s, void *dinp, float *dw, float *db, const void *dout, const void *inp,
                          const void *w, const float *mean, const float *rstd, int N, int C);
    /* out[N,OC] = inp[N,C] @ w[OC,C]^T + bias[OC] (bias may be NULL) */
    void (*matmul_fwd)(zt_stream *s, void *out, const void *inp, const void *w, const void *bias, int N, int C,
                       int OC);
    /* dinp[N,C] = dout @ w (overwritten, so the caller need not zero it);
     * dw[OC,C] += dout^T @ inp; dbias[OC] += sum_n dout (dinp, dbias may be NULL) */
    void (*matmul_bwd)(zt_stream *s, void *dinp, float *dw, float *dbias, const void *dout, const void *inp,
                       const void *w, int N, int C, int OC);
    /* qkv[B,T,3C] -> out[B,T,C]; att[B,NH,T,T] holds the causal softmax
     * probabilities, exactly 0 above the diagonal (backward's GEMMs run over
     * the full T x T blocks and rely on it) */
    void (*attention_fwd)(zt_stream *s, void *out, void *att, const void *qkv, int B, int T, int C, int NH);
    /* dqkv[B,T,3C] += ...; datt[B,NH,T] is scratch (overwritten).
     * scratch[scratch_bytes] is more memory the kernel may overwrite (dead
     * buffers the caller lends; NULL and 0 when none): the CUDA backend runs
     * the backward as batched GEMMs through [NH,T,T] fp32 blocks when it
     * holds at least NH*T*T floats, and row by row otherwise (so the path can
     * depend on B and T); the CPU, in a 16-bit dtype, sums the gradients in
     * an fp32 [B,T,3C] there when it fits (one rounding instead of one per
     * term). */
    void (*attention_bwd)(zt_stream *s, void *dqkv, float *datt, const void *dout, const void *qkv, const void *att,
                          int B, int T, int C, int NH, void *scratch, size_t scratch_bytes);
    /* Memory-efficient attention (--attention fused): out[B,T,C] as
     * attention_fwd, but what it keeps for backward is lse[B,NH,T], the log
     * of each causal row's softmax normaliser,
     *   lse[t] = m + log(sum_{t2 <= t} exp(s[t2] - m)),  s = scale q.k, m = max s,
     * instead of the [B,NH,T,T] probabilities (T times less memory). */
    void (*attention_fused_fwd)(zt_stream *s, void *out, float *lse, const void *qkv, int B, int T, int C, int NH);
    /* dqkv[B,T,3C] += ..., the probabilities recomputed as
     * exp(scale q.k - lse); out[B,T,C] is the forward's output (the softmax
     * gradient's D[t] = dout[t] . out[t], per head); datt[B,NH,T] is scratch
     * (overwritten with D); scratch as for attention_bwd (the CPU's fp32
     * gradient sums). */
    void (*attention_fused_bwd)(zt_stream *s, void *dqkv, float *datt, const void *dout, const void *qkv,
                                const void *out, const float *lse, int B, int T, int C, int NH, void *scratch,
                                size_t scratch_bytes);
    /* out[N] = gelu_tanh(inp[N]) */
    void (*gelu_fwd)(zt_stream *s, void *out, const void *inp, size_t N);
    /* dinp[N] = gelu'(inp) * dout (overwritten) */
    void (*gelu_bwd)(zt_stream *s, void *dinp, const void *inp, const void *dout, size_t N);
    /* out[N] = a[N] + b[N]  (the residual connection) */
    void (*residual_fwd)(zt_stream *s, void *out, const void *a, const void *b, size_t N);
    /* da[N] += dout; db[N] += dout */
    void (*residual_bwd)(zt_stream *s, void *da, void *db, const void *dout, size_t N);
    /* probs[N,V] = softmax(logits[N,V]); losses[N] = -log probs[n, targets[n]]; probs may alias logits */
    void (*softmax_xent_fwd)(zt_stream *s, float *losses, void *probs, const void *logits, const int32_t *targets,
                             int N, int V);
    /* dlogits[N,V] = (probs - onehot(targets)) * dloss (overwrite; may alias probs) */
    void (*softmax_xent_bwd)(zt_stream *s, void *dlogits, const void *probs, const int32_t *targets, int N, int V,
                             float dloss);
    /* ---- the Llama kernels (RMSNorm, RoPE, SwiGLU, grouped-query attention) ---- */
    /* out[N,C] = inp * rstd * w, rstd[N] = 1 / sqrt(mean_c(inp^2) + eps)
     * (fp32, saved for backward); w[C] */
    void (*rmsnorm_fwd)(zt_stream *s, void *out, float *rstd, const void *inp, const void *w, int N, int C,
                        float eps);
    /* dinp[N,C] += ..., dw[C] += ... from dout[N,C], inp[N,C], w[C] and the
     * forward's rstd[N] */
    void (*rmsnorm_bwd)(zt_stream *s, void *dinp, float *dw, const void *dout, const void *inp, const void *w,
                        const float *rstd, int N, int C);
    /* IN PLACE on qkv[B,T,(NH+2*NKV)*HD], per token [q: NH heads | k: NKV
     * heads | v: NKV heads] of HD each (HD even): every q and k head at
     * position t is rotated as Hugging Face transformers' Llama does
     * (rotate-half: element i pairs with i + HD/2), v is untouched. For
     * i < HD/2, in this order:
     *   e   = (float)(2i) / (float)HD                       fp32
     *   f_i = (float)(1.0 / pow((double)theta, (double)e))   rounded once to fp32
     *   a   = (float)t * f_i                                 fp32 product
     *   c   = (float)cos((double)a), s = (float)sin((double)a)
     *   (x_i, x_{i+HD/2}) <- (x_i c - x_{i+HD/2} s, x_{i+HD/2} c + x_i s)   fp32, rounded once
     * HF computes f_i and the angle in fp32 too. f, cos and sin through
     * double are correctly rounded nearly always, so the CPU and CUDA tables
     * agree to the bit almost everywhere, by an fp32 ulp of f, c or s at
     * worst. In 16-bit dtypes c and s stay fp32 and the result is rounded
     * once (HF's bf16 model rounds c, s and each product to bf16). */
    void (*rope_fwd)(zt_stream *s, void *qkv, int B, int T, int NH, int NKV, int HD, float theta);
    /* IN PLACE on dqkv[B,T,(NH+2*NKV)*HD]: the transposed rotation (angle
     * -a, the same c and s as rope_fwd) of the q and k parts; v untouched.
     * Overwrites: rope is a linear map, and its gradient is applied in place. */
    void (*rope_bwd)(zt_stream *s, void *dqkv, int B, int T, int NH, int NKV, int HD, float theta);
    /* out[N,F] = silu(gate) * up, gate_up[N,2F] per row [gate (F) | up (F)],
     * silu(x) = x / (1 + exp(-x)) */
    void (*swiglu_fwd)(zt_stream *s, void *out, const void *gate_up, int N, int F);
    /* dgate_up[N,2F] = [dout * up * silu'(gate) | dout * silu(gate)]
     * (overwritten, as gelu_bwd) from gate_up[N,2F] and dout[N,F] */
    void (*swiglu_bwd)(zt_stream *s, void *dgate_up, const void *gate_up, const void *dout, int N, int F);
    /* Grouped-query attention through attention_fwd/bwd (and the fused
     * pair) on C = NH*HD: qkv[N,(NH+2*NKV)*HD] -> qkv_full[N,3*NH*HD]
     * (overwritten), q copied, and k and v head j (of NKV) copied into query
     * heads j*G .. j*G+G-1, G = NH/NKV (NH a multiple of NKV). N = B*T. */
    void (*gqa_expand)(zt_stream *s, void *qkv_full, const void *qkv, int N, int NH, int NKV, int HD);
    /* The transpose of gqa_expand: dqkv[N,(NH+2*NKV)*HD] += ... from
     * dqkv_full[N,3*NH*HD]: the q part added; k and v head j get the fp32
     * sum over its G query heads (in head order), added once (one rounding
     * in a 16-bit dtype) */
    void (*gqa_reduce)(zt_stream *s, void *dqkv, const void *dqkv_full, int N, int NH, int NKV, int HD);
    /* ---- the engine's operations ---- */
    /* AdamW on n contiguous elements, t = 1-based step for bias correction:
     * m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
     * p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p) */
    void (*adamw)(zt_stream *s, float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                  float beta2, float eps, float wd, int t);
    /* SGD with momentum on n contiguous elements, as torch.optim.SGD with
     * dampening 0 (weight decay coupled, added to the gradient):
     * d = g + wd p; m = momentum m + d; p -= lr (nesterov ? d + momentum m : m) */
    void (*sgd)(zt_stream *s, float *p, const float *g, float *m, size_t n, float lr, float momentum, int nesterov,
                float wd);
    /* 8-bit AdamW (zt_quant.h) on n contiguous elements in zt_qblocks(n)
     * blocks of ZT_QBLOCK: a block's m (signed map) and sqrt(v) (unsigned
     * map) are dequantized from m8, v8 times mscale[b], vscale[b], m and v
     * updated and applied to p in fp32 as adamw's, then m and sqrt(v)
     * quantized again with the block's new absolute maxima as its scales */
    void (*adam8bit)(zt_stream *s, float *p, const float *g, uint8_t *m8, uint8_t *v8, float *mscale, float *vscale,
                     size_t n, float lr, float beta1, float beta2, float eps, float wd, int t);
    /* Adafactor's statistics over elements [at, at + n) of one row-major
     * matrix with `cols` columns (g[n] holds them): row[i] += g^2 + eps1 over
     * row i's elements, col[j] += g^2 + eps1 over column j's, each sum taken
     * in element order (so pieces of a range add up as the whole would) */
    void (*factor_stats)(zt_stream *s, float *row, float *col, const float *g, size_t n, size_t at, size_t cols,
                         float eps1);
    /* Adafactor's preconditioned gradient u[n] for elements [at, at + n) of
     * one parameter: factored (rfac not NULL), u = g rfac[i] cfac[j] for
     * element (i, j) (rfac = rsqrt(vr / mean vr), cfac = rsqrt(vc)); else
     * w = beta2t v + (1 - beta2t)(g^2 + eps1), u = g / sqrt(w), and v = w
     * when store_v */
    void (*adafactor_precondition)(zt_stream *s, float *u, const float *g, float *v, const float *rfac,
                                   const float *cfac, size_t n, size_t at, size_t cols, float beta2t, float eps1,
                                   int store_v);
    /* Adafactor's update: x = step u; with m (not NULL) m = beta1 m +
     * (1 - beta1) x and x = m; p = (p - decay p) - x */
    void (*adafactor_apply)(zt_stream *s, float *p, const float *u, float *m, size_t n, float step, float beta1,
                            float decay);
    /* dst[n] (dst_dtype) = src[n] (src_dtype), through fp32, rounded to
     * nearest even */
    void (*cast)(zt_stream *s, void *dst, zt_dtype dst_dtype, const void *src, zt_dtype src_dtype, size_t n);
    /* x[n] *= alpha */
    void (*scale)(zt_stream *s, float *x, float alpha, size_t n);
    /* dst[n] (dtype) = src * alpha, or dst + src * alpha when accumulate,
     * added in fp32 and rounded once (no add otherwise, so a -0 survives as
     * it would without it) */
    void (*scaled_store)(zt_stream *s, void *dst, zt_dtype dtype, const float *src, float alpha, int accumulate,
                         size_t n);
    /* *out = sum x[i]^2, accumulated in double in a fixed order (inf or NaN
     * when any x[i] is) */
    void (*sum_squares)(zt_stream *s, double *out, const float *x, size_t n);
    /* dst[n] bf16 = src[n] stochastically rounded with the keyed bits of
     * elements key.first .. key.first + n - 1 (zt_sround.h) */
    void (*cast_sr)(zt_stream *s, uint16_t *dst, const float *src, size_t n, zt_sr_key key);
    /* x[rows, cols] fp32 replaced by its Newton-Schulz orthogonalization
     * (zt_newton_schulz.h: `steps` quintic steps with coef[3], the norm
     * clamped at eps), with scratch[zt_newton_schulz_scratch(rows, cols)] */
    void (*newton_schulz)(zt_stream *s, float *x, size_t rows, size_t cols, int steps, const float *coef, float eps,
                          float *scratch);
    /* codes[] and scales[] of x[n] (x_dtype) + feedback[n] (fb_dtype;
     * NULL: none), block-wise from x[0] (zt_wire.h: `bits` 8 or 4, `block`
     * values per scale); feedback then holds what the codes lost */
    void (*wire_quantize)(zt_stream *s, uint8_t *codes, float *scales, const void *x, zt_dtype x_dtype,
                          void *feedback, zt_dtype fb_dtype, size_t n, int bits, unsigned block);
    /* out[n] (dtype) = the values of codes[] and scales[] */
    void (*wire_dequantize)(zt_stream *s, void *out, zt_dtype dtype, const uint8_t *codes, const float *scales,
                            size_t n, int bits, unsigned block);
} zt_ops;

/* A modelled host-device link (zt_backend_set_link; the CPU backend only):
 * per direction its bandwidth and, since it was set, the bytes copied, the
 * time the link spent on them (bytes / bandwidth) and the time the host
 * waited for them (the exposed part). */
enum { ZT_LINK_H2D = 0, ZT_LINK_D2H = 1 };
typedef struct {
    double gbs[2]; /* 1e9 bytes/s, [ZT_LINK_H2D], [ZT_LINK_D2H] */
    double bytes[2];
    double busy_s[2];
    double exposed_s[2];
} zt_link_stats;

/* The device memory a backend's own setup holds outside the tracked
 * allocator (CUDA; zeros elsewhere), each measured as the device's used
 * bytes (cudaMemGetInfo) before and after making it, so a process
 * allocating on the same GPU meanwhile would count too: the cuBLAS and
 * cuBLASLt handles with the GEMM workspace, and the backend's own buffers
 * (the norm's scratch). The CUDA context's bytes are the device bill's
 * (zt_device_bill.h), from NVML at init. */
typedef struct {
    int measured;
    size_t blas_bytes, own_bytes;
    char pci_bus_id[32]; /* cudaDeviceGetPCIBusId: the GPU as NVML names it too */
} zt_device_setup;

typedef struct zt_backend {
    zt_device device;
    const char *name;
    const zt_ops *ops; /* fp32 kernels: ops_for[ZT_FP32] */
    /* Kernels in each compute dtype; NULL where this backend has none (then
     * the engine widens 16-bit parameters to fp32 and computes in fp32). */
    const zt_ops *ops_for[ZT_NDTYPES];
    zt_raw_allocator raw_device; /* blocks for the tracked device allocator */
    /* Blocks for the host offload pool: pinned (cudaHostAlloc) on CUDA; when
     * alloc is NULL (CPU) the context uses mlock'ed host memory. */
    zt_raw_allocator raw_host;
    int nthreads;
    /* The collective watchdog on a device (--collective-timeout): a stream
     * or event sync that has not finished after this many seconds fails
     * with ZT_ERR_TIMEOUT, since a collective queued on the device may wait
     * for a peer that is gone (0: wait for ever; the CPU never waits). */
    double sync_timeout_s;
    /* When set, the fp32 kernels' GEMMs (matmul_fwd/bwd, attention_fwd)
     * round their operands to bf16 and accumulate in fp32 (tensor cores);
     * fp32 throughout otherwise. Set for --dtype bf16 on a backend without
     * bf16 kernels (CUDA, for now); the CPU ignores it. */
    int matmul_bf16;
    /* Copies and fills, ordered on stream s. */
    zt_status (*memcpy_async)(struct zt_backend *be, void *dst, const void *src, size_t bytes,
                              zt_copy_kind kind, zt_stream *s, zt_error *err);
    zt_status (*memset_async)(struct zt_backend *be, void *dst, int value, size_t bytes,
                              zt_stream *s, zt_error *err);
    /* rows copies of width bytes, row i from src + i x src_pitch to dst +
     * i x dst_pitch (cudaMemcpy2DAsync). NULL: zt_memcpy2d_async copies row
     * by row through memcpy_async. */
    zt_status (*memcpy2d_async)(struct zt_backend *be, void *dst, size_t dst_pitch, const void *src,
                                size_t src_pitch, size_t width, size_t rows, zt_copy_kind kind, zt_stream *s,
                                zt_error *err);
    zt_status (*stream_sync)(struct zt_backend *be, zt_stream *s, zt_error *err);
    /* Ordering between streams without blocking the host (CUDA events). NULL
     * on the CPU, whose operations are complete when they return: call them
     * through the zt_event_* and zt_stream_* wrappers below, which turn a
     * missing entry into a no-op. An event is a cudaEvent_t on CUDA. */
    zt_status (*event_record)(struct zt_backend *be, zt_stream *s, void **event, zt_error *err);
    zt_status (*stream_wait_event)(struct zt_backend *be, zt_stream *s, void *event, zt_error *err);
    zt_status (*event_sync)(struct zt_backend *be, void *event, zt_error *err);
    void (*event_destroy)(struct zt_backend *be, void *event);
    /* A further stream (copies, collectives) of the same device. */
    zt_status (*stream_create)(struct zt_backend *be, zt_stream *out, zt_error *err);
    void (*stream_destroy)(struct zt_backend *be, zt_stream *s);
    /* Free and total bytes of the device (cudaMemGetInfo); zeros on CPU. */
    zt_status (*mem_info)(struct zt_backend *be, size_t *free_bytes, size_t *total_bytes, zt_error *err);
    void (*destroy)(struct zt_backend *be);
    zt_link_stats *link;  /* the modelled link's figures; NULL: none (the real link, or memory speed) */
    zt_device_setup setup;
    void *default_stream; /* zt_stream.handle of zt_backend_stream: cudaStream_t on CUDA, NULL on CPU */
    void *impl;
} zt_backend;

/* Creates the backend for `device` with `nthreads` CPU threads per process.
 * CUDA is refused with a clear message when this build has no CUDA backend
 * or no device is visible. The CUDA ordinal is ZT_CUDA_DEVICE if set, else
 * the launcher's local rank (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID,
 * SLURM_LOCALID, LOCAL_RANK), else 0, modulo the visible device count. */
zt_status zt_backend_create(zt_device device, int nthreads, zt_backend **out, zt_error *err);
/* As zt_backend_create, on CUDA ordinal `cuda_device` (modulo the visible
 * count) when it is >= 0: the communicator's local rank, so the backend and
 * NCCL agree on the GPU. -1 picks as zt_backend_create does. */
zt_status zt_backend_create_on(zt_device device, int nthreads, int cuda_device, zt_backend **out, zt_error *err);
void zt_backend_destroy(zt_backend *be);
zt_stream zt_backend_stream(zt_backend *be);

/* The driver's view of the device (cudaMemGetInfo): *used = total - free
 * and *total, both 0 where there is none (the CPU) or the query failed. */
void zt_backend_driver_mem(zt_backend *be, size_t *used, size_t *total);

/* A strided copy on stream s (memcpy2d_async, or row by row where the
 * backend has none); regions must not overlap. */
zt_status zt_memcpy2d_async(zt_backend *be, void *dst, size_t dst_pitch, const void *src, size_t src_pitch,
                            size_t width, size_t rows, zt_copy_kind kind, zt_stream *s, zt_error *err);

/* Stream ordering. *event marks everything queued on s so far (NULL on the
 * CPU, where it has all happened). */
zt_status zt_event_record(zt_backend *be, zt_stream *s, void **event, zt_error *err);
/* Work queued on s from now on runs after `event` (NULL: nothing to wait for).
 * The host does not block. */
zt_status zt_stream_wait_event(zt_backend *be, zt_stream *s, void *event, zt_error *err);
/* Work queued on `waiter` from now on runs after everything queued on `after`
 * so far: record + wait + destroy. */
zt_status zt_stream_after(zt_backend *be, zt_stream *waiter, zt_stream *after, zt_error *err);
/* Blocks the host until `event` has happened (NULL: returns at once). */
zt_status zt_event_sync(zt_backend *be, void *event, zt_error *err);
/* NULL is a no-op. Destroying an event that streams still wait on is safe:
 * the waits keep the point they were given. */
void zt_event_destroy(zt_backend *be, void *event);
/* A further stream of be's device: a distinct cudaStream_t on CUDA; on the
 * CPU a copy of the default stream (everything is synchronous there). */
zt_status zt_stream_create(zt_backend *be, zt_stream *out, zt_error *err);
void zt_stream_destroy(zt_backend *be, zt_stream *s);

/* Models a host-device link of h2d_gbs and d2h_gbs (1e9 bytes/s, > 0) on
 * the CPU backend (runtime/cpu/link.c): H2D and D2H copies take bytes /
 * bandwidth, copy streams run ahead of the host and waits on them sleep.
 * Call before creating any stream. ZT_ERR_UNSUPPORTED on CUDA, where the
 * real link is used; ZT_ERR_INVALID under ZT_CPU_DEFER_COPIES (another
 * schedule of the copy streams). */
zt_status zt_backend_set_link(zt_backend *be, double h2d_gbs, double d2h_gbs, zt_error *err);

/* Implementation entry points (one per backend). */
zt_status zt_backend_cpu_create(int nthreads, zt_backend **out, zt_error *err);
/* The dry backend (runtime/dry): every kernel a no-op, device buffers
 * addresses without memory, host-pool buffers all on one small shared
 * file, copies and fills into them skipped (into other host memory:
 * zeros). Shaped like `like` (device field; CUDA's event-ordered paths),
 * for replaying a run's allocations (zt-plan). */
zt_status zt_backend_dry_create(zt_device like, int nthreads, zt_backend **out, zt_error *err);
zt_status zt_cpu_install_link(zt_backend *be, double h2d_gbs, double d2h_gbs, zt_error *err); /* cpu/link.c */
/* CUDA (built with ZT_HAVE_CUDA): runs on CUDA device `device` modulo the
 * visible count; ZT_ERR_UNSUPPORTED when no device is visible. */
zt_status zt_backend_cuda_create(int nthreads, int device, zt_backend **out, zt_error *err);
int zt_backend_cuda_device_count(void);
const zt_ops *zt_cpu_ops(void);

/* CUDA devices this process can use: 0 in a build without the CUDA backend
 * or when the driver reports none (--device auto picks the CPU then). */
int zt_cuda_devices_visible(void);

#endif
