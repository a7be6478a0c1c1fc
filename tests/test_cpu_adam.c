/* Unit test of the fused CPU AdamW (offload/zt_cpu_adam.h).
 *
 * The reference is the runtime's own kernel: g is copied and scaled with
 * zt_ops.scale when grad_scale != 1 (as global-norm clipping does), then
 * zt_ops.adamw updates p, m, v, and the compute-dtype copy is the new p
 * (fp32) or zt_f32_to_bf16 of it (bf16). Every check below is BITWISE
 * EQUALITY (memcmp) of p, m, v and out against that reference, for each ISA:
 * scalar, AVX2, AVX-512 (an ISA this CPU lacks falls back to the best one; the
 * test says which ISAs really ran), and for
 *   n in {0, 1, 15, 16, 17, 1000, 100003}, t in {1, 7}, wd in {0, 0.1},
 *   grad_scale in {1, 0.37}, out in {fp32, bf16, NULL}, nthreads in {1, 2, 3},
 *   and one thread through zt_cpu_adam_span with streaming stores of out
 *   forced on (zt_adam_step.stream_out), pointers aligned to 64 bytes, and
 *   misaligned (offset by 1-3 floats, each array differently; a bf16 out by 1
 *   element),
 * with inputs that mix zeros, -0, subnormals, tiny v (so vhat << eps^2),
 * large magnitudes (g^2 overflowing to inf), bf16 rounding ties and random bit
 * patterns. Then special values (NaN, inf, FLT_MAX, exact ties) with lr = 0
 * and lr > 0, an n large enough that zt_cpu_adam_fused streams out by itself,
 * that nothing outside [0, n) is written, that n = 0 touches nothing, and the
 * 128-byte chunk boundaries of the thread split. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "zt_backend.h"
#include "zt_cpu_adam.h"



static float rng_sign(void) { return (rng_next() >> 63) ? -1.0f : 1.0f; }
static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
/* A random finite float of any exponent (subnormals included). */
static float rng_finite_bits(void) {
    uint32_t u = (uint32_t)(rng_next() >> 32);
    if (((u >> 23) & 0xff) == 0xff) u &= ~(1u << 30);
    return from_bits(u);
}

static float gen_g(void) {
    switch (rng_next() % 16) {
    case 0: return 0.0f;
    case 1: return -0.0f;
    case 2: return rng_sign() * from_bits(1 + (uint32_t)(rng_next() % 0x7fffff)); /* subnormal */
    case 3: return rng_sign() * rng_uniform(1e-22f, 1e-18f);
    case 4: return rng_sign() * rng_uniform(1e14f, 1e16f);
    case 5: return rng_sign() * rng_uniform(1e19f, 1e21f); /* g^2 overflows: v = inf */
    case 6: return rng_finite_bits() * 1e-30f;
    default: return rng_sign() * rng_uniform(1e-4f, 2.0f);
    }
}
static float gen_m(void) {
    switch (rng_next() % 8) {
    case 0: return 0.0f;
    case 1: return rng_sign() * from_bits(1 + (uint32_t)(rng_next() % 0x7fffff));
    case 2: return rng_sign() * rng_uniform(1e9f, 1e11f);
    case 3: return rng_sign() * rng_uniform(1e-20f, 1e-18f);
    default: return rng_sign() * rng_uniform(0.0f, 1.0f);
    }
}
static float gen_v(void) { /* a second moment: >= 0 */
    switch (rng_next() % 8) {
    case 0: return 0.0f;
    case 1: return from_bits(1 + (uint32_t)(rng_next() % 0x7fffff)); /* subnormal */
    case 2: return rng_uniform(1e-32f, 1e-28f); /* vhat far below eps^2 */
    case 3: return rng_uniform(1e29f, 1e31f);
    default: return rng_uniform(0.0f, 1.0f);
    }
}
static float gen_p(void) {
    switch (rng_next() % 12) {
    case 0: return 0.0f;
    case 1: return -0.0f;
    case 2: return rng_sign() * from_bits(1 + (uint32_t)(rng_next() % 0x7fffff));
    case 3: return rng_sign() * rng_uniform(1e29f, 1e31f);
    case 4: return rng_finite_bits() * 1e-3f;
    case 5: { /* a bf16 tie, before the update */
        uint32_t u = to_bits(rng_uniform(0.01f, 3.0f));
        return rng_sign() * from_bits((u & 0xffff0000u) | 0x8000u);
    }
    default: return rng_sign() * rng_uniform(0.01f, 3.0f);
    }
}

