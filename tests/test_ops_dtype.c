/* Unit test of the CPU's 16-bit kernel tables (be->ops_for[ZT_BF16],
 * be->ops_for[ZT_FP16]) against its fp32 table.
 *
 * 1. Every model kernel, in bf16 and in fp16: random fp32 inputs are rounded
 *    to the dtype; the dtype kernel runs on them, the fp32 kernel on the same
 *    values widened back, so the two differ only by what the dtype kernel
 *    rounds (its outputs, and the sums of the paths that round per term).
 *    Outputs that a kernel overwrites start as NaN (an element it forgets
 *    shows up); outputs it accumulates into (+=) start from the same random
 *    values on both sides. Per output, normwise:
 *        err = max_i |got_i - ref_i| / (max_i |ref_i| + 1e-30)
 *    must stay within the bound in BOUNDS below; a non-finite element on
 *    either side scores infinity. Negative twin of every bound: the
 *    reference rounded to fewer significant bits must score above it (two
 *    fewer than the dtype's for an output in the dtype, the dtype's own for
 *    an fp32 output; BOUNDS's `drop`), so a kernel that lost two bits, or
 *    kept an fp32 gradient in the dtype, would be rejected.
 * 2. The same dtype kernel again gives the same bits, and so does a stream
 *    of 3 threads.
 * 3. ops->cast: every fp16 pattern widens to its value (an independent
 *    decoding in double) and narrows back to the same bits (NaN stays NaN);
 *    fp32 -> fp16 on random values and ties against an independent nearest
 *    search. ops->scaled_store in fp32, bf16 and fp16, with and without
 *    accumulate, bit for bit against zt_dtype_load / zt_dtype_store.
 *
 * The Llama kernels (rmsnorm, rope, swiglu, gqa_expand/gqa_reduce, and
 * embedding without a position table: "-wpe") run the same way, after both
 * dtypes' other cases. rope's buffer is its input and its output (in place:
 * ACC below); exact copies (gqa_expand, embedding_fwd-wpe) must score 0.
 *
 * The shapes exercise the 16-bit GEMM tiling of ops_matmul.inc (TM = TN = 64,
 * TK = 128; no edge a multiple), odd sizes elsewhere, and T > 64 once in
 * each attention. (The fp32 table's own values, gradients and thread
 * independence are tests/test_ops_gradcheck.c's.) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "zt_backend.h"

/* ---- error bounds --------------------------------------------------------
 * err (above) per case and output. Rounding to p significant bits moves x
 * by at most 2^-p |x| (half an ulp: 2^-(p+1) to 2^-p of |x|, by where x
 * lies in its binade), so an output stored once from an fp32 sum scores at
 * most 2^-8 = 3.9e-3 in bf16 and 2^-11 = 4.9e-4 in fp16, plus the fp32
 * sums' own differences (1e-7): the bounds 4e-3 and 5e-4 hold by
 * construction there. attention_bwd and attention_fused_bwd without a
 * scratch round dqkv once per added term (zt_ops), so their error grows
 * with T: their bounds are measured ones, and their twins keep 5 bits
 * fewer. An fp32 output (parameter gradients, statistics, lse, D, losses)
 * sees the same rounded inputs on both sides and differs only by summation
 * order (the GEMM tiles); its twin is the output stored in the dtype.
 * "measured" is the largest err over this file's shapes. */
typedef struct {
    const char *kase, *out;
    double bf16, fp16;
    int drop; /* the twin keeps the dtype's significant bits less this many (0: an fp32 output) */
} bound_row;

static const bound_row BOUNDS[] = {
    /* case                          output    bf16   fp16  drop    measured bf16 / fp16 */
    {"embedding_fwd",                "out",     4e-3, 5e-4, 2}, /* 2.0e-3 / 2.5e-4 */
    {"embedding_bwd",                "dwte",    1e-6, 1e-6, 0}, /* 0 / 0 */
    {"embedding_bwd",                "dwpe",    1e-6, 1e-6, 0}, /* 0 / 0 */
    {"layernorm_fwd",                "out",     4e-3, 5e-4, 2}, /* 2.5e-3 / 3.2e-4 */
    {"layernorm_fwd",                "mean",    1e-6, 1e-6, 0}, /* 0 / 0 */
    {"layernorm_fwd",                "rstd",    1e-6, 1e-6, 0}, /* 0 / 0 */
    {"layernorm_bwd",                "dinp",    4e-3, 5e-4, 2}, /* 2.2e-3 / 2.7e-4 */
    {"layernorm_bwd",                "dw",      1e-6, 1e-6, 0}, /* 0 / 0 */
    {"layernorm_bwd",                "db",      1e-6, 1e-6, 0}, /* 0 / 0 */
    {"matmul_fwd",                   "out",     4e-3, 5e-4, 2}, /* 2.5e-3 / 3.8e-4 */
    {"matmul_fwd+bias",              "out",     4e-3, 5e-4, 2}, /* 2.6e-3 / 3.8e-4 */
    {"matmul_bwd",                   "dw",      1e-6, 1e-6, 0}, /* 1.1e-7 / 2.6e-7 */
    {"matmul_bwd+dinp+dbias",        "dinp",    4e-3, 5e-4, 2}, /* 2.0e-3 / 3.7e-4 */
    {"matmul_bwd+dinp+dbias",        "dw",      1e-6, 1e-6, 0}, /* 9.7e-8 / 3.4e-7 */
    {"matmul_bwd+dinp+dbias",        "dbias",   1e-6, 1e-6, 0}, /* 0 / 0 */
    {"attention_fwd",                "out",     4e-3, 5e-4, 2}, /* 2.6e-3 / 3.3e-4 */
    {"attention_fwd",                "att",     4e-3, 5e-4, 2}, /* 1.8e-3 / 2.4e-4 */
    {"attention_bwd+scratch",        "dqkv",    4e-3, 5e-4, 2}, /* 2.2e-3 / 2.4e-4 */
    {"attention_bwd",                "dqkv",    4e-2, 3e-3, 5}, /* 1.9e-2 / 2.3e-3 (T = 77) */
    {"attention_fused_fwd",          "out",     4e-3, 5e-4, 2}, /* 2.6e-3 / 3.3e-4 */
    {"attention_fused_fwd",          "lse",     1e-6, 1e-6, 0}, /* 0 / 0 */
    {"attention_fused_bwd+scratch",  "dqkv",    4e-3, 5e-4, 2}, /* 2.4e-3 / 2.6e-4 */
    {"attention_fused_bwd+scratch",  "D",       1e-6, 1e-6, 0}, /* 0 / 0 */
    {"attention_fused_bwd",          "dqkv",    4e-2, 3e-3, 5}, /* 3.1e-2 / 2.5e-3 (T = 77) */
    {"attention_fused_bwd",          "D",       1e-6, 1e-6, 0}, /* 0 / 0 */
    {"gelu_fwd",                     "out",     4e-3, 5e-4, 2}, /* 1.5e-3 / 1.9e-4 */
    {"gelu_bwd",                     "dinp",    4e-3, 5e-4, 2}, /* 2.6e-3 / 3.1e-4 */
    {"residual_fwd",                 "out",     4e-3, 5e-4, 2}, /* 2.0e-3 / 2.5e-4 */
    {"residual_bwd",                 "da",      4e-3, 5e-4, 2}, /* 2.7e-3 / 3.3e-4 */
    {"residual_bwd",                 "db",      4e-3, 5e-4, 2}, /* 2.7e-3 / 3.5e-4 */
    {"softmax_xent_fwd",             "losses",  1e-6, 1e-6, 0}, /* 0 / 0 */
    {"softmax_xent_fwd",             "probs",   4e-3, 5e-4, 2}, /* 3.5e-3 / 4.3e-4 */
    {"softmax_xent_bwd",             "dlogits", 4e-3, 5e-4, 2}, /* 1.8e-3 / 2.7e-4 */
    /* The Llama kernels. An exact copy (embedding without wpe, gqa_expand)
     * must score 0: its twin keeps one bit less. */
    {"embedding_fwd-wpe",            "out",     1e-7, 1e-7, 1}, /* 0 / 0 */
    {"embedding_bwd-wpe",            "dwte",    1e-6, 1e-6, 0}, /* 0 / 0 */
    {"rmsnorm_fwd",                  "out",     4e-3, 5e-4, 2}, /* 3.0e-3 / 3.7e-4 */
    {"rmsnorm_fwd",                  "rstd",    1e-6, 1e-6, 0}, /* 0 / 0 */
    {"rmsnorm_bwd",                  "dinp",    4e-3, 5e-4, 2}, /* 2.2e-3 / 2.7e-4 */
    {"rmsnorm_bwd",                  "dw",      1e-6, 1e-6, 0}, /* 0 / 0 */
    {"rope_fwd",                     "qkv",     4e-3, 5e-4, 2}, /* 2.9e-3 / 3.5e-4 */
    {"rope_bwd",                     "dqkv",    4e-3, 5e-4, 2}, /* 2.8e-3 / 3.5e-4 */
    {"swiglu_fwd",                   "out",     4e-3, 5e-4, 2}, /* 3.6e-3 / 3.9e-4 */
    {"swiglu_bwd",                   "dgate_up", 4e-3, 5e-4, 2}, /* 2.5e-3 / 3.0e-4 */
    {"gqa_expand",                   "qkv_full", 1e-7, 1e-7, 1}, /* 0 / 0 */
    {"gqa_reduce",                   "dqkv",    4e-3, 5e-4, 2}, /* 2.6e-3 / 3.3e-4 */
};

