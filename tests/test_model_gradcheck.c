/* Whole-model gradient check of the toy GPT (examples/gpt/) through the
 * engine API, on the CPU backend with one thread, at world size 1, stage 0.
 *
 * 1. fp32 finite differences. A tiny model (2 layers, d_model 8, 2 heads,
 *    seq_len 5, vocab 11, micro-batch 2; untied and tied LM head; and untied
 *    with --attention fused) has every
 *    parameter overwritten after zt_engine_init with random values of scale
 *    0.3 (LayerNorm weights 1 +- 0.3), so no gradient is trivially zero and
 *    every nonlinearity is exercised away from its initial regime. The
 *    analytic gradient is zt_engine_zero_grads + zt_gpt_forward (mean loss) +
 *    zt_gpt_backward(dloss = 1/(B*T)), read from eng.units[u].grads. The
 *    numeric gradient of EVERY parameter of every unit is the central
 *    difference (L(p+h) - L(p-h)) / (2h) of the mean loss that zt_gpt_forward
 *    returns (an fp32 value), with h = H.
 *
 *    Error metric, per named parameter (e.g. "block1.qkv_w"):
 *      err = max_i |a_i - n_i| / max( max_i (|a_i| + |n_i|), FLOOR * gmax )
 *    where gmax = max |n| over the whole model; the check requires
 *    err < GRAD_TOL = 1e-2 (FLOOR = 1e-2, H = 1e-2). The numeric gradient
 *    carries an absolute noise of about
 *    (fp32 rounding of the loss ~ 2.5e-7) / (2h) ~ 1e-5 plus an O(h^2)
 *    truncation term; FLOOR keeps a parameter whose whole gradient is at
 *    that noise level from failing on noise alone. Each measured error is
 *    printed with its "ok" line; at this model they are 1e-5 .. 1e-3, an
 *    order of magnitude or more below GRAD_TOL.
 *
 *    The key biases (qkv_b entries [C, 2C)) have a gradient that is zero in
 *    exact arithmetic (a bias on every key of a query shifts all its scores
 *    by the same amount, and the softmax does not see it): their analytic
 *    gradient must be below KEY_BIAS_TOL * gmax.
 *
 *    Self-check (so the test can fail): the same metric on the analytic
 *    gradient scaled by 1.2 must FAIL for every named parameter (its error is
 *    about 0.2 / 2.2 = 0.09 at the largest entry), and so must a gradient
 *    whose entries are shifted by one position within each parameter.
 *
 * 2. bf16 and fp16. The same model with dtype ZT_BF16 or ZT_FP16 computes
 *    in that dtype (activations, gathered units, kernels; fp32 sums): master
 *    = the perturbed values, params = dtype(master); an fp32 engine gets
 *    params = dtype(master) as fp32, so both start from the same weights.
 *    The gradients come through the reduction at world size 1 (begin_micro
 *    on the last micro-batch, sync_grads), as zt-train runs it, and fp16's
 *    loss is scaled by the engine's loss scale and its gradients unscaled.
 *    Checks, with the 16-bit error of a whole forward and backward in this
 *    model stated per dtype (HALF_LOSS_REL, HALF_GRAD_REL; measured values
 *    are printed): |l16 - l32| <= HALF_LOSS_REL |l32|; per named parameter
 *    max |g16 - g32| <= HALF_GRAD_REL max |g32|; zt_engine_step runs,
 *    params == dtype(master) after it, the grad norms agree to
 *    HALF_GRAD_REL, every master parameter with a gradient moved, and the
 *    masters after the step agree with the fp32 parameters to 2.1 lr (AdamW
 *    moves each by about lr, in the direction of its gradient's sign, which
 *    16-bit noise can flip where the gradient is near 0). Nothing is held in
 *    the workspace after backward or the step; a second forward/backward
 *    after the step still runs. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "gpt.h"
#include "zt_ctx.h"
#include "zt_dtype.h"
#include "zt_engine.h"
#include "test_comm.h"

/* Tolerances (see above). */
#define H 1e-2f
#define GRAD_TOL 1e-2
#define FLOOR 1e-2
#define SCALED 1.2f
#define KEY_BIAS_TOL 1e-5
/* 16-bit compute against fp32 on this model (bf16 has 8 significant bits,
 * fp16 11): the loss, and each parameter's gradient relative to its largest
 * entry. Measured: bf16 loss 5e-4 .. 8e-4, gradients up to 2.0e-2; fp16
 * loss 2e-5 .. 6e-5, gradients up to 1.7e-3. */
