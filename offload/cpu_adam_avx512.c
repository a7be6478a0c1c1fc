/* The AVX-512 span of the fused CPU AdamW: 16 floats per step, the same
 * operations in the same order as the scalar span (separate mul and add: with
 * -ffp-contract=off, which the build sets and CMakeLists.txt repeats for this
 * library, nothing is fused even though the target has FMA), unaligned loads
 * and stores, and the scalar span for the last n % 16 (and, with streaming
 * stores, for the few elements before out is 64/32-byte aligned). Only
 * AVX512F instructions (and the AVX ones it implies) are used: the bf16
 * narrowing is vpmovdw, so AVX512F is all zt_cpu_adam_isa_supported asks for.
 * Built with a function target attribute, so the file needs no -mavx512f. */
#include "zt_cpu_adam.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <stdint.h>

#ifdef __FAST_MATH__
#error "cpu_adam_avx512.c must be compiled without -ffast-math: its results must equal zt_cpu_adamw bit for bit"
#endif

#define ZT_AVX512 __attribute__((target("avx512f")))
#define ZT_AVX512_INLINE static inline __attribute__((always_inline, target("avx512f")))

/* zt_f32_to_bf16 on 16 lanes with integer ops (see cpu_adam_avx2.c): the 16
 * results as uint16 in a 256-bit vector. */
ZT_AVX512_INLINE __m256i bf16x16(__m512 x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i abs_u = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    /* abs_u <= 0x7fffffff, so the signed compare is the unsigned one. */
    const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(abs_u, _mm512_set1_epi32(0x7f800000));
    const __m512i hi = _mm512_srli_epi32(u, 16);
    const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    const __m512i rounded =
        _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __m512i quiet = _mm512_or_si512(hi, _mm512_set1_epi32(0x40));
    const __m512i r = _mm512_mask_mov_epi32(rounded, is_nan, quiet);
    /* Every lane is in [0, 0xffff]: truncating to 16 bits is exact. */
    return _mm512_cvtepi32_epi16(r);
}

/* out_kind: 0 none, 1 fp32, 2 bf16, 3 fp32 streamed, 4 bf16 streamed (out
 * aligned to 64 / 32 bytes); scale: multiply g by grad_scale. */
ZT_AVX512_INLINE void span_avx512(const zt_adam_step *st, float *p, const float *g, float *m, float *v,
                                  void *out, int out_kind, int scale, size_t n) {
    const __m512 b1 = _mm512_set1_ps(st->beta1), b2 = _mm512_set1_ps(st->beta2);
    const __m512 omb1 = _mm512_set1_ps(st->one_minus_beta1), omb2 = _mm512_set1_ps(st->one_minus_beta2);
    const __m512 bc1 = _mm512_set1_ps(st->bc1), bc2 = _mm512_set1_ps(st->bc2);
    const __m512 lr = _mm512_set1_ps(st->lr), eps = _mm512_set1_ps(st->eps), wd = _mm512_set1_ps(st->wd);
    const __m512 gs = _mm512_set1_ps(st->grad_scale);
    float *of = out;
    zt_bf16 *ob = out;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 gi = _mm512_loadu_ps(g + i);
        if (scale) gi = _mm512_mul_ps(gi, gs);
        /* m = b1 * m + (1 - b1) * g */
        const __m512 mi = _mm512_add_ps(_mm512_mul_ps(b1, _mm512_loadu_ps(m + i)), _mm512_mul_ps(omb1, gi));
        /* v = b2 * v + ((1 - b2) * g) * g */
        const __m512 vi =
            _mm512_add_ps(_mm512_mul_ps(b2, _mm512_loadu_ps(v + i)), _mm512_mul_ps(_mm512_mul_ps(omb2, gi), gi));
        _mm512_storeu_ps(m + i, mi);
        _mm512_storeu_ps(v + i, vi);
        const __m512 mhat = _mm512_div_ps(mi, bc1);
        const __m512 vhat = _mm512_div_ps(vi, bc2);
        __m512 pi = _mm512_loadu_ps(p + i);
        /* p = p - lr * (mhat / (sqrt(vhat) + eps) + wd * p) */
        const __m512 upd =
            _mm512_add_ps(_mm512_div_ps(mhat, _mm512_add_ps(_mm512_sqrt_ps(vhat), eps)), _mm512_mul_ps(wd, pi));
        pi = _mm512_sub_ps(pi, _mm512_mul_ps(lr, upd));
        _mm512_storeu_ps(p + i, pi);
        if (out_kind == 1) _mm512_storeu_ps(of + i, pi);
        if (out_kind == 2) _mm256_storeu_si256((__m256i *)(void *)(ob + i), bf16x16(pi));
        if (out_kind == 3) _mm512_stream_ps(of + i, pi);
        if (out_kind == 4) _mm256_stream_si256((__m256i *)(void *)(ob + i), bf16x16(pi));
    }
    if (i < n) {
        int bf = out_kind == 2 || out_kind == 4;
        void *tail_out = out_kind == 0 ? NULL : bf ? (void *)(ob + i) : (void *)(of + i);
        zt_cpu_adam_span_scalar(st, p + i, g + i, m + i, v + i, tail_out, bf ? ZT_BF16 : ZT_FP32, n - i);
    }
}

#define ZT_SPAN(K, S) span_avx512(st, p, g, m, v, out, K, S, n)

ZT_AVX512 void zt_cpu_adam_span_avx512(const zt_adam_step *st, float *p, const float *g, float *m, float *v,
                                       void *out, zt_dtype out_dtype, size_t n) {
    int kind = out == NULL ? 0 : out_dtype == ZT_BF16 ? 2 : 1;
    if (kind && st->stream_out) {
        /* Streaming stores need out aligned to the store: run the scalar span
         * up to that point (nothing streams if out is not even aligned to its
         * element). */
        size_t esize = kind == 2 ? 2 : 4, vbytes = 16 * esize;
        uintptr_t addr = (uintptr_t)out;
        if (addr % esize == 0) {
            size_t head = (size_t)((vbytes - addr % vbytes) % vbytes) / esize;
            if (head > n) head = n;
            if (head) {
                zt_cpu_adam_span_scalar(st, p, g, m, v, out, out_dtype, head);
                p += head, g += head, m += head, v += head, out = (char *)out + head * esize, n -= head;
            }
            kind += 2;
        }
    }
    const int sc = st->scale_grads;
    switch (kind) {
    case 0: sc ? ZT_SPAN(0, 1) : ZT_SPAN(0, 0); break;
    case 1: sc ? ZT_SPAN(1, 1) : ZT_SPAN(1, 0); break;
    case 2: sc ? ZT_SPAN(2, 1) : ZT_SPAN(2, 0); break;
    case 3: sc ? ZT_SPAN(3, 1) : ZT_SPAN(3, 0); break;
    default: sc ? ZT_SPAN(4, 1) : ZT_SPAN(4, 0); break;
    }
    if (kind >= 3) _mm_sfence(); /* order the streaming stores before what follows */
}

#else /* not x86: never selected (zt_cpu_adam_isa_supported says no); the scalar span keeps the symbol valid */

void zt_cpu_adam_span_avx512(const zt_adam_step *st, float *p, const float *g, float *m, float *v, void *out,
                              zt_dtype out_dtype, size_t n) {
    zt_cpu_adam_span_scalar(st, p, g, m, v, out, out_dtype, n);
}

#endif