/* The row of (case, output); NULL when the table has none. */
static const bound_row *bound_for(const char *kase, const char *out) {
    for (size_t i = 0; i < sizeof BOUNDS / sizeof BOUNDS[0]; i++)
        if (strcmp(BOUNDS[i].kase, kase) == 0 && strcmp(BOUNDS[i].out, out) == 0) return &BOUNDS[i];
    return NULL;
}

/* ---- one kernel call, described ------------------------------------------ */

typedef enum {
    IN,     /* read only: random, or set by the case's prepare() */
    OUT,    /* overwritten: NaN before the call, compared after */
    ACC,    /* accumulated into: the same random start on both sides, compared */
    SCRATCH /* the kernel's to overwrite: NaN before, not compared */
} buf_role;

typedef enum {
    DT, /* the table's dtype */
    F32 /* fp32 in every table */
} buf_type;

typedef struct {
    const char *name; /* the output's key in BOUNDS, then the shape: "dqkv [B,T,3C]" */
    buf_role role;
    buf_type type;
    size_t n; /* elements; 0: not used by this variant */
    float lo, hi; /* range of the random start (IN, ACC) */
} buf_spec;

enum { MAXBUF = 8 };

typedef struct op_case op_case;
struct op_case {
    const char *kase; /* the kernel, and its variant: "matmul_bwd+dinp+dbias" */
    char shape[64];   /* printed with every result */
    int B, T, C, NH, N, OC, V;
    int NKV, HD, F; /* the Llama kernels: key/value heads, head size, MLP hidden size */
    int32_t *ints; /* tokens [B,T] or targets [N] */
    int variant;   /* matmul: bias / dinp and dbias; attention backward: a scratch; embedding: no wpe */
    int nbuf;
    buf_spec buf[MAXBUF];
    /* Sets derived inputs (probabilities, statistics) in p, the fp32 form,
     * from the random ones (already rounded to d), with the fp32 table;
     * NULL when none. */
    void (*prepare)(const op_case *c, zt_dtype d, const zt_ops *fp32, zt_stream *s, void **p);
    /* The call, with p[i] buffer i in the form of ops->dtype. */
    void (*run)(const op_case *c, const zt_ops *ops, zt_stream *s, void **p);
};

static int rng_int(int n) { return (int)(rng_next() % (uint64_t)n); }

static size_t elem_bytes(const buf_spec *b, zt_dtype d) { return b->type == F32 ? 4 : zt_dtype_size(d); }

/* Buffers of one call in the form of dtype d, copied from src when given. */
static void bufs_alloc(const op_case *c, zt_dtype d, void **p, void *const *src) {
    for (int i = 0; i < c->nbuf; i++) {
        size_t bytes = c->buf[i].n * elem_bytes(&c->buf[i], d);
        p[i] = xmalloc(bytes);
        if (src) memcpy(p[i], src[i], bytes);
    }
}
static void bufs_free(const op_case *c, void **p) {
    for (int i = 0; i < c->nbuf; i++) free(p[i]);
}

/* x[n] rounded in place to dtype d's precision: the value the dtype kernel
 * will see, so the fp32 kernel sees it too. */
static void round_to(float *x, size_t n, zt_dtype d) {
    for (size_t i = 0; i < n; i++) {
        uint32_t h; /* room for any dtype */
        zt_dtype_store(&h, d, 0, x[i]);
        x[i] = zt_dtype_load(&h, d, 0);
    }
}

/* The start of a call in fp32 form: random IN and ACC buffers, NaN in the
 * others, every DT buffer representable in d; then the derived inputs. */
static void bufs_start(const op_case *c, zt_dtype d, const zt_ops *fp32, zt_stream *s, void **f) {
    for (int i = 0; i < c->nbuf; i++) {
        const buf_spec *b = &c->buf[i];
        float *x = f[i];
        for (size_t k = 0; k < b->n; k++)
            x[k] = b->role == IN || b->role == ACC ? rng_uniform(b->lo, b->hi) : NAN;
        if (b->type == DT) round_to(x, b->n, d);
    }
    if (!c->prepare) return;
    c->prepare(c, d, fp32, s, f);
    for (int i = 0; i < c->nbuf; i++)
        if (c->buf[i].type == DT) round_to(f[i], c->buf[i].n, d);
}

/* The same start in dtype d: DT buffers narrowed (exactly: they are
 * representable), F32 buffers copied. */
static void bufs_narrow(const op_case *c, zt_dtype d, void *const *f, void **h) {
    for (int i = 0; i < c->nbuf; i++) {
        const buf_spec *b = &c->buf[i];
        for (size_t k = 0; k < b->n; k++)
            zt_dtype_store(h[i], b->type == DT ? d : ZT_FP32, k, ((const float *)f[i])[k]);
    }
}

/* ---- comparing ------------------------------------------------------------ */

/* err (see the top) of got[n] (dtype gd) against ref[n]; *worst is where
 * |got - ref| is largest, or the first non-finite element. */
static double rel_err(const void *got, zt_dtype gd, const float *ref, size_t n, size_t *worst) {
    double rmax = 0.0, dmax = 0.0;
    *worst = 0;
    for (size_t i = 0; i < n; i++) {
        double g = zt_dtype_load(got, gd, i), r = ref[i];
        if (!isfinite(g) || !isfinite(r)) {
            *worst = i;
            return INFINITY;
        }
        rmax = fmax(rmax, fabs(r));
        if (fabs(g - r) > dmax) dmax = fabs(g - r), *worst = i;
    }
    return dmax / (rmax + 1e-30);
}

/* x rounded to `bits` significant bits, to nearest. */
static float round_bits(float x, int bits) {
    int e;
    double m = frexp((double)x, &e); /* x = m 2^e, 0.5 <= |m| < 1 */
    return (float)ldexp(nearbyint(ldexp(m, bits)), e - bits);
}

static int dtype_bits(zt_dtype d) { return d == ZT_BF16 ? 8 : d == ZT_FP16 ? 11 : 24; }

/* err of ref[n] rounded to `bits`: what the negative twin scores. */
static double coarse_err(const float *ref, size_t n, int bits) {
    float *r = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) r[i] = round_bits(ref[i], bits);
    size_t w;
    double e = rel_err(r, ZT_FP32, ref, n, &w);
    free(r);
    return e;
}

/* Output b of case c in dtype d: got (the dtype kernel's, in form d) against
 * ref (the fp32 kernel's), within its bound, and the twin above it. */