#define BF16_LOSS_REL 4e-3
#define BF16_GRAD_REL 5e-2
#define FP16_LOSS_REL 5e-4
#define FP16_GRAD_REL 8e-3



/* Stops the test on a runtime error: nothing after it would be meaningful. */
/* ---- deterministic random numbers (own generator, fixed seed) ----------- */

static uint64_t g_rng = 0x5EEDC0FFEE123457ull;
static uint64_t rnd_u64(void) {
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 31)) * 0x7FB5D329728EA185ull;
    z = (z ^ (z >> 27)) * 0x81DADEF4BC2DD44Dull;
    return z ^ (z >> 33);
}
static float rnd_sym(float scale) { /* uniform in [-scale, scale) */
    return scale * (2.0f * (float)((double)(rnd_u64() >> 40) / 16777216.0) - 1.0f);
}
static int rnd_int(int n) { return (int)(rnd_u64() % (uint64_t)n); }

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        printf("FAIL: calloc(%zu, %zu)\n", n, size);
        exit(1);
    }
    return p;
}

/* ---- model setup -------------------------------------------------------- */

static zt_gpt_config tiny_config(int tied) {
    zt_gpt_config c;
    memset(&c, 0, sizeof c);
    c.layers = 2;
    c.d_model = 8;
    c.heads = 2;
    c.seq_len = 5;
    c.vocab = 11;
    c.micro_batch = 2;
    c.tied = tied;
    c.seed = 1234;
    return c;
}

static int is_layernorm_weight(const char *name) {
    return strcmp(name, "ln1_w") == 0 || strcmp(name, "ln2_w") == 0 || strcmp(name, "lnf_w") == 0;
}

/* Random values for every parameter: [model total_numel] floats, units in
 * order, parameters at their offsets. LayerNorm weights 1 +- 0.3, the rest
 * +- 0.3. */
static float *random_params(const zt_model_spec *spec) {
    float *v = xcalloc(spec->total_numel, sizeof(float));
    size_t base = 0;
    for (int u = 0; u < spec->nunits; u++) {
        const zt_unit_spec *us = &spec->units[u];
        for (int p = 0; p < us->nparams; p++) {
            const zt_param_spec *ps = &us->params[p];
            float centre = is_layernorm_weight(ps->name) ? 1.0f : 0.0f;
            for (size_t i = 0; i < ps->numel; i++) v[base + ps->offset + i] = centre + rnd_sym(0.3f);
        }
        base += us->numel;
    }
    return v;
}

/* Writes vals (units in order) into the engine: fp32 params, or for bf16 the
 * fp32 master and params = bf16(master). */
static void load_params(zt_engine *eng, const float *vals) {
    size_t base = 0;
    for (int u = 0; u < eng->spec->nunits; u++) {
        const zt_unit_spec *us = &eng->spec->units[u];
        zt_unit_state *st = &eng->units[u];
        for (size_t i = 0; i < us->numel; i++) {
            float x = vals[base + i];
            if (eng->cfg.dtype == ZT_FP32) {
                zt_f32(&st->params)[i] = x;
            } else {
                zt_f32(&st->master)[i] = x;
                zt_dtype_store(st->params.data, eng->cfg.dtype, i, x);
            }
        }
        base += us->numel;
    }
}

/* The gradients as fp32, units in order. */
static void read_grads(const zt_engine *eng, float *out) {
    size_t base = 0;
    for (int u = 0; u < eng->spec->nunits; u++) {
        const zt_unit_spec *us = &eng->spec->units[u];
        const zt_unit_state *st = &eng->units[u];
        /* fp16's are scaled by the loss scale (a power of two: exact) */
        for (size_t i = 0; i < us->numel; i++)
            out[base + i] = (float)(zt_dtype_load(st->grads.data, eng->cfg.dtype, i) / eng->scaler.scale);
        base += us->numel;
    }
}

