/* Unit test of the CPU kernel table (zt_ops).
 *
 * 1. Finite-difference gradient checks of every kernel that has a backward:
 *    embedding, layernorm, matmul (with/without bias, with/without dinp),
 *    attention (several head counts, T > 1, causal), fused attention (lse
 *    against double precision, its backward against the materialized one
 *    too), gelu, residual and
 *    softmax cross-entropy. The scalar objective is L = sum(out * R) for a fixed
 *    random R (so dout = R), or L = dloss * sum(losses) for the loss. The
 *    analytic gradient comes from the backward kernel; the numeric one is the
 *    central difference (L(x+h) - L(x-h)) / (2h), where the fp32 forward is
 *    evaluated and L is accumulated in double.
 *
 *    Error metric, per tensor:
 *      err = max_i |a_i - n_i| / max(GRAD_FLOOR * max_j |n_j|, |a_i| + |n_i|)
 *    and the check requires err < GRAD_TOL. Every check also re-runs the metric
 *    on the analytic gradient scaled by 1.1 and requires that to FAIL (error
 *    about 0.1/2.1 = 0.048 at the largest entries), so the tolerance is shown
 *    to be tight enough to reject a wrong formula.
 *
 * 2. Forward values against double-precision references (embedding exact,
 *    attention rows causal and summing to 1, losses and probabilities), the
 *    ACCUMULATE contract of the backward kernels (a second call adds the same
 *    gradient again; softmax_xent_bwd overwrites), forward outputs and scratch
 *    prefilled with NaN are fully overwritten, and thread-count independence
 *    (1 vs 3 threads give identical bits) of every non-BLAS kernel.
 *
 * 3. fp32 -> bf16 round-to-nearest-even on hand-picked values and against an
 *    independent double-precision reference, bf16 -> fp32 -> bf16 round trips
 *    of all 65536 patterns, scale, and sum_squares against a double loop and
 *    bit-identical across thread counts. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "zt_backend.h"

/* Tolerances of the gradient check (see the metric above). Measured errors at
 * these shapes are printed with every "ok" line; they sit one to two orders
 * of magnitude below GRAD_TOL, while a gradient off by 10% scores ~0.048. */
#define GRAD_TOL 1e-2
#define GRAD_FLOOR 1e-2
/* Forward values against double references: |f32 - ref| <= FWD_TOL * (1 + |ref|). */
#define FWD_TOL 1e-5



/* ---- helpers ------------------------------------------------------------ */

static int rng_int(int n) { return (int)(rng_next() % (uint64_t)n); }

static float *falloc(size_t n) { return xmalloc(n * sizeof(float)); }
static void fill_uniform(float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = rng_uniform(lo, hi);
}
static void fill(float *x, size_t n, float v) {
    for (size_t i = 0; i < n; i++) x[i] = v;
}
static double dot_d(const float *a, const float *r, size_t n) {
    double acc = 0.0;
    for (size_t i = 0; i < n; i++) acc += (double)a[i] * (double)r[i];
    return acc;
}
static int all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}
static float *fdup(const float *x, size_t n) {
    float *p = falloc(n);
    memcpy(p, x, n * sizeof(float));
    return p;
}

/* max_i |got_i - ref_i| / (1 + |ref_i|) */
static double max_rel_err_d(const float *got, const double *ref, size_t n, size_t *worst) {
    double e = 0.0;
    *worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]) / (1.0 + fabs(ref[i]));
        if (!(d <= e)) { /* also catches NaN */
            e = d;
            *worst = i;
        }
    }
    return e;
}

static void check_fwd(const char *what, const float *got, const double *ref, size_t n) {
    size_t w;
    double e = max_rel_err_d(got, ref, n, &w);
    CHECK(e <= FWD_TOL, "%s: forward mismatch at %zu: got %.9g want %.9g (err %.3g > %.0e)", what, w,
          (double)got[w], ref[w], e, FWD_TOL);
    if (e <= FWD_TOL) printf("ok forward %s (max err %.2e)\n", what, e);
}

/* The second backward call into the same buffers must add the same gradient
 * again: |g2 - 2 g1| <= 1e-5 * max|g1| (exactly 0 for single-term sums). */
static void check_accumulated(const char *what, const float *g1, const float *g2, size_t n) {
    double scale = 0.0, e = 0.0;
    size_t w = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)g1[i]));
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)g2[i] - 2.0 * (double)g1[i]);
        if (!(d <= e)) {
            e = d;
            w = i;
        }
    }
    CHECK(e <= 1e-5 * scale, "%s: backward does not accumulate: at %zu first %.9g second %.9g", what, w,
          (double)g1[w], (double)g2[w]);
    if (e <= 1e-5 * scale) printf("ok accumulate %s\n", what);
}

/* An output the backward overwrites (matmul's and GELU's dinp): a second
 * call into a buffer holding NaN must give the first call's bits. */
static void check_overwritten(const char *what, const float *g1, const float *g2, size_t n) {
    int same = memcmp(g1, g2, n * sizeof(float)) == 0;
    CHECK(same, "%s: backward does not overwrite its output (a NaN-filled buffer changes the result)", what);
    if (same) printf("ok overwrite %s\n", what);
}

static void check_same_bits(const char *what, const void *a, const void *b, size_t bytes) {
    int same = memcmp(a, b, bytes) == 0;
    CHECK(same, "%s: results differ between 1 and 3 threads", what);
    if (same) printf("ok thread-independent %s\n", what);
}

/* ---- the gradient check -------------------------------------------------- */

typedef double (*objective_fn)(void *ctx);

static double grad_error(const float *a, const double *num, size_t n, double mul, size_t *worst) {
    double nmax = 0.0;
    for (size_t i = 0; i < n; i++) nmax = fmax(nmax, fabs(num[i]));
    double floor_ = GRAD_FLOOR * nmax;
    if (floor_ < 1e-12) floor_ = 1e-12;
    double e = 0.0;
    *worst = 0;
    for (size_t i = 0; i < n; i++) {
        double ai = mul * (double)a[i];
        double d = fabs(ai - num[i]) / fmax(floor_, fabs(ai) + fabs(num[i]));
        if (!(d <= e)) {
            e = d;
            *worst = i;
        }
    }
    return e;
}

/* Compares analytic[n] with central differences of f over x[n] (x is perturbed
 * in place and restored bit-exactly). */