static void check_output(const op_case *c, zt_dtype d, const buf_spec *b, const void *got, const float *ref) {
    char key[32];
    snprintf(key, sizeof key, "%.*s", (int)strcspn(b->name, " "), b->name);
    const char *dn = zt_dtype_name(d);
    const bound_row *row = bound_for(c->kase, key);
    CHECK(row, "%s %s %s: no bound in BOUNDS", dn, c->kase, key);
    if (!row) return;
    double bound = d == ZT_BF16 ? row->bf16 : row->fp16;
    zt_dtype gd = b->type == DT ? d : ZT_FP32;
    size_t w;
    double e = rel_err(got, gd, ref, b->n, &w);
    int twin_bits = dtype_bits(d) - row->drop;
    double twin = coarse_err(ref, b->n, twin_bits);
    CHECK(e <= bound, "%s %s %s %s: err %.3g > bound %.1e (at %zu: got %.9g, want %.9g)", dn, c->kase, c->shape,
          b->name, e, bound, w, (double)zt_dtype_load(got, gd, w), (double)ref[w]);
    CHECK(twin > bound,
          "%s %s %s %s: self-check: the reference rounded to %d bits scores %.3g <= bound %.1e; bound too loose",
          dn, c->kase, c->shape, b->name, twin_bits, twin, bound);
    if (e <= bound && twin > bound)
        printf("ok %s %-27s %-22s %-16s err %.2e (bound %.0e; %2d-bit ref scores %.1e)\n", dn, c->kase, c->shape,
               b->name, e, bound, twin_bits, twin);
}

/* Every compared output of a and b holds the same bits. */
static void check_same_bits(const op_case *c, zt_dtype d, void *const *a, void *const *b, const char *why) {
    int same = 1;
    for (int i = 0; i < c->nbuf; i++) {
        const buf_spec *s = &c->buf[i];
        if (s->role != OUT && s->role != ACC) continue;
        if (memcmp(a[i], b[i], s->n * elem_bytes(s, d)) != 0) {
            same = 0;
            CHECK(0, "%s %s %s %s: %s", zt_dtype_name(d), c->kase, c->shape, s->name, why);
        }
    }
    if (same) printf("ok %s %-27s %-22s %s\n", zt_dtype_name(d), c->kase, c->shape, why);
}

typedef struct {
    const zt_ops *fp32;
    zt_stream *s1, *s3; /* 1 and 3 threads */
} env;

/* Case c in dtype d: against fp32, then repeated, then on 3 threads. */
static void run_case(const op_case *c, zt_dtype d, const zt_ops *ops, const env *e) {
    void *f0[MAXBUF], *h0[MAXBUF], *ref[MAXBUF], *got[MAXBUF], *again[MAXBUF], *threads[MAXBUF];
    bufs_alloc(c, ZT_FP32, f0, NULL);
    bufs_start(c, d, e->fp32, e->s1, f0);
    bufs_alloc(c, d, h0, NULL);
    bufs_narrow(c, d, f0, h0);

    bufs_alloc(c, ZT_FP32, ref, f0);
    c->run(c, e->fp32, e->s1, ref);
    bufs_alloc(c, d, got, h0);
    c->run(c, ops, e->s1, got);
    for (int i = 0; i < c->nbuf; i++)
        if ((c->buf[i].role == OUT || c->buf[i].role == ACC) && c->buf[i].n)
            check_output(c, d, &c->buf[i], got[i], ref[i]);

    bufs_alloc(c, d, again, h0);
    c->run(c, ops, e->s1, again);
    check_same_bits(c, d, got, again, "same bits when run again");
    bufs_alloc(c, d, threads, h0);
    c->run(c, ops, e->s3, threads);
    check_same_bits(c, d, got, threads, "same bits on 3 threads");

    bufs_free(c, f0), bufs_free(c, h0), bufs_free(c, ref), bufs_free(c, got);
    bufs_free(c, again), bufs_free(c, threads);
}

/* ---- the cases ------------------------------------------------------------ */

/* embedding: tokens [B,T] in [0, V) */
enum { EMB_OUT, EMB_WTE, EMB_WPE, EMB_NBUF };
static void run_embedding_fwd(const op_case *c, const zt_ops *ops, zt_stream *s, void **p) {
    ops->embedding_fwd(s, p[EMB_OUT], c->ints, p[EMB_WTE], c->variant ? NULL : p[EMB_WPE], c->B, c->T, c->C);
}
enum { EMB_DWTE, EMB_DWPE, EMB_DOUT, EMB_BWD_NBUF };
static void run_embedding_bwd(const op_case *c, const zt_ops *ops, zt_stream *s, void **p) {
    ops->embedding_bwd(s, p[EMB_DWTE], c->variant ? NULL : p[EMB_DWPE], p[EMB_DOUT], c->ints, c->B, c->T, c->C);
}

/* no_wpe: wpe and dwpe NULL (a Llama's embedding: RoPE encodes positions). */
static void cases_embedding(zt_dtype d, const zt_ops *ops, const env *e, int B, int T, int C, int V, int no_wpe) {
    size_t BT = (size_t)B * T, BTC = BT * C, TC = no_wpe ? 0 : (size_t)T * C;
    int32_t *tokens = xmalloc(BT * sizeof(int32_t)); /* [B,T] */
    for (size_t i = 0; i < BT; i++) tokens[i] = rng_int(V);
    tokens[BT - 1] = tokens[0]; /* a repeat: dwte's scatter adds */
    op_case fwd = {.kase = no_wpe ? "embedding_fwd-wpe" : "embedding_fwd", .B = B, .T = T, .C = C, .V = V,
                   .ints = tokens, .variant = no_wpe, .nbuf = EMB_NBUF, .run = run_embedding_fwd,
                   .buf = {[EMB_OUT] = {"out [B,T,C]", OUT, DT, BTC},
                           [EMB_WTE] = {"wte [V,C]", IN, DT, (size_t)V * C, -1, 1},
                           [EMB_WPE] = {"wpe [T,C]", IN, DT, TC, -1, 1}}};
    snprintf(fwd.shape, sizeof fwd.shape, "B=%d T=%d C=%d V=%d", B, T, C, V);
    run_case(&fwd, d, ops, e);
    op_case bwd = {.kase = no_wpe ? "embedding_bwd-wpe" : "embedding_bwd", .B = B, .T = T, .C = C, .V = V,
                   .ints = tokens, .variant = no_wpe, .nbuf = EMB_BWD_NBUF, .run = run_embedding_bwd,
                   .buf = {[EMB_DWTE] = {"dwte [V,C]", ACC, F32, (size_t)V * C, -1, 1},
                           [EMB_DWPE] = {"dwpe [T,C]", ACC, F32, TC, -1, 1},
                           [EMB_DOUT] = {"dout [B,T,C]", IN, DT, BTC, -1, 1}}};
    memcpy(bwd.shape, fwd.shape, sizeof bwd.shape);
    run_case(&bwd, d, ops, e);
    free(tokens);
}

