/* Whole-model gradient check of the Llama family (examples/llama/llama.c)
 * through the engine, on the CPU backend with one thread, at world size 1,
 * stage 0: the same checks tests/test_model_gradcheck.c makes of the GPT.
 *
 * 1. fp32 finite differences. A tiny model (2 layers, d_model 16, 4 query
 *    heads of dimension 4, ffn_dim 24, seq_len 5, vocab 11, micro-batch 2)
 *    in four shapes: grouped-query attention (kv_heads 2) with an untied
 *    and with a tied head, plain multi-head attention (kv_heads 4, where
 *    nothing is expanded) and multi-query attention (kv_heads 1) with fused
 *    attention. After zt_engine_init every parameter is overwritten with
 *    random values of scale 0.3 (RMSNorm weights 1 +- 0.3), so that no
 *    gradient is trivially zero and the rotary embedding, SwiGLU and the
 *    norms all run away from their initial regime. The analytic gradient is
 *    zero_grads + forward (mean loss) + backward(dloss = 1/(B*T)) + the
 *    reduction at world size 1, read from eng.units[u].grads; the numeric
 *    one of EVERY parameter is the central difference
 *    (L(p+h) - L(p-h)) / (2h) of the fp32 mean loss, h = H.
 *
 *    Error metric, per named parameter (e.g. "block1.qkv_w"), the GPT's:
 *      err = max_i |a_i - n_i| / max( max_i (|a_i| + |n_i|), FLOOR * gmax )
 *    with gmax = max |n| over the whole model; err < GRAD_TOL is required.
 *    The numeric gradient carries about (fp32 rounding of the loss) / (2h)
 *    ~ 1e-5 of noise plus an O(h^2) truncation term; FLOOR keeps a tensor
 *    whose whole gradient sits at that noise from failing on noise alone,
 *    and every tensor's largest gradient must clear the floor, so none is
 *    checked against noise only. Measured errors are printed on each "ok".
 *
 *    Negative twin (so the check can fail): the analytic gradient scaled by
 *    SCALED, and the analytic gradient shifted by one position within each
 *    tensor, must both be rejected for every named parameter.
 *
 * 2. bf16 and fp16 against fp32, as the GPT's test: the 16-bit engine's
 *    master holds the random values and its params their rounding; an fp32
 *    engine holds the rounded values, so both compute with the same
 *    weights. The loss and every tensor's gradient agree within the
 *    dtype's stated error; after one AdamW step the params are
 *    dtype(master), every parameter with a gradient moved, and the two
 *    updates agree to 2.1 lr (16-bit noise can flip the sign of a near-zero
 *    gradient, and AdamW moves each parameter by about lr). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"
#include "test_comm.h"
#include "test_util.h"
#include "zt_ctx.h"
#include "zt_dtype.h"
#include "zt_engine.h"

#define H 1e-2f
#define GRAD_TOL 1e-2
#define FLOOR 1e-2
#define SCALED 1.2f
/* 16-bit compute against fp32 on this model: the loss's relative error and
 * each tensor's largest gradient error relative to its largest entry
 * (bf16 keeps 8 significant bits, fp16 11). Measured: bf16 loss 4e-4 ..
 * 8e-4, gradients up to 1.6e-2; fp16 loss 1e-5 .. 1.2e-4, gradients up to
 * 3.6e-3. fp32's worst finite-difference error is 1.1e-3 (tied head). */
#define BF16_LOSS_REL 4e-3
#define BF16_GRAD_REL 6e-2
#define FP16_LOSS_REL 5e-4
#define FP16_GRAD_REL 1e-2

/* A runtime error ends the test: nothing after it would mean anything. */
/* ---- the model and its engine ------------------------------------------- */

typedef struct {
    int tied, kv_heads, attention_fused;
} shape;

static zt_model_settings tiny_settings(shape sh) {
    zt_model_settings s;
    memset(&s, 0, sizeof s);
    s.layers = 2;
    s.d_model = 16;
    s.heads = 4;
    s.kv_heads = sh.kv_heads;
    s.ffn_dim = 24;
    s.seq_len = 5;
    s.vocab = 11;
    s.micro_batch = 2;
    s.tied = sh.tied;
    s.norm_eps = 1e-5;
    s.rope_theta = 10000.0;
    s.seed = 1234;
    s.attention_fused = sh.attention_fused;
    return s;
}

typedef struct {
    zt_ctx ctx;
    zt_llama llama;
    zt_engine eng;
} model;

