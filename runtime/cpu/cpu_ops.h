/* CPU kernels (fp32, OpenMP over the stream's threads, OpenBLAS for GEMM).
 * Every parallel loop gives each thread whole outputs, and every sum runs in a
 * fixed order, so results do not depend on timing. Signatures and shapes: see
 * zt_ops in zt_backend.h. */
#ifndef ZT_CPU_OPS_H
#define ZT_CPU_OPS_H

#include "zt_backend.h"

void zt_cpu_embedding_fwd(zt_stream *s, float *out, const int32_t *tokens, const float *wte,
                          const float *wpe, int B, int T, int C);
void zt_cpu_embedding_bwd(zt_stream *s, float *dwte, float *dwpe, const float *dout,
                          const int32_t *tokens, int B, int T, int C);
void zt_cpu_layernorm_fwd(zt_stream *s, float *out, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, int N, int C);
void zt_cpu_layernorm_bwd(zt_stream *s, float *dinp, float *dw, float *db, const float *dout,
                          const float *inp, const float *w, const float *mean, const float *rstd,
                          int N, int C);
void zt_cpu_matmul_fwd(zt_stream *s, float *out, const float *inp, const float *w,
                       const float *bias, int N, int C, int OC);
void zt_cpu_matmul_bwd(zt_stream *s, float *dinp, float *dw, float *dbias, const float *dout,
                       const float *inp, const float *w, int N, int C, int OC);
void zt_cpu_attention_fwd(zt_stream *s, float *out, float *att, const float *qkv, int B, int T,
                          int C, int NH);
void zt_cpu_attention_bwd(zt_stream *s, float *dqkv, float *datt, const float *dout,
                          const float *qkv, const float *att, int B, int T, int C, int NH,
                          float *scratch, size_t scratch_numel);
void zt_cpu_attention_fused_fwd(zt_stream *s, float *out, float *lse, const float *qkv, int B, int T, int C,
                                int NH);
void zt_cpu_attention_fused_bwd(zt_stream *s, float *dqkv, float *datt, const float *dout, const float *qkv,
                                const float *out, const float *lse, int B, int T, int C, int NH);
void zt_cpu_gelu_fwd(zt_stream *s, float *out, const float *inp, size_t N);
void zt_cpu_gelu_bwd(zt_stream *s, float *dinp, const float *inp, const float *dout, size_t N);
void zt_cpu_residual_fwd(zt_stream *s, float *out, const float *a, const float *b, size_t N);
void zt_cpu_residual_bwd(zt_stream *s, float *da, float *db, const float *dout, size_t N);
void zt_cpu_softmax_xent_fwd(zt_stream *s, float *losses, float *probs, const float *logits,
                             const int32_t *targets, int N, int V);
void zt_cpu_softmax_xent_bwd(zt_stream *s, float *dlogits, const float *probs,
                             const int32_t *targets, int N, int V, float dloss);
void zt_cpu_adamw(zt_stream *s, float *p, const float *g, float *m, float *v, size_t n, float lr,
                  float beta1, float beta2, float eps, float wd, int t);
void zt_cpu_cast_f32_to_bf16(zt_stream *s, zt_bf16 *dst, const float *src, size_t n);
void zt_cpu_cast_bf16_to_f32(zt_stream *s, float *dst, const zt_bf16 *src, size_t n);
void zt_cpu_scale(zt_stream *s, float *x, float alpha, size_t n);
void zt_cpu_scaled_store_f32(zt_stream *s, float *dst, const float *src, float alpha, int accumulate, size_t n);
void zt_cpu_scaled_store_bf16(zt_stream *s, zt_bf16 *dst, const float *src, float alpha, int accumulate, size_t n);
void zt_cpu_sum_squares(zt_stream *s, double *out, const float *x, size_t n);

/* Test mode (ZT_CPU_DEFER_COPIES=1, copy_queue.c): copies on streams other
 * than the default one are queued and happen only when waited for. */
void zt_cpu_install_copy_queues(zt_backend *be);

#endif