/* layernorm */
enum { LN_OUT, LN_MEAN, LN_RSTD, LN_INP, LN_W, LN_B, LN_NBUF };
static void run_layernorm_fwd(const op_case *c, const zt_ops *ops, zt_stream *s, void **p) {
    ops->layernorm_fwd(s, p[LN_OUT], p[LN_MEAN], p[LN_RSTD], p[LN_INP], p[LN_W], p[LN_B], c->N, c->C);
}
/* A row with a large mean (rounded again after prepare). */
static void prepare_layernorm_fwd(const op_case *c, zt_dtype d, const zt_ops *fp32, zt_stream *s, void **p) {
    (void)d, (void)fp32, (void)s;
    float *inp = p[LN_INP];
    for (size_t i = 0; i < (size_t)c->C; i++) inp[i] += 3.0f;
}
enum { LNB_DINP, LNB_DW, LNB_DB, LNB_DOUT, LNB_INP, LNB_W, LNB_MEAN, LNB_RSTD, LNB_NBUF };
static void run_layernorm_bwd(const op_case *c, const zt_ops *ops, zt_stream *s, void **p) {
    ops->layernorm_bwd(s, p[LNB_DINP], p[LNB_DW], p[LNB_DB], p[LNB_DOUT], p[LNB_INP], p[LNB_W], p[LNB_MEAN],
                       p[LNB_RSTD], c->N, c->C);
}
/* mean and rstd of the (rounded) input, as the forward saved them. */
static void prepare_layernorm_bwd(const op_case *c, zt_dtype d, const zt_ops *fp32, zt_stream *s, void **p) {
    size_t NC = (size_t)c->N * c->C;
    float *out = xmalloc(NC * sizeof(float)), *b = xmalloc((size_t)c->C * sizeof(float)); /* [N,C], [C] */
    float *inp = p[LNB_INP];
    for (size_t i = 0; i < (size_t)c->C; i++) inp[i] += 3.0f; /* a row with a large mean */
    round_to(inp, (size_t)c->C, d);
    memset(b, 0, (size_t)c->C * sizeof(float));
    fp32->layernorm_fwd(s, out, p[LNB_MEAN], p[LNB_RSTD], inp, p[LNB_W], b, c->N, c->C);
    free(out), free(b);
}

static void cases_layernorm(zt_dtype d, const zt_ops *ops, const env *e, int N, int C) {
    size_t NC = (size_t)N * C;
    op_case fwd = {.kase = "layernorm_fwd", .N = N, .C = C, .nbuf = LN_NBUF, .prepare = prepare_layernorm_fwd,
                   .run = run_layernorm_fwd,
                   .buf = {[LN_OUT] = {"out [N,C]", OUT, DT, NC},
                           [LN_MEAN] = {"mean [N]", OUT, F32, (size_t)N},
                           [LN_RSTD] = {"rstd [N]", OUT, F32, (size_t)N},
                           [LN_INP] = {"inp [N,C]", IN, DT, NC, -2, 2},
                           [LN_W] = {"w [C]", IN, DT, (size_t)C, 0.5f, 1.5f},
                           [LN_B] = {"b [C]", IN, DT, (size_t)C, -0.5f, 0.5f}}};
    snprintf(fwd.shape, sizeof fwd.shape, "N=%d C=%d", N, C);
    run_case(&fwd, d, ops, e);
    op_case bwd = {.kase = "layernorm_bwd", .N = N, .C = C, .nbuf = LNB_NBUF, .prepare = prepare_layernorm_bwd,
                   .run = run_layernorm_bwd,
                   .buf = {[LNB_DINP] = {"dinp [N,C]", ACC, DT, NC, -0.5f, 0.5f},
                           [LNB_DW] = {"dw [C]", ACC, F32, (size_t)C, -1, 1},
                           [LNB_DB] = {"db [C]", ACC, F32, (size_t)C, -1, 1},
                           [LNB_DOUT] = {"dout [N,C]", IN, DT, NC, -1, 1},
                           [LNB_INP] = {"inp [N,C]", IN, DT, NC, -2, 2},
                           [LNB_W] = {"w [C]", IN, DT, (size_t)C, 0.5f, 1.5f},
                           [LNB_MEAN] = {"mean [N]", IN, F32, (size_t)N},
                           [LNB_RSTD] = {"rstd [N]", IN, F32, (size_t)N}}};
    memcpy(bwd.shape, fwd.shape, sizeof bwd.shape);
    run_case(&bwd, d, ops, e);
}

/* matmul: variant = bias (forward), dinp and dbias (backward) */
enum { MM_OUT, MM_INP, MM_W, MM_BIAS, MM_NBUF };
static void run_matmul_fwd(const op_case *c, const zt_ops *ops, zt_stream *s, void **p) {
    ops->matmul_fwd(s, p[MM_OUT], p[MM_INP], p[MM_W], c->variant ? p[MM_BIAS] : NULL, c->N, c->C, c->OC);
}
enum { MMB_DINP, MMB_DW, MMB_DBIAS, MMB_DOUT, MMB_INP, MMB_W, MMB_NBUF };
static void run_matmul_bwd(const op_case *c, const zt_ops *ops, zt_stream *s, void **p) {
    ops->matmul_bwd(s, c->variant ? p[MMB_DINP] : NULL, p[MMB_DW], c->variant ? p[MMB_DBIAS] : NULL, p[MMB_DOUT],
                    p[MMB_INP], p[MMB_W], c->N, c->C, c->OC);
}

static void cases_matmul(zt_dtype d, const zt_ops *ops, const env *e, int N, int C, int OC) {
    size_t NC = (size_t)N * C, OCC = (size_t)OC * C, NOC = (size_t)N * OC;
    for (int with = 0; with < 2; with++) {
        op_case fwd = {.kase = with ? "matmul_fwd+bias" : "matmul_fwd", .N = N, .C = C, .OC = OC, .variant = with,
                       .nbuf = MM_NBUF, .run = run_matmul_fwd,
                       .buf = {[MM_OUT] = {"out [N,OC]", OUT, DT, NOC},
                               [MM_INP] = {"inp [N,C]", IN, DT, NC, -1, 1},
                               [MM_W] = {"w [OC,C]", IN, DT, OCC, -1, 1},
                               [MM_BIAS] = {"bias [OC]", IN, DT, with ? (size_t)OC : 0, -1, 1}}};
        snprintf(fwd.shape, sizeof fwd.shape, "N=%d C=%d OC=%d", N, C, OC);
        run_case(&fwd, d, ops, e);
        op_case bwd = {.kase = with ? "matmul_bwd+dinp+dbias" : "matmul_bwd", .N = N, .C = C, .OC = OC,
                       .variant = with, .nbuf = MMB_NBUF, .run = run_matmul_bwd,
                       .buf = {[MMB_DINP] = {"dinp [N,C]", ACC, DT, with ? NC : 0, -1, 1},
                               [MMB_DW] = {"dw [OC,C]", ACC, F32, OCC, -1, 1},
                               [MMB_DBIAS] = {"dbias [OC]", ACC, F32, with ? (size_t)OC : 0, -1, 1},
                               [MMB_DOUT] = {"dout [N,OC]", IN, DT, NOC, -1, 1},
                               [MMB_INP] = {"inp [N,C]", IN, DT, NC, -1, 1},
                               [MMB_W] = {"w [OC,C]", IN, DT, OCC, -1, 1}}};
        memcpy(bwd.shape, fwd.shape, sizeof bwd.shape);
        run_case(&bwd, d, ops, e);
    }
}

/* attention (materialized): variant = backward with the model's scratch,
 * 8 [B,T,C] buffers of the dtype (examples/gpt/gpt_layers.c lends dfch and dfchg) */
static size_t attention_scratch_bytes(const op_case *c, zt_dtype d) {
    return c->variant ? (size_t)8 * c->B * c->T * c->C * zt_dtype_size(d) : 0;
}

enum { ATT_OUT, ATT_ATT, ATT_QKV, ATT_NBUF };
static void run_attention_fwd(const op_case *c, const zt_ops *ops, zt_stream *s, void **p) {
    ops->attention_fwd(s, p[ATT_OUT], p[ATT_ATT], p[ATT_QKV], c->B, c->T, c->C, c->NH);
}
enum { ATB_DQKV, ATB_DATT, ATB_DOUT, ATB_QKV, ATB_ATT, ATB_SCRATCH, ATB_NBUF };
static void run_attention_bwd(const op_case *c, const zt_ops *ops, zt_stream *s, void **p) {
    ops->attention_bwd(s, p[ATB_DQKV], p[ATB_DATT], p[ATB_DOUT], p[ATB_QKV], p[ATB_ATT], c->B, c->T, c->C, c->NH,
                       c->variant ? p[ATB_SCRATCH] : NULL, attention_scratch_bytes(c, ops->dtype));
}
/* The probabilities of the (rounded) qkv, as the forward kept them. */
static void prepare_attention_bwd(const op_case *c, zt_dtype d, const zt_ops *fp32, zt_stream *s, void **p) {
    (void)d;
    float *out = xmalloc((size_t)c->B * c->T * c->C * sizeof(float)); /* [B,T,C] */
    fp32->attention_fwd(s, out, p[ATB_ATT], p[ATB_QKV], c->B, c->T, c->C, c->NH);
    free(out);
}