static void gradcheck(const char *what, objective_fn f, void *ctx, float *x, const float *analytic,
                      size_t n, float h) {
    double *num = xmalloc(n * sizeof(double));
    double nmax = 0.0;
    for (size_t i = 0; i < n; i++) {
        float x0 = x[i];
        float xp = x0 + h, xm = x0 - h;
        x[i] = xp;
        double lp = f(ctx);
        x[i] = xm;
        double lm = f(ctx);
        x[i] = x0;
        num[i] = (lp - lm) / ((double)xp - (double)xm); /* the step actually taken */
        nmax = fmax(nmax, fabs(num[i]));
    }
    size_t w, ww;
    double e = grad_error(analytic, num, n, 1.0, &w);
    double e_wrong = grad_error(analytic, num, n, 1.1, &ww);
    CHECK(nmax > 0.0, "%s: numeric gradient is identically zero (test is vacuous)", what);
    CHECK(e < GRAD_TOL, "%s: gradient mismatch at %zu: analytic %.9g numeric %.9g (err %.3g >= %.0e)",
          what, w, (double)analytic[w], num[w], e, GRAD_TOL);
    CHECK(e_wrong > GRAD_TOL,
          "%s: self-check: gradient scaled by 1.1 was accepted (err %.3g <= %.0e); tolerance too loose",
          what, e_wrong, GRAD_TOL);
    if (e < GRAD_TOL && e_wrong > GRAD_TOL)
        printf("ok gradcheck %-28s n=%-4zu max err %.2e (tol %.0e; 1.1x wrong grad scores %.2e)\n", what,
               n, e, GRAD_TOL, e_wrong);
    free(num);
}

/* ---- embedding ---------------------------------------------------------- */

typedef struct {
    const zt_ops *ops;
    zt_stream *s;
    float *out, *wte, *wpe, *R;
    int32_t *tokens;
    int B, T, C, V;
} emb_ctx;

static double emb_obj(void *p) {
    emb_ctx *c = p;
    c->ops->embedding_fwd(c->s, c->out, c->tokens, c->wte, c->wpe, c->B, c->T, c->C);
    return dot_d(c->out, c->R, (size_t)c->B * c->T * c->C);
}

static void test_embedding(const zt_ops *ops, zt_stream *s, zt_stream *s3) {
    emb_ctx c = {.ops = ops, .s = s, .B = 2, .T = 5, .C = 8, .V = 11};
    size_t nout = (size_t)c.B * c.T * c.C, nwte = (size_t)c.V * c.C, nwpe = (size_t)c.T * c.C;
    c.out = falloc(nout);
    c.wte = falloc(nwte);
    c.wpe = falloc(nwpe);
    c.R = falloc(nout);
    c.tokens = xmalloc((size_t)c.B * c.T * sizeof(int32_t));
    fill_uniform(c.wte, nwte, -1, 1);
    fill_uniform(c.wpe, nwpe, -1, 1);
    fill_uniform(c.R, nout, -1, 1);
    for (int i = 0; i < c.B * c.T; i++) c.tokens[i] = rng_int(c.V);
    c.tokens[7] = c.tokens[2]; /* a repeated token: the scatter must add, not store */
    c.tokens[9] = c.V - 1;     /* the last row */

    /* Forward: exact values (one fp32 addition each), every output written. */
    fill(c.out, nout, NAN);
    emb_obj(&c);
    int exact = 1;
    for (int bt = 0; bt < c.B * c.T && exact; bt++)
        for (int ch = 0; ch < c.C; ch++) {
            float want = c.wte[(size_t)c.tokens[bt] * c.C + ch] + c.wpe[(size_t)(bt % c.T) * c.C + ch];
            float got = c.out[(size_t)bt * c.C + ch];
            if (memcmp(&want, &got, sizeof got) != 0) {
                CHECK(0, "embedding_fwd[bt=%d,c=%d] = %.9g, want exactly %.9g", bt, ch, (double)got,
                      (double)want);
                exact = 0;
                break;
            }
        }
    if (exact) printf("ok forward embedding (exact)\n");

    float *dwte = falloc(nwte), *dwpe = falloc(nwpe);
    fill(dwte, nwte, 0.0f);
    fill(dwpe, nwpe, 0.0f);
    ops->embedding_bwd(s, dwte, dwpe, c.R, c.tokens, c.B, c.T, c.C);
    gradcheck("embedding dwte", emb_obj, &c, c.wte, dwte, nwte, 1e-2f);
    gradcheck("embedding dwpe", emb_obj, &c, c.wpe, dwpe, nwpe, 1e-2f);

    float *dwte2 = fdup(dwte, nwte), *dwpe2 = fdup(dwpe, nwpe);
    ops->embedding_bwd(s, dwte2, dwpe2, c.R, c.tokens, c.B, c.T, c.C);
    check_accumulated("embedding dwte", dwte, dwte2, nwte);
    check_accumulated("embedding dwpe", dwpe, dwpe2, nwpe);

    /* 3 threads: same bits. */
    float *out3 = falloc(nout);
    ops->embedding_fwd(s, c.out, c.tokens, c.wte, c.wpe, c.B, c.T, c.C);
    ops->embedding_fwd(s3, out3, c.tokens, c.wte, c.wpe, c.B, c.T, c.C);
    check_same_bits("embedding_fwd", c.out, out3, nout * sizeof(float));
    fill(dwte2, nwte, 0.0f);
    fill(dwpe2, nwpe, 0.0f);
    ops->embedding_bwd(s3, dwte2, dwpe2, c.R, c.tokens, c.B, c.T, c.C);
    check_same_bits("embedding_bwd dwte", dwte, dwte2, nwte * sizeof(float));
    check_same_bits("embedding_bwd dwpe", dwpe, dwpe2, nwpe * sizeof(float));

    free(out3), free(dwte2), free(dwpe2), free(dwte), free(dwpe);
    free(c.out), free(c.wte), free(c.wpe), free(c.R), free(c.tokens);
}

/* ---- layernorm ---------------------------------------------------------- */

typedef struct {
    const zt_ops *ops;
    zt_stream *s;
    float *out, *mean, *rstd, *inp, *w, *b, *R;
    int N, C;
} ln_ctx;

static double ln_obj(void *p) {
    ln_ctx *c = p;
    c->ops->layernorm_fwd(c->s, c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->N, c->C);
    return dot_d(c->out, c->R, (size_t)c->N * c->C);
}

