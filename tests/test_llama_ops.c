/* Unit test of the CPU's Llama kernels in the fp32 table (zt_ops: rmsnorm,
 * rope, swiglu, gqa_expand/gqa_reduce, embedding without a position table).
 *
 * 1. Finite-difference gradient checks, as tests/test_ops_gradcheck.c does
 *    them: L = sum(out * R) for a fixed random R, the fp32 forward evaluated
 *    at x +- h and L summed in double; per tensor
 *      err = max_i |a_i - n_i| / max(GRAD_FLOOR * max_j |n_j|, |a_i| + |n_i|)
 *    must stay below GRAD_TOL, and the analytic gradient scaled by 1.1 must
 *    score above it (the negative twin: the tolerance rejects a gradient off
 *    by 10%). Checked: rmsnorm (inp and w), rope (q, k and v together),
 *    swiglu, gqa_expand through gqa_reduce (NKV < NH, NKV == NH, NKV == 1),
 *    embedding's dwte without a position table, and the composition rope ->
 *    gqa_expand -> attention (materialized and fused) -> L for GQA, whose
 *    gradient is attention_bwd -> gqa_reduce -> rope_bwd.
 * 2. Forward values against double-precision references of zt_ops's
 *    formulas: |f32 - ref| <= FWD_TOL (1 + |ref|). RoPE's reference follows
 *    the documented steps (the frequency and the angle in fp32, cos and sin
 *    in double), and its negative twin is the interleaved (GPT-J) pairing,
 *    which must be rejected; v comes through bit for bit; the expansion and
 *    the position-free embedding are exact copies.
 * 3. The contracts: rmsnorm_bwd and gqa_reduce accumulate (a second call
 *    adds the gradient again), swiglu_bwd overwrites (a NaN-filled buffer
 *    gives the same bits), rope_bwd undoes rope_fwd, and every kernel gives
 *    the same bits on 1 and 3 threads. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "zt_backend.h"

#define GRAD_TOL 1e-2
#define GRAD_FLOOR 1e-2
#define FWD_TOL 1e-5
#define THETA 10000.0f

/* ---- helpers ------------------------------------------------------------ */

static float *falloc(size_t n) { return xmalloc(n * sizeof(float)); }
static float *frand(size_t n, float lo, float hi) {
    float *x = falloc(n);
    for (size_t i = 0; i < n; i++) x[i] = rng_uniform(lo, hi);
    return x;
}
static float *ffill(size_t n, float v) {
    float *x = falloc(n);
    for (size_t i = 0; i < n; i++) x[i] = v;
    return x;
}
static float *fdup(const float *x, size_t n) {
    float *p = falloc(n);
    memcpy(p, x, n * sizeof(float));
    return p;
}
static double dot_d(const float *a, const float *r, size_t n) {
    double acc = 0.0;
    for (size_t i = 0; i < n; i++) acc += (double)a[i] * (double)r[i];
    return acc;
}

/* max_i |got_i - ref_i| / (1 + |ref_i|) (NaN scores infinity). */
static double fwd_err(const float *got, const double *ref, size_t n, size_t *worst) {
    double e = 0.0;
    *worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]) / (1.0 + fabs(ref[i]));
        if (!(d <= e)) {
            e = isnan(d) ? INFINITY : d;
            *worst = i;
        }
    }
    return e;
}
static void check_fwd(const char *what, const float *got, const double *ref, size_t n) {
    size_t w;
    double e = fwd_err(got, ref, n, &w);
    CHECK(e <= FWD_TOL, "%s: forward mismatch at %zu: got %.9g want %.9g (err %.3g > %.0e)", what, w,
          (double)got[w], ref[w], e, FWD_TOL);
    if (e <= FWD_TOL) printf("ok forward %-34s max err %.2e\n", what, e);
}
static void check_bits(const char *what, const float *a, const float *b, size_t n) {
    int same = memcmp(a, b, n * sizeof(float)) == 0;
    CHECK(same, "%s: not the same bits", what);
    if (same) printf("ok same bits %s\n", what);
}
/* A second backward into the same buffers adds the gradient again:
 * |g2 - 2 g1| <= 1e-5 max|g1|. */