static void cases_attention(zt_dtype d, const zt_ops *ops, const env *e, int B, int T, int C, int NH) {
    size_t BTC = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    op_case fwd = {.kase = "attention_fwd", .B = B, .T = T, .C = C, .NH = NH, .nbuf = ATT_NBUF,
                   .run = run_attention_fwd,
                   .buf = {[ATT_OUT] = {"out [B,T,C]", OUT, DT, BTC},
                           [ATT_ATT] = {"att [B,NH,T,T]", OUT, DT, natt},
                           [ATT_QKV] = {"qkv [B,T,3C]", IN, DT, 3 * BTC, -1.5f, 1.5f}}};
    snprintf(fwd.shape, sizeof fwd.shape, "B=%d T=%d C=%d NH=%d", B, T, C, NH);
    run_case(&fwd, d, ops, e);
    for (int scratch = 0; scratch < 2; scratch++) {
        op_case bwd = {.kase = scratch ? "attention_bwd+scratch" : "attention_bwd", .B = B, .T = T, .C = C,
                       .NH = NH, .variant = scratch, .nbuf = ATB_NBUF, .prepare = prepare_attention_bwd,
                       .run = run_attention_bwd,
                       .buf = {[ATB_DQKV] = {"dqkv [B,T,3C]", ACC, DT, 3 * BTC, -0.1f, 0.1f},
                               [ATB_DATT] = {"datt [B,NH,T]", SCRATCH, F32, (size_t)B * NH * T},
                               [ATB_DOUT] = {"dout [B,T,C]", IN, DT, BTC, -1, 1},
                               [ATB_QKV] = {"qkv [B,T,3C]", IN, DT, 3 * BTC, -1.5f, 1.5f},
                               [ATB_ATT] = {"att [B,NH,T,T]", IN, DT, natt},
                               [ATB_SCRATCH] = {"scratch [8,B,T,C]", SCRATCH, DT, scratch ? 8 * BTC : 0}}};
        memcpy(bwd.shape, fwd.shape, sizeof bwd.shape);
        run_case(&bwd, d, ops, e);
    }
}

/* attention (fused): variant = backward with the model's scratch */
enum { AF_OUT, AF_LSE, AF_QKV, AF_NBUF };
static void run_attention_fused_fwd(const op_case *c, const zt_ops *ops, zt_stream *s, void **p) {
    ops->attention_fused_fwd(s, p[AF_OUT], p[AF_LSE], p[AF_QKV], c->B, c->T, c->C, c->NH);
}
enum { AFB_DQKV, AFB_D, AFB_DOUT, AFB_QKV, AFB_OUT, AFB_LSE, AFB_SCRATCH, AFB_NBUF };
static void run_attention_fused_bwd(const op_case *c, const zt_ops *ops, zt_stream *s, void **p) {
    ops->attention_fused_bwd(s, p[AFB_DQKV], p[AFB_D], p[AFB_DOUT], p[AFB_QKV], p[AFB_OUT], p[AFB_LSE], c->B, c->T,
                             c->C, c->NH, c->variant ? p[AFB_SCRATCH] : NULL,
                             attention_scratch_bytes(c, ops->dtype));
}
/* out and lse of the (rounded) qkv, as the forward kept them. */
static void prepare_attention_fused_bwd(const op_case *c, zt_dtype d, const zt_ops *fp32, zt_stream *s, void **p) {
    (void)d;
    fp32->attention_fused_fwd(s, p[AFB_OUT], p[AFB_LSE], p[AFB_QKV], c->B, c->T, c->C, c->NH);
}

static void cases_attention_fused(zt_dtype d, const zt_ops *ops, const env *e, int B, int T, int C, int NH) {
    size_t BTC = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    op_case fwd = {.kase = "attention_fused_fwd", .B = B, .T = T, .C = C, .NH = NH, .nbuf = AF_NBUF,
                   .run = run_attention_fused_fwd,
                   .buf = {[AF_OUT] = {"out [B,T,C]", OUT, DT, BTC},
                           [AF_LSE] = {"lse [B,NH,T]", OUT, F32, nlse},
                           [AF_QKV] = {"qkv [B,T,3C]", IN, DT, 3 * BTC, -1.5f, 1.5f}}};
    snprintf(fwd.shape, sizeof fwd.shape, "B=%d T=%d C=%d NH=%d", B, T, C, NH);
    run_case(&fwd, d, ops, e);
    for (int scratch = 0; scratch < 2; scratch++) {
        op_case bwd = {.kase = scratch ? "attention_fused_bwd+scratch" : "attention_fused_bwd", .B = B, .T = T,
                       .C = C, .NH = NH, .variant = scratch, .nbuf = AFB_NBUF,
                       .prepare = prepare_attention_fused_bwd, .run = run_attention_fused_bwd,
                       .buf = {[AFB_DQKV] = {"dqkv [B,T,3C]", ACC, DT, 3 * BTC, -0.1f, 0.1f},
                               [AFB_D] = {"D [B,NH,T]", OUT, F32, nlse},
                               [AFB_DOUT] = {"dout [B,T,C]", IN, DT, BTC, -1, 1},
                               [AFB_QKV] = {"qkv [B,T,3C]", IN, DT, 3 * BTC, -1.5f, 1.5f},
                               [AFB_OUT] = {"out [B,T,C]", IN, DT, BTC},
                               [AFB_LSE] = {"lse [B,NH,T]", IN, F32, nlse},
                               [AFB_SCRATCH] = {"scratch [8,B,T,C]", SCRATCH, DT, scratch ? 8 * BTC : 0}}};
        memcpy(bwd.shape, fwd.shape, sizeof bwd.shape);
        run_case(&bwd, d, ops, e);
    }
}

/* gelu and residual over N elements */
enum { GE_OUT, GE_INP, GE_NBUF };
static void run_gelu_fwd(const op_case *c, const zt_ops *ops, zt_stream *s, void **p) {
    ops->gelu_fwd(s, p[GE_OUT], p[GE_INP], (size_t)c->N);
}
enum { GEB_DINP, GEB_INP, GEB_DOUT, GEB_NBUF };
static void run_gelu_bwd(const op_case *c, const zt_ops *ops, zt_stream *s, void **p) {
    ops->gelu_bwd(s, p[GEB_DINP], p[GEB_INP], p[GEB_DOUT], (size_t)c->N);
}
enum { RE_OUT, RE_A, RE_B, RE_NBUF };
static void run_residual_fwd(const op_case *c, const zt_ops *ops, zt_stream *s, void **p) {
    ops->residual_fwd(s, p[RE_OUT], p[RE_A], p[RE_B], (size_t)c->N);
}
enum { REB_DA, REB_DB, REB_DOUT, REB_NBUF };
static void run_residual_bwd(const op_case *c, const zt_ops *ops, zt_stream *s, void **p) {
    ops->residual_bwd(s, p[REB_DA], p[REB_DB], p[REB_DOUT], (size_t)c->N);
}