/* A buffer with guard elements before and after the span under test. */
#define GUARD 24
#define SENTINEL 0xA5u
typedef struct {
    unsigned char *base;
    size_t elem, off, n, total; /* element size, offset of the span, span length, bytes */
} guarded;

static void *guarded_alloc(guarded *b, size_t elem, size_t off, size_t n) {
    b->elem = elem, b->off = off, b->n = n;
    b->total = (GUARD + off + n + GUARD) * elem;
    void *mem = NULL;
    if (posix_memalign(&mem, 64, b->total) != 0) {
        printf("FAIL: out of memory\n");
        exit(1);
    }
    b->base = mem;
    memset(b->base, SENTINEL, b->total);
    return b->base + (GUARD + off) * elem;
}
static int guarded_intact(const guarded *b) {
    size_t lo = (GUARD + b->off) * b->elem, hi = lo + b->n * b->elem;
    for (size_t i = 0; i < lo; i++)
        if (b->base[i] != SENTINEL) return 0;
    for (size_t i = hi; i < b->total; i++)
        if (b->base[i] != SENTINEL) return 0;
    return 1;
}

static size_t first_diff(const void *a, const void *b, size_t n, size_t elem) {
    for (size_t i = 0; i < n; i++)
        if (memcmp((const char *)a + i * elem, (const char *)b + i * elem, elem) != 0) return i;
    return n;
}

typedef struct {
    float lr, beta1, beta2, eps, wd, grad_scale;
    int t;
} hyper;

/* The reference: copy and scale g with ops->scale, ops->adamw, then the out copy. */
static void reference(const zt_ops *ops, zt_stream *s, const hyper *h, const float *p0, const float *g0,
                      const float *m0, const float *v0, size_t n, float *p, float *m, float *v, float *out_f32,
                      zt_bf16 *out_bf16) {
    float *g = calloc(n ? n : 1, sizeof *g);
    if (!g) exit(1);
    if (n) {
        memcpy(g, g0, n * sizeof *g);
        memcpy(p, p0, n * sizeof *p);
        memcpy(m, m0, n * sizeof *m);
        memcpy(v, v0, n * sizeof *v);
    }
    if (h->grad_scale != 1.0f) ops->scale(s, g, h->grad_scale, n);
    ops->adamw(s, p, g, m, v, n, h->lr, h->beta1, h->beta2, h->eps, h->wd, h->t);
    for (size_t i = 0; i < n; i++) {
        out_f32[i] = p[i];
        out_bf16[i] = zt_f32_to_bf16(p[i]);
    }
    free(g);
}

typedef struct {
    const float *p0, *g0, *m0, *v0;    /* inputs */
    const float *rp, *rm, *rv, *rout;  /* reference results */
    const zt_bf16 *rbf;
    size_t n;
} case_data;

/* Runs zt_cpu_adam_fused once with nthreads (or, for nthreads = STREAM_SPAN,
 * zt_cpu_adam_span on one thread with streaming stores forced on) and compares
 * every output bit for bit. Returns 1 when everything matched. */