static void test_layernorm(const zt_ops *ops, zt_stream *s, zt_stream *s3) {
    ln_ctx c = {.ops = ops, .s = s, .N = 10, .C = 8};
    size_t n = (size_t)c.N * c.C, C = (size_t)c.C;
    c.out = falloc(n), c.mean = falloc((size_t)c.N), c.rstd = falloc((size_t)c.N);
    c.inp = falloc(n), c.w = falloc(C), c.b = falloc(C), c.R = falloc(n);
    fill_uniform(c.inp, n, -2, 2);
    for (size_t i = 0; i < C; i++) c.inp[i] += 3.0f; /* a row with a large mean */
    fill_uniform(c.w, C, 0.5f, 1.5f);
    fill_uniform(c.b, C, -0.5f, 0.5f);
    fill_uniform(c.R, n, -1, 1);

    fill(c.out, n, NAN), fill(c.mean, (size_t)c.N, NAN), fill(c.rstd, (size_t)c.N, NAN);
    ln_obj(&c);
    double *ref = xmalloc(n * sizeof(double)), rm[10], rr[10];
    for (int r = 0; r < c.N; r++) {
        const float *x = c.inp + (size_t)r * C;
        double m = 0, v = 0;
        for (size_t i = 0; i < C; i++) m += x[i];
        m /= (double)C;
        for (size_t i = 0; i < C; i++) v += ((double)x[i] - m) * ((double)x[i] - m);
        v /= (double)C;
        double rs = 1.0 / sqrt(v + 1e-5);
        for (size_t i = 0; i < C; i++)
            ref[(size_t)r * C + i] = ((double)x[i] - m) * rs * (double)c.w[i] + (double)c.b[i];
        rm[r] = m, rr[r] = rs;
    }
    check_fwd("layernorm out", c.out, ref, n);
    check_fwd("layernorm mean", c.mean, rm, (size_t)c.N);
    check_fwd("layernorm rstd", c.rstd, rr, (size_t)c.N);

    float *dinp = falloc(n), *dw = falloc(C), *db = falloc(C);
    fill(dinp, n, 0), fill(dw, C, 0), fill(db, C, 0);
    ops->layernorm_bwd(s, dinp, dw, db, c.R, c.inp, c.w, c.mean, c.rstd, c.N, c.C);
    gradcheck("layernorm dinp", ln_obj, &c, c.inp, dinp, n, 1e-2f);
    gradcheck("layernorm dw", ln_obj, &c, c.w, dw, C, 1e-2f);
    gradcheck("layernorm db", ln_obj, &c, c.b, db, C, 1e-2f);

    ln_obj(&c); /* restore mean/rstd of the unperturbed input */
    float *dinp2 = fdup(dinp, n), *dw2 = fdup(dw, C), *db2 = fdup(db, C);
    ops->layernorm_bwd(s, dinp2, dw2, db2, c.R, c.inp, c.w, c.mean, c.rstd, c.N, c.C);
    check_accumulated("layernorm dinp", dinp, dinp2, n);
    check_accumulated("layernorm dw", dw, dw2, C);
    check_accumulated("layernorm db", db, db2, C);

    float *out3 = falloc(n), *mean3 = falloc((size_t)c.N), *rstd3 = falloc((size_t)c.N);
    ops->layernorm_fwd(s3, out3, mean3, rstd3, c.inp, c.w, c.b, c.N, c.C);
    check_same_bits("layernorm_fwd out", c.out, out3, n * sizeof(float));
    check_same_bits("layernorm_fwd rstd", c.rstd, rstd3, (size_t)c.N * sizeof(float));
    fill(dinp2, n, 0), fill(dw2, C, 0), fill(db2, C, 0);
    ops->layernorm_bwd(s3, dinp2, dw2, db2, c.R, c.inp, c.w, c.mean, c.rstd, c.N, c.C);
    check_same_bits("layernorm_bwd dinp", dinp, dinp2, n * sizeof(float));
    check_same_bits("layernorm_bwd dw", dw, dw2, C * sizeof(float));
    check_same_bits("layernorm_bwd db", db, db2, C * sizeof(float));

    free(out3), free(mean3), free(rstd3), free(dinp2), free(dw2), free(db2);
    free(dinp), free(dw), free(db), free(ref);
    free(c.out), free(c.mean), free(c.rstd), free(c.inp), free(c.w), free(c.b), free(c.R);
}

/* ---- matmul ------------------------------------------------------------- */

typedef struct {
    const zt_ops *ops;
    zt_stream *s;
    float *out, *inp, *w, *bias, *R;
    int N, C, OC;
} mm_ctx;

static double mm_obj(void *p) {
    mm_ctx *c = p;
    c->ops->matmul_fwd(c->s, c->out, c->inp, c->w, c->bias, c->N, c->C, c->OC);
    return dot_d(c->out, c->R, (size_t)c->N * c->OC);
}

static void test_matmul(const zt_ops *ops, zt_stream *s, int with_bias) {
    mm_ctx c = {.ops = ops, .s = s, .N = 10, .C = 8, .OC = 12};
    size_t nin = (size_t)c.N * c.C, nw = (size_t)c.OC * c.C, nout = (size_t)c.N * c.OC;
    c.out = falloc(nout), c.inp = falloc(nin), c.w = falloc(nw), c.R = falloc(nout);
    c.bias = with_bias ? falloc((size_t)c.OC) : NULL;
    fill_uniform(c.inp, nin, -1, 1);
    fill_uniform(c.w, nw, -1, 1);
    if (c.bias) fill_uniform(c.bias, (size_t)c.OC, -1, 1);
    fill_uniform(c.R, nout, -1, 1);
    char name[64];

    fill(c.out, nout, NAN); /* forward overwrites (also without bias, beta = 0) */
    mm_obj(&c);
    double *ref = xmalloc(nout * sizeof(double));
    for (int n = 0; n < c.N; n++)
        for (int o = 0; o < c.OC; o++) {
            double acc = c.bias ? (double)c.bias[o] : 0.0;
            for (int i = 0; i < c.C; i++)
                acc += (double)c.inp[(size_t)n * c.C + i] * (double)c.w[(size_t)o * c.C + i];
            ref[(size_t)n * c.OC + o] = acc;
        }
    snprintf(name, sizeof name, "matmul%s out", with_bias ? "+bias" : "");
    check_fwd(name, c.out, ref, nout);

    float *dinp = falloc(nin), *dw = falloc(nw), *dbias = with_bias ? falloc((size_t)c.OC) : NULL;
    fill(dinp, nin, 0), fill(dw, nw, 0);
    if (dbias) fill(dbias, (size_t)c.OC, 0);
    ops->matmul_bwd(s, dinp, dw, dbias, c.R, c.inp, c.w, c.N, c.C, c.OC);
    snprintf(name, sizeof name, "matmul%s dinp", with_bias ? "+bias" : "");
    gradcheck(name, mm_obj, &c, c.inp, dinp, nin, 1e-2f);
    snprintf(name, sizeof name, "matmul%s dw", with_bias ? "+bias" : "");
    gradcheck(name, mm_obj, &c, c.w, dw, nw, 1e-2f);
    if (with_bias) gradcheck("matmul+bias dbias", mm_obj, &c, c.bias, dbias, (size_t)c.OC, 1e-2f);

    float *dinp2 = falloc(nin), *dw2 = fdup(dw, nw), *dbias2 = dbias ? fdup(dbias, (size_t)c.OC) : NULL;
    fill(dinp2, nin, NAN);
    ops->matmul_bwd(s, dinp2, dw2, dbias2, c.R, c.inp, c.w, c.N, c.C, c.OC);
    snprintf(name, sizeof name, "matmul%s dinp", with_bias ? "+bias" : "");
    check_overwritten(name, dinp, dinp2, nin);
    snprintf(name, sizeof name, "matmul%s dw", with_bias ? "+bias" : "");
    check_accumulated(name, dw, dw2, nw);
    if (dbias) check_accumulated("matmul+bias dbias", dbias, dbias2, (size_t)c.OC);

    /* dinp == NULL (and dbias == NULL): dw alone, same values. */
    fill(dw2, nw, 0);
    ops->matmul_bwd(s, NULL, dw2, NULL, c.R, c.inp, c.w, c.N, c.C, c.OC);
    double e = 0;
    for (size_t i = 0; i < nw; i++) e = fmax(e, fabs((double)dw2[i] - (double)dw[i]) / (1.0 + fabs(dw[i])));
    CHECK(e <= 1e-6, "matmul_bwd with dinp=NULL, dbias=NULL: dw differs from the full call (%.3g)", e);
    if (e <= 1e-6) printf("ok matmul_bwd with dinp=NULL, dbias=NULL\n");

    free(dinp), free(dw), free(dbias), free(dinp2), free(dw2), free(dbias2), free(ref);
    free(c.out), free(c.inp), free(c.w), free(c.bias), free(c.R);
}