static void cases_pointwise(zt_dtype d, const zt_ops *ops, const env *e, int N) {
    size_t n = (size_t)N;
    op_case cs[] = {
        {.kase = "gelu_fwd", .nbuf = GE_NBUF, .run = run_gelu_fwd,
         .buf = {[GE_OUT] = {"out [N]", OUT, DT, n}, [GE_INP] = {"inp [N]", IN, DT, n, -5, 5}}},
        {.kase = "gelu_bwd", .nbuf = GEB_NBUF, .run = run_gelu_bwd,
         .buf = {[GEB_DINP] = {"dinp [N]", ACC, DT, n, -0.5f, 0.5f},
                 [GEB_INP] = {"inp [N]", IN, DT, n, -5, 5},
                 [GEB_DOUT] = {"dout [N]", IN, DT, n, -1, 1}}},
        {.kase = "residual_fwd", .nbuf = RE_NBUF, .run = run_residual_fwd,
         .buf = {[RE_OUT] = {"out [N]", OUT, DT, n},
                 [RE_A] = {"a [N]", IN, DT, n, -1, 1},
                 [RE_B] = {"b [N]", IN, DT, n, -1, 1}}},
        {.kase = "residual_bwd", .nbuf = REB_NBUF, .run = run_residual_bwd,
         .buf = {[REB_DA] = {"da [N]", ACC, DT, n, -0.5f, 0.5f},
                 [REB_DB] = {"db [N]", ACC, DT, n, -0.5f, 0.5f},
                 [REB_DOUT] = {"dout [N]", IN, DT, n, -1, 1}}},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        cs[i].N = N;
        snprintf(cs[i].shape, sizeof cs[i].shape, "N=%d", N);
        run_case(&cs[i], d, ops, e);
    }
}

/* softmax cross-entropy: targets [N] in [0, V), dloss = 1/N */
enum { XE_LOSSES, XE_PROBS, XE_LOGITS, XE_NBUF };
static void run_xent_fwd(const op_case *c, const zt_ops *ops, zt_stream *s, void **p) {
    ops->softmax_xent_fwd(s, p[XE_LOSSES], p[XE_PROBS], p[XE_LOGITS], c->ints, c->N, c->V);
}
enum { XEB_DLOGITS, XEB_PROBS, XEB_NBUF };
static void run_xent_bwd(const op_case *c, const zt_ops *ops, zt_stream *s, void **p) {
    ops->softmax_xent_bwd(s, p[XEB_DLOGITS], p[XEB_PROBS], c->ints, c->N, c->V, 1.0f / (float)c->N);
}
/* Probabilities of random logits (rounded to the dtype first), one row of
 * them 40 above the others. */
static void prepare_xent_bwd(const op_case *c, zt_dtype d, const zt_ops *fp32, zt_stream *s, void **p) {
    (void)d;
    size_t NV = (size_t)c->N * c->V;
    float *logits = xmalloc(NV * sizeof(float)), *losses = xmalloc((size_t)c->N * sizeof(float)); /* [N,V], [N] */
    for (size_t i = 0; i < NV; i++) logits[i] = rng_uniform(-4, 4) + (i < (size_t)c->V ? 40.0f : 0.0f);
    fp32->softmax_xent_fwd(s, losses, p[XEB_PROBS], logits, c->ints, c->N, c->V);
    free(logits), free(losses);
}
static void prepare_xent_fwd(const op_case *c, zt_dtype d, const zt_ops *fp32, zt_stream *s, void **p) {
    (void)d, (void)fp32, (void)s;
    float *logits = p[XE_LOGITS];
    for (int i = 0; i < c->V; i++) logits[i] += 40.0f; /* large logits: needs the max subtracted */
}

static void cases_xent(zt_dtype d, const zt_ops *ops, const env *e, int N, int V) {
    size_t NV = (size_t)N * V;
    int32_t *targets = xmalloc((size_t)N * sizeof(int32_t)); /* [N] */
    for (int i = 0; i < N; i++) targets[i] = rng_int(V);
    targets[0] = 0, targets[N - 1] = V - 1;
    op_case fwd = {.kase = "softmax_xent_fwd", .N = N, .V = V, .ints = targets, .nbuf = XE_NBUF,
                   .prepare = prepare_xent_fwd, .run = run_xent_fwd,
                   .buf = {[XE_LOSSES] = {"losses [N]", OUT, F32, (size_t)N},
                           [XE_PROBS] = {"probs [N,V]", OUT, DT, NV},
                           [XE_LOGITS] = {"logits [N,V]", IN, DT, NV, -4, 4}}};
    snprintf(fwd.shape, sizeof fwd.shape, "N=%d V=%d", N, V);
    run_case(&fwd, d, ops, e);
    op_case bwd = {.kase = "softmax_xent_bwd", .N = N, .V = V, .ints = targets, .nbuf = XEB_NBUF,
                   .prepare = prepare_xent_bwd, .run = run_xent_bwd,
                   .buf = {[XEB_DLOGITS] = {"dlogits [N,V]", OUT, DT, NV},
                           [XEB_PROBS] = {"probs [N,V]", IN, DT, NV}}};
    memcpy(bwd.shape, fwd.shape, sizeof bwd.shape);
    run_case(&bwd, d, ops, e);
    free(targets);
}

/* ---- the Llama kernels ------------------------------------------------------ */

/* rmsnorm, eps 1e-5 */
enum { RMS_OUT, RMS_RSTD, RMS_INP, RMS_W, RMS_NBUF };
static void run_rmsnorm_fwd(const op_case *c, const zt_ops *ops, zt_stream *s, void **p) {
    ops->rmsnorm_fwd(s, p[RMS_OUT], p[RMS_RSTD], p[RMS_INP], p[RMS_W], c->N, c->C, 1e-5f);
}
enum { RMSB_DINP, RMSB_DW, RMSB_DOUT, RMSB_INP, RMSB_W, RMSB_RSTD, RMSB_NBUF };
static void run_rmsnorm_bwd(const op_case *c, const zt_ops *ops, zt_stream *s, void **p) {
    ops->rmsnorm_bwd(s, p[RMSB_DINP], p[RMSB_DW], p[RMSB_DOUT], p[RMSB_INP], p[RMSB_W], p[RMSB_RSTD], c->N, c->C);
}
/* rstd of the (rounded) input, as the forward saved it. */
static void prepare_rmsnorm_bwd(const op_case *c, zt_dtype d, const zt_ops *fp32, zt_stream *s, void **p) {
    (void)d;
    float *out = xmalloc((size_t)c->N * c->C * sizeof(float)); /* [N,C] */
    fp32->rmsnorm_fwd(s, out, p[RMSB_RSTD], p[RMSB_INP], p[RMSB_W], c->N, c->C, 1e-5f);
    free(out);
}

static void cases_rmsnorm(zt_dtype d, const zt_ops *ops, const env *e, int N, int C) {
    size_t NC = (size_t)N * C;
    op_case fwd = {.kase = "rmsnorm_fwd", .N = N, .C = C, .nbuf = RMS_NBUF, .run = run_rmsnorm_fwd,
                   .buf = {[RMS_OUT] = {"out [N,C]", OUT, DT, NC},
                           [RMS_RSTD] = {"rstd [N]", OUT, F32, (size_t)N},
                           [RMS_INP] = {"inp [N,C]", IN, DT, NC, -2, 2},
                           [RMS_W] = {"w [C]", IN, DT, (size_t)C, 0.5f, 1.5f}}};
    snprintf(fwd.shape, sizeof fwd.shape, "N=%d C=%d", N, C);
    run_case(&fwd, d, ops, e);
    op_case bwd = {.kase = "rmsnorm_bwd", .N = N, .C = C, .nbuf = RMSB_NBUF, .prepare = prepare_rmsnorm_bwd,
                   .run = run_rmsnorm_bwd,
                   .buf = {[RMSB_DINP] = {"dinp [N,C]", ACC, DT, NC, -0.5f, 0.5f},
                           [RMSB_DW] = {"dw [C]", ACC, F32, (size_t)C, -1, 1},
                           [RMSB_DOUT] = {"dout [N,C]", IN, DT, NC, -1, 1},
                           [RMSB_INP] = {"inp [N,C]", IN, DT, NC, -2, 2},
                           [RMSB_W] = {"w [C]", IN, DT, (size_t)C, 0.5f, 1.5f},
                           [RMSB_RSTD] = {"rstd [N]", IN, F32, (size_t)N}}};
    memcpy(bwd.shape, fwd.shape, sizeof bwd.shape);
    run_case(&bwd, d, ops, e);
}

