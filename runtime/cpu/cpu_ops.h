/* CPU kernels (OpenMP over the stream's threads, OpenBLAS for GEMM). Every
 * parallel loop gives each thread whole outputs, and every sum runs in a
 * fixed order, so results do not depend on timing. Signatures and shapes:
 * see zt_ops in zt_backend.h. The model kernels exist once per compute dtype
 * (kernels.h); the engine's operations below are shared by the tables. */
#ifndef ZT_CPU_OPS_H
#define ZT_CPU_OPS_H

#include "zt_backend.h"

extern const zt_ops zt_cpu_ops_fp32, zt_cpu_ops_bf16, zt_cpu_ops_fp16;

void zt_cpu_adamw(zt_stream *s, float *p, const float *g, float *m, float *v, size_t n, float lr,
                  float beta1, float beta2, float eps, float wd, int t);
void zt_cpu_sgd(zt_stream *s, float *p, const float *g, float *m, size_t n, float lr, float momentum, int nesterov,
                float wd);
void zt_cpu_adam8bit(zt_stream *s, float *p, const float *g, uint8_t *m8, uint8_t *v8, float *mscale, float *vscale,
                     size_t n, float lr, float beta1, float beta2, float eps, float wd, int t);
void zt_cpu_factor_stats(zt_stream *s, float *row, float *col, const float *g, size_t n, size_t at, size_t cols,
                         float eps1);
void zt_cpu_adafactor_precondition(zt_stream *s, float *u, const float *g, float *v, const float *rfac,
                                   const float *cfac, size_t n, size_t at, size_t cols, float beta2t, float eps1,
                                   int store_v);
void zt_cpu_adafactor_apply(zt_stream *s, float *p, const float *u, float *m, size_t n, float step, float beta1,
                            float decay);
void zt_cpu_cast(zt_stream *s, void *dst, zt_dtype dst_dtype, const void *src, zt_dtype src_dtype, size_t n);
void zt_cpu_newton_schulz(zt_stream *s, float *x, size_t rows, size_t cols, int steps, const float *coef, float eps,
                          float *scratch);
void zt_cpu_wire_quantize(zt_stream *s, uint8_t *codes, float *scales, const void *x, zt_dtype x_dtype, void *feedback,
                          zt_dtype fb_dtype, size_t n, int bits, unsigned block);
void zt_cpu_wire_dequantize(zt_stream *s, void *out, zt_dtype dtype, const uint8_t *codes, const float *scales, size_t n,
                            int bits, unsigned block);
void zt_cpu_cast_sr(zt_stream *s, uint16_t *dst, const float *src, size_t n, zt_sr_key key);
void zt_cpu_scale(zt_stream *s, float *x, float alpha, size_t n);
void zt_cpu_scaled_store(zt_stream *s, void *dst, zt_dtype dtype, const float *src, float alpha, int accumulate,
                         size_t n);
void zt_cpu_sum_squares(zt_stream *s, double *out, const float *x, size_t n);

/* Test mode (ZT_CPU_DEFER_COPIES=1, copy_queue.c): copies on streams other
 * than the default one are queued and happen only when waited for. */
void zt_cpu_install_copy_queues(zt_backend *be);
/* The modelled link's state (link.c) is be->impl: freed here (NULL: none). */
void zt_cpu_link_destroy(zt_backend *be);

#endif