#define STREAM_SPAN (-1)
static int run_one(const char *what, zt_adam_isa isa, int nthreads, int misaligned, int out_kind,
                   const hyper *h, const case_data *cd) {
    size_t n = cd->n;
    /* Misaligned: each array off by a different number of floats. */
    size_t op = misaligned ? 1 : 0, og = misaligned ? 3 : 0, om = misaligned ? 2 : 0, ov = misaligned ? 1 : 0;
    size_t oo = misaligned ? 1 : 0;
    /* The span starts (GUARD + 8 + offset) elements into a 64-byte-aligned
     * block: (24 + 8) * 4 = 128 bytes, so offset 0 is 64-byte aligned. */
    guarded bp, bg, bm, bv, bo;
    float *p = guarded_alloc(&bp, 4, 8 + op, n);
    float *g = guarded_alloc(&bg, 4, 8 + og, n);
    float *m = guarded_alloc(&bm, 4, 8 + om, n);
    float *v = guarded_alloc(&bv, 4, 8 + ov, n);
    size_t oelem = out_kind == 2 ? 2 : 4;
    /* bf16: (24 + 8) * 2 = 64 bytes. */
    void *out = guarded_alloc(&bo, oelem, 8 + oo, out_kind == 0 ? 0 : n);
    if (!misaligned)
        CHECK(((uintptr_t)p | (uintptr_t)g | (uintptr_t)m | (uintptr_t)v | (uintptr_t)out) % 64 == 0,
              "test set-up: aligned buffers are not 64-byte aligned");
    if (n) {
        memcpy(p, cd->p0, n * 4);
        memcpy(g, cd->g0, n * 4);
        memcpy(m, cd->m0, n * 4);
        memcpy(v, cd->v0, n * 4);
    }
    void *out_arg = out_kind == 0 ? NULL : out;
    zt_dtype odt = out_kind == 2 ? ZT_BF16 : ZT_FP32;
    if (nthreads == STREAM_SPAN) {
        zt_adam_step st;
        zt_adam_step_init(&st, h->grad_scale, h->lr, h->beta1, h->beta2, h->eps, h->wd, h->t);
        st.stream_out = 1;
        zt_cpu_adam_span(isa, &st, p, g, m, v, out_arg, odt, n);
    } else {
        zt_cpu_adam_fused(isa, nthreads, p, g, m, v, out_arg, odt, n, h->grad_scale, h->lr, h->beta1, h->beta2,
                          h->eps, h->wd, h->t);
    }

    int ok = 1;
    const char *names[4] = {"p", "m", "v", "out"};
    const void *want_out = out_kind == 2 ? (const void *)cd->rbf : (const void *)cd->rout;
    const void *got[4] = {p, m, v, out}, *want[4] = {cd->rp, cd->rm, cd->rv, want_out};
    size_t elems[4] = {4, 4, 4, oelem};
    for (int a = 0; a < (out_kind == 0 ? 3 : 4); a++) {
        size_t i = first_diff(got[a], want[a], n, elems[a]);
        if (i < n) {
            ok = 0;
            uint32_t gb = 0, wb = 0;
            memcpy(&gb, (const char *)got[a] + i * elems[a], elems[a]);
            memcpy(&wb, (const char *)want[a] + i * elems[a], elems[a]);
            CHECK(0,
                  "%s isa=%s threads=%d %s out=%s n=%zu t=%d wd=%g gs=%g: %s[%zu] = 0x%08x, reference 0x%08x "
                  "(inputs p %.9g g %.9g m %.9g v %.9g)",
                  what, zt_adam_isa_name(isa), nthreads, misaligned ? "misaligned" : "aligned",
                  out_kind == 0 ? "none" : out_kind == 1 ? "fp32" : "bf16", n, h->t, (double)h->wd,
                  (double)h->grad_scale, names[a], i, (unsigned)gb, (unsigned)wb, (double)cd->p0[i],
                  (double)cd->g0[i], (double)cd->m0[i], (double)cd->v0[i]);
        }
    }
    if (n && memcmp(g, cd->g0, n * 4) != 0) {
        ok = 0;
        CHECK(0, "%s isa=%s threads=%d n=%zu: the gradients were modified", what, zt_adam_isa_name(isa), nthreads, n);
    }
    guarded *bufs[5] = {&bp, &bg, &bm, &bv, &bo};
    const char *bnames[5] = {"p", "g", "m", "v", "out"};
    for (int b = 0; b < 5; b++)
        if (!guarded_intact(bufs[b])) {
            ok = 0;
            CHECK(0, "%s isa=%s threads=%d n=%zu: wrote outside %s[0, n)", what, zt_adam_isa_name(isa), nthreads,
                  n, bnames[b]);
        }
    g_checks++;
    for (int b = 0; b < 5; b++) free(bufs[b]->base);
    return ok;
}

typedef struct {
    float *p, *m, *v, *out;
    zt_bf16 *bf;
} ref_bufs;

static void ref_alloc(ref_bufs *r, size_t n) {
    size_t k = n ? n : 1;
    r->p = malloc(k * 4), r->m = malloc(k * 4), r->v = malloc(k * 4), r->out = malloc(k * 4);
    r->bf = malloc(k * 2);
    if (!r->p || !r->m || !r->v || !r->out || !r->bf) exit(1);
}
static void ref_free(ref_bufs *r) { free(r->p), free(r->m), free(r->v), free(r->out), free(r->bf); }

