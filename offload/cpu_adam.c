/* Fused CPU AdamW: ISA detection and dispatch, the scalar span, and the
 * OpenMP split into 128-byte-aligned contiguous chunks. The vector spans are
 * in cpu_adam_avx2.c and cpu_adam_avx512.c. See zt_cpu_adam.h. */
#include "zt_cpu_adam.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>

#ifdef __FAST_MATH__
#error "cpu_adam.c must be compiled without -ffast-math: its results must equal zt_cpu_adamw bit for bit"
#endif

/* Below this many elements per thread a parallel region costs more than it
 * saves (a span of 8192 takes a few microseconds). */
#define ZT_ADAM_MIN_PER_THREAD ((size_t)8192)
/* Chunk boundaries: 32 floats = 128 bytes of p (64 bytes of a bf16 copy). */
#define ZT_ADAM_CHUNK_ELEMS ((size_t)32)

void zt_adam_step_init(zt_adam_step *st, float grad_scale, float lr, float beta1, float beta2, float eps,
                       float wd, int t) {
    st->lr = lr;
    st->beta1 = beta1;
    st->beta2 = beta2;
    st->eps = eps;
    st->wd = wd;
    st->one_minus_beta1 = 1.0f - beta1;
    st->one_minus_beta2 = 1.0f - beta2;
    /* Exactly as zt_cpu_adamw computes them. */
    st->bc1 = 1.0f - powf(beta1, (float)t);
    st->bc2 = 1.0f - powf(beta2, (float)t);
    st->grad_scale = grad_scale;
    st->scale_grads = grad_scale != 1.0f;
    st->stream_out = 0;
}

/* ---- ISA detection ---------------------------------------------------- */

int zt_cpu_adam_isa_supported(zt_adam_isa isa) {
#if defined(__x86_64__) || defined(__i386__)
    /* libgcc's detection also checks that the OS saves the YMM/ZMM state. */
    __builtin_cpu_init();
    switch (isa) {
    case ZT_ADAM_SCALAR: return 1;
    case ZT_ADAM_AVX2: return __builtin_cpu_supports("avx2") ? 1 : 0;
    case ZT_ADAM_AVX512: return __builtin_cpu_supports("avx512f") ? 1 : 0;
    }
    return 0;
#else
    return isa == ZT_ADAM_SCALAR;
#endif
}

zt_adam_isa zt_cpu_adam_best_isa(void) {
    if (zt_cpu_adam_isa_supported(ZT_ADAM_AVX512)) return ZT_ADAM_AVX512;
    if (zt_cpu_adam_isa_supported(ZT_ADAM_AVX2)) return ZT_ADAM_AVX2;
    return ZT_ADAM_SCALAR;
}

zt_adam_isa zt_cpu_adam_resolve_isa(zt_adam_isa isa) {
    return zt_cpu_adam_isa_supported(isa) ? isa : zt_cpu_adam_best_isa();
}

const char *zt_adam_isa_name(zt_adam_isa isa) {
    switch (isa) {
    case ZT_ADAM_SCALAR: return "scalar";
    case ZT_ADAM_AVX2: return "avx2";
    case ZT_ADAM_AVX512: return "avx512";
    }
    return "?";
}

/* ---- scalar span ------------------------------------------------------ */

/* out_kind: 0 none, 1 fp32, 2 bf16. Constant at every call site, so each
 * combination compiles to its own loop. */
static inline __attribute__((always_inline)) void span_scalar(const zt_adam_step *st, float *p, const float *g,
                                                               float *m, float *v, void *out, int out_kind,
                                                               int scale, size_t n) {
    const float b1 = st->beta1, b2 = st->beta2, omb1 = st->one_minus_beta1, omb2 = st->one_minus_beta2;
    const float bc1 = st->bc1, bc2 = st->bc2, lr = st->lr, eps = st->eps, wd = st->wd, gs = st->grad_scale;
    float *of = out;
    zt_bf16 *ob = out;
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        if (scale) gi = gi * gs;
        float mi = b1 * m[i] + omb1 * gi;
        float vi = b2 * v[i] + omb2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1;
        float vhat = vi / bc2;
        float pi = p[i];
        pi = pi - lr * (mhat / (sqrtf(vhat) + eps) + wd * pi);
        p[i] = pi;
        if (out_kind == 1) of[i] = pi;
        if (out_kind == 2) ob[i] = zt_f32_to_bf16(pi);
    }
}

