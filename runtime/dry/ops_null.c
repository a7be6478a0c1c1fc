/* The dry backend's kernels: each takes the arguments its zt_ops entry
 * declares and does nothing, so a replay issues every kernel the real run
 * would (the same buffers, allocated in the same order) at no cost. Nothing
 * here reads or writes memory: a dry buffer has addresses and no pages. */
#include "dry_internal.h"

/* Every parameter of a null kernel is unused by design. */
#pragma GCC diagnostic ignored "-Wunused-parameter"

static void embedding_fwd(zt_stream *s, void *out, const int32_t *tokens, const void *wte, const void *wpe, int B,
                          int T, int C) {}
static void embedding_bwd(zt_stream *s, float *dwte, float *dwpe, const void *dout, const int32_t *tokens, int B,
                          int T, int C) {}
static void layernorm_fwd(zt_stream *s, void *out, float *mean, float *rstd, const void *inp, const void *w,
                          const void *b, int N, int C) {}
static void layernorm_bwd(zt_stream *s, void *dinp, float *dw, float *db, const void *dout, const void *inp,
                          const void *w, const float *mean, const float *rstd, int N, int C) {}
static void matmul_fwd(zt_stream *s, void *out, const void *inp, const void *w, const void *bias, int N, int C,
                       int OC) {}
static void matmul_bwd(zt_stream *s, void *dinp, float *dw, float *dbias, const void *dout, const void *inp,
                       const void *w, int N, int C, int OC) {}
static void attention_fwd(zt_stream *s, void *out, void *att, const void *qkv, int B, int T, int C, int NH) {}
static void attention_bwd(zt_stream *s, void *dqkv, float *datt, const void *dout, const void *qkv, const void *att,
                          int B, int T, int C, int NH, void *scratch, size_t scratch_bytes) {}
static void attention_fused_fwd(zt_stream *s, void *out, float *lse, const void *qkv, int B, int T, int C, int NH) {}
static void attention_fused_bwd(zt_stream *s, void *dqkv, float *datt, const void *dout, const void *qkv,
                                const void *out, const float *lse, int B, int T, int C, int NH, void *scratch,
                                size_t scratch_bytes) {}
static void gelu_fwd(zt_stream *s, void *out, const void *inp, size_t N) {}
static void gelu_bwd(zt_stream *s, void *dinp, const void *inp, const void *dout, size_t N) {}
static void residual_fwd(zt_stream *s, void *out, const void *a, const void *b, size_t N) {}
static void residual_bwd(zt_stream *s, void *da, void *db, const void *dout, size_t N) {}
static void softmax_xent_fwd(zt_stream *s, float *losses, void *probs, const void *logits, const int32_t *targets,
                             int N, int V) {}
static void softmax_xent_bwd(zt_stream *s, void *dlogits, const void *probs, const int32_t *targets, int N, int V,
                             float dloss) {}
static void rmsnorm_fwd(zt_stream *s, void *out, float *rstd, const void *inp, const void *w, int N, int C,
                        float eps) {}
static void rmsnorm_bwd(zt_stream *s, void *dinp, float *dw, const void *dout, const void *inp, const void *w,
                        const float *rstd, int N, int C) {}
static void rope_fwd(zt_stream *s, void *qkv, int B, int T, int NH, int NKV, int HD, float theta) {}
static void rope_bwd(zt_stream *s, void *dqkv, int B, int T, int NH, int NKV, int HD, float theta) {}
static void swiglu_fwd(zt_stream *s, void *out, const void *gate_up, int N, int F) {}
static void swiglu_bwd(zt_stream *s, void *dgate_up, const void *gate_up, const void *dout, int N, int F) {}
static void gqa_expand(zt_stream *s, void *qkv_full, const void *qkv, int N, int NH, int NKV, int HD) {}
static void gqa_reduce(zt_stream *s, void *dqkv, const void *dqkv_full, int N, int NH, int NKV, int HD) {}
static void adamw(zt_stream *s, float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                  float beta2, float eps, float wd, int t) {}
static void sgd(zt_stream *s, float *p, const float *g, float *m, size_t n, float lr, float momentum, int nesterov,
                float wd) {}
static void adam8bit(zt_stream *s, float *p, const float *g, uint8_t *m8, uint8_t *v8, float *mscale, float *vscale,
                     size_t n, float lr, float beta1, float beta2, float eps, float wd, int t) {}
static void factor_stats(zt_stream *s, float *row, float *col, const float *g, size_t n, size_t at, size_t cols,
                         float eps1) {}
static void adafactor_precondition(zt_stream *s, float *u, const float *g, float *v, const float *rfac,
                                   const float *cfac, size_t n, size_t at, size_t cols, float beta2t, float eps1,
                                   int store_v) {}
static void adafactor_apply(zt_stream *s, float *p, const float *u, float *m, size_t n, float step, float beta1,
                            float decay) {}
static void cast(zt_stream *s, void *dst, zt_dtype dst_dtype, const void *src, zt_dtype src_dtype, size_t n) {}
static void scale(zt_stream *s, float *x, float alpha, size_t n) {}
static void scaled_store(zt_stream *s, void *dst, zt_dtype dtype, const float *src, float alpha, int accumulate,
                         size_t n) {}
/* The CPU path passes a host double, which the caller zeroed: the norm of
 * dry gradients is 0, finite, so no step is skipped. */
static void sum_squares(zt_stream *s, double *out, const float *x, size_t n) {}
static void cast_sr(zt_stream *s, uint16_t *dst, const float *src, size_t n, zt_sr_key key) {}
static void newton_schulz(zt_stream *s, float *x, size_t rows, size_t cols, int steps, const float *coef, float eps,
                          float *scratch) {}
static void wire_quantize(zt_stream *s, uint8_t *codes, float *scales, const void *x, zt_dtype x_dtype, void *feedback,
                          zt_dtype fb_dtype, size_t n, int bits, unsigned block) {}
static void wire_dequantize(zt_stream *s, void *out, zt_dtype dtype, const uint8_t *codes, const float *scales,
                            size_t n, int bits, unsigned block) {}

#define NULL_TABLE(DT)                                                                                              \
    {DT, embedding_fwd, embedding_bwd, layernorm_fwd, layernorm_bwd, matmul_fwd, matmul_bwd, attention_fwd,        \
     attention_bwd, attention_fused_fwd, attention_fused_bwd, gelu_fwd, gelu_bwd, residual_fwd, residual_bwd,     \
     softmax_xent_fwd, softmax_xent_bwd, rmsnorm_fwd, rmsnorm_bwd, rope_fwd, rope_bwd, swiglu_fwd, swiglu_bwd,     \
     gqa_expand, gqa_reduce, adamw, sgd, adam8bit, factor_stats, adafactor_precondition, adafactor_apply, cast,    \
     scale, scaled_store, sum_squares, cast_sr, newton_schulz, wire_quantize, wire_dequantize}

const zt_ops zt_dry_ops[ZT_NDTYPES] = {
    [ZT_FP32] = NULL_TABLE(ZT_FP32),
    [ZT_BF16] = NULL_TABLE(ZT_BF16),
    [ZT_FP16] = NULL_TABLE(ZT_FP16),
};