static void model_open(model *m, shape sh, zt_dtype dtype) {
    memset(m, 0, sizeof *m);
    zt_model_settings s = tiny_settings(sh);
    MUST(zt_ctx_init(&m->ctx, ZT_DEVICE_CPU, 1, 0, 0, 1, 1), &m->ctx);
    MUST(zt_llama_resolve(&s, &m->ctx.err), &m->ctx);
    MUST(zt_llama_create(&m->llama, &s, &m->ctx.err), &m->ctx);
    zt_spec_layout(m->llama.dec.spec, 1);
    zt_engine_config ec = {.stage = 0, .dtype = dtype, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                           .weight_decay = 0.1f, .grad_clip = 0.0f};
    MUST(zt_engine_init(&m->eng, &m->ctx, test_comm(), m->llama.dec.spec, &ec, zt_llama_init_param, &m->llama),
         &m->ctx);
}

static void model_close(model *m) {
    zt_decoder_free_activations(&m->llama.dec, &m->eng);
    zt_engine_destroy(&m->eng);
    CHECK(m->ctx.device_mem.allocated.current == 0, "%zu bytes still allocated after teardown",
          m->ctx.device_mem.allocated.current);
    zt_llama_destroy(&m->llama);
    zt_ctx_destroy(&m->ctx);
}

static int is_norm_weight(const char *name) {
    return strcmp(name, "attn_norm_w") == 0 || strcmp(name, "mlp_norm_w") == 0 || strcmp(name, "norm_w") == 0;
}

/* Random values for every parameter [total_numel], units in order: RMSNorm
 * weights 1 +- 0.3, the rest +- 0.3. */
static float *random_values(const zt_model_spec *spec) {
    float *v = xmalloc(spec->total_numel * sizeof(float));
    float *unit = v;
    for (int u = 0; u < spec->nunits; u++) {
        const zt_unit_spec *usp = &spec->units[u];
        for (int k = 0; k < usp->nparams; k++) {
            const zt_param_spec *ps = &usp->params[k];
            float centre = is_norm_weight(ps->name) ? 1.0f : 0.0f;
            for (size_t i = 0; i < ps->numel; i++) unit[ps->offset + i] = centre + rng_uniform(-0.3f, 0.3f);
        }
        unit += usp->numel;
    }
    return v;
}

/* vals (units in order) into the engine: the fp32 params, or a 16-bit
 * engine's fp32 master with params = dtype(master). */
static void set_values(zt_engine *eng, const float *vals) {
    for (int u = 0; u < eng->spec->nunits; u++) {
        zt_unit_state *ust = &eng->units[u];
        for (size_t i = 0; i < eng->spec->units[u].numel; i++) {
            if (eng->cfg.dtype == ZT_FP32) {
                zt_f32(&ust->params)[i] = vals[i];
            } else {
                zt_f32(&ust->master)[i] = vals[i];
                zt_dtype_store(ust->params.data, eng->cfg.dtype, i, vals[i]);
            }
        }
        vals += eng->spec->units[u].numel;
    }
}

/* The loss of a forward pass alone (its activations freed). */
static float loss_at(model *m, const int32_t *tok, const int32_t *tgt, int B, int T) {
    float loss = NAN;
    MUST(zt_decoder_forward(&m->llama.dec, &m->eng, tok, tgt, B, T, &loss), &m->ctx);
    zt_decoder_free_activations(&m->llama.dec, &m->eng);
    return loss;
}

/* The analytic gradient, as fp32, units in order into out; returns the
 * loss. It runs as zt-train runs one micro-batch: the loss scaled by the
 * engine's scale (1 except fp16), the gradients reduced and unscaled (the
 * scale is a power of two, so unscaling is exact). */
static float gradients(model *m, const int32_t *tok, const int32_t *tgt, int B, int T, float *out) {
    float loss = NAN;
    double scale = m->eng.scaler.scale;
    MUST(zt_engine_zero_grads(&m->eng), &m->ctx);
    zt_engine_begin_micro(&m->eng, 1);
    MUST(zt_decoder_forward(&m->llama.dec, &m->eng, tok, tgt, B, T, &loss), &m->ctx);
    MUST(zt_decoder_backward(&m->llama.dec, &m->eng, (float)scale / ((float)B * (float)T)), &m->ctx);
    MUST(zt_engine_sync_grads(&m->eng), &m->ctx);
    for (int u = 0; u < m->eng.spec->nunits; u++) {
        const zt_unit_state *ust = &m->eng.units[u];
        for (size_t i = 0; i < m->eng.spec->units[u].numel; i++)
            out[i] = (float)(zt_dtype_load(ust->grads.data, m->eng.cfg.dtype, i) / scale);
        out += m->eng.spec->units[u].numel;
    }
    return loss;
}

