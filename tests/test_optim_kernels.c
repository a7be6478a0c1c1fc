/* Unit test of the memory-saving optimizers' CPU kernels against double
 * precision: 8-bit AdamW (ops->adam8bit, zt_quant.h) and Adafactor's pieces
 * (ops->factor_stats, adafactor_precondition, adafactor_apply). Every kernel
 * runs on a stream with 1 and with 2 threads, and the two must give the same
 * bits; every bound has a twin that shows it rejects a wrong result. Bounds,
 * each asserted where it is used ("observed": the worst over 300 seeds):
 *
 * 1. Code maps: 255 entries, strictly ascending (so distinct), equal to
 *    zt_qmap_value, with 0 and 1 (and -1, and odd symmetry, in the signed
 *    map). Largest gap between positive neighbours, relative to the lower:
 *    9/2 (signed) and 9/4 (unsigned), both from 1e-6 to the next entry;
 *    over [0.1, 1], 9/64 and 9/128; largest absolute gap 0.9/64 and 0.9/128
 *    (the top decade), which caps a block's quantization error at half
 *    that times its scale. Asserted to 2e-5 relative (the entries are fp32).
 * 2. zt_quantize / zt_dequantize, 3 full blocks and one of 1000 (values over
 *    8 decades, zeros, 3e20, 1e-20): every scale is its block's absmax
 *    bitwise, nothing is written past n, and every value comes back within
 *      |deq - x| <= s gap(x/s) / 2 + 2^-23 (|x| + |deq|)
 *    where gap(r) is the distance between the map entries around r (the
 *    2^-23 terms cover the two fp32 roundings, x/s and map[c] s); observed
 *    0.00703 s (signed) and 0.00352 s (unsigned), the top decade's half gap.
 *    Quantizing the dequantized values again gives the same codes and
 *    scales (bitwise). Twin: a value rounded outward and moved one more entry
 *    outward breaks the bound.
 * 3. adam8bit, 8 steps on 2 full blocks and one of 777, gradients over three
 *    decades: a double AdamW step from the kernel's own dequantized m, v
 *    before the step (with the kernel's fp32 bias corrections) gives p within
 *      |p - p_d| <= 1e-6 (|p_prev| + lr mterms / bc1 / (sqrt(vhat_d) + eps))
 *    (mterms = |b1 m| + |(1-b1) g|, the size of what m's sum may cancel;
 *    observed 2.4e-7 of that); the new scales are the absmax of the double
 *    m, sqrt(v_d) within 1e-6, and the new dequantized m, sqrt(v) (v is kept
 *    as its root) lie within the bound of 2. around the double m_d,
 *    sqrt(v_d), plus 1e-6 of the terms for the fp32 update. Twin: a double
 *    reference that never quantizes fails the p bound. Against fp32 AdamW
 *    (ops->adamw), 20 steps from the same start with gradients over one
 *    decade: |p8 - p32| / lr at most ADAM8_VS_FP32_MAX and on average at
 *    most ADAM8_VS_FP32_MEAN (observed 7.1 and 0.206; the parameters move
 *    about 22 lr); over three decades ADAM8_WIDE_MAX and ADAM8_WIDE_MEAN
 *    (observed 11.7 and 0.46). Kept as v itself, v quantized to 0 where |g|
 *    stayed below about 5e-4 of its block's largest, and those steps were
 *    divided by the current gradient alone (316 .. 20000 lr).
 * 4. factor_stats on a 37 x 53 matrix in 4 pieces, 3 of them starting
 *    mid-row: bitwise the sums of one pass, and within 1e-5 relative of the
 *    double sums (all terms are positive; observed 6.9e-7); a zero row sums
 *    to cols * eps1 within 1e-5. Twin: sums without eps1 are rejected.
 * 5. adafactor_precondition, factored, in two pieces: |u - u_d| <= 3e-7 |u_d|
 *    (two fp32 products; observed 1.1e-7); unfactored at t = 1 and 5 (eps1
 *    1e-30 and 1e-3): |u - u_d| <= 1e-6 |u_d| and, when store_v, v = w
 *    within 1e-6 w (observed 1.5e-7 and 1.9e-7); v untouched bitwise when
 *    not store_v, and the same u either way.
 *    adafactor_apply: |p - p_d| <= 1e-6 (|p| + |x|) and
 *    |m - m_d| <= 1e-6 (|b1 m| + |x|), with and without m (observed 1.1e-7).
 *    Twins: the second piece indexed without `at`, u from the stale v, and
 *    the decay applied after the update are rejected.
 * 6. Six full Adafactor steps composed from the kernels (the host doing the
 *    means, rsqrt and rms, as the engine does) on a 24 x 40 matrix and a
 *    40-vector, each with and without momentum, clip 1 and clip 100, against
 *    the whole algorithm in double:
 *      |p - p_d| <= 1e-5 sum_t |x_d,t| + 1e-6 |p_d|
 *    where x_d,t is the reference's update of step t (observed 0.38 of the
 *    tolerance). Twin: a reference with beta2t = 1 - t^-0.5 is rejected. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "zt_backend.h"
#include "zt_quant.h"

/* Bounds on |p8 - p32| / lr after 20 steps (see 3.). Over 300 seeds the
 * largest was 1.2 .. 2.4 (this seed 1.7) but 5.8 and 7.1 in two, and the
 * mean 0.187 .. 0.206. */
#define ADAM8_VS_FP32_MAX 10.0
#define ADAM8_VS_FP32_MEAN 0.4
#define ADAM8_WIDE_MAX 50.0
#define ADAM8_WIDE_MEAN 1.5

/* Zeroed memory that ends the test on failure, as xmalloc. */
static void *xcalloc(size_t count, size_t size) {
    void *p = xmalloc(count * size);
    memset(p, 0, count * size);
    return p;
}

/* The streams every kernel runs on: one thread and two. */
typedef struct {
    const zt_ops *ops;
    zt_stream s1, s2;
} kit;

/* ---- 1. code maps ---------------------------------------------------- */

/* Half the distance between the map entries around r (0 where r is an
 * entry or outside the map). */
static double half_gap(const float *map, double r) {
    if (r <= map[0] || r >= map[ZT_QCODES - 1]) return 0.0;
    int lo = 0, hi = ZT_QCODES - 1;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if ((double)map[mid] <= r) lo = mid;
        else hi = mid;
    }
    if ((double)map[lo] == r) return 0.0;
    return 0.5 * ((double)map[hi] - (double)map[lo]);
}

/* Violations of the map's shape: entries, order, 0, +-1. */
static int map_violations(const float *map, int is_signed) {
    int bad = 0;
    for (int c = 0; c < ZT_QCODES; c++)
        if (memcmp(&map[c], &(float){zt_qmap_value(is_signed, c)}, sizeof(float)) != 0) bad++;
    for (int c = 1; c < ZT_QCODES; c++)
        if (!(map[c] > map[c - 1])) bad++; /* strictly ascending: 255 distinct */
    if (map[ZT_QCODES - 1] != 1.0f) bad++;
    if (is_signed) {
        if (map[0] != -1.0f || map[ZT_QCODES / 2] != 0.0f) bad++;
        for (int c = 0; c < ZT_QCODES; c++)
            if (map[c] != -map[ZT_QCODES - 1 - c]) bad++;
    } else if (map[0] != 0.0f) {
        bad++;
    }
    return bad;
}