/* ---- attention ---------------------------------------------------------- */

typedef struct {
    const zt_ops *ops;
    zt_stream *s;
    float *out, *att, *qkv, *R;
    int B, T, C, NH;
} att_ctx;

/* Random qkv [B,T,3C] and R [B,T,C]; out [B,T,C] and att (natt floats: the
 * probabilities [B,NH,T,T], or the lse [B,NH,T]) poisoned with NaN. */
static att_ctx att_ctx_new(const zt_ops *ops, zt_stream *s, int B, int T, int C, int NH, size_t natt) {
    att_ctx c = {.ops = ops, .s = s, .B = B, .T = T, .C = C, .NH = NH};
    size_t nout = (size_t)B * T * C;
    c.out = falloc(nout), c.att = falloc(natt), c.qkv = falloc(3 * nout), c.R = falloc(nout);
    fill_uniform(c.qkv, 3 * nout, -1.5f, 1.5f);
    fill_uniform(c.R, nout, -1, 1);
    fill(c.out, nout, NAN), fill(c.att, natt, NAN);
    return c;
}
static void att_ctx_free(att_ctx *c) { free(c->out), free(c->att), free(c->qkv), free(c->R); }

static double att_obj(void *p) {
    att_ctx *c = p;
    c->ops->attention_fwd(c->s, c->out, c->att, c->qkv, c->B, c->T, c->C, c->NH);
    return dot_d(c->out, c->R, (size_t)c->B * c->T * c->C);
}

/* An attention forward (attention_fwd, or attention_fused_fwd when `fused`)
 * on the 3-thread stream gives the bits `out` [B,T,C] and `second` (the
 * probabilities or the lse, nsecond floats) had from 1 thread. The two
 * forwards differ in their second output's type (the probabilities are in
 * the table's dtype, the lse is fp32), so one function pointer type cannot
 * hold both: the flag picks the entry. */
static void check_attention_fwd_threads(const char *op, const char *second_name, const zt_ops *ops, int fused,
                                        zt_stream *s3, const float *qkv, const float *out, const float *second,
                                        size_t nsecond, int B, int T, int C, int NH) {
    char name[96];
    size_t nout = (size_t)B * T * C;
    float *out3 = falloc(nout), *second3 = falloc(nsecond);
    if (fused) ops->attention_fused_fwd(s3, out3, second3, qkv, B, T, C, NH);
    else ops->attention_fwd(s3, out3, second3, qkv, B, T, C, NH);
    snprintf(name, sizeof name, "%s out B%d T%d C%d NH%d", op, B, T, C, NH);
    check_same_bits(name, out, out3, nout * sizeof(float));
    snprintf(name, sizeof name, "%s %s B%d T%d C%d NH%d", op, second_name, B, T, C, NH);
    check_same_bits(name, second, second3, nsecond * sizeof(float));
    free(out3), free(second3);
}

/* Causal attention in double precision from qkv [B,T,3C]: rout [B,T,C], and
 * where not NULL the probabilities ratt [B,NH,T,T] (zeros above the
 * diagonal) and rlse [B,NH,T] (each row's log-sum-exp of scaled scores). */
static void attention_reference(const float *qkv, int B, int T, int C, int NH, double *rout, double *ratt,
                                double *rlse) {
    int hs = C / NH;
    double *p = xmalloc((size_t)T * sizeof(double)); /* [T] one row's scores, then probabilities */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * 3 * C + (size_t)h * hs; /* [hs] */
                size_t row = ((size_t)b * NH + h) * T + t;
                double mx = -INFINITY, sum = 0.0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = qkv + ((size_t)b * T + t2) * 3 * C + C + (size_t)h * hs; /* [hs] */
                    double d = 0.0;
                    for (int i = 0; i < hs; i++) d += (double)q[i] * (double)k[i];
                    p[t2] = d / sqrt((double)hs);
                    mx = fmax(mx, p[t2]);
                }
                for (int t2 = 0; t2 <= t; t2++) sum += (p[t2] = exp(p[t2] - mx));
                for (int t2 = 0; t2 <= t; t2++) p[t2] /= sum;
                if (rlse) rlse[row] = mx + log(sum);
                if (ratt)
                    for (int t2 = 0; t2 < T; t2++) ratt[row * T + t2] = t2 <= t ? p[t2] : 0.0;
                for (int i = 0; i < hs; i++) {
                    double o = 0.0;
                    for (int t2 = 0; t2 <= t; t2++)
                        o += p[t2] * (double)qkv[((size_t)b * T + t2) * 3 * C + 2 * (size_t)C + (size_t)h * hs + i];
                    rout[((size_t)b * T + t) * C + (size_t)h * hs + i] = o;
                }
            }
    free(p);
}