static void random_batch(int32_t *tok, int32_t *tgt, int n, int vocab) {
    for (int i = 0; i < n; i++) {
        tok[i] = (int32_t)(rng_next() % (uint64_t)vocab);
        tgt[i] = (int32_t)(rng_next() % (uint64_t)vocab);
    }
}

/* ---- 1. fp32 finite differences ---------------------------------------- */

/* The metric above over n entries: the analytic gradient a times `scale`,
 * read `shift` positions on (cyclically), against the numeric one. */
static double grad_error(const float *a, const float *num, size_t n, float scale, size_t shift, double floor_abs) {
    double worst = 0.0, size = 0.0;
    for (size_t i = 0; i < n; i++) {
        double ai = (double)scale * (double)a[(i + shift) % n], ni = (double)num[i];
        worst = fmax(worst, fabs(ai - ni));
        size = fmax(size, fabs(ai) + fabs(ni));
    }
    return worst / fmax(size, floor_abs);
}

/* The central difference of every parameter, perturbed in place in the
 * fp32 params; num [total_numel], units in order. */
static void numeric_gradients(model *m, const int32_t *tok, const int32_t *tgt, int B, int T, float *num) {
    for (int u = 0; u < m->eng.spec->nunits; u++) {
        float *p = zt_f32(&m->eng.units[u].params);
        for (size_t i = 0; i < m->eng.spec->units[u].numel; i++) {
            float keep = p[i], up = keep + H, down = keep - H;
            p[i] = up;
            double lp = loss_at(m, tok, tgt, B, T);
            p[i] = down;
            double lm = loss_at(m, tok, tgt, B, T);
            p[i] = keep;
            num[i] = (float)((lp - lm) / ((double)up - (double)down)); /* the step fp32 really took */
        }
        num += m->eng.spec->units[u].numel;
    }
}

static void test_fp32(shape sh) {
    printf("-- fp32 gradcheck: kv_heads %d of 4, %s head, %s attention\n", sh.kv_heads, sh.tied ? "tied" : "untied",
           sh.attention_fused ? "fused" : "materialized");
    model m;
    model_open(&m, sh, ZT_FP32);
    const zt_model_spec *spec = m.llama.dec.spec;
    const zt_model_settings *s = &m.llama.cfg;
    size_t P = spec->total_numel;
    CHECK(spec->total_padded_numel == P, "world size 1 pads: %zu of %zu", spec->total_padded_numel, P);
    CHECK(m.llama.qkv_dim == (s->heads + 2 * sh.kv_heads) * 4, "qkv rows %d for kv_heads %d", m.llama.qkv_dim,
          sh.kv_heads);
    CHECK((m.llama.p_lm_head < 0) == sh.tied, "lm_head present: %d, tied: %d", m.llama.p_lm_head >= 0, sh.tied);

    int B = s->micro_batch, T = s->seq_len;
    int32_t tok[16], tgt[16];
    random_batch(tok, tgt, B * T, s->vocab);
    float *vals = random_values(spec);
    set_values(&m.eng, vals);

    float *ana = xmalloc(P * sizeof(float)), *num = xmalloc(P * sizeof(float));
    float loss = gradients(&m, tok, tgt, B, T, ana);
    CHECK(isfinite(loss) && loss > 0.0f, "loss %g", (double)loss);
    CHECK(m.ctx.device_mem.by_category[ZT_CAT_ACTIVATIONS].current == 0, "activations held after backward");
    float again = loss_at(&m, tok, tgt, B, T);
    CHECK(again == loss, "the forward is not repeatable: %.9g, then %.9g", (double)loss, (double)again);
    numeric_gradients(&m, tok, tgt, B, T, num);

    double gmax = 0.0;
    for (size_t i = 0; i < P; i++) gmax = fmax(gmax, fabs((double)num[i]));
    CHECK(gmax > 0.0, "the numeric gradient is all zero");
    double floor_abs = FLOOR * gmax, worst = 0.0;
    size_t checked = 0, base = 0;
    int tensors = 0;
    for (int u = 0; u < spec->nunits; u++) {
        const zt_unit_spec *usp = &spec->units[u];
        for (int k = 0; k < usp->nparams; k++) {
            const zt_param_spec *ps = &usp->params[k];
            const float *a = ana + base + ps->offset, *n = num + base + ps->offset;
            double amax = 0.0;
            for (size_t i = 0; i < ps->numel; i++) amax = fmax(amax, fabs((double)a[i]));
            double err = grad_error(a, n, ps->numel, 1.0f, 0, floor_abs);
            double err_scaled = grad_error(a, n, ps->numel, SCALED, 0, floor_abs);
            double err_shifted = grad_error(a, n, ps->numel, 1.0f, 1, floor_abs);
            char name[80];
            snprintf(name, sizeof name, "%s.%s", usp->name, ps->name);
            CHECK(amax > floor_abs, "%s: largest gradient %.3e is below the floor %.3e", name, amax, floor_abs);
            CHECK(err < GRAD_TOL, "%s: gradient error %.3e >= %.0e", name, err, GRAD_TOL);
            CHECK(err_scaled >= GRAD_TOL, "%s: the check accepts the gradient scaled by %.1f (err %.3e)", name,
                  (double)SCALED, err_scaled);
            CHECK(err_shifted >= GRAD_TOL, "%s: the check accepts the gradient shifted by one (err %.3e)", name,
                  err_shifted);
            printf("ok %-18s %5zu entries  max|g| %.3e  err %.2e  (x%.1f: %.2e, shifted: %.2e)\n", name, ps->numel,
                   amax, err, (double)SCALED, err_scaled, err_shifted);
            worst = fmax(worst, err);
            checked += ps->numel;
            tensors++;
        }
        base += usp->numel;
    }
    CHECK(checked == P, "checked %zu of %zu parameters", checked, P);
    printf("ok kv_heads %d tied %d fused %d: %zu parameters in %d tensors, loss %.6f, max |grad| %.3e, worst err "
           "%.2e\n",
           sh.kv_heads, sh.tied, sh.attention_fused, checked, tensors, (double)loss, gmax, worst);
    free(ana);
    free(num);
    free(vals);
    model_close(&m);
}