static void test_qmaps(void) {
    for (int is_signed = 1; is_signed >= 0; is_signed--) {
        const char *name = is_signed ? "signed" : "unsigned";
        float map[ZT_QMAP_LEN];
        zt_qmap_fill(map, is_signed);
        int bad = map_violations(map, is_signed);
        CHECK(bad == 0, "%s map: %d violations of shape (ascending, 0, +-1, zt_qmap_value)", name, bad);

        double rel = 0.0, rel_top = 0.0, absg = 0.0;
        for (int c = 1; c < ZT_QCODES; c++) {
            double a = map[c - 1], b = map[c];
            absg = fmax(absg, b - a);
            if (a > 0.0) rel = fmax(rel, (b - a) / a);
            if (a >= 0.1 - 1e-9) rel_top = fmax(rel_top, (b - a) / a);
        }
        double want_rel = is_signed ? 4.5 : 2.25, want_top = is_signed ? 9.0 / 64 : 9.0 / 128;
        double want_abs = is_signed ? 0.9 / 64 : 0.9 / 128;
        int gaps_ok = fabs(rel - want_rel) <= 2e-5 * want_rel && fabs(rel_top - want_top) <= 2e-5 * want_top &&
                      fabs(absg - want_abs) <= 2e-5 * want_abs;
        CHECK(gaps_ok,
              "%s map gaps: relative %.9g (want %.9g), relative over [0.1,1] %.9g (want %.9g), absolute %.9g "
              "(want %.9g)",
              name, rel, want_rel, rel_top, want_top, absg, want_abs);
        if (bad == 0 && gaps_ok)
            printf("ok qmap %s: 255 ascending entries with 0, 1%s; max relative gap %.4g (%.4g over [0.1,1]), "
                   "max absolute gap %.4g\n",
                   name, is_signed ? ", -1" : "", rel, rel_top, absg);

        /* Twin: two entries swapped, or 1 moved off, is seen. */
        float bent[ZT_QMAP_LEN];
        memcpy(bent, map, sizeof bent);
        float tmp = bent[200];
        bent[200] = bent[201], bent[201] = tmp;
        CHECK(map_violations(bent, is_signed) > 0, "%s map: a swapped pair is not detected", name);
        memcpy(bent, map, sizeof bent);
        bent[ZT_QCODES - 1] = nextafterf(1.0f, 2.0f);
        CHECK(map_violations(bent, is_signed) > 0, "%s map: a top entry other than 1 is not detected", name);
    }
}

/* ---- 2. quantize / dequantize ---------------------------------------- */

/* Largest |x| of x[n]. */
static float absmax_of(const float *x, size_t n) {
    float most = 0.0f;
    for (size_t i = 0; i < n; i++) most = fmaxf(most, fabsf(x[i]));
    return most;
}

/* Elements of deq[n] outside the quantization bound around x[n]. */
static size_t quant_violations(const float *map, const float *x, const float *deq, const float *scales, size_t n,
                               double *worst) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double s = scales[i / ZT_QBLOCK], xi = x[i], err = fabs((double)deq[i] - xi);
        double bound = (s > 0.0 ? s * half_gap(map, xi / s) : 0.0) + 0x1p-23 * (fabs(xi) + fabs((double)deq[i]));
        if (!(err <= bound)) bad++;
        if (worst && s > 0.0) *worst = fmax(*worst, err / s);
    }
    return bad;
}

static void test_quant_roundtrip(void) {
    enum { N = 3 * ZT_QBLOCK + 1000, NB = (N + ZT_QBLOCK - 1) / ZT_QBLOCK };
    float *x = xmalloc(N * sizeof *x), *deq = xmalloc(N * sizeof *deq), *mag = xmalloc(N * sizeof *mag);
    uint8_t *codes = xmalloc(N + 16), *codes2 = xmalloc(N + 16);
    float scales[NB + 1], scales2[NB + 1];
    for (size_t i = 0; i < N; i++) {
        size_t b = i / ZT_QBLOCK;
        float sign = rng_next() & 1 ? -1.0f : 1.0f;
        if (b == 0) x[i] = sign * powf(10.0f, -rng_uniform(0.0f, 8.0f)); /* 1e-8 .. 1: below the map too */
        else if (b == 1) x[i] = 0.0f;                                    /* a block of zeros: scale 0 */
        else if (b == 2) x[i] = sign * rng_uniform(0.0f, 3e20f);          /* large, linear */
        else x[i] = sign * 1e-20f * powf(10.0f, -rng_uniform(0.0f, 4.0f)); /* small (still normal as deq) */
    }
    x[2 * ZT_QBLOCK + 5] = -4e20f; /* block 2's maximum is negative */
    x[N - 1] = 2e-20f;             /* the short block's maximum is its last value */

    for (int is_signed = 1; is_signed >= 0; is_signed--) {
        const char *name = is_signed ? "signed" : "unsigned";
        float map[ZT_QMAP_LEN];
        zt_qmap_fill(map, is_signed);
        float *in = x;
        if (!is_signed) { /* v >= 0: the magnitudes */
            in = mag;
            for (size_t i = 0; i < N; i++) in[i] = fabsf(x[i]);
        }
        memset(codes, 0xA5, N + 16);
        scales[NB] = -7.0f;
        zt_quantize(map, in, N, codes, scales);
        int tail_ok = scales[NB] == -7.0f;
        for (size_t i = N; i < N + 16; i++) tail_ok &= codes[i] == 0xA5;
        CHECK(tail_ok, "%s quantize wrote past n or past zt_qblocks(n) scales", name);
        int scale_ok = 1;
        for (size_t b = 0; b < NB; b++) {
            size_t lo = b * ZT_QBLOCK, len = N - lo < ZT_QBLOCK ? N - lo : ZT_QBLOCK;
            float want = absmax_of(in + lo, len);
            if (memcmp(&scales[b], &want, sizeof want) != 0) {
                scale_ok = 0;
                CHECK(0, "%s block %zu: scale %.9g, absmax %.9g", name, b, (double)scales[b], (double)want);
            }
        }
        zt_dequantize(map, codes, scales, N, deq);
        int zeros_ok = 1;
        for (size_t i = ZT_QBLOCK; i < 2 * ZT_QBLOCK; i++) zeros_ok &= deq[i] == 0.0f;
        CHECK(zeros_ok, "%s: a block of zeros does not come back as zeros", name);
        double worst = 0.0;
        size_t bad = quant_violations(map, in, deq, scales, N, &worst);
        CHECK(bad == 0, "%s round trip: %zu of %d values outside half a gap x scale", name, bad, N);

        zt_quantize(map, deq, N, codes2, scales2);
        int same = memcmp(codes, codes2, N) == 0 && memcmp(scales, scales2, NB * sizeof(float)) == 0;
        CHECK(same, "%s: quantizing the dequantized values changes codes or scales", name);
        if (bad == 0 && same && scale_ok)
            printf("ok quant %s round trip: %d values within half a gap x scale (max err %.3g x scale), "
                   "requantized bitwise\n",
                   name, N, worst);

        /* Twin: a value rounded outward (|map[c]| >= |x/s|) and then moved one
         * more entry outward is rejected: the gaps grow with the magnitude, so
         * it lies at least a whole gap of its bracket from x. */
        size_t movable = 0, caught = 0;
        for (size_t i = 0; i < N; i++) {
            int c = codes[i];
            float s = scales[i / ZT_QBLOCK];
            if (s == 0.0f || fabsf(map[c]) == 1.0f || fabs((double)map[c]) < fabs(in[i] / (double)s)) continue;
            float one = map[in[i] > 0.0f ? c + 1 : c - 1] * s;
            movable++;
            caught += quant_violations(map, in + i, &one, &s, 1, NULL);
        }
        CHECK(movable > N / 4 && caught == movable, "%s twin: only %zu of %zu one-code errors caught", name,
              caught, movable);
    }
    free(x), free(deq), free(mag), free(codes), free(codes2);
}