static void test_attention(const zt_ops *ops, zt_stream *s, zt_stream *s3, int B, int T, int C, int NH) {
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    size_t ndatt = (size_t)B * NH * T;
    att_ctx c = att_ctx_new(ops, s, B, T, C, NH, natt);
    char name[96];
    att_obj(&c);

    /* Probabilities: causal zeros, rows sum to 1, and both tensors against a
     * double-precision reference. */
    double *ratt = xmalloc(natt * sizeof(double)), *rout = xmalloc(nout * sizeof(double));
    attention_reference(c.qkv, B, T, C, NH, rout, ratt, NULL);
    int causal_ok = 1;
    double worst_rowsum = 0.0;
    for (size_t r = 0; r < (size_t)B * NH * T; r++) {
        int t = (int)(r % (size_t)T);
        const float *a = c.att + r * T; /* [T] */
        double rowsum = 0.0;
        for (int t2 = 0; t2 < T; t2++) {
            if (t2 > t && a[t2] != 0.0f) causal_ok = 0;
            rowsum += a[t2];
        }
        worst_rowsum = fmax(worst_rowsum, fabs(rowsum - 1.0));
        if (!(fabs(rowsum - 1.0) <= 1e-6)) worst_rowsum = fmax(worst_rowsum, 1.0); /* NaN */
    }
    snprintf(name, sizeof name, "attention B=%d T=%d C=%d NH=%d", B, T, C, NH);
    CHECK(causal_ok, "%s: att[t, t2 > t] is not exactly 0", name);
    CHECK(worst_rowsum <= 1e-6, "%s: an att row does not sum to 1 (|sum-1| = %.3g)", name, worst_rowsum);
    if (causal_ok && worst_rowsum <= 1e-6)
        printf("ok %s: causal, rows sum to 1 (max |sum-1| %.2e)\n", name, worst_rowsum);
    snprintf(name, sizeof name, "attention B=%d T=%d C=%d NH=%d att", B, T, C, NH);
    check_fwd(name, c.att, ratt, natt);
    snprintf(name, sizeof name, "attention B=%d T=%d C=%d NH=%d out", B, T, C, NH);
    check_fwd(name, c.out, rout, nout);

    float *dqkv = falloc(nqkv), *datt = falloc(ndatt);
    fill(dqkv, nqkv, 0);
    fill(datt, ndatt, NAN); /* scratch: must be written before it is read */
    ops->attention_bwd(s, dqkv, datt, c.R, c.qkv, c.att, B, T, C, NH, NULL, 0);
    snprintf(name, sizeof name, "attention dqkv B%d T%d C%d NH%d", B, T, C, NH);
    gradcheck(name, att_obj, &c, c.qkv, dqkv, nqkv, 1e-2f);

    att_obj(&c); /* att of the unperturbed input */
    float *dqkv2 = fdup(dqkv, nqkv);
    fill(datt, ndatt, NAN);
    ops->attention_bwd(s, dqkv2, datt, c.R, c.qkv, c.att, B, T, C, NH, NULL, 0);
    check_accumulated(name, dqkv, dqkv2, nqkv);

    check_attention_fwd_threads("attention_fwd", "att", ops, 0, s3, c.qkv, c.out, c.att, natt, B, T, C, NH);
    fill(dqkv2, nqkv, 0);
    fill(datt, ndatt, NAN);
    ops->attention_bwd(s3, dqkv2, datt, c.R, c.qkv, c.att, B, T, C, NH, NULL, 0);
    snprintf(name, sizeof name, "attention_bwd B%d T%d C%d NH%d", B, T, C, NH);
    check_same_bits(name, dqkv, dqkv2, nqkv * sizeof(float));

    free(dqkv), free(dqkv2), free(datt), free(ratt), free(rout);
    att_ctx_free(&c);
}

/* ---- fused (memory-efficient) attention ---------------------------------- */

static double att_fused_obj(void *p) {
    att_ctx *c = p; /* c->att holds lse [B,NH,T] here */
    c->ops->attention_fused_fwd(c->s, c->out, c->att, c->qkv, c->B, c->T, c->C, c->NH);
    return dot_d(c->out, c->R, (size_t)c->B * c->T * c->C);
}

/* The fused forward against double references of out and lse; its backward
 * by central differences, against the materialized backward, accumulating;
 * both independent of the thread count; D (in datt) = dout . out per head. */
static void test_attention_fused(const zt_ops *ops, zt_stream *s, zt_stream *s3, int B, int T, int C, int NH) {
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    size_t natt = (size_t)B * NH * T * T;
    int hs = C / NH;
    att_ctx c = att_ctx_new(ops, s, B, T, C, NH, nlse);
    char name[96];
    att_fused_obj(&c);
    double *rlse = xmalloc(nlse * sizeof(double)), *rout = xmalloc(nout * sizeof(double));
    attention_reference(c.qkv, B, T, C, NH, rout, NULL, rlse);
    snprintf(name, sizeof name, "attention_fused B=%d T=%d C=%d NH=%d out", B, T, C, NH);
    check_fwd(name, c.out, rout, nout);
    snprintf(name, sizeof name, "attention_fused B=%d T=%d C=%d NH=%d lse", B, T, C, NH);
    check_fwd(name, c.att, rlse, nlse);

    /* Backward: gradcheck, D, accumulation. */
    float *dqkv = falloc(nqkv), *datt = falloc(nlse);
    fill(dqkv, nqkv, 0);
    fill(datt, nlse, NAN);
    ops->attention_fused_bwd(s, dqkv, datt, c.R, c.qkv, c.out, c.att, B, T, C, NH, NULL, 0);
    double *rD = xmalloc(nlse * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                double d = 0.0;
                for (int i = 0; i < hs; i++) {
                    size_t at = ((size_t)b * T + t) * C + (size_t)h * hs + i;
                    d += (double)c.R[at] * (double)c.out[at];
                }
                rD[((size_t)b * NH + h) * T + t] = d;
            }
    snprintf(name, sizeof name, "attention_fused B=%d T=%d C=%d NH=%d D", B, T, C, NH);
    check_fwd(name, datt, rD, nlse);
    snprintf(name, sizeof name, "attention_fused dqkv B%d T%d C%d NH%d", B, T, C, NH);
    gradcheck(name, att_fused_obj, &c, c.qkv, dqkv, nqkv, 1e-2f);
    att_fused_obj(&c); /* out and lse of the unperturbed input */
    float *dqkv2 = fdup(dqkv, nqkv);
    ops->attention_fused_bwd(s, dqkv2, datt, c.R, c.qkv, c.out, c.att, B, T, C, NH, NULL, 0);
    check_accumulated(name, dqkv, dqkv2, nqkv);

    /* The materialized backward from the same input: the same gradient up to
     * float rounding (its probabilities are divided, these exponentiated). */
    float *out_m = falloc(nout), *att_m = falloc(natt), *dqkv_m = falloc(nqkv);
    ops->attention_fwd(s, out_m, att_m, c.qkv, B, T, C, NH);
    fill(dqkv_m, nqkv, 0);
    ops->attention_bwd(s, dqkv_m, datt, c.R, c.qkv, att_m, B, T, C, NH, NULL, 0);
    double *dm = xmalloc(nqkv * sizeof(double));
    for (size_t i = 0; i < nqkv; i++) dm[i] = dqkv_m[i];
    snprintf(name, sizeof name, "attention_fused vs materialized dqkv B%d T%d C%d NH%d", B, T, C, NH);
    check_fwd(name, dqkv, dm, nqkv);

    /* 1 thread vs 3: the same bits. */
    check_attention_fwd_threads("attention_fused_fwd", "lse", ops, 1, s3, c.qkv, c.out, c.att, nlse, B, T, C, NH);
    fill(dqkv2, nqkv, 0);
    ops->attention_fused_bwd(s3, dqkv2, datt, c.R, c.qkv, c.out, c.att, B, T, C, NH, NULL, 0);
    snprintf(name, sizeof name, "attention_fused_bwd B%d T%d C%d NH%d", B, T, C, NH);
    check_same_bits(name, dqkv, dqkv2, nqkv * sizeof(float));

    free(out_m), free(att_m), free(dqkv_m), free(dm), free(rD);
    free(dqkv), free(dqkv2), free(datt), free(rlse), free(rout);
    att_ctx_free(&c);
}

