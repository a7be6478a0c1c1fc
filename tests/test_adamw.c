/* Unit test of ops->adamw (and ops->sgd, below) against the closed form, computed in double:
 *   m_t = b1 m_{t-1} + (1-b1) g_t,  v_t = b2 v_{t-1} + (1-b2) g_t^2
 *   mhat = m_t / (1 - b1^t),        vhat = v_t / (1 - b2^t)
 *   p_t = p_{t-1} - lr * (mhat / (sqrt(vhat) + eps) + wd * p_{t-1})
 * for 5 steps (t = 1..5) with fixed per-step gradients, in several
 * configurations: wd = 0 and wd = 0.1 with eps = 1e-8, and a large eps with
 * small gradients where the placement of eps (outside the sqrt) matters.
 * The reference uses the float values of the hyperparameters as passed.
 *
 * Tolerances (relative, 1e-6):
 *   p: |p_f - p_d| <= 1e-6 * |p_d|   (parameters are kept away from 0, and
 *      lr = 1e-2 makes each update large enough that a 1e-4 relative error in
 *      the update, e.g. a missing bias correction or wrong decay, is caught)
 *   m: |m_f - m_d| <= 1e-6 * (|m_d| + max|g|)     (m can cancel to near 0)
 *   v: |v_f - v_d| <= 1e-6 * (|v_d| + max g^2)
 * Also: the same bits with 1 and 3 threads, and n = 0 is a no-op. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "zt_backend.h"

#define NSTEPS 5
#define NELEM 9
#define TOL 1e-6




typedef struct {
    const char *name;
    float lr, beta1, beta2, eps, wd;
    float gscale; /* gradients are uniform in [-gscale, gscale] */
} config;

static void run_config(const zt_ops *ops, zt_stream *s, zt_stream *s3, const config *cfg) {
    float p[NELEM], m[NELEM], v[NELEM], g[NSTEPS][NELEM];
    double pd[NELEM], md[NELEM], vd[NELEM], p0[NELEM];
    float p3[NELEM], m3[NELEM], v3[NELEM];
    double gmax = 0.0;

    for (int i = 0; i < NELEM; i++) {
        /* |p| in [0.5, 1.5], both signs. */
        p[i] = rng_uniform(0.5f, 1.5f) * (i % 2 ? -1.0f : 1.0f);
        m[i] = v[i] = 0.0f;
        pd[i] = p0[i] = p[i], md[i] = vd[i] = 0.0;
    }
    for (int t = 0; t < NSTEPS; t++)
        for (int i = 0; i < NELEM; i++) {
            g[t][i] = rng_uniform(-cfg->gscale, cfg->gscale);
            if (i == 0) g[t][i] = 0.0f;                       /* never a gradient: only decay */
            if (i == 1) g[t][i] = cfg->gscale * (t % 2 ? -1.0f : 1.0f); /* sign flips: m cancels */
            gmax = fmax(gmax, fabs((double)g[t][i]));
        }
    memcpy(p3, p, sizeof p), memcpy(m3, m, sizeof m), memcpy(v3, v, sizeof v);

    double b1 = cfg->beta1, b2 = cfg->beta2, eps = cfg->eps, wd = cfg->wd, lr = cfg->lr;
    int ok = 1;
    double worst_p = 0.0;
    for (int t = 1; t <= NSTEPS; t++) {
        const float *gt = g[t - 1];
        ops->adamw(s, p, gt, m, v, NELEM, cfg->lr, cfg->beta1, cfg->beta2, cfg->eps, cfg->wd, t);
        ops->adamw(s3, p3, gt, m3, v3, NELEM, cfg->lr, cfg->beta1, cfg->beta2, cfg->eps, cfg->wd, t);
        double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
        for (int i = 0; i < NELEM; i++) {
            double gi = gt[i];
            md[i] = b1 * md[i] + (1.0 - b1) * gi;
            vd[i] = b2 * vd[i] + (1.0 - b2) * gi * gi;
            double mhat = md[i] / bc1, vhat = vd[i] / bc2;
            pd[i] -= lr * (mhat / (sqrt(vhat) + eps) + wd * pd[i]);

            double ep = fabs((double)p[i] - pd[i]) / fabs(pd[i]);
            double em = fabs((double)m[i] - md[i]) / (fabs(md[i]) + gmax);
            double ev = fabs((double)v[i] - vd[i]) / (fabs(vd[i]) + gmax * gmax);
            worst_p = fmax(worst_p, ep);
            if (!(ep <= TOL && em <= TOL && ev <= TOL)) {
                ok = 0;
                CHECK(0,
                      "%s step %d elem %d: p %.9g want %.9g (rel %.3g), m %.9g want %.9g (%.3g), "
                      "v %.9g want %.9g (%.3g)",
                      cfg->name, t, i, (double)p[i], pd[i], ep, (double)m[i], md[i], em, (double)v[i], vd[i],
                      ev);
            }
        }
    }
    if (ok) printf("ok adamw %s: 5 steps match the closed form (max rel err of p %.2e, tol %.0e)\n", cfg->name,
                   worst_p, TOL);

    /* Sanity of the reference itself: the parameters moved by much more than
     * the tolerance, so the comparison is not vacuous. */
    double moved = 0.0;
    for (int i = 0; i < NELEM; i++) moved = fmax(moved, fabs(pd[i] - p0[i]) / fabs(p0[i]));
    CHECK(moved > 1000 * TOL, "%s: parameters moved only %.3g (relative); the test is too weak", cfg->name,
          moved);

    int same = memcmp(p, p3, sizeof p) == 0 && memcmp(m, m3, sizeof m) == 0 && memcmp(v, v3, sizeof v) == 0;
    CHECK(same, "%s: 1 and 3 threads give different bits", cfg->name);
    if (same) printf("ok adamw %s: same bits with 1 and 3 threads\n", cfg->name);
}