/* ---- 2. bf16 and fp16 against fp32 --------------------------------------- */

/* The largest |g16 - g32| of each tensor over its largest |g32|; the worst. */
static double half_grad_errors(const zt_model_spec *spec, const float *g32, const float *g16, double tol,
                               const char *dn) {
    double worst = 0.0;
    const float *a = g32, *b = g16;
    for (int u = 0; u < spec->nunits; u++) {
        const zt_unit_spec *usp = &spec->units[u];
        for (int k = 0; k < usp->nparams; k++) {
            const zt_param_spec *ps = &usp->params[k];
            double amax = 0.0, dmax = 0.0;
            for (size_t i = ps->offset; i < ps->offset + ps->numel; i++) {
                amax = fmax(amax, fabs((double)a[i]));
                dmax = fmax(dmax, fabs((double)b[i] - (double)a[i]));
            }
            CHECK(amax > 0.0, "%s.%s: the fp32 gradient is zero", usp->name, ps->name);
            CHECK(dmax <= tol * amax, "%s.%s (%s): max |g16 - g32| %.3e > %.0e x %.3e", usp->name, ps->name, dn,
                  dmax, tol, amax);
            if (amax > 0.0) worst = fmax(worst, dmax / amax);
        }
        a += usp->numel;
        b += usp->numel;
    }
    return worst;
}