/* ---- 3. adam8bit ------------------------------------------------------- */

typedef struct {
    float lr, beta1, beta2, eps, wd;
} adam_cfg;

/* 8-bit state of n elements. */
typedef struct {
    size_t n, nb;
    float *p;
    uint8_t *m8, *v8;
    float *ms, *vs;
} q8_state;

static q8_state q8_new(const float *mmap, const float *vmap, const float *p0, size_t n) {
    q8_state q = {n, zt_qblocks(n), xmalloc(n * sizeof(float)), xmalloc(n), xmalloc(n),
                  xmalloc(zt_qblocks(n) * sizeof(float)), xmalloc(zt_qblocks(n) * sizeof(float))};
    memcpy(q.p, p0, n * sizeof(float));
    float *zero = xcalloc(n, sizeof(float));
    zt_quantize(mmap, zero, n, q.m8, q.ms);
    zt_quantize(vmap, zero, n, q.v8, q.vs);
    free(zero);
    return q;
}

static void q8_free(q8_state *q) { free(q->p), free(q->m8), free(q->v8), free(q->ms), free(q->vs); }

static int q8_same(const q8_state *a, const q8_state *b) {
    return memcmp(a->p, b->p, a->n * sizeof(float)) == 0 && memcmp(a->m8, b->m8, a->n) == 0 &&
           memcmp(a->v8, b->v8, a->n) == 0 && memcmp(a->ms, b->ms, a->nb * sizeof(float)) == 0 &&
           memcmp(a->vs, b->vs, a->nb * sizeof(float)) == 0;
}

/* Gradients mu + scale U(-1, 1) per element (the caller spreads scale over
 * decades, so m and v use the small entries of the maps too); element 0 of
 * each block never sees a gradient and element 1 flips sign every step (m
 * cancels). */
static void adam_grads(float *g, const float *mu, const float *scale, size_t n, int t) {
    for (size_t i = 0; i < n; i++) {
        g[i] = mu[i] + scale[i] * rng_uniform(-1.0f, 1.0f);
        if (i % ZT_QBLOCK == 0) g[i] = 0.0f;
        if (i % ZT_QBLOCK == 1) g[i] = t % 2 ? -scale[i] : scale[i];
    }
}