/* ---- gelu and residual -------------------------------------------------- */

typedef struct {
    const zt_ops *ops;
    zt_stream *s;
    float *out, *inp, *a, *b, *R;
    size_t n;
} pw_ctx;

static double gelu_obj(void *p) {
    pw_ctx *c = p;
    c->ops->gelu_fwd(c->s, c->out, c->inp, c->n);
    return dot_d(c->out, c->R, c->n);
}
static double residual_obj(void *p) {
    pw_ctx *c = p;
    c->ops->residual_fwd(c->s, c->out, c->a, c->b, c->n);
    return dot_d(c->out, c->R, c->n);
}

static void test_gelu(const zt_ops *ops, zt_stream *s, zt_stream *s3) {
    pw_ctx c = {.ops = ops, .s = s, .n = 64};
    c.out = falloc(c.n), c.inp = falloc(c.n), c.R = falloc(c.n);
    fill_uniform(c.inp, c.n, -4, 4);
    c.inp[0] = 0.0f, c.inp[1] = -0.5f, c.inp[2] = 0.5f, c.inp[3] = 6.0f, c.inp[4] = -6.0f;
    fill_uniform(c.R, c.n, -1, 1);

    fill(c.out, c.n, NAN);
    gelu_obj(&c);
    double *ref = xmalloc(c.n * sizeof(double));
    for (size_t i = 0; i < c.n; i++) {
        double x = c.inp[i];
        ref[i] = 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    }
    check_fwd("gelu out", c.out, ref, c.n);

    float *dinp = falloc(c.n);
    fill(dinp, c.n, 0);
    ops->gelu_bwd(s, dinp, c.inp, c.R, c.n);
    gradcheck("gelu dinp", gelu_obj, &c, c.inp, dinp, c.n, 1e-2f);
    float *dinp2 = falloc(c.n);
    fill(dinp2, c.n, NAN);
    ops->gelu_bwd(s, dinp2, c.inp, c.R, c.n);
    check_overwritten("gelu dinp", dinp, dinp2, c.n);

    gelu_obj(&c); /* the last gradcheck evaluation left a perturbed output */
    float *out3 = falloc(c.n);
    ops->gelu_fwd(s3, out3, c.inp, c.n);
    check_same_bits("gelu_fwd", c.out, out3, c.n * sizeof(float));
    fill(dinp2, c.n, 0);
    ops->gelu_bwd(s3, dinp2, c.inp, c.R, c.n);
    check_same_bits("gelu_bwd", dinp, dinp2, c.n * sizeof(float));
    free(out3), free(dinp), free(dinp2), free(ref), free(c.out), free(c.inp), free(c.R);
}

static void test_residual(const zt_ops *ops, zt_stream *s, zt_stream *s3) {
    pw_ctx c = {.ops = ops, .s = s, .n = 80};
    c.out = falloc(c.n), c.a = falloc(c.n), c.b = falloc(c.n), c.R = falloc(c.n);
    fill_uniform(c.a, c.n, -1, 1);
    fill_uniform(c.b, c.n, -1, 1);
    fill_uniform(c.R, c.n, -1, 1);
    fill(c.out, c.n, NAN);
    residual_obj(&c);
    int exact = 1;
    for (size_t i = 0; i < c.n; i++) {
        float want = c.a[i] + c.b[i];
        if (memcmp(&want, &c.out[i], sizeof want) != 0) exact = 0;
    }
    CHECK(exact, "residual_fwd is not exactly a + b");
    if (exact) printf("ok forward residual (exact)\n");

    float *da = falloc(c.n), *db = falloc(c.n);
    fill(da, c.n, 0), fill(db, c.n, 0);
    ops->residual_bwd(s, da, db, c.R, c.n);
    gradcheck("residual da", residual_obj, &c, c.a, da, c.n, 1e-2f);
    gradcheck("residual db", residual_obj, &c, c.b, db, c.n, 1e-2f);
    float *da2 = fdup(da, c.n), *db2 = fdup(db, c.n);
    ops->residual_bwd(s, da2, db2, c.R, c.n);
    check_accumulated("residual da", da, da2, c.n);
    check_accumulated("residual db", db, db2, c.n);

    residual_obj(&c); /* the last gradcheck evaluation left a perturbed output */
    float *out3 = falloc(c.n);
    ops->residual_fwd(s3, out3, c.a, c.b, c.n);
    check_same_bits("residual_fwd", c.out, out3, c.n * sizeof(float));
    fill(da2, c.n, 0), fill(db2, c.n, 0);
    ops->residual_bwd(s3, da2, db2, c.R, c.n);
    check_same_bits("residual_bwd", da, da2, c.n * sizeof(float));
    free(out3), free(da), free(db), free(da2), free(db2);
    free(c.out), free(c.a), free(c.b), free(c.R);
}

/* ---- softmax cross-entropy ---------------------------------------------- */

typedef struct {
    const zt_ops *ops;
    zt_stream *s;
    float *losses, *probs, *logits;
    int32_t *targets;
    int N, V;
    float dloss;
} xent_ctx;

/* L = dloss * sum_n losses[n]; with dloss = 1/N this is the mean loss. */
static double xent_obj(void *p) {
    xent_ctx *c = p;
    c->ops->softmax_xent_fwd(c->s, c->losses, c->probs, c->logits, c->targets, c->N, c->V);
    double sum = 0.0;
    for (int n = 0; n < c->N; n++) sum += (double)c->losses[n];
    return sum * (double)c->dloss;
}