typedef struct {
    zt_ctx ctx;
    zt_gpt gpt;
    zt_engine eng;
} model;

static void model_open(model *m, const zt_gpt_config *gc, zt_dtype dtype) {
    memset(m, 0, sizeof *m);
    MUST(zt_ctx_init(&m->ctx, ZT_DEVICE_CPU, 1, 0, 0, 1, 1), &m->ctx);
    MUST(zt_gpt_create(&m->gpt, gc, &m->ctx.err), &m->ctx);
    zt_spec_layout(m->gpt.dec.spec, 1);
    zt_engine_config ec = {.stage = 0, .dtype = dtype, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                           .weight_decay = 0.1f, .grad_clip = 0.0f};
    MUST(zt_engine_init(&m->eng, &m->ctx, test_comm(), m->gpt.dec.spec, &ec, zt_gpt_init_param, &m->gpt), &m->ctx);
}

static void model_close(model *m) {
    zt_gpt_free_activations(&m->gpt, &m->eng);
    zt_engine_destroy(&m->eng);
    CHECK(m->ctx.device_mem.allocated.current == 0, "%zu bytes still allocated after teardown",
          m->ctx.device_mem.allocated.current);
    zt_gpt_destroy(&m->gpt);
    zt_ctx_destroy(&m->ctx);
}

/* Mean loss of a forward pass only (activations freed afterwards). */
static float eval_loss(model *m, const int32_t *tok, const int32_t *tgt, int B, int T) {
    float loss = NAN;
    MUST(zt_gpt_forward(&m->gpt, &m->eng, tok, tgt, B, T, &loss), &m->ctx);
    zt_gpt_free_activations(&m->gpt, &m->eng);
    return loss;
}

/* Analytic gradient into out (units in order); returns the loss. */
static float analytic_grads(model *m, const int32_t *tok, const int32_t *tgt, int B, int T, float *out) {
    float loss = NAN;
    MUST(zt_engine_zero_grads(&m->eng), &m->ctx);
    zt_engine_begin_micro(&m->eng, 1);
    MUST(zt_gpt_forward(&m->gpt, &m->eng, tok, tgt, B, T, &loss), &m->ctx);
    MUST(zt_gpt_backward(&m->gpt, &m->eng, (float)m->eng.scaler.scale / ((float)B * (float)T)), &m->ctx);
    MUST(zt_engine_sync_grads(&m->eng), &m->ctx);
    read_grads(&m->eng, out);
    return loss;
}

/* ---- the error metric --------------------------------------------------- */

/* err over n entries of a (analytic) and num (numeric), a scaled by `scale`
 * and optionally shifted by one position (a[(i+1) % n]). */
static double grad_error(const float *a, const float *num, size_t n, float scale, int shift, double floor_abs) {
    double maxdiff = 0.0, maxmag = 0.0;
    for (size_t i = 0; i < n; i++) {
        double ai = (double)scale * a[shift ? (i + 1) % n : i], ni = num[i];
        double d = fabs(ai - ni), mg = fabs(ai) + fabs(ni);
        if (d > maxdiff) maxdiff = d;
        if (mg > maxmag) maxmag = mg;
    }
    return maxdiff / (maxmag > floor_abs ? maxmag : floor_abs);
}

/* ---- 1. fp32 finite differences ---------------------------------------- */