static void test_adam8bit(kit *k) {
    enum { N = 2 * ZT_QBLOCK + 777, STEPS = 8, STEPS32 = 20 };
    const adam_cfg c = {1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f};
    float mmap[ZT_QMAP_LEN], vmap[ZT_QMAP_LEN];
    zt_qmap_fill(mmap, 1);
    zt_qmap_fill(vmap, 0);
    float *p0 = xmalloc(N * sizeof(float)), *mu = xmalloc(N * sizeof(float)), *scale = xmalloc(N * sizeof(float));
    float *g = xmalloc(N * sizeof(float)), *mq = xmalloc(N * sizeof(float)), *vq = xmalloc(N * sizeof(float));
    float *pprev = xmalloc(N * sizeof(float));
    double *md = xmalloc(N * sizeof(double)), *vd = xmalloc(N * sizeof(double));
    double *pu = xmalloc(N * sizeof(double)), *mu_d = xmalloc(N * sizeof(double)), *vu_d = xmalloc(N * sizeof(double));
    for (size_t i = 0; i < N; i++) {
        p0[i] = rng_uniform(0.5f, 1.5f) * (i % 2 ? -1.0f : 1.0f);
        scale[i] = powf(10.0f, -rng_uniform(0.0f, 3.0f));
        mu[i] = scale[i] * rng_uniform(-1.0f, 1.0f);
        pu[i] = p0[i], mu_d[i] = vu_d[i] = 0.0;
    }
    q8_state a = q8_new(mmap, vmap, p0, N), b = q8_new(mmap, vmap, p0, N);
    const double b1 = c.beta1, b2 = c.beta2, eps = c.eps, wd = c.wd, lr = c.lr;
    double worst_p = 0.0, worst_m = 0.0, worst_v = 0.0;
    size_t bad_p = 0, bad_mv = 0, bad_scale = 0, twin_caught = 0;
    int same = 1;
    for (int t = 1; t <= STEPS; t++) {
        adam_grads(g, mu, scale, N, t);
        zt_dequantize(mmap, a.m8, a.ms, N, mq);
        zt_dequantize(vmap, a.v8, a.vs, N, vq);
        for (size_t i = 0; i < N; i++) vq[i] *= vq[i]; /* v is kept as sqrt(v) */
        memcpy(pprev, a.p, N * sizeof(float));
        k->ops->adam8bit(&k->s1, a.p, g, a.m8, a.v8, a.ms, a.vs, N, c.lr, c.beta1, c.beta2, c.eps, c.wd, t);
        k->ops->adam8bit(&k->s2, b.p, g, b.m8, b.v8, b.ms, b.vs, N, c.lr, c.beta1, c.beta2, c.eps, c.wd, t);
        same &= q8_same(&a, &b);

        /* The bias corrections as the kernel (and zt_cpu_adamw) forms them, in
         * fp32: 1 - powf(b2, t) cancels (3e-5 relative error at t = 2 for
         * b2 = 0.999), and the double step takes them as given. */
        double bc1 = 1.0f - powf(c.beta1, (float)t), bc2 = 1.0f - powf(c.beta2, (float)t);
        for (size_t i = 0; i < N; i++) {
            double gi = g[i];
            md[i] = b1 * mq[i] + (1.0 - b1) * gi;
            vd[i] = b2 * vq[i] + (1.0 - b2) * gi * gi;
            double den = sqrt(vd[i] / bc2) + eps, pp = pprev[i];
            double pd = pp - lr * (md[i] / bc1 / den + wd * pp);
            double mterms = fabs(b1 * mq[i]) + fabs((1.0 - b1) * gi);
            double tol = 1e-6 * (fabs(pp) + lr * mterms / bc1 / den);
            double ep = fabs((double)a.p[i] - pd);
            worst_p = fmax(worst_p, ep / tol * 1e-6);
            if (!(ep <= tol)) {
                if (bad_p++ < 5)
                    CHECK(0, "adam8bit step %d elem %zu: p %.9g want %.9g (err %.3g, tol %.3g)", t, i,
                          (double)a.p[i], pd, ep, tol);
            }
            /* Twin: the same bound against a double reference that never quantizes. */
            mu_d[i] = b1 * mu_d[i] + (1.0 - b1) * gi;
            vu_d[i] = b2 * vu_d[i] + (1.0 - b2) * gi * gi;
            pu[i] -= lr * (mu_d[i] / bc1 / (sqrt(vu_d[i] / bc2) + eps) + wd * pu[i]);
            if (!(fabs((double)a.p[i] - pu[i]) <= 1e-6 * (fabs(pu[i]) + lr))) twin_caught++;
        }
        /* The new state: scales are the double absmax (of m and of sqrt(v)),
         * m and sqrt(v) within the quantization bound. */
        zt_dequantize(mmap, a.m8, a.ms, N, mq);
        zt_dequantize(vmap, a.v8, a.vs, N, vq); /* sqrt(v) */
        for (size_t i = 0; i < N; i++) vd[i] = sqrt(vd[i]);
        for (size_t blk = 0; blk < a.nb; blk++) {
            size_t lo = blk * ZT_QBLOCK, hi = lo + ZT_QBLOCK < N ? lo + ZT_QBLOCK : N;
            double mmax = 0.0, vmax = 0.0;
            for (size_t i = lo; i < hi; i++) mmax = fmax(mmax, fabs(md[i])), vmax = fmax(vmax, vd[i]);
            if (!(fabs(a.ms[blk] - mmax) <= 1e-6 * mmax && fabs(a.vs[blk] - vmax) <= 1e-6 * vmax)) bad_scale++;
        }
        for (size_t i = 0; i < N; i++) {
            double s_m = a.ms[i / ZT_QBLOCK], s_v = a.vs[i / ZT_QBLOCK], gi = g[i];
            /* fp32 rounding of the update, of x/s and of map[c] s */
            double slack_m = 1e-6 * (fabs(b1 * md[i]) + fabs((1.0 - b1) * gi)) + 0x1p-22 * s_m;
            double slack_v = 1e-6 * vd[i] + 0x1p-22 * s_v; /* vd: sqrt(v) here */
            double em = fabs((double)mq[i] - md[i]), ev = fabs((double)vq[i] - vd[i]);
            double bm = (s_m > 0.0 ? s_m * half_gap(mmap, md[i] / s_m) : 0.0) + slack_m;
            double bv = (s_v > 0.0 ? s_v * half_gap(vmap, vd[i] / s_v) : 0.0) + slack_v;
            if (s_m > 0.0) worst_m = fmax(worst_m, em / s_m);
            if (s_v > 0.0) worst_v = fmax(worst_v, ev / s_v);
            if (!(em <= bm && ev <= bv)) {
                if (bad_mv++ < 5)
                    CHECK(0, "adam8bit step %d elem %zu: m %.9g want %.9g (bound %.3g), sqrt v %.9g want %.9g (bound %.3g)",
                          t, i, (double)mq[i], md[i], bm, (double)vq[i], vd[i], bv);
            }
        }
    }
    CHECK(bad_p == 0, "adam8bit: %zu p values outside the bound", bad_p);
    CHECK(bad_mv == 0, "adam8bit: %zu m or v values outside the quantization bound", bad_mv);
    CHECK(bad_scale == 0, "adam8bit: %zu block scales are not the absmax of the new m, v", bad_scale);
    CHECK(same, "adam8bit: 1 and 2 threads give different bits");
    CHECK(twin_caught > N / 10, "adam8bit twin: an unquantized reference is rejected for only %zu values",
          twin_caught);
    if (!bad_p && !bad_mv && !bad_scale && same)
        printf("ok adam8bit %d steps vs double on the dequantized state: p err <= %.2e of its scale (tol 1e-6), "
               "new m within %.3g x scale, sqrt(v) within %.3g x scale; same bits with 2 threads; an unquantized "
               "reference fails %zu of %d checks\n",
               STEPS, worst_p, worst_m, worst_v, twin_caught, N * STEPS);

    /* 20 steps against fp32 AdamW from the same start, gradients spread over
     * one decade per block, and (printed, not asserted) over three. */
    for (int decades = 1; decades <= 3; decades += 2) {
        for (size_t i = 0; i < N; i++) {
            scale[i] = powf(10.0f, -rng_uniform(0.0f, (float)decades));
            mu[i] = scale[i] * rng_uniform(-1.0f, 1.0f);
        }
        q8_state q = q8_new(mmap, vmap, p0, N);
        float *p32 = xmalloc(N * sizeof(float)), *m32 = xcalloc(N, sizeof(float)), *v32 = xcalloc(N, sizeof(float));
        memcpy(p32, p0, N * sizeof(float));
        for (int t = 1; t <= STEPS32; t++) {
            adam_grads(g, mu, scale, N, t);
            k->ops->adam8bit(&k->s1, q.p, g, q.m8, q.v8, q.ms, q.vs, N, c.lr, c.beta1, c.beta2, c.eps, c.wd, t);
            k->ops->adamw(&k->s1, p32, g, m32, v32, N, c.lr, c.beta1, c.beta2, c.eps, c.wd, t);
        }
        double dev = 0.0, mean_dev = 0.0, moved = 0.0;
        size_t far = 0;
        for (size_t i = 0; i < N; i++) {
            double d = fabs((double)q.p[i] - p32[i]) / c.lr;
            dev = fmax(dev, d), mean_dev += d / N, far += d > 1.0;
            moved = fmax(moved, fabs((double)p32[i] - p0[i]) / c.lr);
        }
        if (decades == 1) {
            CHECK(dev <= ADAM8_VS_FP32_MAX && mean_dev <= ADAM8_VS_FP32_MEAN,
                  "adam8bit vs fp32 adamw, %d steps: |dp| max %.3g lr, mean %.3g lr (bounds %.3g, %.3g lr)", STEPS32,
                  dev, mean_dev, ADAM8_VS_FP32_MAX, ADAM8_VS_FP32_MEAN);
            CHECK(moved > 5.0, "adam8bit vs fp32: parameters moved only %.3g lr; the comparison is too weak", moved);
        }
        else /* v kept as sqrt(v): a block's small gradients keep their v (kept as v, it rounded to 0 for
              * |g| under 5e-4 of the block's largest, and their steps ran to hundreds of lr) */
            CHECK(dev <= ADAM8_WIDE_MAX && mean_dev <= ADAM8_WIDE_MEAN,
                  "adam8bit vs fp32 adamw, %d steps, gradients over %d decades: |dp| max %.3g lr, mean %.3g lr "
                  "(bounds %.3g, %.3g lr)", STEPS32, decades, dev, mean_dev, ADAM8_WIDE_MAX, ADAM8_WIDE_MEAN);
        int passed = decades == 1 ? dev <= ADAM8_VS_FP32_MAX && mean_dev <= ADAM8_VS_FP32_MEAN && moved > 5.0
                                  : dev <= ADAM8_WIDE_MAX && mean_dev <= ADAM8_WIDE_MEAN;
        if (passed)
            printf("ok adam8bit vs fp32 adamw, %d steps, gradients over %d decade%s: max |p8 - p32| %.3g lr, mean "
                   "%.3g lr, %zu beyond 1 lr (p moved up to %.3g lr)\n",
                   STEPS32, decades, decades > 1 ? "s" : "", dev, mean_dev, far, moved);
        q8_free(&q);
        free(p32), free(m32), free(v32);
    }

    q8_free(&a), q8_free(&b);
    free(p0), free(mu), free(scale), free(g), free(mq), free(vq), free(pprev), free(md), free(vd), free(pu),
        free(mu_d), free(vu_d);
}