/* rope, theta 10000, in place: the buffer is the input and the output */
enum { ROPE_QKV, ROPE_NBUF };
static void run_rope_fwd(const op_case *c, const zt_ops *ops, zt_stream *s, void **p) {
    ops->rope_fwd(s, p[ROPE_QKV], c->B, c->T, c->NH, c->NKV, c->HD, 10000.0f);
}
static void run_rope_bwd(const op_case *c, const zt_ops *ops, zt_stream *s, void **p) {
    ops->rope_bwd(s, p[ROPE_QKV], c->B, c->T, c->NH, c->NKV, c->HD, 10000.0f);
}

static void cases_rope(zt_dtype d, const zt_ops *ops, const env *e, int B, int T, int NH, int NKV, int HD) {
    size_t n = (size_t)B * T * (NH + 2 * NKV) * HD;
    op_case cs[] = {
        {.kase = "rope_fwd", .run = run_rope_fwd, .buf = {[ROPE_QKV] = {"qkv [B,T,(NH+2NKV)HD]", ACC, DT, n, -2, 2}}},
        {.kase = "rope_bwd", .run = run_rope_bwd, .buf = {[ROPE_QKV] = {"dqkv [B,T,(NH+2NKV)HD]", ACC, DT, n, -1, 1}}},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        cs[i].B = B, cs[i].T = T, cs[i].NH = NH, cs[i].NKV = NKV, cs[i].HD = HD, cs[i].nbuf = ROPE_NBUF;
        snprintf(cs[i].shape, sizeof cs[i].shape, "B=%d T=%d NH=%d NKV=%d HD=%d", B, T, NH, NKV, HD);
        run_case(&cs[i], d, ops, e);
    }
}

/* swiglu: gate_up [N,2F] */
enum { SW_OUT, SW_GATE_UP, SW_NBUF };
static void run_swiglu_fwd(const op_case *c, const zt_ops *ops, zt_stream *s, void **p) {
    ops->swiglu_fwd(s, p[SW_OUT], p[SW_GATE_UP], c->N, c->F);
}
enum { SWB_DGATE_UP, SWB_GATE_UP, SWB_DOUT, SWB_NBUF };
static void run_swiglu_bwd(const op_case *c, const zt_ops *ops, zt_stream *s, void **p) {
    ops->swiglu_bwd(s, p[SWB_DGATE_UP], p[SWB_GATE_UP], p[SWB_DOUT], c->N, c->F);
}

static void cases_swiglu(zt_dtype d, const zt_ops *ops, const env *e, int N, int F) {
    size_t NF = (size_t)N * F;
    op_case fwd = {.kase = "swiglu_fwd", .N = N, .F = F, .nbuf = SW_NBUF, .run = run_swiglu_fwd,
                   .buf = {[SW_OUT] = {"out [N,F]", OUT, DT, NF},
                           [SW_GATE_UP] = {"gate_up [N,2F]", IN, DT, 2 * NF, -6, 6}}};
    snprintf(fwd.shape, sizeof fwd.shape, "N=%d F=%d", N, F);
    run_case(&fwd, d, ops, e);
    op_case bwd = {.kase = "swiglu_bwd", .N = N, .F = F, .nbuf = SWB_NBUF, .run = run_swiglu_bwd,
                   .buf = {[SWB_DGATE_UP] = {"dgate_up [N,2F]", OUT, DT, 2 * NF},
                           [SWB_GATE_UP] = {"gate_up [N,2F]", IN, DT, 2 * NF, -6, 6},
                           [SWB_DOUT] = {"dout [N,F]", IN, DT, NF, -1, 1}}};
    memcpy(bwd.shape, fwd.shape, sizeof bwd.shape);
    run_case(&bwd, d, ops, e);
}

/* gqa_expand / gqa_reduce over N = B*T rows */
enum { GQ_FULL, GQ_QKV, GQ_NBUF };
static void run_gqa_expand(const op_case *c, const zt_ops *ops, zt_stream *s, void **p) {
    ops->gqa_expand(s, p[GQ_FULL], p[GQ_QKV], c->N, c->NH, c->NKV, c->HD);
}
enum { GQR_DQKV, GQR_DFULL, GQR_NBUF };
static void run_gqa_reduce(const op_case *c, const zt_ops *ops, zt_stream *s, void **p) {
    ops->gqa_reduce(s, p[GQR_DQKV], p[GQR_DFULL], c->N, c->NH, c->NKV, c->HD);
}

static void cases_gqa(zt_dtype d, const zt_ops *ops, const env *e, int N, int NH, int NKV, int HD) {
    size_t nsmall = (size_t)N * (NH + 2 * NKV) * HD, nfull = (size_t)N * 3 * NH * HD;
    op_case fwd = {.kase = "gqa_expand", .N = N, .NH = NH, .NKV = NKV, .HD = HD, .nbuf = GQ_NBUF,
                   .run = run_gqa_expand,
                   .buf = {[GQ_FULL] = {"qkv_full [N,3 NH HD]", OUT, DT, nfull},
                           [GQ_QKV] = {"qkv [N,(NH+2NKV)HD]", IN, DT, nsmall, -2, 2}}};
    snprintf(fwd.shape, sizeof fwd.shape, "N=%d NH=%d NKV=%d HD=%d", N, NH, NKV, HD);
    run_case(&fwd, d, ops, e);
    op_case bwd = {.kase = "gqa_reduce", .N = N, .NH = NH, .NKV = NKV, .HD = HD, .nbuf = GQR_NBUF,
                   .run = run_gqa_reduce,
                   .buf = {[GQR_DQKV] = {"dqkv [N,(NH+2NKV)HD]", ACC, DT, nsmall, -0.5f, 0.5f},
                           [GQR_DFULL] = {"dqkv_full [N,3 NH HD]", IN, DT, nfull, -1, 1}}};
    memcpy(bwd.shape, fwd.shape, sizeof bwd.shape);
    run_case(&bwd, d, ops, e);
}

/* ---- casts and scaled_store ----------------------------------------------- */

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static int fp16_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0; }

/* The value of fp16 pattern h, decoded independently in double (inf as
 * HUGE_VAL, NaN as NAN). */
static double fp16_value(uint16_t h) {
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 31 ? (m ? NAN : HUGE_VAL) : e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (h & 0x8000u) ? -v : v;
}

/* Nearest fp16 pattern of finite f, ties to the even pattern, by binary
 * search over the ordered positive patterns 0 .. 0x7c00 (0x7c00, infinity,
 * stands for 2^16 there: past 65504 + 16 IEEE rounds to it). */
static uint16_t ref_fp16(float f) {
    double a = fabs((double)f);
    uint16_t sign = signbit(f) ? 0x8000u : 0;
    unsigned lo = 0, hi = 0x7c00u; /* value(lo) <= a < value(hi), or a at or past 2^16 */
    if (a >= 65536.0) return sign | 0x7c00u;
    while (hi - lo > 1) {
        unsigned mid = (lo + hi) / 2;
        double v = mid == 0x7c00u ? 65536.0 : fp16_value((uint16_t)mid);
        if (v <= a) lo = mid;
        else hi = mid;
    }
    double vlo = fp16_value((uint16_t)lo), vhi = hi == 0x7c00u ? 65536.0 : fp16_value((uint16_t)hi);
    unsigned pick = a - vlo < vhi - a ? lo : vhi - a < a - vlo ? hi : (lo & 1u) ? hi : lo;
    return (uint16_t)(sign | pick);
}