static void test_half(zt_dtype dtype, shape sh) {
    const char *dn = zt_dtype_name(dtype);
    double loss_tol = dtype == ZT_BF16 ? BF16_LOSS_REL : FP16_LOSS_REL;
    double grad_tol = dtype == ZT_BF16 ? BF16_GRAD_REL : FP16_GRAD_REL;
    model m32, m16;
    model_open(&m32, sh, ZT_FP32);
    model_open(&m16, sh, dtype);
    const zt_model_spec *spec = m32.llama.dec.spec;
    size_t P = spec->total_numel;
    CHECK(m16.llama.dec.spec->total_numel == P, "the two models' sizes differ");
    CHECK(m16.eng.compute_dtype == dtype, "%s: the CPU computes in %s", dn, zt_dtype_name(m16.eng.compute_dtype));

    int B = m32.llama.cfg.micro_batch, T = m32.llama.cfg.seq_len - 1; /* a window shorter than seq_len */
    int32_t tok[16], tgt[16];
    random_batch(tok, tgt, B * T, m32.llama.cfg.vocab);
    float *vals = random_values(spec), *rounded = xmalloc(P * sizeof(float));
    for (size_t i = 0; i < P; i++) {
        uint16_t h;
        zt_dtype_store(&h, dtype, 0, vals[i]);
        rounded[i] = zt_dtype_load(&h, dtype, 0);
    }
    set_values(&m16.eng, vals);
    set_values(&m32.eng, rounded);

    float *g32 = xmalloc(P * sizeof(float)), *g16 = xmalloc(P * sizeof(float));
    float l32 = gradients(&m32, tok, tgt, B, T, g32), l16 = gradients(&m16, tok, tgt, B, T, g16);
    double loss_err = fabs((double)l16 - (double)l32) / fabs((double)l32);
    CHECK(isfinite(l16) && loss_err <= loss_tol, "%s loss %.9g, fp32 %.9g", dn, (double)l16, (double)l32);
    CHECK(m16.ctx.device_mem.by_category[ZT_CAT_WORKSPACE].current == 0, "%s: workspace held after backward", dn);
    double worst = half_grad_errors(spec, g32, g16, grad_tol, dn);

    float lr = 1e-2f;
    zt_mem_set_phase(&m32.ctx.device_mem, ZT_PHASE_OPTIMIZER);
    zt_mem_set_phase(&m16.ctx.device_mem, ZT_PHASE_OPTIMIZER);
    MUST(zt_engine_step(&m32.eng, lr), &m32.ctx);
    MUST(zt_engine_step(&m16.eng, lr), &m16.ctx);
    double n32 = m32.eng.last_grad_norm, n16 = m16.eng.last_grad_norm;
    CHECK(n32 > 0.0 && fabs(n16 - n32) <= grad_tol * n32, "%s grad norm %.6g, fp32 %.6g", dn, n16, n32);
    size_t unrounded = 0, unmoved = 0, at = 0;
    double step_diff = 0.0;
    for (int u = 0; u < spec->nunits; u++) {
        const zt_unit_state *s16 = &m16.eng.units[u], *s32 = &m32.eng.units[u];
        for (size_t i = 0; i < spec->units[u].numel; i++, at++) {
            float master = zt_f32(&s16->master)[i];
            uint16_t want;
            zt_dtype_store(&want, dtype, 0, master);
            if (((const uint16_t *)s16->params.data)[i] != want) unrounded++;
            if (master == vals[at] && fabs((double)g32[at]) > 1e-6 * n32) unmoved++;
            double moved16 = (double)master - (double)vals[at];
            double moved32 = (double)zt_f32(&s32->params)[i] - (double)rounded[at];
            step_diff = fmax(step_diff, fabs(moved16 - moved32));
        }
    }
    CHECK(unrounded == 0, "%zu %s params differ from %s(master) after the step", unrounded, dn, dn);
    CHECK(unmoved == 0, "%zu master params with a gradient did not move in the step", unmoved);
    CHECK(step_diff <= 2.1 * lr, "%s and fp32 updates differ by %.3e (> 2.1 lr)", dn, step_diff);
    float after = gradients(&m16, tok, tgt, B, T, g16);
    CHECK(isfinite(after), "%s loss after the step %g", dn, (double)after);
    printf("ok %s kv_heads %d tied %d: loss %.6f (fp32 %.6f, rel %.1e), worst gradient error %.2e of its max, "
           "grad norm %.6g (fp32 %.6g), loss after the step %.6f\n",
           dn, sh.kv_heads, sh.tied, (double)l16, (double)l32, loss_err, worst, n16, n32, (double)after);
    free(g32);
    free(g16);
    free(vals);
    free(rounded);
    model_close(&m16);
    model_close(&m32);
}

int main(void) {
    rng_state = 0x11a3C0FFEE5EED01ull;
    test_fp32((shape){.tied = 0, .kv_heads = 2});
    test_fp32((shape){.tied = 1, .kv_heads = 2});
    test_fp32((shape){.tied = 0, .kv_heads = 4});
    test_fp32((shape){.tied = 0, .kv_heads = 1, .attention_fused = 1});
    test_half(ZT_BF16, (shape){.tied = 0, .kv_heads = 2});
    test_half(ZT_BF16, (shape){.tied = 1, .kv_heads = 2});
    test_half(ZT_FP16, (shape){.tied = 0, .kv_heads = 2});
    test_half(ZT_FP16, (shape){.tied = 1, .kv_heads = 2});
    printf("%ld checks, %d failed\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