/* Every ISA (really run or falling back) x out kind x threads x alignment. */
static int run_all_variants(const char *what, const hyper *h, const case_data *cd, const int *threads,
                            int nthreads_list) {
    int ok = 1;
    for (int isa = 0; isa < ZT_ADAM_NUM_ISAS; isa++)
        for (int out_kind = 0; out_kind < 3; out_kind++)
            for (int ti = 0; ti < nthreads_list; ti++)
                for (int mis = 0; mis < 2; mis++)
                    ok &= run_one(what, (zt_adam_isa)isa, threads[ti], mis, out_kind, h, cd);
    return ok;
}

static void test_random(const zt_ops *ops, zt_stream *s) {
    static const size_t sizes[] = {0, 1, 15, 16, 17, 1000, 100003};
    static const int threads[] = {1, 2, 3, STREAM_SPAN};
    static const int steps[] = {1, 7};
    static const float wds[] = {0.0f, 0.1f}, scales[] = {1.0f, 0.37f};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t n = sizes[si], k = n ? n : 1;
        float *p0 = malloc(k * 4), *g0 = malloc(k * 4), *m0 = malloc(k * 4), *v0 = malloc(k * 4);
        if (!p0 || !g0 || !m0 || !v0) exit(1);
        for (size_t i = 0; i < n; i++) p0[i] = gen_p(), g0[i] = gen_g(), m0[i] = gen_m(), v0[i] = gen_v();
        ref_bufs r;
        ref_alloc(&r, n);
        int ok = 1, combos = 0;
        for (int ti = 0; ti < 2; ti++)
            for (int wi = 0; wi < 2; wi++)
                for (int gi = 0; gi < 2; gi++) {
                    hyper h = {1e-3f, 0.9f, 0.999f, 1e-8f, wds[wi], scales[gi], steps[ti]};
                    reference(ops, s, &h, p0, g0, m0, v0, n, r.p, r.m, r.v, r.out, r.bf);
                    case_data cd = {p0, g0, m0, v0, r.p, r.m, r.v, r.out, r.bf, n};
                    ok &= run_all_variants("random", &h, &cd, threads, 4);
                    combos++;
                }
        if (ok)
            printf("ok cpu_adam n=%zu: p, m, v, out bitwise equal to zt_cpu_adamw in %d runs (%d hyperparameter "
                   "sets x 3 ISAs x 3 out kinds x (3 thread counts + streamed span) x 2 alignments)\n",
                   n, combos * ZT_ADAM_NUM_ISAS * 3 * 4 * 2, combos);
        ref_free(&r);
        free(p0), free(g0), free(m0), free(v0);
    }
}

/* NaN, inf, FLT_MAX, bf16 ties: scattered through the vector body and the
 * tail, one NaN source per element (see zt_cpu_adam.h on NaN payloads). */