/* ---- 4. factor_stats --------------------------------------------------- */

static void test_factor_stats(kit *k) {
    enum { R = 37, C = 53, N = R * C };
    const float eps1 = 1e-3f; /* large, so a missing or doubled eps1 shows */
    float *g = xmalloc(N * sizeof(float));
    for (size_t e = 0; e < N; e++) g[e] = rng_uniform(-2.0f, 2.0f);
    for (size_t j = 0; j < C; j++) g[5 * C + j] = 0.0f; /* row 5: eps1 only */
    float row1[R] = {0}, col1[C] = {0}, rowp[R] = {0}, colp[C] = {0}, row2[R] = {0}, col2[C] = {0};
    k->ops->factor_stats(&k->s1, row1, col1, g, N, 0, C, eps1);
    /* [0,10) [10,100) [100,1000) [1000,N): three start mid-row, one spans rows */
    static const size_t cut[] = {0, 10, 100, 1000, N};
    for (int q = 0; q < 4; q++) {
        zt_stream *s = q % 2 ? &k->s2 : &k->s1;
        k->ops->factor_stats(s, rowp, colp, g + cut[q], cut[q + 1] - cut[q], cut[q], C, eps1);
        k->ops->factor_stats(&k->s2, row2, col2, g + cut[q], cut[q + 1] - cut[q], cut[q], C, eps1);
    }
    CHECK(memcmp(row1, rowp, sizeof row1) == 0 && memcmp(col1, colp, sizeof col1) == 0,
          "factor_stats: pieces give other bits than one pass");
    CHECK(memcmp(rowp, row2, sizeof row2) == 0 && memcmp(colp, col2, sizeof col2) == 0,
          "factor_stats: 1 and 2 threads give different bits");

    double rd[R] = {0}, cd[C] = {0}, rnoeps[R] = {0};
    for (size_t e = 0; e < N; e++) {
        double sq = (double)g[e] * g[e] + eps1;
        rd[e / C] += sq, cd[e % C] += sq, rnoeps[e / C] += (double)g[e] * g[e];
    }
    double worst = 0.0;
    int twin = 0;
    for (int i = 0; i < R; i++) {
        worst = fmax(worst, fabs(row1[i] - rd[i]) / rd[i]);
        twin += !(fabs(row1[i] - rnoeps[i]) <= 1e-5 * rnoeps[i]);
    }
    for (int j = 0; j < C; j++) worst = fmax(worst, fabs(col1[j] - cd[j]) / cd[j]);
    CHECK(worst <= 1e-5, "factor_stats: relative error %.3g vs double sums (tol 1e-5)", worst);
    CHECK(fabs(row1[5] - C * (double)eps1) <= 1e-5 * C * eps1, "factor_stats: zero row sums to %.9g, want %.9g",
          (double)row1[5], C * (double)eps1);
    CHECK(twin == R, "factor_stats twin: sums without eps1 pass for %d of %d rows", R - twin, R);
    if (worst <= 1e-5 && twin == R)
        printf("ok factor_stats %dx%d: 4 pieces (3 mid-row) = one pass bitwise, same with 2 threads, rel err %.2e "
               "vs double (tol 1e-5)\n",
               R, C, worst);
    free(g);
}

/* ---- 5. adafactor_precondition, adafactor_apply ------------------------ */