static void test_cast_fp16(const zt_ops *ops, zt_stream *s) {
    /* Every pattern: widened to its value, narrowed back to its bits. */
    uint16_t *all = xmalloc(65536 * 2), *back = xmalloc(65536 * 2); /* [65536] fp16 */
    float *wide = xmalloc(65536 * sizeof(float));                   /* [65536] fp32 */
    for (uint32_t i = 0; i < 65536; i++) all[i] = (uint16_t)i;
    ops->cast(s, wide, ZT_FP32, all, ZT_FP16, 65536);
    ops->cast(s, back, ZT_FP16, wide, ZT_FP32, 65536);
    size_t bad = 0, first = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        double v = fp16_value((uint16_t)i);
        int value_ok = isnan(v) ? isnan(wide[i]) : (double)wide[i] == v && !signbit(wide[i]) == !signbit(v);
        int back_ok = fp16_is_nan((uint16_t)i) ? fp16_is_nan(back[i]) : back[i] == i;
        if (!(value_ok && back_ok) && bad++ == 0) first = i;
    }
    CHECK(bad == 0, "fp16 round trip: %zu of 65536 patterns fail, first 0x%04x -> %.9g (0x%08x) -> 0x%04x", bad,
          (unsigned)first, (double)wide[first], (unsigned)bits_of(wide[first]), (unsigned)back[first]);
    if (bad == 0) printf("ok cast fp16 -> fp32 -> fp16 of all 65536 patterns (values exact, NaN stays NaN)\n");

    /* fp32 -> fp16 on random values over fp16's range, half of them ties
     * (the 13 dropped bits 0x1000 on a normal, a half-ulp on a subnormal). */
    size_t n = 200000;
    float *x = xmalloc(n * sizeof(float)); /* [n] fp32 */
    uint16_t *h = xmalloc(n * 2);           /* [n] fp16 */
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)(rng_next() >> 32);
        u = (u & 0x807fffffu) | ((100u + (u >> 23) % 44u) << 23); /* 2^-27 .. 2^16 */
        if (i % 2) u = (u & 0xffffe000u) | 0x1000u;
        x[i] = zt_f32_from_bits(u);
        if (i % 4 == 3) x[i] = (float)ldexp((double)(rng_next() % 2048) + 0.5, -24); /* subnormal ties */
    }
    /* The edges: the largest finite, the overflow tie (65520: to even, so
     * infinity), half the smallest subnormal (a tie, to 0) and just above. */
    static const float edges[] = {65504.0f, 65519.996f, 65520.0f, -65520.0f, 65536.0f, 5.9604645e-8f,
                                  2.9802322e-8f, 2.9802326e-8f, -2.9802322e-8f, 6.1035156e-5f, 6.1035152e-5f};
    memcpy(x, edges, sizeof edges);
    ops->cast(s, h, ZT_FP16, x, ZT_FP32, n);
    bad = 0;
    for (size_t i = 0; i < n; i++)
        if (h[i] != ref_fp16(x[i]) && bad++ == 0) first = i;
    CHECK(bad == 0, "cast fp32 -> fp16: %zu of %zu values differ from the nearest search, first %.9g (0x%08x) -> "
          "0x%04x, want 0x%04x", bad, n, (double)x[first], (unsigned)bits_of(x[first]), (unsigned)h[first],
          (unsigned)ref_fp16(x[first]));
    if (bad == 0) printf("ok cast fp32 -> fp16 matches the nearest search on %zu values\n", n);
    free(all), free(back), free(wide), free(x), free(h);
}

/* scaled_store in dtype d, against zt_dtype_store of the fp32 expression;
 * src holds a -0 (kept without accumulate) and, for fp16, values past 65504
 * (infinity). */
static void test_scaled_store(const zt_ops *ops, zt_stream *s, zt_dtype d) {
    size_t n = 1003, e = zt_dtype_size(d);
    float alpha = 0.37f;
    float *src = xmalloc(n * sizeof(float)); /* [n] fp32 */
    void *dst0 = xmalloc(n * e), *dst = xmalloc(n * e), *want = xmalloc(n * e); /* [n] d */
    for (size_t i = 0; i < n; i++) {
        src[i] = rng_uniform(-8, 8);
        zt_dtype_store(dst0, d, i, rng_uniform(-8, 8));
    }
    src[0] = -0.0f;
    src[1] = 2e5f; /* * alpha: 74000, past fp16's largest */
    for (int accumulate = 0; accumulate < 2; accumulate++) {
        memcpy(dst, dst0, n * e);
        ops->scaled_store(s, dst, d, src, alpha, accumulate, n);
        for (size_t i = 0; i < n; i++)
            zt_dtype_store(want, d, i, accumulate ? zt_dtype_load(dst0, d, i) + src[i] * alpha : src[i] * alpha);
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < n; i++)
            if (memcmp((char *)dst + i * e, (char *)want + i * e, e) != 0 && bad++ == 0) first = i;
        CHECK(bad == 0, "scaled_store %s accumulate=%d: %zu of %zu differ, first at %zu: %.9g, want %.9g",
              zt_dtype_name(d), accumulate, bad, n, first, (double)zt_dtype_load(dst, d, first),
              (double)zt_dtype_load(want, d, first));
        if (bad == 0) printf("ok scaled_store %s accumulate=%d (bit for bit)\n", zt_dtype_name(d), accumulate);
    }
    free(src), free(dst0), free(dst), free(want);
}

/* ---- main ------------------------------------------------------------------ */

static void test_dtype(zt_dtype d, const zt_ops *ops, const env *e) {
    cases_embedding(d, ops, e, 3, 37, 70, 101, 0);
    cases_layernorm(d, ops, e, 67, 203);
    cases_matmul(d, ops, e, 150, 200, 130); /* 3 x 64 rows, 2 x 128 deep (dw: 2 x 128), 3 x 64 wide */
    cases_attention(d, ops, e, 2, 19, 48, 4);
    cases_attention(d, ops, e, 1, 77, 30, 3); /* T > 64, head size 10 */
    cases_attention(d, ops, e, 1, 77, 240, 1); /* T x head size > 16384: 16-bit's row loops */
    cases_attention_fused(d, ops, e, 2, 19, 48, 4);
    cases_attention_fused(d, ops, e, 1, 77, 30, 3);
    cases_pointwise(d, ops, e, 1003);
    cases_xent(d, ops, e, 37, 1003);
}

/* The Llama kernels, run after every dtype's cases above, so that those
 * draw the random inputs their measured errors were taken with. */
static void test_llama_dtype(zt_dtype d, const zt_ops *ops, const env *e) {
    cases_embedding(d, ops, e, 3, 37, 70, 101, 1);
    cases_rmsnorm(d, ops, e, 67, 203);
    cases_rope(d, ops, e, 2, 37, 4, 2, 10);
    cases_rope(d, ops, e, 1, 300, 3, 3, 64); /* positions past 256: angles of many turns */
    cases_swiglu(d, ops, e, 37, 101);
    cases_gqa(d, ops, e, 37, 6, 2, 10);
    cases_gqa(d, ops, e, 37, 4, 4, 10);
}

int main(void) {
    zt_backend *be = NULL;
    zt_error err = {0};
    if (zt_backend_cpu_create(1, &be, &err) != ZT_OK) {
        printf("FAIL: zt_backend_cpu_create: %s\n", err.msg);
        return 1;
    }
    zt_stream s1 = zt_backend_stream(be), s3 = s1;
    s3.nthreads = 3;
    env e = {.fp32 = be->ops_for[ZT_FP32], .s1 = &s1, .s3 = &s3};
    CHECK(e.fp32 == be->ops && e.fp32->dtype == ZT_FP32, "ops_for[ZT_FP32] is not the fp32 table be->ops");

    static const zt_dtype dtypes[] = {ZT_BF16, ZT_FP16};
    for (size_t k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++) {
        zt_dtype d = dtypes[k];
        const zt_ops *ops = be->ops_for[d];
        CHECK(ops && ops->dtype == d, "ops_for[%s] is missing or has dtype %d", zt_dtype_name(d),
              ops ? (int)ops->dtype : -1);
        if (ops && ops->dtype == d) test_dtype(d, ops, &e);
    }
    for (size_t k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++)
        if (be->ops_for[dtypes[k]]) test_llama_dtype(dtypes[k], be->ops_for[dtypes[k]], &e);
    test_cast_fp16(be->ops, &s1);
    for (int d = 0; d < ZT_NDTYPES; d++) test_scaled_store(be->ops, &s1, (zt_dtype)d);

    zt_backend_destroy(be);
    printf("%ld checks, %d failed\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