static void test_specials(const zt_ops *ops, zt_stream *s) {
    enum { N = 3 * 16 + 13 };
    float p0[N], g0[N], m0[N], v0[N];
    for (int i = 0; i < N; i++)
        p0[i] = rng_uniform(0.5f, 2.0f), g0[i] = rng_uniform(-1.0f, 1.0f), m0[i] = rng_uniform(-0.1f, 0.1f),
        v0[i] = rng_uniform(0.0f, 0.1f);
    const float inf = INFINITY;
    for (int i = 0; i < N; i++) switch (i % 16) {
        case 0: p0[i] = from_bits(0x7fffffffu); break; /* NaN whose rounding would carry into the sign */
        case 1: p0[i] = from_bits(0xffc12345u); break; /* negative quiet NaN with payload */
        case 2: g0[i] = inf; break;                   /* m = v = inf: inf / inf = NaN */
        case 3: g0[i] = -inf; break;
        case 4: g0[i] = from_bits(0x7fc0beefu); break; /* NaN gradient */
        case 5: m0[i] = inf; break;                   /* p -> -inf */
        case 6: v0[i] = inf; break;                   /* update 0 */
        case 7: p0[i] = inf; break;                   /* inf - inf with wd */
        case 8: p0[i] = FLT_MAX; break;               /* rounds to bf16 inf */
        case 9: p0[i] = from_bits(0x3f808000u); break; /* tie, even: down */
        case 10: p0[i] = from_bits(0x3f818000u); break; /* tie, odd: up */
        case 11: p0[i] = from_bits(0xbf818000u); break;
        case 12: p0[i] = from_bits(0x3f808001u); break; /* just above a tie */
        case 13: p0[i] = -0.0f, g0[i] = 0.0f, m0[i] = 0.0f, v0[i] = 0.0f; break;
        case 14: p0[i] = from_bits(0x00008000u); break; /* subnormal tie */
        default: break;
        }
    static const int threads[] = {1, 2, STREAM_SPAN};
    static const float lrs[] = {0.0f, 1e-3f}, wds[] = {0.0f, 0.1f};
    ref_bufs r;
    ref_alloc(&r, N);
    int ok = 1;
    for (int li = 0; li < 2; li++)
        for (int wi = 0; wi < 2; wi++) {
            hyper h = {lrs[li], 0.9f, 0.999f, 1e-8f, wds[wi], 1.0f, 1};
            reference(ops, s, &h, p0, g0, m0, v0, N, r.p, r.m, r.v, r.out, r.bf);
            case_data cd = {p0, g0, m0, v0, r.p, r.m, r.v, r.out, r.bf, N};
            ok &= run_all_variants("specials", &h, &cd, threads, 3);
        }
    /* The cases the test means to cover really arise. */
    {
        hyper h = {0.0f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f, 1};
        reference(ops, s, &h, p0, g0, m0, v0, N, r.p, r.m, r.v, r.out, r.bf);
        CHECK(r.bf[0] == 0x7fff, "specials: bf16 of NaN 0x7fffffff is 0x%04x, want 0x7fff", r.bf[0]);
        CHECK(r.bf[8] == 0x7f80, "specials: bf16 of FLT_MAX is 0x%04x, want 0x7f80 (inf)", r.bf[8]);
        CHECK(r.bf[9] == 0x3f80 && r.bf[10] == 0x3f82 && r.bf[11] == 0xbf82 && r.bf[12] == 0x3f81,
              "specials: bf16 ties 0x%04x 0x%04x 0x%04x 0x%04x", r.bf[9], r.bf[10], r.bf[11], r.bf[12]);
        CHECK(isnan(r.p[2]) && isnan(r.p[4]), "specials: inf and NaN gradients do not give NaN");
    }
    if (ok)
        printf("ok cpu_adam specials (NaN payloads, inf, FLT_MAX -> bf16 inf, ties, -0): bitwise equal, lr 0 and "
               "1e-3, wd 0 and 0.1\n");
    ref_free(&r);
}

/* Big enough that zt_cpu_adam_fused streams out by itself (fp32 and bf16). */
static void test_auto_stream(const zt_ops *ops, zt_stream *s) {
    size_t n = ZT_ADAM_STREAM_MIN_BYTES / 2 + 1001;
    float *p0 = malloc(n * 4), *g0 = malloc(n * 4), *m0 = malloc(n * 4), *v0 = malloc(n * 4);
    if (!p0 || !g0 || !m0 || !v0) exit(1);
    for (size_t i = 0; i < n; i++) p0[i] = gen_p(), g0[i] = gen_g(), m0[i] = gen_m(), v0[i] = gen_v();
    ref_bufs r;
    ref_alloc(&r, n);
    hyper h = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.37f, 7};
    reference(ops, s, &h, p0, g0, m0, v0, n, r.p, r.m, r.v, r.out, r.bf);
    case_data cd = {p0, g0, m0, v0, r.p, r.m, r.v, r.out, r.bf, n};
    int ok = 1;
    for (int isa = 0; isa < ZT_ADAM_NUM_ISAS; isa++)
        for (int out_kind = 1; out_kind < 3; out_kind++)
            for (int mis = 0; mis < 2; mis++)
                ok &= run_one("auto-stream", (zt_adam_isa)isa, 2, mis, out_kind, &h, &cd);
    if (ok)
        printf("ok cpu_adam n=%zu (out >= ZT_ADAM_STREAM_MIN_BYTES: streamed): bitwise equal, fp32 and bf16, "
               "2 threads, aligned and misaligned\n",
               n);
    ref_free(&r);
    free(p0), free(g0), free(m0), free(v0);
}

static void test_n0(void) {
    float sentinel[4] = {42.0f, 42.0f, 42.0f, 42.0f};
    zt_bf16 bsent = 0x1234;
    for (int isa = 0; isa < ZT_ADAM_NUM_ISAS; isa++) {
        zt_cpu_adam_fused((zt_adam_isa)isa, 2, &sentinel[0], &sentinel[1], &sentinel[2], &sentinel[3], &bsent,
                          ZT_BF16, 0, 0.5f, 0.1f, 0.9f, 0.999f, 1e-8f, 0.1f, 1);
    }
    int ok = sentinel[0] == 42.0f && sentinel[1] == 42.0f && sentinel[2] == 42.0f && sentinel[3] == 42.0f &&
             bsent == 0x1234;
    CHECK(ok, "n = 0 modified memory");
    if (ok) printf("ok cpu_adam n=0 touches nothing\n");
}