static void test_precondition(kit *k) {
    enum { R = 19, C = 31, N = R * C };
    float *g = xmalloc(N * sizeof(float)), *u1 = xmalloc(N * sizeof(float)), *u2 = xmalloc(N * sizeof(float));
    float rfac[R], cfac[C];
    for (size_t e = 0; e < N; e++) g[e] = rng_uniform(-1.0f, 1.0f) * powf(10.0f, -rng_uniform(0.0f, 2.0f));
    g[7] = 0.0f;
    for (int i = 0; i < R; i++) rfac[i] = rng_uniform(0.3f, 3.0f);
    for (int j = 0; j < C; j++) cfac[j] = powf(10.0f, rng_uniform(0.0f, 3.0f));

    /* Factored, in two pieces (the second starts mid-row), 1 and 2 threads;
     * v is not read (NULL) and store_v does not matter. */
    const size_t cut = 100;
    k->ops->adafactor_precondition(&k->s1, u1, g, NULL, rfac, cfac, cut, 0, C, 0.5f, 1e-30f, 0);
    k->ops->adafactor_precondition(&k->s1, u1 + cut, g + cut, NULL, rfac, cfac, N - cut, cut, C, 0.5f,
                                   1e-30f, 1);
    k->ops->adafactor_precondition(&k->s2, u2, g, NULL, rfac, cfac, N, 0, C, 0.5f, 1e-30f, 0);
    double worst = 0.0;
    size_t bad = 0, caught = 0;
    for (size_t e = 0; e < N; e++) {
        double ud = (double)g[e] * rfac[e / C] * cfac[e % C], err = fabs(u1[e] - ud);
        if (!(err <= 3e-7 * fabs(ud))) bad++;
        if (ud != 0.0) worst = fmax(worst, err / fabs(ud));
        /* Twin: the second piece indexed from its own start, not from `at`. */
        size_t e2 = e < cut ? e : e - cut;
        double wrong = (double)g[e] * rfac[e2 / C] * cfac[e2 % C];
        caught += e >= cut && !(fabs(u1[e] - wrong) <= 3e-7 * fabs(wrong));
    }
    CHECK(bad == 0, "precondition factored: %zu values beyond 3e-7 relative", bad);
    CHECK(memcmp(u1, u2, N * sizeof(float)) == 0, "precondition factored: pieces / 2 threads give other bits");
    CHECK(caught > (N - cut) * 9 / 10, "precondition factored twin: ignoring `at` is caught for only %zu of %zu",
          caught, N - cut);
    if (bad == 0 && memcmp(u1, u2, N * sizeof(float)) == 0)
        printf("ok adafactor_precondition factored: rel err %.2e (tol 3e-7), pieces and 2 threads bitwise\n",
               worst);

    /* Unfactored, store_v 0 and 1, at t = 1 (beta2t = 0, eps1 = 1e-30, a zero
     * gradient) and t = 5 (eps1 = 1e-3, large enough to matter). */
    float *v0 = xmalloc(N * sizeof(float)), *v = xmalloc(N * sizeof(float)), *v2 = xmalloc(N * sizeof(float));
    float *u0 = xmalloc(N * sizeof(float));
    for (size_t e = 0; e < N; e++) v0[e] = (float)pow(10.0, -rng_uniform(0.0f, 4.0f));
    static const int steps[] = {1, 5};
    for (int si = 0; si < 2; si++) {
        const float eps1 = si ? 1e-3f : 1e-30f, beta2t = 1.0f - powf((float)steps[si], -0.8f);
        memcpy(v, v0, N * sizeof(float));
        k->ops->adafactor_precondition(&k->s1, u0, g, v, NULL, NULL, N, 0, C, beta2t, eps1, 0);
        int untouched = memcmp(v, v0, N * sizeof(float)) == 0;
        k->ops->adafactor_precondition(&k->s1, u1, g, v, NULL, NULL, cut, 0, C, beta2t, eps1, 1);
        k->ops->adafactor_precondition(&k->s1, u1 + cut, g + cut, v + cut, NULL, NULL, N - cut, cut, C,
                                       beta2t, eps1, 1);
        memcpy(v2, v0, N * sizeof(float));
        k->ops->adafactor_precondition(&k->s2, u2, g, v2, NULL, NULL, N, 0, C, beta2t, eps1, 1);
        double wu = 0.0, wv = 0.0;
        bad = caught = 0;
        for (size_t e = 0; e < N; e++) {
            double w = (double)beta2t * v0[e] + (1.0 - (double)beta2t) * ((double)g[e] * g[e] + eps1);
            double ud = g[e] / sqrt(w), eu = fabs(u1[e] - ud), ev = fabs(v[e] - w);
            if (!(eu <= 1e-6 * fabs(ud) && ev <= 1e-6 * w)) bad++;
            if (ud != 0.0) wu = fmax(wu, eu / fabs(ud));
            wv = fmax(wv, ev / w);
            double stale = g[e] / sqrt((double)v0[e]); /* twin: u from the v before the update */
            caught += g[e] != 0.0f && !(fabs(u1[e] - stale) <= 1e-6 * fabs(stale));
        }
        CHECK(caught >= N - 1, "precondition unfactored t=%d twin: a stale v is caught for only %zu of %d",
              steps[si], caught, N - 1);
        CHECK(bad == 0, "precondition unfactored t=%d: %zu values beyond 1e-6 relative", steps[si], bad);
        CHECK(untouched, "precondition unfactored t=%d: store_v 0 modified v", steps[si]);
        CHECK(memcmp(u0, u1, N * sizeof(float)) == 0, "precondition t=%d: store_v changes u", steps[si]);
        CHECK(memcmp(u1, u2, N * sizeof(float)) == 0 && memcmp(v, v2, N * sizeof(float)) == 0,
              "precondition unfactored t=%d: pieces / 2 threads give other bits", steps[si]);
        if (bad == 0 && untouched)
            printf("ok adafactor_precondition unfactored t=%d: u rel err %.2e, v rel err %.2e (tol 1e-6); store_v 0 "
                   "leaves v, same u; 2 threads bitwise\n",
                   steps[si], wu, wv);
    }
    free(g), free(u1), free(u2), free(u0), free(v0), free(v), free(v2);
}

static void test_apply(kit *k) {
    enum { N = 1001 };
    float p0[N], u[N], m0[N], p[N], m[N], p2[N], m2[N];
    for (int i = 0; i < N; i++) {
        p0[i] = rng_uniform(-2.0f, 2.0f);
        u[i] = rng_uniform(-1.5f, 1.5f);
        m0[i] = rng_uniform(-1e-2f, 1e-2f);
    }
    const float step = 7e-3f, beta1 = 0.9f, decay = 1e-3f;
    for (int with_m = 0; with_m <= 1; with_m++) {
        memcpy(p, p0, sizeof p), memcpy(m, m0, sizeof m), memcpy(p2, p0, sizeof p), memcpy(m2, m0, sizeof m);
        k->ops->adafactor_apply(&k->s1, p, u, with_m ? m : NULL, N, step, beta1, decay);
        k->ops->adafactor_apply(&k->s2, p2, u, with_m ? m2 : NULL, N, step, beta1, decay);
        double wp = 0.0, wm = 0.0;
        size_t bad = 0, caught = 0;
        for (int i = 0; i < N; i++) {
            double x = (double)step * u[i], md = m0[i];
            if (with_m) md = (double)beta1 * m0[i] + (1.0 - beta1) * x, x = md;
            double pd = (double)p0[i] - (double)decay * p0[i] - x;
            double ep = fabs(p[i] - pd) / (fabs((double)p0[i]) + fabs(x));
            double em = fabs(m[i] - md) / (fabs((double)beta1 * m0[i]) + fabs((double)step * u[i]));
            if (!(ep <= 1e-6 && em <= 1e-6)) bad++;
            wp = fmax(wp, ep), wm = fmax(wm, em);
            double wrong = ((double)p0[i] - x) * (1.0 - (double)decay); /* twin: decay after the update */
            caught += !(fabs(p[i] - wrong) <= 1e-6 * (fabs((double)p0[i]) + fabs(x)));
        }
        CHECK(bad == 0, "adafactor_apply m=%d: %zu values beyond 1e-6", with_m, bad);
        CHECK(caught > N / 2, "adafactor_apply m=%d twin: decay after the update is caught for only %zu of %d",
              with_m, caught, N);
        CHECK(memcmp(p, p2, sizeof p) == 0 && memcmp(m, m2, sizeof m) == 0,
              "adafactor_apply m=%d: 1 and 2 threads give different bits", with_m);
        if (!with_m) CHECK(memcmp(m, m0, sizeof m) == 0, "adafactor_apply without m touched m");
        if (bad == 0)
            printf("ok adafactor_apply %s: p err %.2e, m err %.2e (tol 1e-6), 2 threads bitwise\n",
                   with_m ? "with m" : "without m", wp, wm);
    }
}

/* ---- 6. full Adafactor steps ------------------------------------------- */

typedef struct {
    float lr, eps1, clip, beta1, wd;
} afac_cfg;