/* ops->sgd against torch.optim.SGD's rule (dampening 0) in double, 5 steps:
 *   d = g + wd p;  m = momentum m + d;  p -= lr (nesterov ? d + momentum m : m)
 * with |p_f - p_d| <= 1e-6 (|p_d| + 1) and |m_f - m_d| <= 1e-6 (|m_d| + max|g|),
 * and the same bits with 1 and 3 threads. */
static void run_sgd(const zt_ops *ops, zt_stream *s, zt_stream *s3, float lr, float momentum, int nesterov, float wd) {
    float p[NELEM], m[NELEM], p3[NELEM], m3[NELEM], g[NELEM];
    double pd[NELEM], md[NELEM];
    for (int i = 0; i < NELEM; i++) {
        p[i] = p3[i] = rng_uniform(0.5f, 1.5f) * (i % 2 ? -1.0f : 1.0f);
        m[i] = m3[i] = 0.0f;
        pd[i] = p[i], md[i] = 0.0;
    }
    double worst_p = 0.0, worst_m = 0.0;
    for (int t = 0; t < NSTEPS; t++) {
        for (int i = 0; i < NELEM; i++) g[i] = i == 0 ? 0.0f : rng_uniform(-1.0f, 1.0f);
        ops->sgd(s, p, g, m, NELEM, lr, momentum, nesterov, wd);
        ops->sgd(s3, p3, g, m3, NELEM, lr, momentum, nesterov, wd);
        for (int i = 0; i < NELEM; i++) {
            double d = (double)g[i] + (double)wd * pd[i];
            md[i] = (double)momentum * md[i] + d;
            pd[i] -= (double)lr * (nesterov ? d + (double)momentum * md[i] : md[i]);
            worst_p = fmax(worst_p, fabs((double)p[i] - pd[i]) / (fabs(pd[i]) + 1.0));
            worst_m = fmax(worst_m, fabs((double)m[i] - md[i]) / (fabs(md[i]) + 1.0));
        }
    }
    CHECK(worst_p <= TOL && worst_m <= TOL, "sgd momentum %g nesterov %d wd %g: p err %.2e, m err %.2e", momentum,
          nesterov, wd, worst_p, worst_m);
    CHECK(memcmp(p, p3, sizeof p) == 0 && memcmp(m, m3, sizeof m) == 0, "sgd: 1 and 3 threads give different bits");
    printf("ok sgd momentum %g nesterov %d wd %g: 5 steps within %.1e of double (p %.2e, m %.2e)\n", momentum,
           nesterov, wd, TOL, worst_p, worst_m);
}

int main(void) {
    rng_state = 0x13198A2E03707344ull; /* this test's own stream */
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

    static const config configs[] = {
        {"wd=0", 1e-2f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f},
        {"wd=0.1", 1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, 1.0f},
        {"wd=0.1 b2=0.95", 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f},
        /* eps comparable to sqrt(vhat): eps inside the sqrt would be caught */
        {"wd=0.1 eps=1e-3 small grads", 1e-2f, 0.9f, 0.999f, 1e-3f, 0.1f, 2e-3f},
    };
    for (size_t k = 0; k < sizeof configs / sizeof configs[0]; k++) run_config(ops, &s, &s3, &configs[k]);
    run_sgd(ops, &s, &s3, 0.1f, 0.9f, 0, 0.0f);
    run_sgd(ops, &s, &s3, 0.1f, 0.9f, 1, 0.01f);
    run_sgd(ops, &s, &s3, 0.05f, 0.0f, 0, 0.1f); /* no momentum: plain SGD with L2 decay */

    /* The first step of Adam moves every parameter with a nonzero gradient by
     * lr * sign(g) (mhat = g, vhat = g^2), up to eps: an easy closed form. */
    {
        float p[4] = {1.0f, -1.0f, 2.0f, 0.5f}, g[4] = {0.3f, -2.0f, -1e-3f, 5.0f}, m[4] = {0}, v[4] = {0};
        ops->adamw(&s, p, g, m, v, 4, 0.1f, 0.9f, 0.999f, 1e-12f, 0.0f, 1);
        const float want[4] = {0.9f, -0.9f, 2.1f, 0.4f};
        int ok = 1;
        for (int i = 0; i < 4; i++)
            if (!(fabs((double)p[i] - (double)want[i]) <= 1e-6)) {
                ok = 0;
                CHECK(0, "first step: p[%d] = %.9g, want %.9g (p - lr*sign(g))", i, (double)p[i],
                      (double)want[i]);
            }
        if (ok) printf("ok adamw first step moves by lr*sign(g)\n");
    }

    /* n = 0 touches nothing. */
    {
        float sentinel = 42.0f;
        ops->adamw(&s, &sentinel, &sentinel, &sentinel, &sentinel, 0, 0.1f, 0.9f, 0.999f, 1e-8f, 0.1f, 1);
        CHECK(sentinel == 42.0f, "adamw with n = 0 modified memory (%.9g)", (double)sentinel);
        if (sentinel == 42.0f) printf("ok adamw n=0 is a no-op\n");
    }

    zt_backend_destroy(be);
    if (g_failures) printf("%d failed\n", g_failures);
    return g_failures ? 1 : 0;
}