static void test_xent(const zt_ops *ops, zt_stream *s, zt_stream *s3) {
    xent_ctx c = {.ops = ops, .s = s, .N = 10, .V = 11};
    size_t nl = (size_t)c.N * c.V;
    c.dloss = 1.0f / (float)c.N;
    c.losses = falloc((size_t)c.N), c.probs = falloc(nl), c.logits = falloc(nl);
    c.targets = xmalloc((size_t)c.N * sizeof(int32_t));
    fill_uniform(c.logits, nl, -2, 2);
    for (int i = 0; i < c.V; i++) c.logits[(size_t)1 * c.V + i] += 40.0f; /* large logits: needs max-subtraction */
    for (int n = 0; n < c.N; n++) c.targets[n] = rng_int(c.V);
    c.targets[0] = 0, c.targets[1] = c.V - 1;

    fill(c.losses, (size_t)c.N, NAN), fill(c.probs, nl, NAN);
    double L = xent_obj(&c);
    double *rl = xmalloc((size_t)c.N * sizeof(double)), *rp = xmalloc(nl * sizeof(double));
    double worst_rowsum = 0.0;
    for (int n = 0; n < c.N; n++) {
        const float *z = c.logits + (size_t)n * c.V;
        double mx = -INFINITY, sum = 0.0, rowsum = 0.0;
        for (int i = 0; i < c.V; i++) mx = fmax(mx, (double)z[i]);
        for (int i = 0; i < c.V; i++) sum += exp((double)z[i] - mx);
        for (int i = 0; i < c.V; i++) rp[(size_t)n * c.V + i] = exp((double)z[i] - mx) / sum;
        rl[n] = -((double)z[c.targets[n]] - mx - log(sum));
        for (int i = 0; i < c.V; i++) rowsum += c.probs[(size_t)n * c.V + i];
        double d = fabs(rowsum - 1.0);
        worst_rowsum = (d <= worst_rowsum) ? worst_rowsum : d;
    }
    check_fwd("softmax_xent losses", c.losses, rl, (size_t)c.N);
    check_fwd("softmax_xent probs", c.probs, rp, nl);
    CHECK(worst_rowsum <= 1e-6, "softmax_xent: a probability row does not sum to 1 (%.3g)", worst_rowsum);
    CHECK(isfinite(L) && L > 0.0, "softmax_xent: mean loss %.9g is not finite and positive", L);
    printf("ok softmax_xent mean loss %.6f, rows sum to 1 (max |sum-1| %.2e)\n", L, worst_rowsum);

    float *dlogits = falloc(nl);
    fill(dlogits, nl, NAN); /* overwritten, not accumulated */
    ops->softmax_xent_bwd(s, dlogits, c.probs, c.targets, c.N, c.V, c.dloss);
    CHECK(all_finite(dlogits, nl), "softmax_xent_bwd left non-finite values (reads its output?)");
    gradcheck("softmax_xent dlogits", xent_obj, &c, c.logits, dlogits, nl, 1e-2f);

    xent_obj(&c);
    float *dlogits2 = fdup(dlogits, nl);
    ops->softmax_xent_bwd(s, dlogits2, c.probs, c.targets, c.N, c.V, c.dloss);
    int same = memcmp(dlogits, dlogits2, nl * sizeof(float)) == 0;
    CHECK(same, "softmax_xent_bwd: a second call changed the result (it must overwrite)");
    if (same) printf("ok softmax_xent_bwd overwrites\n");

    float *losses3 = falloc((size_t)c.N), *probs3 = falloc(nl);
    ops->softmax_xent_fwd(s3, losses3, probs3, c.logits, c.targets, c.N, c.V);
    check_same_bits("softmax_xent_fwd losses", c.losses, losses3, (size_t)c.N * sizeof(float));
    check_same_bits("softmax_xent_fwd probs", c.probs, probs3, nl * sizeof(float));
    ops->softmax_xent_bwd(s3, dlogits2, c.probs, c.targets, c.N, c.V, c.dloss);
    check_same_bits("softmax_xent_bwd", dlogits, dlogits2, nl * sizeof(float));

    free(losses3), free(probs3), free(dlogits), free(dlogits2), free(rl), free(rp);
    free(c.losses), free(c.probs), free(c.logits), free(c.targets);
}

/* ---- casts, scale, sum_squares ------------------------------------------ */

static float f_of_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static uint32_t bits_of_f(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static int bf16_is_nan(zt_bf16 h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x007fu) != 0; }

/* Independent reference: the two bf16 neighbours of a finite f, chosen by
 * distance in double, ties to the even mantissa; past the largest finite
 * bf16 the upper neighbour is 2^128 and stands for infinity (IEEE overflow). */
static zt_bf16 ref_bf16(float f) {
    uint32_t u = bits_of_f(f);
    uint32_t sign = u & 0x80000000u, mag = u & 0x7fffffffu;
    uint32_t lo = mag & 0xffff0000u, hi = lo + 0x10000u;
    if (mag == lo) return (zt_bf16)((sign | lo) >> 16);
    double flo = (double)f_of_bits(lo);
    double fhi = hi >= 0x7f800000u ? ldexp(1.0, 128) : (double)f_of_bits(hi);
    double fm = (double)f_of_bits(mag);
    double dlo = fm - flo, dhi = fhi - fm;
    uint32_t pick;
    if (dlo < dhi) pick = lo;
    else if (dhi < dlo) pick = hi;
    else pick = ((lo >> 16) & 1u) ? hi : lo;
    return (zt_bf16)((sign | pick) >> 16);
}