static void test_fp32_gradcheck(int tied, int attention_fused) {
    zt_gpt_config gc = tiny_config(tied);
    gc.attention_fused = attention_fused;
    printf("-- fp32 gradcheck, %s LM head, %s attention\n", tied ? "tied" : "untied",
           attention_fused ? "fused" : "materialized");
    model m;
    model_open(&m, &gc, ZT_FP32);
    const zt_model_spec *spec = m.gpt.dec.spec;
    size_t P = spec->total_numel;
    CHECK(spec->total_padded_numel == P, "world size 1 must not pad (%zu vs %zu)", spec->total_padded_numel, P);

    int B = gc.micro_batch, T = gc.seq_len;
    int32_t tok[64], tgt[64];
    for (int i = 0; i < B * T; i++) {
        tok[i] = rnd_int(gc.vocab);
        tgt[i] = rnd_int(gc.vocab);
    }
    float *vals = random_params(spec);
    load_params(&m.eng, vals);

    float *ana = xcalloc(P, sizeof(float)), *num = xcalloc(P, sizeof(float));
    float loss0 = analytic_grads(&m, tok, tgt, B, T, ana);
    CHECK(isfinite(loss0) && loss0 > 0.0f, "loss %g", (double)loss0);
    CHECK(m.ctx.device_mem.by_category[ZT_CAT_ACTIVATIONS].current == 0, "activations held after backward");
    /* The loss at the loaded parameters does not depend on the backward having run. */
    float loss_again = eval_loss(&m, tok, tgt, B, T);
    CHECK(loss_again == loss0, "forward is not repeatable: %.9g then %.9g", (double)loss0, (double)loss_again);

    /* Numeric gradient of every parameter, perturbed in place in params. */
    size_t base = 0;
    for (int u = 0; u < spec->nunits; u++) {
        float *p = zt_f32(&m.eng.units[u].params);
        for (size_t i = 0; i < spec->units[u].numel; i++) {
            float saved = p[i];
            p[i] = saved + H;
            float lp = eval_loss(&m, tok, tgt, B, T);
            p[i] = saved - H;
            float lm = eval_loss(&m, tok, tgt, B, T);
            p[i] = saved;
            /* The step actually taken, as stored in fp32. */
            double step = (double)(saved + H) - (double)(saved - H);
            num[base + i] = (float)(((double)lp - (double)lm) / step);
        }
        base += spec->units[u].numel;
    }

    double gmax = 0.0;
    for (size_t i = 0; i < P; i++) gmax = fmax(gmax, fabs((double)num[i]));
    double floor_abs = FLOOR * gmax;
    CHECK(gmax > 0.0, "numeric gradient is all zero");

    /* Key biases: zero gradient. */
    double key_bias_max = 0.0;
    for (int l = 0; l < gc.layers; l++) {
        int u = m.gpt.dec.first_block + l;
        size_t ub = 0;
        for (int v = 0; v < u; v++) ub += spec->units[v].numel;
        const zt_param_spec *qb = &spec->units[u].params[GPT_QKV_B];
        double kmax = 0.0;
        for (int c = gc.d_model; c < 2 * gc.d_model; c++)
            kmax = fmax(kmax, fabs((double)ana[ub + qb->offset + (size_t)c]));
        key_bias_max = fmax(key_bias_max, kmax);
        CHECK(kmax <= KEY_BIAS_TOL * gmax, "block%d key bias gradient %.3e is not ~0 (max grad %.3e)", l, kmax, gmax);
    }

    size_t checked = 0;
    int named = 0;
    base = 0;
    for (int u = 0; u < spec->nunits; u++) {
        const zt_unit_spec *us = &spec->units[u];
        for (int k = 0; k < us->nparams; k++) {
            const zt_param_spec *ps = &us->params[k];
            const float *a = ana + base + ps->offset, *n = num + base + ps->offset;
            double amax = 0.0;
            for (size_t i = 0; i < ps->numel; i++) amax = fmax(amax, fabs((double)a[i]));
            double err = grad_error(a, n, ps->numel, 1.0f, 0, floor_abs);
            double err_scaled = grad_error(a, n, ps->numel, SCALED, 0, floor_abs);
            double err_shift = ps->numel > 1 ? grad_error(a, n, ps->numel, 1.0f, 1, floor_abs) : 1.0;
            char name[80];
            snprintf(name, sizeof name, "%s.%s", us->name, ps->name);
            CHECK(amax > floor_abs, "%s (tied=%d): gradient max %.3e is below the floor %.3e", name, tied, amax,
                  floor_abs);
            CHECK(err < GRAD_TOL, "%s (tied=%d): gradient error %.3e >= %.1e", name, tied, err, GRAD_TOL);
            CHECK(err_scaled >= GRAD_TOL, "%s (tied=%d): the check accepts a gradient scaled by %.1f (err %.3e)",
                  name, tied, (double)SCALED, err_scaled);
            CHECK(err_shift >= GRAD_TOL, "%s (tied=%d): the check accepts a shifted gradient (err %.3e)", name,
                  tied, err_shift);
            printf("ok tied=%d %-20s %5zu entries  max|g| %.3e  err %.2e  (x%.1f: %.2e, shifted: %.2e)\n", tied,
                   name, ps->numel, amax, err, (double)SCALED, err_scaled, err_shift);
            checked += ps->numel;
            named++;
        }
        base += us->numel;
    }
    CHECK(checked == P, "checked %zu of %zu parameters", checked, P);
    printf("ok tied=%d: %zu parameters in %d named tensors, loss %.6f, max |grad| %.3e, floor %.3e, "
           "key-bias max |grad| %.2e\n",
           tied, checked, named, (double)loss0, gmax, floor_abs, key_bias_max);

    free(ana);
    free(num);
    free(vals);
    model_close(&m);
}