static void check_accumulated(const char *what, const float *g1, const float *g2, size_t n) {
    double scale = 0.0, e = 0.0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)g1[i]));
    for (size_t i = 0; i < n; i++) e = fmax(e, fabs((double)g2[i] - 2.0 * (double)g1[i]));
    CHECK(e <= 1e-5 * scale, "%s: backward does not accumulate (|g2 - 2 g1| = %.3g)", what, e);
    if (e <= 1e-5 * scale) printf("ok accumulate %s\n", what);
}

/* ---- the gradient check -------------------------------------------------- */

typedef double (*objective_fn)(void *ctx);

static double grad_error(const float *a, const double *num, size_t n, double mul, size_t *worst) {
    double nmax = 0.0, e = 0.0;
    for (size_t i = 0; i < n; i++) nmax = fmax(nmax, fabs(num[i]));
    double floor_ = fmax(GRAD_FLOOR * nmax, 1e-12);
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

/* analytic[n] against central differences of f over x[n] (perturbed in
 * place, restored bit for bit), and the 1.1-scaled twin rejected. */
static void gradcheck(const char *what, objective_fn f, void *ctx, float *x, const float *analytic, size_t n,
                      float h) {
    double *num = xmalloc(n * sizeof(double)); /* [n] the central differences */
    double nmax = 0.0;
    memset(num, 0, n * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        float x0 = x[i], xp = x0 + h, xm = x0 - h;
        x[i] = xp;
        double lp = f(ctx);
        x[i] = xm;
        double lm = f(ctx);
        x[i] = x0;
        num[i] = (lp - lm) / ((double)xp - (double)xm);
        nmax = fmax(nmax, fabs(num[i]));
    }
    size_t w, ww;
    double e = grad_error(analytic, num, n, 1.0, &w), e_wrong = grad_error(analytic, num, n, 1.1, &ww);
    CHECK(nmax > 0.0, "%s: numeric gradient is identically zero (test is vacuous)", what);
    CHECK(e < GRAD_TOL, "%s: gradient mismatch at %zu: analytic %.9g numeric %.9g (err %.3g >= %.0e)", what, w,
          (double)analytic[w], num[w], e, GRAD_TOL);
    CHECK(e_wrong > GRAD_TOL, "%s: self-check: gradient scaled by 1.1 was accepted (err %.3g)", what, e_wrong);
    if (e < GRAD_TOL && e_wrong > GRAD_TOL)
        printf("ok gradcheck %-34s n=%-4zu max err %.2e (tol %.0e; 1.1x wrong grad scores %.2e)\n", what, n, e,
               GRAD_TOL, e_wrong);
    free(num);
}

typedef struct {
    const zt_ops *ops;
    zt_stream *s1, *s3; /* 1 and 3 threads */
} env;

/* ---- rmsnorm ------------------------------------------------------------- */

typedef struct {
    const env *e;
    float *out, *rstd, *inp, *w, *R; /* [N,C], [N], [N,C], [C], [N,C] */
    int N, C;
    float eps;
} rms_ctx;

static double rms_obj(void *p) {
    rms_ctx *c = p;
    c->e->ops->rmsnorm_fwd(c->e->s1, c->out, c->rstd, c->inp, c->w, c->N, c->C, c->eps);
    return dot_d(c->out, c->R, (size_t)c->N * c->C);
}

/* out[N,C] and rstd[N] in double from inp, w. */
static void rms_reference(const rms_ctx *c, double *out, double *rstd) {
    for (int n = 0; n < c->N; n++) {
        const float *x = c->inp + (size_t)n * c->C;
        double ss = 0.0;
        for (int i = 0; i < c->C; i++) ss += (double)x[i] * x[i];
        rstd[n] = 1.0 / sqrt(ss / c->C + c->eps);
        for (int i = 0; i < c->C; i++) out[(size_t)n * c->C + i] = x[i] * rstd[n] * c->w[i];
    }
}

static void test_rmsnorm(const env *e, int N, int C) {
    rms_ctx c = {.e = e, .N = N, .C = C, .eps = 1e-5f};
    size_t n = (size_t)N * C;
    c.out = ffill(n, NAN), c.rstd = ffill((size_t)N, NAN), c.inp = frand(n, -2, 2), c.w = frand((size_t)C, 0.5f, 1.5f);
    c.R = frand(n, -1, 1);
    for (int i = 0; i < C; i++) c.inp[i] = c.inp[i] * 0.01f + 3.0f; /* a row far from zero mean */
    rms_obj(&c);
    double *ref = xmalloc(n * sizeof(double)), *rref = xmalloc((size_t)N * sizeof(double));
    rms_reference(&c, ref, rref);
    check_fwd("rmsnorm out", c.out, ref, n);
    check_fwd("rmsnorm rstd", c.rstd, rref, (size_t)N);

    float *dinp = ffill(n, 0), *dw = ffill((size_t)C, 0);
    e->ops->rmsnorm_bwd(e->s1, dinp, dw, c.R, c.inp, c.w, c.rstd, N, C);
    gradcheck("rmsnorm dinp", rms_obj, &c, c.inp, dinp, n, 1e-2f);
    gradcheck("rmsnorm dw", rms_obj, &c, c.w, dw, (size_t)C, 1e-2f);

    rms_obj(&c); /* rstd of the unperturbed input again */
    float *dinp2 = fdup(dinp, n), *dw2 = fdup(dw, (size_t)C);
    e->ops->rmsnorm_bwd(e->s1, dinp2, dw2, c.R, c.inp, c.w, c.rstd, N, C);
    check_accumulated("rmsnorm dinp", dinp, dinp2, n);
    check_accumulated("rmsnorm dw", dw, dw2, (size_t)C);

    float *out3 = ffill(n, NAN), *rstd3 = ffill((size_t)N, NAN);
    e->ops->rmsnorm_fwd(e->s3, out3, rstd3, c.inp, c.w, N, C, c.eps);
    check_bits("rmsnorm_fwd out, 1 vs 3 threads", c.out, out3, n);
    check_bits("rmsnorm_fwd rstd, 1 vs 3 threads", c.rstd, rstd3, (size_t)N);
    memset(dinp2, 0, n * sizeof(float)), memset(dw2, 0, (size_t)C * sizeof(float));
    e->ops->rmsnorm_bwd(e->s3, dinp2, dw2, c.R, c.inp, c.w, c.rstd, N, C);
    check_bits("rmsnorm_bwd dinp, 1 vs 3 threads", dinp, dinp2, n);
    check_bits("rmsnorm_bwd dw, 1 vs 3 threads", dw, dw2, (size_t)C);

    free(ref), free(rref), free(dinp), free(dw), free(dinp2), free(dw2), free(out3), free(rstd3);
    free(c.out), free(c.rstd), free(c.inp), free(c.w), free(c.R);
}

/* ---- rope ----------------------------------------------------------------- */

typedef struct {
    const env *e;
    float *x, *tmp, *R; /* [B,T,(NH+2NKV)HD] each */
    int B, T, NH, NKV, HD;
} rope_ctx;

static size_t rope_n(const rope_ctx *c) { return (size_t)c->B * c->T * (c->NH + 2 * c->NKV) * c->HD; }

static double rope_obj(void *p) {
    rope_ctx *c = p;
    memcpy(c->tmp, c->x, rope_n(c) * sizeof(float));
    c->e->ops->rope_fwd(c->e->s1, c->tmp, c->B, c->T, c->NH, c->NKV, c->HD, THETA);
    return dot_d(c->tmp, c->R, rope_n(c));
}

/* The rotated x in double by zt_ops.rope_fwd's steps; element i of a head
 * pairs with i + HD/2, or with its neighbour when `interleaved` (GPT-J's
 * convention: the negative twin). */
static void rope_reference(const rope_ctx *c, int interleaved, double *out) {
    int half = c->HD / 2;
    size_t row = (size_t)(c->NH + 2 * c->NKV) * c->HD;
    for (size_t i = 0; i < rope_n(c); i++) out[i] = c->x[i];
    for (int bt = 0; bt < c->B * c->T; bt++)
        for (int h = 0; h < c->NH + c->NKV; h++)
            for (int i = 0; i < half; i++) {
                float f = (float)(1.0 / pow((double)THETA, (double)((float)(2 * i) / (float)c->HD)));
                double a = (double)((float)(bt % c->T) * f);
                size_t i0 = (size_t)bt * row + (size_t)h * c->HD + (interleaved ? 2 * i : i);
                size_t i1 = i0 + (interleaved ? 1 : (size_t)half);
                double x0 = c->x[i0], x1 = c->x[i1];
                out[i0] = x0 * cos(a) - x1 * sin(a);
                out[i1] = x1 * cos(a) + x0 * sin(a);
            }
}

static void test_rope(const env *e, int B, int T, int NH, int NKV, int HD) {
    rope_ctx c = {.e = e, .B = B, .T = T, .NH = NH, .NKV = NKV, .HD = HD};
    size_t n = rope_n(&c), row = (size_t)(NH + 2 * NKV) * HD, qk = (size_t)(NH + NKV) * HD;
    char what[96];
    c.x = frand(n, -1.5f, 1.5f), c.tmp = falloc(n), c.R = frand(n, -1, 1);
    rope_obj(&c);
    double *ref = xmalloc(n * sizeof(double));
    rope_reference(&c, 0, ref);
    snprintf(what, sizeof what, "rope NH=%d NKV=%d HD=%d T=%d", NH, NKV, HD, T);
    check_fwd(what, c.tmp, ref, n);
    rope_reference(&c, 1, ref);
    size_t w;
    double twin = fwd_err(c.tmp, ref, n, &w);
    CHECK(twin > FWD_TOL, "rope: the interleaved convention's reference was accepted (err %.3g)", twin);
    int v_same = 1;
    for (int bt = 0; bt < B * T; bt++)
        v_same &= memcmp(c.tmp + bt * row + qk, c.x + bt * row + qk, (row - qk) * sizeof(float)) == 0;
    CHECK(v_same, "rope_fwd changed the v heads");
    if (v_same && twin > FWD_TOL) printf("ok rope: v untouched; interleaved pairing rejected (err %.2e)\n", twin);

    float *back = fdup(c.tmp, n);
    e->ops->rope_bwd(e->s1, back, B, T, NH, NKV, HD, THETA);
    double dmax = 0.0;
    for (size_t i = 0; i < n; i++) dmax = fmax(dmax, fabs((double)back[i] - c.x[i]));
    CHECK(dmax <= 1e-6, "rope_bwd(rope_fwd(x)) differs from x by %.3g", dmax);
    if (dmax <= 1e-6) printf("ok rope_bwd undoes rope_fwd (max diff %.2e)\n", dmax);

    float *g = fdup(c.R, n); /* dL/dout, turned in place into dL/dx */
    e->ops->rope_bwd(e->s1, g, B, T, NH, NKV, HD, THETA);
    snprintf(what, sizeof what, "rope dqkv NH=%d NKV=%d HD=%d", NH, NKV, HD);
    gradcheck(what, rope_obj, &c, c.x, g, n, 1e-2f);

    float *x3 = fdup(c.x, n), *g3 = fdup(c.R, n);
    rope_obj(&c);
    e->ops->rope_fwd(e->s3, x3, B, T, NH, NKV, HD, THETA);
    e->ops->rope_bwd(e->s3, g3, B, T, NH, NKV, HD, THETA);
    check_bits("rope_fwd, 1 vs 3 threads", c.tmp, x3, n);
    check_bits("rope_bwd, 1 vs 3 threads", g, g3, n);
    free(ref), free(back), free(g), free(x3), free(g3), free(c.x), free(c.tmp), free(c.R);
}

/* ---- swiglu --------------------------------------------------------------- */

typedef struct {
    const env *e;
    float *out, *gate_up, *R; /* [N,F], [N,2F], [N,F] */
    int N, F;
} swiglu_ctx;

static double swiglu_obj(void *p) {
    swiglu_ctx *c = p;
    c->e->ops->swiglu_fwd(c->e->s1, c->out, c->gate_up, c->N, c->F);
    return dot_d(c->out, c->R, (size_t)c->N * c->F);
}

static void test_swiglu(const env *e, int N, int F) {
    swiglu_ctx c = {.e = e, .N = N, .F = F};
    size_t n = (size_t)N * F;
    c.out = ffill(n, NAN), c.gate_up = frand(2 * n, -4, 4), c.R = frand(n, -1, 1);
    c.gate_up[0] = -100.0f, c.gate_up[1] = 100.0f; /* exp(-g) overflows, and underflows */
    swiglu_obj(&c);
    double *ref = xmalloc(n * sizeof(double));
    for (int r = 0; r < N; r++)
        for (int i = 0; i < F; i++) {
            double g = c.gate_up[(size_t)r * 2 * F + i], u = c.gate_up[(size_t)r * 2 * F + F + i];
            ref[(size_t)r * F + i] = g / (1.0 + exp(-g)) * u;
        }
    check_fwd("swiglu out", c.out, ref, n);

    float *dgu = ffill(2 * n, NAN);
    e->ops->swiglu_bwd(e->s1, dgu, c.gate_up, c.R, N, F);
    gradcheck("swiglu dgate_up", swiglu_obj, &c, c.gate_up, dgu, 2 * n, 1e-2f);
    float *dgu2 = ffill(2 * n, NAN);
    e->ops->swiglu_bwd(e->s1, dgu2, c.gate_up, c.R, N, F);
    check_bits("swiglu_bwd overwrites its output", dgu, dgu2, 2 * n);

    float *out3 = ffill(n, NAN), *dgu3 = ffill(2 * n, NAN);
    swiglu_obj(&c);
    e->ops->swiglu_fwd(e->s3, out3, c.gate_up, N, F);
    e->ops->swiglu_bwd(e->s3, dgu3, c.gate_up, c.R, N, F);
    check_bits("swiglu_fwd, 1 vs 3 threads", c.out, out3, n);
    check_bits("swiglu_bwd, 1 vs 3 threads", dgu, dgu3, 2 * n);
    free(ref), free(dgu), free(dgu2), free(out3), free(dgu3), free(c.out), free(c.gate_up), free(c.R);
}

/* ---- gqa_expand / gqa_reduce ------------------------------------------------ */

typedef struct {
    const env *e;
    float *qkv, *full, *R; /* [N,(NH+2NKV)HD], [N,3 NH HD], [N,3 NH HD] */
    int N, NH, NKV, HD;
} gqa_ctx;

static double gqa_obj(void *p) {
    gqa_ctx *c = p;
    c->e->ops->gqa_expand(c->e->s1, c->full, c->qkv, c->N, c->NH, c->NKV, c->HD);
    return dot_d(c->full, c->R, (size_t)c->N * 3 * c->NH * c->HD);
}

/* Every element of full is the element of qkv the expansion names. */
static int gqa_expanded_exactly(const gqa_ctx *c) {
    int C = c->NH * c->HD, kvC = c->NKV * c->HD, G = c->NH / c->NKV;
    for (int n = 0; n < c->N; n++)
        for (int i = 0; i < 3 * C; i++) {
            int part = i / C, h = (i % C) / c->HD, d = i % c->HD;
            int src = part == 0 ? i : C + (part - 1) * kvC + (h / G) * c->HD + d;
            if (memcmp(&c->full[(size_t)n * 3 * C + i], &c->qkv[(size_t)n * (C + 2 * kvC) + src], 4) != 0) return 0;
        }
    return 1;
}

static void test_gqa(const env *e, int N, int NH, int NKV, int HD) {
    gqa_ctx c = {.e = e, .N = N, .NH = NH, .NKV = NKV, .HD = HD};
    size_t nsmall = (size_t)N * (NH + 2 * NKV) * HD, nfull = (size_t)N * 3 * NH * HD;
    char what[96];
    c.qkv = frand(nsmall, -1, 1), c.full = ffill(nfull, NAN), c.R = frand(nfull, -1, 1);
    gqa_obj(&c);
    int exact = gqa_expanded_exactly(&c);
    CHECK(exact, "gqa_expand NH=%d NKV=%d: not the exact copy of the named heads", NH, NKV);
    if (exact) printf("ok forward gqa_expand NH=%d NKV=%d (exact copies)\n", NH, NKV);

    float *d = ffill(nsmall, 0);
    e->ops->gqa_reduce(e->s1, d, c.R, N, NH, NKV, HD);
    snprintf(what, sizeof what, "gqa dqkv NH=%d NKV=%d HD=%d", NH, NKV, HD);
    gradcheck(what, gqa_obj, &c, c.qkv, d, nsmall, 1e-2f);
    float *d2 = fdup(d, nsmall);
    e->ops->gqa_reduce(e->s1, d2, c.R, N, NH, NKV, HD);
    check_accumulated(what, d, d2, nsmall);

    float *full3 = ffill(nfull, NAN), *d3 = ffill(nsmall, 0);
    gqa_obj(&c); /* the expansion of the unperturbed qkv again */
    e->ops->gqa_expand(e->s3, full3, c.qkv, N, NH, NKV, HD);
    e->ops->gqa_reduce(e->s3, d3, c.R, N, NH, NKV, HD);
    check_bits("gqa_expand, 1 vs 3 threads", c.full, full3, nfull);
    check_bits("gqa_reduce, 1 vs 3 threads", d, d3, nsmall);
    free(d), free(d2), free(full3), free(d3), free(c.qkv), free(c.full), free(c.R);
}

/* ---- rope -> gqa_expand -> attention, as a Llama block runs them ------------ */

typedef struct {
    const env *e;
    int fused; /* attention_fused_fwd/bwd, else attention_fwd/bwd */
    float *qkv, *roped, *full, *out, *att, *R; /* [B,T,(NH+2NKV)HD] x2, [B,T,3C], [B,T,C], att or lse, [B,T,C] */
    int B, T, NH, NKV, HD;
} llama_att_ctx;

static size_t la_small(const llama_att_ctx *c) { return (size_t)c->B * c->T * (c->NH + 2 * c->NKV) * c->HD; }

static double llama_att_obj(void *p) {
    llama_att_ctx *c = p;
    const zt_ops *ops = c->e->ops;
    zt_stream *s = c->e->s1;
    int C = c->NH * c->HD;
    memcpy(c->roped, c->qkv, la_small(c) * sizeof(float));
    ops->rope_fwd(s, c->roped, c->B, c->T, c->NH, c->NKV, c->HD, THETA);
    ops->gqa_expand(s, c->full, c->roped, c->B * c->T, c->NH, c->NKV, c->HD);
    if (c->fused) ops->attention_fused_fwd(s, c->out, c->att, c->full, c->B, c->T, C, c->NH);
    else ops->attention_fwd(s, c->out, c->att, c->full, c->B, c->T, C, c->NH);
    return dot_d(c->out, c->R, (size_t)c->B * c->T * C);
}

/* dL/dqkv[B,T,(NH+2NKV)HD] of the forward just run: attention's backward
 * into a zeroed dfull, reduced over the groups, rotated back. */
static float *llama_att_grad(llama_att_ctx *c) {
    const zt_ops *ops = c->e->ops;
    zt_stream *s = c->e->s1;
    int C = c->NH * c->HD;
    size_t nfull = (size_t)c->B * c->T * 3 * C;
    float *dfull = ffill(nfull, 0), *datt = falloc((size_t)c->B * c->NH * c->T), *d = ffill(la_small(c), 0);
    if (c->fused)
        ops->attention_fused_bwd(s, dfull, datt, c->R, c->full, c->out, c->att, c->B, c->T, C, c->NH, NULL, 0);
    else ops->attention_bwd(s, dfull, datt, c->R, c->full, c->att, c->B, c->T, C, c->NH, NULL, 0);
    ops->gqa_reduce(s, d, dfull, c->B * c->T, c->NH, c->NKV, c->HD);
    ops->rope_bwd(s, d, c->B, c->T, c->NH, c->NKV, c->HD, THETA);
    free(dfull), free(datt);
    return d;
}

static void test_llama_attention(const env *e, int fused, int B, int T, int NH, int NKV, int HD) {
    llama_att_ctx c = {.e = e, .fused = fused, .B = B, .T = T, .NH = NH, .NKV = NKV, .HD = HD};
    size_t nsmall = la_small(&c), nout = (size_t)B * T * NH * HD;
    size_t natt = fused ? (size_t)B * NH * T : (size_t)B * NH * T * T;
    c.qkv = frand(nsmall, -1.5f, 1.5f), c.roped = falloc(nsmall), c.full = falloc(3 * nout);
    c.out = falloc(nout), c.att = falloc(natt), c.R = frand(nout, -1, 1);
    llama_att_obj(&c);
    float *d = llama_att_grad(&c);
    char what[96];
    snprintf(what, sizeof what, "rope>gqa>%s NH=%d NKV=%d", fused ? "attention_fused" : "attention", NH, NKV);
    gradcheck(what, llama_att_obj, &c, c.qkv, d, nsmall, 1e-2f);
    free(d), free(c.qkv), free(c.roped), free(c.full), free(c.out), free(c.att), free(c.R);
}

/* ---- embedding without a position table ----------------------------------- */

typedef struct {
    const env *e;
    float *out, *wte, *R; /* [B,T,C], [V,C], [B,T,C] */
    int32_t *tokens;      /* [B,T] */
    int B, T, C;
} emb_ctx;

static double emb_obj(void *p) {
    emb_ctx *c = p;
    c->e->ops->embedding_fwd(c->e->s1, c->out, c->tokens, c->wte, NULL, c->B, c->T, c->C);
    return dot_d(c->out, c->R, (size_t)c->B * c->T * c->C);
}

static void test_embedding_no_wpe(const env *e, int B, int T, int C, int V) {
    emb_ctx c = {.e = e, .B = B, .T = T, .C = C};
    size_t n = (size_t)B * T * C, nwte = (size_t)V * C;
    c.out = ffill(n, NAN), c.wte = frand(nwte, -1, 1), c.R = frand(n, -1, 1);
    c.tokens = xmalloc((size_t)B * T * sizeof(int32_t));
    for (int i = 0; i < B * T; i++) c.tokens[i] = (int32_t)(rng_next() % (uint64_t)V);
    c.tokens[B * T - 1] = c.tokens[0]; /* a repeated token */
    emb_obj(&c);
    int exact = 1;
    for (int bt = 0; bt < B * T; bt++)
        exact &= memcmp(c.out + (size_t)bt * C, c.wte + (size_t)c.tokens[bt] * C, (size_t)C * 4) == 0;
    CHECK(exact, "embedding_fwd without wpe: not the token rows");
    if (exact) printf("ok forward embedding without wpe (exact rows)\n");

    float *dwte = ffill(nwte, 0), *dwte_pe = ffill(nwte, 0), *dwpe = ffill((size_t)T * C, 0);
    e->ops->embedding_bwd(e->s1, dwte, NULL, c.R, c.tokens, B, T, C);
    e->ops->embedding_bwd(e->s1, dwte_pe, dwpe, c.R, c.tokens, B, T, C);
    check_bits("embedding_bwd dwte with dwpe NULL and without", dwte, dwte_pe, nwte);
    gradcheck("embedding dwte (no wpe)", emb_obj, &c, c.wte, dwte, nwte, 1e-2f);
    free(dwte), free(dwte_pe), free(dwpe), free(c.out), free(c.wte), free(c.R), free(c.tokens);
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
    env e = {.ops = be->ops_for[ZT_FP32], .s1 = &s1, .s3 = &s3};

    test_rmsnorm(&e, 10, 24);
    test_rope(&e, 2, 5, 4, 2, 8);   /* GQA: 4 query heads, 2 key/value heads */
    test_rope(&e, 1, 7, 3, 3, 6);   /* MHA, HD/2 odd */
    test_rope(&e, 1, 3, 2, 1, 140); /* HD/2 past one chunk of angles */
    test_swiglu(&e, 6, 13);
    test_gqa(&e, 5, 6, 2, 4); /* G = 3 */
    test_gqa(&e, 5, 3, 3, 4); /* NKV == NH: copies */
    test_gqa(&e, 4, 4, 1, 3); /* one key/value head (multi-query) */
    for (int fused = 0; fused < 2; fused++) {
        test_llama_attention(&e, fused, 2, 5, 4, 2, 4);
        test_llama_attention(&e, fused, 1, 6, 2, 2, 6);
    }
    test_embedding_no_wpe(&e, 2, 5, 8, 11);

    zt_backend_destroy(be);
    printf("%ld checks, %d failed\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