static void test_casts(const zt_ops *ops, zt_stream *s) {
    static const struct {
        uint32_t in;
        uint16_t want;
        const char *why;
    } cases[] = {
        {0x3f800000u, 0x3f80u, "1.0 exact"},
        {0x3f808000u, 0x3f80u, "1 + 2^-8: tie, even stays down"},
        {0x3f80c000u, 0x3f81u, "1 + 3*2^-9: above half, rounds up"},
        {0x3f804000u, 0x3f80u, "1 + 2^-9: below half, rounds down"},
        {0x3f818000u, 0x3f82u, "1 + 2^-7 + 2^-8: tie, odd rounds up to even"},
        {0x3f808001u, 0x3f81u, "just above the tie rounds up"},
        {0x3f807fffu, 0x3f80u, "just below the tie rounds down"},
        {0xbf808000u, 0xbf80u, "-(1 + 2^-8): tie, even, sign kept"},
        {0xbf80c000u, 0xbf81u, "-(1 + 3*2^-9): rounds away from zero"},
        {0x00000000u, 0x0000u, "+0"},
        {0x80000000u, 0x8000u, "-0"},
        {0x00008000u, 0x0000u, "subnormal tie to even (0)"},
        {0x00018000u, 0x0002u, "subnormal tie to even (up)"},
        {0x3fffffffu, 0x4000u, "carry into the exponent"},
        {0x7f800000u, 0x7f80u, "+inf"},
        {0xff800000u, 0xff80u, "-inf"},
        {0x7f7fffffu, 0x7f80u, "FLT_MAX overflows to +inf"},
        {0x7f7f7fffu, 0x7f7fu, "below the overflow threshold stays finite"},
    };
    size_t nc = sizeof cases / sizeof cases[0];
    float src[32];
    zt_bf16 dst[32];
    for (size_t i = 0; i < nc; i++) src[i] = f_of_bits(cases[i].in);
    ops->cast(s, dst, ZT_BF16, src, ZT_FP32, nc);
    int ok = 1;
    for (size_t i = 0; i < nc; i++) {
        if (dst[i] != cases[i].want) {
            ok = 0;
            CHECK(0, "bf16(0x%08x) = 0x%04x, want 0x%04x (%s)", (unsigned)cases[i].in, (unsigned)dst[i],
                  (unsigned)cases[i].want, cases[i].why);
        }
    }
    if (ok) printf("ok cast f32->bf16 round-to-nearest-even on %zu hand-picked values\n", nc);

    /* NaNs (quiet, signalling, low-bit-only payloads) stay NaN, never inf. */
    static const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u,
                                    0x7f80ffffu, 0x7fffffffu, 0x7f810000u};
    size_t nn = sizeof nans / sizeof nans[0];
    for (size_t i = 0; i < nn; i++) src[i] = f_of_bits(nans[i]);
    ops->cast(s, dst, ZT_BF16, src, ZT_FP32, nn);
    ok = 1;
    for (size_t i = 0; i < nn; i++) {
        if (!bf16_is_nan(dst[i])) {
            ok = 0;
            CHECK(0, "bf16(NaN 0x%08x) = 0x%04x is not NaN", (unsigned)nans[i], (unsigned)dst[i]);
        }
    }
    if (ok) printf("ok cast f32->bf16 keeps %zu NaN patterns NaN\n", nn);

    /* Random finite bit patterns against the reference rounding. */
    size_t nr = 200000;
    float *rs = falloc(nr);
    zt_bf16 *rd = xmalloc(nr * sizeof(zt_bf16));
    for (size_t i = 0; i < nr; i++) {
        uint32_t u;
        do {
            u = (uint32_t)(rng_next() >> 32);
        } while ((u & 0x7f800000u) == 0x7f800000u);
        if (i % 4 == 0) u = (u & 0xffff0000u) | 0x8000u; /* many exact ties */
        rs[i] = f_of_bits(u);
    }
    ops->cast(s, rd, ZT_BF16, rs, ZT_FP32, nr);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < nr; i++)
        if (rd[i] != ref_bf16(rs[i]) && bad++ == 0) first = i;
    CHECK(bad == 0, "cast f32->bf16: %zu of %zu random values differ from the reference, first 0x%08x -> 0x%04x "
          "(want 0x%04x)", bad, nr, (unsigned)bits_of_f(rs[first]), (unsigned)rd[first],
          (unsigned)ref_bf16(rs[first]));
    if (bad == 0) printf("ok cast f32->bf16 matches the reference on %zu random values\n", nr);

    /* All bf16 patterns: widening is exact (bits << 16) and narrowing it back
     * returns the same pattern (NaN stays NaN). */
    zt_bf16 *all = xmalloc(65536 * sizeof(zt_bf16)), *back = xmalloc(65536 * sizeof(zt_bf16));
    float *wide = falloc(65536);
    for (uint32_t i = 0; i < 65536; i++) all[i] = (zt_bf16)i;
    ops->cast(s, wide, ZT_FP32, all, ZT_BF16, 65536);
    ops->cast(s, back, ZT_BF16, wide, ZT_FP32, 65536);
    bad = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        int good = bits_of_f(wide[i]) == (i << 16) && (bf16_is_nan(all[i]) ? bf16_is_nan(back[i]) : back[i] == all[i]);
        if (!good && bad++ == 0) first = i;
    }
    CHECK(bad == 0, "bf16 round trip: %zu of 65536 patterns fail, first 0x%04x -> 0x%08x -> 0x%04x", bad,
          (unsigned)first, (unsigned)bits_of_f(wide[first]), (unsigned)back[first]);
    if (bad == 0) printf("ok bf16 -> f32 -> bf16 round trip of all 65536 patterns\n");
    free(all), free(back), free(wide), free(rs), free(rd);
}

static void test_scale(const zt_ops *ops, zt_stream *s) {
    size_t n = 1000;
    float *x = falloc(n), *x0 = falloc(n);
    fill_uniform(x0, n, -10, 10);
    memcpy(x, x0, n * sizeof(float));
    ops->scale(s, x, 0.37f, n);
    int exact = 1;
    for (size_t i = 0; i < n; i++) {
        float want = x0[i] * 0.37f;
        if (memcmp(&want, &x[i], sizeof want) != 0) exact = 0;
    }
    CHECK(exact, "scale: x * alpha is not exact");
    if (exact) printf("ok scale\n");
    free(x), free(x0);
}

static void test_sum_squares(const zt_ops *ops, zt_stream *s) {
    /* 100000 elements (25 chunks) and 256*4096 + 5 (more than one outer
     * block of 256 chunks), plus edge sizes. */
    static const size_t sizes[] = {0, 1, 4095, 4096, 4097, 100000, 256u * 4096u + 5u};
    size_t nmax = 256u * 4096u + 5u;
    float *x = falloc(nmax);
    fill_uniform(x, nmax, -3, 3);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        double ref = 0.0;
        for (size_t i = 0; i < n; i++) ref += (double)x[i] * (double)x[i];
        double got = -1.0;
        ops->sum_squares(s, &got, x, n);
        /* Same terms, different order of double additions: relative 1e-12. */
        double rel = fabs(got - ref) / fmax(ref, 1e-300);
        CHECK(n == 0 ? got == 0.0 : rel <= 1e-12, "sum_squares(n=%zu) = %.17g, double loop %.17g (rel %.3g)", n,
              got, ref, rel);
        int same = 1;
        for (int nt = 2; nt <= 8; nt *= 2) {
            zt_stream sn = *s;
            sn.nthreads = nt;
            double other = -1.0;
            ops->sum_squares(&sn, &other, x, n);
            if (memcmp(&other, &got, sizeof got) != 0) {
                same = 0;
                CHECK(0, "sum_squares(n=%zu): %d threads give %.17g, 1 thread %.17g", n, nt, other, got);
            }
        }
        if (same && (n == 0 ? got == 0.0 : rel <= 1e-12))
            printf("ok sum_squares n=%zu (rel err %.2e vs double loop, same bits with 1/2/4/8 threads)\n", n,
                   n ? rel : 0.0);
    }
    free(x);
}

int main(void) {
    zt_backend *be = NULL;
    zt_error err = {0};
    if (zt_backend_cpu_create(1, &be, &err) != ZT_OK) {
        printf("FAIL: zt_backend_cpu_create: %s\n", err.msg);
        return 1;
    }
    zt_stream s = zt_backend_stream(be);
    zt_stream s3 = s;
    s3.nthreads = 3;
    const zt_ops *ops = be->ops;

    test_embedding(ops, &s, &s3);
    test_layernorm(ops, &s, &s3);
    test_matmul(ops, &s, 1);
    test_matmul(ops, &s, 0);
    test_attention(ops, &s, &s3, 2, 5, 8, 2);
    test_attention(ops, &s, &s3, 1, 7, 12, 3);
    test_attention(ops, &s, &s3, 2, 4, 8, 1);
    test_attention(ops, &s, &s3, 1, 1, 4, 2); /* T = 1: a single attended position */
    test_attention_fused(ops, &s, &s3, 2, 5, 8, 2);
    test_attention_fused(ops, &s, &s3, 1, 7, 12, 3);
    test_attention_fused(ops, &s, &s3, 1, 1, 4, 2);
    test_gelu(ops, &s, &s3);
    test_residual(ops, &s, &s3);
    test_xent(ops, &s, &s3);
    test_casts(ops, &s);
    test_scale(ops, &s);
    test_sum_squares(ops, &s);

    zt_backend_destroy(be);
    printf("%ld checks, %d failed\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