/* ---- 2. bf16 and fp16 against fp32 --------------------------------------- */

static void test_half(zt_dtype dtype, int tied) {
    const char *dn = zt_dtype_name(dtype);
    double loss_rel = dtype == ZT_BF16 ? BF16_LOSS_REL : FP16_LOSS_REL;
    double grad_rel = dtype == ZT_BF16 ? BF16_GRAD_REL : FP16_GRAD_REL;
    zt_gpt_config gc = tiny_config(tied);
    model m32, m16;
    model_open(&m32, &gc, ZT_FP32);
    model_open(&m16, &gc, dtype);
    const zt_model_spec *spec = m32.gpt.dec.spec;
    size_t P = spec->total_numel;
    CHECK(m16.gpt.dec.spec->total_numel == P, "specs differ");
    CHECK(m16.eng.compute_dtype == dtype, "%s: the CPU computes in %s", dn, zt_dtype_name(m16.eng.compute_dtype));

    int B = gc.micro_batch, T = gc.seq_len - 1; /* a shorter window than seq_len */
    int32_t tok[64], tgt[64];
    for (int i = 0; i < B * T; i++) {
        tok[i] = rnd_int(gc.vocab);
        tgt[i] = rnd_int(gc.vocab);
    }
    float *vals = random_params(spec);
    float *rounded = xcalloc(P, sizeof(float));
    for (size_t i = 0; i < P; i++) {
        uint16_t h;
        zt_dtype_store(&h, dtype, 0, vals[i]);
        rounded[i] = zt_dtype_load(&h, dtype, 0);
    }
    load_params(&m16.eng, vals);     /* master = vals, params = dtype(vals) */
    load_params(&m32.eng, rounded); /* the weights the 16-bit model computes with */

    float *g32 = xcalloc(P, sizeof(float)), *g16 = xcalloc(P, sizeof(float));
    float l32 = analytic_grads(&m32, tok, tgt, B, T, g32);
    float l16 = analytic_grads(&m16, tok, tgt, B, T, g16);
    double loss_err = fabs((double)l16 - (double)l32) / fabs((double)l32);
    CHECK(isfinite(l16) && loss_err <= loss_rel, "%s loss %.9g vs fp32 loss %.9g", dn, (double)l16, (double)l32);
    CHECK(m16.ctx.device_mem.by_category[ZT_CAT_WORKSPACE].current == 0, "%s workspace held after backward", dn);

    size_t base = 0;
    double worst = 0.0;
    for (int u = 0; u < spec->nunits; u++) {
        const zt_unit_spec *us = &spec->units[u];
        for (int k = 0; k < us->nparams; k++) {
            const zt_param_spec *ps = &us->params[k];
            const float *a = g32 + base + ps->offset, *b = g16 + base + ps->offset;
            double amax = 0.0, dmax = 0.0;
            for (size_t i = 0; i < ps->numel; i++) {
                amax = fmax(amax, fabs((double)a[i]));
                dmax = fmax(dmax, fabs((double)b[i] - (double)a[i]));
            }
            CHECK(amax > 0.0, "%s.%s: fp32 gradient is zero", us->name, ps->name);
            /* the key biases' gradients are 0 up to rounding (see part 1) */
            int key_bias = k == GPT_QKV_B;
            CHECK(key_bias || dmax <= grad_rel * amax, "%s.%s (%s, tied=%d): max |g16 - g32| %.3e > %.0e * %.3e",
                  us->name, ps->name, dn, tied, dmax, grad_rel, amax);
            if (!key_bias) worst = fmax(worst, dmax / amax);
        }
        base += us->numel;
    }

    /* One optimizer step on both. */
    float lr = 1e-2f;
    zt_mem_set_phase(&m32.ctx.device_mem, ZT_PHASE_OPTIMIZER);
    zt_mem_set_phase(&m16.ctx.device_mem, ZT_PHASE_OPTIMIZER);
    MUST(zt_engine_step(&m32.eng, lr), &m32.ctx);
    MUST(zt_engine_step(&m16.eng, lr), &m16.ctx);
    CHECK(m16.eng.steps_taken == 1 && m32.eng.steps_taken == 1, "steps_taken %d / %d", m16.eng.steps_taken,
          m32.eng.steps_taken);
    double n16 = m16.eng.last_grad_norm, n32 = m32.eng.last_grad_norm;
    CHECK(n32 > 0.0 && fabs(n16 - n32) <= grad_rel * n32, "grad norm %s %.6g vs fp32 %.6g", dn, n16, n32);
    size_t not_rounded = 0, unmoved = 0;
    double step_diff = 0.0;
    base = 0;
    for (int u = 0; u < spec->nunits; u++) {
        const zt_unit_state *s16 = &m16.eng.units[u], *s32 = &m32.eng.units[u];
        for (size_t i = 0; i < spec->units[u].numel; i++) {
            float master = zt_f32(&s16->master)[i];
            uint16_t want;
            zt_dtype_store(&want, dtype, 0, master);
            if (((const uint16_t *)s16->params.data)[i] != want) not_rounded++;
            /* A parameter with a zero gradient and no decay has nothing to move it: the key
             * biases (see test_fp32_gradcheck). */
            if (master == vals[base + i] && fabs((double)g32[base + i]) > 1e-6 * n32) unmoved++;
            step_diff = fmax(step_diff, fabs((double)master - (double)vals[base + i] -
                                             ((double)zt_f32(&s32->params)[i] - (double)rounded[base + i])));
        }
        base += spec->units[u].numel;
    }
    CHECK(not_rounded == 0, "%zu %s params differ from %s(master) after the step", not_rounded, dn, dn);
    CHECK(unmoved == 0, "%zu master params did not move in the step", unmoved);
    CHECK(step_diff <= 2.1 * lr, "%s and fp32 updates differ by %.3e (> 2.1 lr)", dn, step_diff);
    CHECK(m16.ctx.device_mem.by_category[ZT_CAT_WORKSPACE].current == 0, "%s workspace held after the step", dn);

    /* A second forward/backward after the step still runs and stays finite. */
    float l2 = analytic_grads(&m16, tok, tgt, B, T, g16);
    CHECK(isfinite(l2), "%s loss after the step %g", dn, (double)l2);
    printf("ok %s tied=%d: loss %.6f (fp32 %.6f, rel %.1e), worst gradient error %.2e of its max, grad norm %.6g "
           "(fp32 %.6g), loss after step %.6f\n",
           dn, tied, (double)l16, (double)l32, loss_err, worst, n16, n32, (double)l2);

    free(g32);
    free(g16);
    free(vals);
    free(rounded);
    model_close(&m16);
    model_close(&m32);
}

int main(void) {
    test_fp32_gradcheck(0, 0);
    test_fp32_gradcheck(1, 0);
    test_fp32_gradcheck(0, 1); /* --attention fused: probabilities recomputed from lse */
    test_half(ZT_BF16, 0);
    test_half(ZT_BF16, 1);
    test_half(ZT_FP16, 0);
    test_half(ZT_FP16, 1);
    printf("%ld checks, %d failed\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