/* One parameter's fp32 state (vr, vc for a matrix, else v; m when momentum). */
typedef struct {
    int rows, cols; /* rows == 1: a vector, unfactored */
    float *p, *m, *vr, *vc, *v;
} afac_f;

typedef struct {
    double *p, *m, *vr, *vc, *v;
} afac_d;

/* The step as the engine composes it: stats (in two pieces), host means and
 * rsqrt, precondition, host rms, apply. Returns whether the clip engaged. */
static int afac_step_kernels(const zt_ops *ops, zt_stream *s, afac_f *a, const float *g, const afac_cfg *c, int t) {
    const size_t R = a->rows, C = a->cols, n = R * C, cut = n / 3 + 1;
    const float beta2t = 1.0f - powf((float)t, -0.8f);
    float *u = xmalloc(n * sizeof(float));
    if (R > 1) {
        float *row = xcalloc(R, sizeof(float)), *col = xcalloc(C, sizeof(float));
        float *rfac = xmalloc(R * sizeof(float)), *cfac = xmalloc(C * sizeof(float));
        ops->factor_stats(s, row, col, g, cut, 0, C, c->eps1);
        ops->factor_stats(s, row, col, g + cut, n - cut, cut, C, c->eps1);
        double vr_sum = 0.0;
        for (size_t i = 0; i < R; i++) {
            a->vr[i] = beta2t * a->vr[i] + (1.0f - beta2t) * (row[i] / (float)C);
            vr_sum += a->vr[i];
        }
        float vr_mean = (float)(vr_sum / R);
        for (size_t i = 0; i < R; i++) rfac[i] = 1.0f / sqrtf(a->vr[i] / vr_mean);
        for (size_t j = 0; j < C; j++) {
            a->vc[j] = beta2t * a->vc[j] + (1.0f - beta2t) * (col[j] / (float)R);
            cfac[j] = 1.0f / sqrtf(a->vc[j]);
        }
        ops->adafactor_precondition(s, u, g, NULL, rfac, cfac, cut, 0, C, beta2t, c->eps1, 0);
        ops->adafactor_precondition(s, u + cut, g + cut, NULL, rfac, cfac, n - cut, cut, C, beta2t, c->eps1, 0);
        free(row), free(col), free(rfac), free(cfac);
    } else {
        ops->adafactor_precondition(s, u, g, a->v, NULL, NULL, n, 0, C, beta2t, c->eps1, 1);
    }
    double ss = 0.0;
    for (size_t e = 0; e < n; e++) ss += (double)u[e] * u[e];
    float rms = (float)sqrt(ss / n), div = fmaxf(1.0f, rms / c->clip);
    ops->adafactor_apply(s, a->p, u, a->m, n, c->lr / div, c->beta1, c->lr * c->wd);
    free(u);
    return div > 1.0f;
}

/* The whole algorithm in double, with beta2t = 1 - t^-decay_exp (0.8; the
 * twin passes another); adds |x| of each element to xsum. */
static void afac_step_double(const afac_f *shape, afac_d *d, const float *g, const afac_cfg *c, int t,
                             double decay_exp, double *xsum) {
    const size_t R = shape->rows, C = shape->cols, n = R * C;
    const double beta2t = 1.0 - pow((double)t, -decay_exp), eps1 = c->eps1, lr = c->lr, b1 = c->beta1;
    double *u = xmalloc(n * sizeof(double));
    if (R > 1) {
        double mean = 0.0;
        for (size_t i = 0; i < R; i++) {
            double acc = 0.0;
            for (size_t j = 0; j < C; j++) acc += (double)g[i * C + j] * g[i * C + j] + eps1;
            d->vr[i] = beta2t * d->vr[i] + (1.0 - beta2t) * acc / C;
            mean += d->vr[i] / R;
        }
        for (size_t j = 0; j < C; j++) {
            double acc = 0.0;
            for (size_t i = 0; i < R; i++) acc += (double)g[i * C + j] * g[i * C + j] + eps1;
            d->vc[j] = beta2t * d->vc[j] + (1.0 - beta2t) * acc / R;
        }
        for (size_t e = 0; e < n; e++) u[e] = g[e] / sqrt(d->vr[e / C] / mean) / sqrt(d->vc[e % C]);
    } else {
        for (size_t e = 0; e < n; e++) {
            d->v[e] = beta2t * d->v[e] + (1.0 - beta2t) * ((double)g[e] * g[e] + eps1);
            u[e] = g[e] / sqrt(d->v[e]);
        }
    }
    double ss = 0.0;
    for (size_t e = 0; e < n; e++) ss += u[e] * u[e];
    double div = fmax(1.0, sqrt(ss / n) / c->clip);
    for (size_t e = 0; e < n; e++) {
        double x = lr * u[e] / div;
        if (d->m) d->m[e] = b1 * d->m[e] + (1.0 - b1) * x, x = d->m[e];
        d->p[e] = d->p[e] - lr * (double)c->wd * d->p[e] - x;
        xsum[e] += fabs(x);
    }
    free(u);
}

/* Parameters of one composed-step run. */
typedef struct {
    int rows, cols, momentum;
    float clip;
} afac_case;

static afac_d afac_d_new(int R, int C, int mom, const float *p) {
    const size_t n = (size_t)R * C;
    afac_d d = {xmalloc(n * sizeof(double)), mom ? xcalloc(n, sizeof(double)) : NULL, xcalloc(R, sizeof(double)),
                xcalloc(C, sizeof(double)), xcalloc(R > 1 ? 1 : n, sizeof(double))};
    for (size_t e = 0; e < n; e++) d.p[e] = p[e];
    return d;
}

static void afac_d_free(afac_d *d) { free(d->p), free(d->m), free(d->vr), free(d->vc), free(d->v); }