static void test_chunks(void) {
    static float arena[64 + 64];
    int ok = 1;
    static const size_t sizes[] = {1, 31, 32, 33, 1000, 8192, 100003, 1u << 20};
    for (int off = 0; off < 32; off++) {
        const float *p = arena + ((64 - ((uintptr_t)arena % 256) / 4) % 64) + off; /* 256-byte base + off */
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
            for (int parts = 1; parts <= 7; parts++) {
                size_t n = sizes[si], prev = 0;
                ok &= zt_cpu_adam_chunk_begin(p, n, 0, parts) == 0;
                ok &= zt_cpu_adam_chunk_begin(p, n, parts, parts) == n;
                for (int k = 1; k <= parts; k++) {
                    size_t b = zt_cpu_adam_chunk_begin(p, n, k, parts);
                    ok &= b >= prev && b <= n;
                    ok &= b == n || ((uintptr_t)p + b * sizeof(float)) % 128 == 0;
                    prev = b;
                }
                /* Big enough spans are split roughly evenly: no part exceeds its share by a chunk. */
                if (n >= (size_t)parts * 1024)
                    for (int k = 0; k < parts; k++) {
                        size_t len = zt_cpu_adam_chunk_begin(p, n, k + 1, parts) -
                                     zt_cpu_adam_chunk_begin(p, n, k, parts);
                        ok &= len <= n / (size_t)parts + 64;
                    }
            }
    }
    CHECK(ok, "chunk boundaries are not monotonic, 128-byte aligned in p, and covering [0, n)");
    if (ok) printf("ok cpu_adam chunk boundaries: 0 .. n, monotonic, at 128-byte boundaries of p\n");
}

static void test_isa(void) {
    zt_adam_isa best = zt_cpu_adam_best_isa();
    CHECK(zt_cpu_adam_isa_supported(ZT_ADAM_SCALAR), "scalar must always be supported");
    CHECK(zt_cpu_adam_isa_supported(best), "the best ISA %s is not supported", zt_adam_isa_name(best));
    CHECK(strcmp(zt_adam_isa_name(ZT_ADAM_SCALAR), "scalar") == 0 &&
              strcmp(zt_adam_isa_name(ZT_ADAM_AVX2), "avx2") == 0 &&
              strcmp(zt_adam_isa_name(ZT_ADAM_AVX512), "avx512") == 0,
          "ISA names");
    printf("cpu_adam ISAs on this CPU (best: %s):", zt_adam_isa_name(best));
    for (int isa = 0; isa < ZT_ADAM_NUM_ISAS; isa++) {
        zt_adam_isa got = zt_cpu_adam_resolve_isa((zt_adam_isa)isa);
        if (zt_cpu_adam_isa_supported((zt_adam_isa)isa)) {
            CHECK(got == (zt_adam_isa)isa, "supported %s resolves to %s", zt_adam_isa_name((zt_adam_isa)isa),
                  zt_adam_isa_name(got));
            printf(" %s (tested)", zt_adam_isa_name((zt_adam_isa)isa));
        } else {
            CHECK(got == best, "unsupported %s resolves to %s, not the best %s", zt_adam_isa_name((zt_adam_isa)isa),
                  zt_adam_isa_name(got), zt_adam_isa_name(best));
            printf(" %s (NOT supported here: calls fall back to %s, which is what its runs test)",
                   zt_adam_isa_name((zt_adam_isa)isa), zt_adam_isa_name(got));
        }
    }
    printf("\n");
}

int main(void) {
    zt_backend *be = NULL;
    zt_error err = {0};
    if (zt_backend_cpu_create(1, &be, &err) != ZT_OK) {
        printf("FAIL: zt_backend_cpu_create: %s\n", err.msg);
        return 1;
    }
    zt_stream s = zt_backend_stream(be);
    const zt_ops *ops = zt_cpu_ops();

    test_isa();
    test_chunks();
    test_n0();
    test_specials(ops, &s);
    test_random(ops, &s);
    test_auto_stream(ops, &s);

    zt_backend_destroy(be);
    printf("%ld checks, %d failed\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
