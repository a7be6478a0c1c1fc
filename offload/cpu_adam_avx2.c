/* The AVX2 span of the fused CPU AdamW: 8 floats per step, the same operations
 * in the same order as the scalar span (no FMA: the target is "avx2" alone),
 * unaligned loads and stores, and the scalar span for the last n % 8 (and,
 * with streaming stores, for the few elements before out is 32/16-byte
 * aligned). Built with a function target attribute, so the file needs no
 * -mavx2; it is only called after zt_cpu_adam_isa_supported(ZT_ADAM_AVX2). */
#include "zt_cpu_adam.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <stdint.h>

#ifdef __FAST_MATH__
#error "cpu_adam_avx2.c must be compiled without -ffast-math: its results must equal zt_cpu_adamw bit for bit"
#endif

#define ZT_AVX2 __attribute__((target("avx2")))
#define ZT_AVX2_INLINE static inline __attribute__((always_inline, target("avx2")))

/* zt_f32_to_bf16 on 8 lanes with integer ops: a NaN keeps its top 16 bits with
 * the quiet bit (0x40) set; anything else rounds to nearest, ties to even:
 * (u + 0x7fff + ((u >> 16) & 1)) >> 16, wrapping like uint32_t. Returns the 8
 * results as uint16 in a 128-bit vector. */
ZT_AVX2_INLINE __m128i bf16x8(__m256 x) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i abs_u = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    /* abs_u <= 0x7fffffff, so the signed compare is the unsigned one. */
    const __m256i is_nan = _mm256_cmpgt_epi32(abs_u, _mm256_set1_epi32(0x7f800000));
    const __m256i hi = _mm256_srli_epi32(u, 16);
    const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    const __m256i rounded =
        _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    const __m256i quiet = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
    const __m256i r = _mm256_blendv_epi8(rounded, quiet, is_nan);
    /* Every lane is in [0, 0xffff], so the unsigned-saturating pack is exact. */
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

/* out_kind: 0 none, 1 fp32, 2 bf16, 3 fp32 streamed, 4 bf16 streamed (out
 * aligned to 32 / 16 bytes); scale: multiply g by grad_scale. */
ZT_AVX2_INLINE void span_avx2(const zt_adam_step *st, float *p, const float *g, float *m, float *v, void *out,
                              int out_kind, int scale, size_t n) {
    const __m256 b1 = _mm256_set1_ps(st->beta1), b2 = _mm256_set1_ps(st->beta2);
    const __m256 omb1 = _mm256_set1_ps(st->one_minus_beta1), omb2 = _mm256_set1_ps(st->one_minus_beta2);
    const __m256 bc1 = _mm256_set1_ps(st->bc1), bc2 = _mm256_set1_ps(st->bc2);
    const __m256 lr = _mm256_set1_ps(st->lr), eps = _mm256_set1_ps(st->eps), wd = _mm256_set1_ps(st->wd);
    const __m256 gs = _mm256_set1_ps(st->grad_scale);
    float *of = out;
    zt_bf16 *ob = out;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 gi = _mm256_loadu_ps(g + i);
        if (scale) gi = _mm256_mul_ps(gi, gs);
        /* m = b1 * m + (1 - b1) * g */
        const __m256 mi = _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(m + i)), _mm256_mul_ps(omb1, gi));
        /* v = b2 * v + ((1 - b2) * g) * g */
        const __m256 vi =
            _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(v + i)), _mm256_mul_ps(_mm256_mul_ps(omb2, gi), gi));
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        const __m256 mhat = _mm256_div_ps(mi, bc1);
        const __m256 vhat = _mm256_div_ps(vi, bc2);
        __m256 pi = _mm256_loadu_ps(p + i);
        /* p = p - lr * (mhat / (sqrt(vhat) + eps) + wd * p) */
        const __m256 upd =
            _mm256_add_ps(_mm256_div_ps(mhat, _mm256_add_ps(_mm256_sqrt_ps(vhat), eps)), _mm256_mul_ps(wd, pi));
        pi = _mm256_sub_ps(pi, _mm256_mul_ps(lr, upd));
        _mm256_storeu_ps(p + i, pi);
        if (out_kind == 1) _mm256_storeu_ps(of + i, pi);
        if (out_kind == 2) _mm_storeu_si128((__m128i *)(void *)(ob + i), bf16x8(pi));
        if (out_kind == 3) _mm256_stream_ps(of + i, pi);
        if (out_kind == 4) _mm_stream_si128((__m128i *)(void *)(ob + i), bf16x8(pi));
    }
    if (i < n) {
        int bf = out_kind == 2 || out_kind == 4;
        void *tail_out = out_kind == 0 ? NULL : bf ? (void *)(ob + i) : (void *)(of + i);
        zt_cpu_adam_span_scalar(st, p + i, g + i, m + i, v + i, tail_out, bf ? ZT_BF16 : ZT_FP32, n - i);
    }
}

#define ZT_SPAN(K, S) span_avx2(st, p, g, m, v, out, K, S, n)

ZT_AVX2 void zt_cpu_adam_span_avx2(const zt_adam_step *st, float *p, const float *g, float *m, float *v,
                                   void *out, zt_dtype out_dtype, size_t n) {
    int kind = out == NULL ? 0 : out_dtype == ZT_BF16 ? 2 : 1;
    if (kind && st->stream_out) {
        /* Streaming stores need out aligned to the store: run the scalar span
         * up to that point (nothing streams if out is not even aligned to its
         * element). */
        size_t esize = kind == 2 ? 2 : 4, vbytes = 8 * esize;
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

void zt_cpu_adam_span_avx2(const zt_adam_step *st, float *p, const float *g, float *m, float *v, void *out,
                           zt_dtype out_dtype, size_t n) {
    zt_cpu_adam_span_scalar(st, p, g, m, v, out, out_dtype, n);
}

#endif