static void test_adafactor_full(kit *k) {
    enum { STEPS = 6 };
    /* clip 1 (Adafactor's default) clips most steps, which hides a constant
     * factor in u; clip 100 never does, so u's scale is checked too. */
    static const afac_case cases[] = {
        {24, 40, 0, 1.0f}, {24, 40, 1, 100.0f}, {1, 40, 1, 1.0f}, {1, 40, 0, 100.0f}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const afac_case *cs = &cases[ci];
        const afac_cfg c = {1e-2f, 1e-30f, cs->clip, 0.9f, 0.01f};
        const int R = cs->rows, C = cs->cols, mom = cs->momentum;
        const size_t n = (size_t)R * C, nv = R > 1 ? 1 : n;
        afac_f a[2];
        float *p0 = xmalloc(n * sizeof(float));
        for (size_t e = 0; e < n; e++) p0[e] = rng_uniform(-1.0f, 1.0f);
        for (int q = 0; q < 2; q++) {
            a[q] = (afac_f){R, C, xmalloc(n * sizeof(float)), mom ? xcalloc(n, sizeof(float)) : NULL,
                            xcalloc(R, sizeof(float)), xcalloc(C, sizeof(float)), xcalloc(nv, sizeof(float))};
            memcpy(a[q].p, p0, n * sizeof(float));
        }
        afac_d d = afac_d_new(R, C, mom, p0), twin = afac_d_new(R, C, mom, p0);
        double *xsum = xcalloc(n, sizeof(double)), *xsum_twin = xcalloc(n, sizeof(double));
        float *g = xmalloc(n * sizeof(float)), *rs = xmalloc(R * sizeof(float)), *cl = xmalloc(C * sizeof(float));
        /* Rows and columns of different scales (what factoring models), times noise. */
        for (int i = 0; i < R; i++) rs[i] = powf(10.0f, rng_uniform(-1.0f, 1.0f));
        for (int j = 0; j < C; j++) cl[j] = powf(10.0f, rng_uniform(-1.0f, 1.0f));
        int clipped = 0;
        double worst = 0.0;
        size_t bad = 0, caught = 0;
        for (int t = 1; t <= STEPS; t++) {
            for (size_t e = 0; e < n; e++) g[e] = rs[e / C] * cl[e % C] * rng_uniform(-1.0f, 1.0f);
            clipped += afac_step_kernels(k->ops, &k->s1, &a[0], g, &c, t);
            afac_step_kernels(k->ops, &k->s2, &a[1], g, &c, t);
            afac_step_double(&a[0], &d, g, &c, t, 0.8, xsum);
            afac_step_double(&a[0], &twin, g, &c, t, 0.5, xsum_twin); /* twin: beta2t = 1 - t^-0.5 */
            for (size_t e = 0; e < n; e++) {
                double err = fabs(a[0].p[e] - d.p[e]), tol = 1e-5 * xsum[e] + 1e-6 * fabs(d.p[e]);
                if (!(err <= tol)) bad++;
                worst = fmax(worst, err / tol);
                caught += !(fabs(a[0].p[e] - twin.p[e]) <= 1e-5 * xsum_twin[e] + 1e-6 * fabs(twin.p[e]));
            }
        }
        int same = memcmp(a[0].p, a[1].p, n * sizeof(float)) == 0 &&
                   (!mom || memcmp(a[0].m, a[1].m, n * sizeof(float)) == 0);
        char name[64];
        snprintf(name, sizeof name, "%s %dx%d%s clip %g", R > 1 ? "factored" : "vector", R, C,
                 mom ? " momentum" : "", (double)cs->clip);
        CHECK(bad == 0, "adafactor %s: %zu parameter values beyond 1e-5 sum|x| + 1e-6 |p|", name, bad);
        CHECK(same, "adafactor %s: 1 and 2 threads give different bits", name);
        CHECK(caught > n, "adafactor %s twin: beta2t = 1 - t^-0.5 is rejected for only %zu of %zu values", name,
              caught, n * STEPS);
        if (bad == 0 && same)
            printf("ok adafactor %s, %d steps (clipped %d): worst err %.2g of the tolerance, 2 threads bitwise; "
                   "a t^-0.5 decay fails %zu of %zu\n",
                   name, STEPS, clipped, worst, caught, n * STEPS);
        for (int q = 0; q < 2; q++) free(a[q].p), free(a[q].m), free(a[q].vr), free(a[q].vc), free(a[q].v);
        afac_d_free(&d), afac_d_free(&twin);
        free(p0), free(xsum), free(xsum_twin), free(g), free(rs), free(cl);
    }
}

/* Resharding 8-bit state: values quantized in one world's blocks,
 * dequantized (the checkpoint) and quantized in blocks that start
 * elsewhere (another world's slices) lie within half a gap x the new
 * block's scale of the checkpoint's values; and the sqrt(v) a loading
 * rank quantizes from a saved v (dequantized sqrt(v), squared) is the
 * value it came from (resume at the same world size is bitwise). */
static void test_reblock(void) {
    enum { N = 2 * ZT_QBLOCK + 999, CUT = 700 };
    float *x = xmalloc(N * sizeof *x), *deq = xmalloc(N * sizeof *deq), *re = xmalloc(N * sizeof *re);
    uint8_t *codes = xmalloc(N), *codes2 = xmalloc(N);
    float scales[4], scales2[5], map[ZT_QMAP_LEN];
    zt_qmap_fill(map, 1);
    for (size_t i = 0; i < N; i++) x[i] = (rng_next() & 1 ? -1.0f : 1.0f) * powf(10.0f, -rng_uniform(0.0f, 5.0f));
    zt_quantize(map, x, N, codes, scales);
    zt_dequantize(map, codes, scales, N, deq);
    /* the new world: a slice boundary at CUT, blocks from 0 and from CUT */
    zt_quantize(map, deq, CUT, codes2, scales2);
    zt_quantize(map, deq + CUT, N - CUT, codes2 + CUT, scales2 + 1);
    zt_dequantize(map, codes2, scales2, CUT, re);
    zt_dequantize(map, codes2 + CUT, scales2 + 1, N - CUT, re + CUT);
    double worst = 0.0;
    size_t bad = quant_violations(map, deq, re, scales2, CUT, &worst) +
                 quant_violations(map, deq + CUT, re + CUT, scales2 + 1, N - CUT, &worst);
    CHECK(bad == 0, "reblocked: %zu of %d values outside half a gap x the new block's scale", bad, N);
    size_t moved = 0;
    for (size_t i = 0; i < N; i++) moved += re[i] != deq[i];
    CHECK(moved > 0, "reblocked: no value moved; the check is too weak");
    /* sqrt of a saved square gives back the root */
    size_t roots_off = 0;
    for (size_t i = 0; i < N; i++) {
        float r = fabsf(deq[i]), v = r * r;
        roots_off += sqrtf(v) != r && v > 0x1p-126f; /* normal squares only */
    }
    CHECK(roots_off == 0, "%zu roots of saved squares differ from the roots saved", roots_off);
    if (bad == 0 && moved && !roots_off)
        printf("ok 8-bit resharding: re-quantized in other blocks, %zu of %d values moved, all within half a gap "
               "x the new scale (worst %.3g x scale); sqrt(v^2) == v for every normal square\n",
               moved, N, worst);
    free(x), free(deq), free(re), free(codes), free(codes2);
}

int main(void) {
    rng_state = 0xA4093822299F31D0ull; /* this test's own stream */
    zt_backend *be = NULL;
    zt_error err = {0};
    if (zt_backend_cpu_create(1, &be, &err) != ZT_OK) {
        printf("FAIL: zt_backend_cpu_create: %s\n", err.msg);
        return 1;
    }
    kit k = {be->ops, zt_backend_stream(be), zt_backend_stream(be)};
    k.s1.nthreads = 1;
    k.s2.nthreads = 2;

    test_qmaps();
    test_quant_roundtrip();
    test_reblock();
    test_adam8bit(&k);
    test_factor_stats(&k);
    test_precondition(&k);
    test_apply(&k);
    test_adafactor_full(&k);

    zt_backend_destroy(be);
    if (g_failures) printf("%d of %ld checks failed\n", g_failures, g_checks);
    return g_failures ? 1 : 0;
}