void zt_cpu_adam_span_scalar(const zt_adam_step *st, float *p, const float *g, float *m, float *v, void *out,
                             zt_dtype out_dtype, size_t n) {
    int kind = out == NULL ? 0 : out_dtype == ZT_BF16 ? 2 : 1;
    if (st->scale_grads) {
        if (kind == 0) span_scalar(st, p, g, m, v, out, 0, 1, n);
        else if (kind == 1) span_scalar(st, p, g, m, v, out, 1, 1, n);
        else span_scalar(st, p, g, m, v, out, 2, 1, n);
    } else {
        if (kind == 0) span_scalar(st, p, g, m, v, out, 0, 0, n);
        else if (kind == 1) span_scalar(st, p, g, m, v, out, 1, 0, n);
        else span_scalar(st, p, g, m, v, out, 2, 0, n);
    }
}

void zt_cpu_adam_span(zt_adam_isa isa, const zt_adam_step *st, float *p, const float *g, float *m, float *v,
                      void *out, zt_dtype out_dtype, size_t n) {
    switch (zt_cpu_adam_resolve_isa(isa)) {
    case ZT_ADAM_AVX512: zt_cpu_adam_span_avx512(st, p, g, m, v, out, out_dtype, n); return;
    case ZT_ADAM_AVX2: zt_cpu_adam_span_avx2(st, p, g, m, v, out, out_dtype, n); return;
    case ZT_ADAM_SCALAR: break;
    }
    zt_cpu_adam_span_scalar(st, p, g, m, v, out, out_dtype, n);
}

/* ---- threads ---------------------------------------------------------- */

size_t zt_cpu_adam_chunk_begin(const float *p, size_t n, int k, int parts) {
    if (k <= 0 || parts <= 0) return 0;
    if (k >= parts) return n;
    /* n * k / parts without overflow. */
    size_t x = (n / (size_t)parts) * (size_t)k + (n % (size_t)parts) * (size_t)k / (size_t)parts;
    /* Elements before the first 128-byte boundary of p. */
    const size_t step = ZT_ADAM_CHUNK_ELEMS, step_bytes = ZT_ADAM_CHUNK_ELEMS * sizeof(float);
    uintptr_t addr = (uintptr_t)p;
    size_t lead = 0;
    if (addr % sizeof(float) == 0) lead = (size_t)((step_bytes - addr % step_bytes) % step_bytes) / sizeof(float);
    /* Round x up to the next boundary. */
    size_t y = x <= lead ? lead : lead + (x - lead + step - 1) / step * step;
    return y < n ? y : n;
}

typedef void (*span_fn)(const zt_adam_step *, float *, const float *, float *, float *, void *, zt_dtype,
                        size_t);

void zt_cpu_adam_fused(zt_adam_isa isa, int nthreads, float *p, const float *g, float *m, float *v,
                       void *out, zt_dtype out_dtype, size_t n, float grad_scale, float lr, float beta1,
                       float beta2, float eps, float wd, int t) {
    if (n == 0) return;
    zt_adam_step st;
    zt_adam_step_init(&st, grad_scale, lr, beta1, beta2, eps, wd, t);
    st.stream_out = out != NULL && n >= ZT_ADAM_STREAM_MIN_BYTES / zt_dtype_size(out_dtype);
    span_fn fn = zt_cpu_adam_span_scalar;
    switch (zt_cpu_adam_resolve_isa(isa)) {
    case ZT_ADAM_AVX512: fn = zt_cpu_adam_span_avx512; break;
    case ZT_ADAM_AVX2: fn = zt_cpu_adam_span_avx2; break;
    case ZT_ADAM_SCALAR: break;
    }

    int nt = nthreads > 0 ? nthreads : omp_get_max_threads();
    size_t useful = (n + ZT_ADAM_MIN_PER_THREAD - 1) / ZT_ADAM_MIN_PER_THREAD;
    if ((size_t)nt > useful) nt = (int)useful;
    if (nt <= 1) {
        fn(&st, p, g, m, v, out, out_dtype, n);
        return;
    }
    size_t osize = zt_dtype_size(out_dtype);
#pragma omp parallel num_threads(nt)
    {
        /* Split by the team we really got (it may be smaller than asked). */
        int parts = omp_get_num_threads(), k = omp_get_thread_num();
        size_t lo = zt_cpu_adam_chunk_begin(p, n, k, parts), hi = zt_cpu_adam_chunk_begin(p, n, k + 1, parts);
        if (hi > lo)
            fn(&st, p + lo, g + lo, m + lo, v + lo, out ? (void *)((char *)out + lo * osize) : NULL, out_dtype,
               hi - lo);
    }
}
