/* The host-side (offloaded) optimizer step: a fused, SIMD, multi-threaded AdamW.
 *
 * One pass over n contiguous elements reads g, p, m, v once and writes p, m, v
 * and, optionally, the compute-dtype copy of the new parameters (fp32, or bf16
 * rounded to nearest even exactly like zt_f32_to_bf16), which is what goes back
 * to the device. The arithmetic is that of the runtime's reference kernel
 * (zt_ops.adamw, runtime/cpu/ops_adamw.c), operation for operation:
 *
 *   g'   = g * grad_scale                      (only when grad_scale != 1)
 *   bc1  = 1 - powf(beta1, t),  bc2 = 1 - powf(beta2, t)
 *   m    = beta1 * m + (1 - beta1) * g'
 *   v    = beta2 * v + ((1 - beta2) * g') * g'
 *   p    = p - lr * ((m / bc1) / (sqrtf(v / bc2) + eps) + wd * p)
 *
 * Every path (scalar, AVX2, AVX-512) uses only IEEE add, sub, mul, div and
 * sqrt, which are correctly rounded in SIMD as in scalar code, and no fused
 * multiply-add, so the results equal zt_cpu_adamw (after zt_cpu_scale when
 * clipping) bit for bit, for any ISA and any thread count. NaN payloads are
 * reproduced too as long as each element meets at most one NaN input (two
 * different NaNs in one operation may keep either payload, as IEEE allows).
 *
 * The vector paths are compiled with per-function target attributes, so the
 * library needs no -mavx flags; the ISA is chosen at run time. */
#ifndef ZT_CPU_ADAM_H
#define ZT_CPU_ADAM_H

#include <stddef.h>

#include "zt_dtype.h"

typedef enum { ZT_ADAM_SCALAR = 0, ZT_ADAM_AVX2 = 1, ZT_ADAM_AVX512 = 2 } zt_adam_isa;

#define ZT_ADAM_NUM_ISAS 3

/* The widest ISA this CPU (and OS: the register state must be enabled)
 * supports: AVX-512 needs AVX512F, AVX2 needs AVX2. */
zt_adam_isa zt_cpu_adam_best_isa(void);
/* 1 when this CPU can run `isa` (ZT_ADAM_SCALAR always), else 0. */
int zt_cpu_adam_isa_supported(zt_adam_isa isa);
/* The ISA zt_cpu_adam_fused really uses when asked for `isa`: `isa` itself if
 * supported, otherwise the best supported one. */
zt_adam_isa zt_cpu_adam_resolve_isa(zt_adam_isa isa);
/* "scalar", "avx2", "avx512" ("?" for anything else). */
const char *zt_adam_isa_name(zt_adam_isa isa);

/* One fused AdamW pass over n contiguous elements (see above). `out` receives
 * the new parameters in `out_dtype` (ZT_FP32: float, ZT_BF16: zt_bf16), or
 * nothing when out is NULL. t is the 1-based step. `nthreads` OpenMP threads
 * (<= 0: omp_get_max_threads()) each take one contiguous chunk whose
 * boundaries fall on 128-byte boundaries of p (64-byte cache lines of p, m, v,
 * and of a bf16 out, when those are aligned like p, are never shared between
 * threads); fewer threads are used when
 * n is too small to be worth splitting, which changes no bit. An out of at
 * least ZT_ADAM_STREAM_MIN_BYTES is written with streaming stores (see
 * zt_adam_step.stream_out), which changes no bit either. Any pointer
 * alignment works (a float's own alignment for p, g, m, v, a zt_bf16's for a
 * bf16 out). `isa` falls back to the best supported one if this CPU lacks it.
 * p, g, m, v, out must not overlap. n = 0 touches nothing. */
void zt_cpu_adam_fused(zt_adam_isa isa, int nthreads, float *p, const float *g, float *m, float *v,
                       void *out, zt_dtype out_dtype, size_t n, float grad_scale, float lr, float beta1,
                       float beta2, float eps, float wd, int t);

/* Lower level, for callers that run their own threads. */

/* The per-step constants, computed once as the reference computes them. */
typedef struct {
    float lr, beta1, beta2, eps, wd;
    float one_minus_beta1, one_minus_beta2; /* 1 - beta1, 1 - beta2 (in float) */
    float bc1, bc2;                         /* 1 - powf(beta, t) */
    float grad_scale;
    int scale_grads; /* grad_scale != 1 */
    /* 1: the vector spans write `out` with non-temporal (streaming) stores,
     * which skip the read-for-ownership of a buffer that is only written
     * (about 15-30% faster when memory-bound) but leave it out of the caches.
     * zt_adam_step_init sets 0; zt_cpu_adam_fused sets 1 when the whole out
     * is at least ZT_ADAM_STREAM_MIN_BYTES. Never changes a bit of the results. */
    int stream_out;
} zt_adam_step;

#define ZT_ADAM_STREAM_MIN_BYTES ((size_t)4 << 20)

void zt_adam_step_init(zt_adam_step *st, float grad_scale, float lr, float beta1, float beta2, float eps,
                       float wd, int t);

/* One thread's span, with exactly the ISA named: the caller must have checked
 * zt_cpu_adam_isa_supported (zt_cpu_adam_span does, and falls back). `out` points
 * at element 0 of the span. With st->stream_out, a vector span ends with an
 * sfence, so its streaming stores are ordered before whatever follows. */
void zt_cpu_adam_span(zt_adam_isa isa, const zt_adam_step *st, float *p, const float *g, float *m, float *v,
                      void *out, zt_dtype out_dtype, size_t n);
void zt_cpu_adam_span_scalar(const zt_adam_step *st, float *p, const float *g, float *m, float *v, void *out,
                             zt_dtype out_dtype, size_t n);
void zt_cpu_adam_span_avx2(const zt_adam_step *st, float *p, const float *g, float *m, float *v, void *out,
                           zt_dtype out_dtype, size_t n);
void zt_cpu_adam_span_avx512(const zt_adam_step *st, float *p, const float *g, float *m, float *v, void *out,
                             zt_dtype out_dtype, size_t n);

/* Where part k of `parts` begins when zt_cpu_adam_fused splits n elements at p
 * (k = 0 gives 0, k = parts gives n): every inner boundary is at an element
 * whose address in p is a multiple of 128 bytes (so of 64 bytes too; for a p
 * aligned to 4 bytes), or at n. Boundaries never decrease with k. */
size_t zt_cpu_adam_chunk_begin(const float *p, size_t n, int k, int parts);

#endif
