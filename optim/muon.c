/* Muon (Keller Jordan's; torch.optim.Muon's definition) on the hidden
 * matrices, AdamW on every other parameter (embeddings, head, norms,
 * biases), as Muon is meant to be used.
 *
 * A hidden matrix's element keeps one state, its momentum buffer:
 *   buf = lerp(buf, g, 1 - mu); u = nesterov ? lerp(g, buf, mu) : buf
 * and each logical matrix's u (q, k and v of a fused qkv separately) is
 * orthogonalized whole by Newton-Schulz on its owner rank (the engine's
 * matrix hook, optim/matrix_hook.c), then
 *   p = p (1 - lr wd) - lr adjust(rows, cols) O.
 * The others keep AdamW's exp_avg and exp_avg_sq. Slot 0 holds the
 * momentum buffer or exp_avg per owned element; slot 1 holds exp_avg_sq
 * only for the elements outside hidden matrices, compact, so the state of
 * a matrix costs 4 bytes per parameter instead of AdamW's 8.
 *
 * The same functions step the device's buffers and (offload) the host
 * pool's, so the CPU backend gives the same bits either way. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "zt_cpu_adam.h"
#include "cpu_ops.h"
#include "zt_newton_schulz.h"
#include "zt_optim_engine.h"

enum { MOMENTUM = 0, EXP_AVG_SQ }; /* slot 0: momentum_buf (hidden) or exp_avg (others) */

/* Elements of unit range [lo, x) outside hidden parameters: where element
 * x's exp_avg_sq lies in the compact slot of owned range [lo, ...). */
static size_t not_hidden_before(const zt_unit_spec *us, size_t lo, size_t x) {
    size_t n = 0;
    for (int i = 0; i < us->nparams; i++) {
        const zt_param_spec *ps = &us->params[i];
        if (ps->hidden) continue;
        size_t a = ps->offset > lo ? ps->offset : lo, b = ps->offset + ps->numel < x ? ps->offset + ps->numel : x;
        if (a < b) n += b - a;
    }
    return n;
}

static size_t muon_slot_words(const zt_engine_config *cfg, int slot, const zt_unit_spec *us, size_t lo, size_t hi) {
    (void)cfg;
    return slot == MOMENTUM ? hi - lo : not_hidden_before(us, lo, hi);
}

/* buf[n] = lerp(buf, g, 1 - mu) = mu buf + (1 - mu) g; out[n] the update
 * direction, lerp(g, buf, mu) = (1 - mu) g + mu buf with Nesterov, else buf.
 * Through the backend's kernels (the device's, or the CPU's on the host
 * pool), so a GPU never has its memory read by the host and the CPU's
 * device and host steps round alike. */
static void momentum_blend(const zt_ops *ops, zt_stream *cs, float *buf, const float *g, float *out, size_t n,
                           float mu, int nesterov) {
    ops->scale(cs, buf, mu, n);
    ops->scaled_store(cs, buf, ZT_FP32, g, 1.0f - mu, 1, n);
    if (nesterov) {
        ops->scaled_store(cs, out, ZT_FP32, g, 1.0f - mu, 0, n);
        ops->scaled_store(cs, out, ZT_FP32, buf, mu, 1, n);
    } else {
        ops->scaled_store(cs, out, ZT_FP32, buf, 1.0f, 0, n);
    }
}

static float adjust(const zt_engine_config *cfg, size_t rows, size_t cols) {
    if (cfg->muon_adjust_lr == ZT_MUON_ADJUST_MATCH_RMS_ADAMW)
        return 0.2f * sqrtf((float)(rows > cols ? rows : cols));
    double r = (double)rows / (double)cols;
    return (float)sqrt(r > 1.0 ? r : 1.0);
}

/* The apply over owned range [lo, lo + n) of unit u: the elements of p
 * (p[0] is unit element p_at) of each of its matrices (the engine's list:
 * q, k, v apart) stepped with upd (upd[0] is element lo). */
static void apply_range(const zt_ops *ops, zt_stream *cs, const zt_engine *e, int u, float *p, size_t p_at,
                        const float *upd, size_t lo, size_t n, float lr) {
    int nm;
    const zt_matrix *ms = zt_engine_matrices(e, &nm);
    for (int i = 0; i < nm; i++) {
        const zt_matrix *m = &ms[i];
        size_t end = m->offset + m->rows * m->cols;
        size_t a = m->offset > lo ? m->offset : lo, b = end < lo + n ? end : lo + n;
        if (m->unit != u || a >= b) continue;
        int decays = e->spec->units[u].params[m->param].decay;
        ops->scale(cs, p + (a - p_at), 1.0f - lr * (decays ? e->cfg.weight_decay : 0.0f), b - a);
        ops->scaled_store(cs, p + (a - p_at), ZT_FP32, upd + (a - lo), -lr * adjust(&e->cfg, m->rows, m->cols), 1,
                          b - a);
    }
}

/* Device: AdamW on the others' elements of each gradient piece, the
 * momentum and blend on the matrices' (into upd). */
static zt_status muon_update(zt_engine *e, int u, const zt_optim_step *s, float *upd) {
    const zt_ops *ops = e->ctx->be->ops;
    zt_stream *cs = &e->ctx->compute;
    const zt_unit_spec *us = &e->spec->units[u];
    size_t lo = owned_lo(e, u), at, gn, a, b;
    float *m = zt_f32(&e->units[u].opt_state[MOMENTUM]), *v = zt_f32(&e->units[u].opt_state[EXP_AVG_SQ]);
    float *g, wd, adamw_lr = s->lr * e->cfg.muon_adamw_lr_scale;
    for (zt_grad_pieces it = zt_engine_grad_pieces(e, u, lo, owned_numel(e, u), s->ws);
         zt_engine_next_grad_piece(&it, &g, &at, &gn);) {
        if (s->mult != 1.0f) ops->scale(cs, g, s->mult, gn);
        for (int i = 0; i < us->nparams; i++) {
            if (!param_in_range(e, u, i, at, at + gn, &a, &b, &wd)) continue;
            if (us->params[i].hidden)
                momentum_blend(ops, cs, m + (a - lo), g + (a - at), upd + (a - lo), b - a, e->cfg.muon_momentum,
                               e->cfg.muon_nesterov);
            else
                ops->adamw(cs, s->p + (a - s->p_at), g + (a - at), m + (a - lo), v + not_hidden_before(us, lo, a),
                           b - a, adamw_lr, e->cfg.beta1, e->cfg.beta2, e->cfg.eps, wd, s->t);
        }
    }
    return ZT_OK;
}

static zt_status muon_apply(zt_engine *e, int u, const zt_optim_step *s, const float *upd) {
    apply_range(e->ctx->be->ops, &e->ctx->compute, e, u, s->p, s->p_at, upd, owned_lo(e, u), owned_numel(e, u), s->lr);
    return ZT_OK;
}

static size_t muon_scratch(size_t rows, size_t cols) { return zt_newton_schulz_scratch(rows, cols); }

static double muon_flops(size_t rows, size_t cols) { return zt_newton_schulz_flops(rows, cols, 1); }

static zt_status muon_transform(const zt_engine_config *cfg, const zt_ops *ops, zt_stream *s, const zt_matrix *m,
                                float *whole, float *scratch, zt_error *err) {
    (void)err;
    ops->newton_schulz(s, whole, m->rows, m->cols, cfg->muon_ns_steps, cfg->muon_ns_coef, cfg->muon_eps, scratch);
    return ZT_OK;
}

/* Offload: the same steps on the host master and slots, the matrices'
 * exchange through the host pool, the fused CPU Adam on the others. */
static zt_status muon_host_step(const zt_engine *e, int u, float *g, void *out, const zt_optim_step *s,
                                int *written) {
    (void)out;
    const zt_unit_spec *us = &e->spec->units[u];
    zt_unit_state *ust = &e->units[u];
    size_t lo = owned_lo(e, u), n = owned_numel(e, u), a, b;
    float *p = zt_f32(&ust->host_master), *m = zt_f32(&ust->host_opt_state[MOMENTUM]);
    float *v = zt_f32(&ust->host_opt_state[EXP_AVG_SQ]), wd; /* [owned], [owned], [not hidden] */
    zt_adam_isa isa = zt_cpu_adam_best_isa();
    zt_stream host = {.nthreads = e->cfg.host_threads > 0 ? e->cfg.host_threads : 1};
    *written = 0;
    scale_host_grads(g, n, s->mult);
    zt_tensor upd = {0}; /* [owned] fp32, host pool: the update direction */
    ZT_TRY(zt_engine_alloc_host(e, &upd, ZT_FP32, n, ZT_CAT_WORKSPACE, "matrix update", u));
    float *d = zt_f32(&upd);
    for (int i = 0; i < us->nparams; i++) {
        if (!param_in_range(e, u, i, lo, lo + n, &a, &b, &wd)) continue;
        size_t j = a - lo;
        if (us->params[i].hidden)
            momentum_blend(&zt_cpu_ops_fp32, &host, m + j, g + j, d + j, b - a, e->cfg.muon_momentum,
                           e->cfg.muon_nesterov);
        else
            zt_cpu_adam_fused(isa, e->cfg.host_threads, p + j, g + j, m + j, v + not_hidden_before(us, lo, a), NULL,
                              e->cfg.dtype, b - a, 1.0f, s->lr * e->cfg.muon_adamw_lr_scale, e->cfg.beta1,
                              e->cfg.beta2, e->cfg.eps, wd, s->t);
    }
    zt_status st = zt_engine_transform_matrices(e, u, d, 1);
    if (st == ZT_OK) apply_range(&zt_cpu_ops_fp32, &host, e, u, p, lo, d, lo, n, s->lr);
    zt_tensor_free(&upd, &e->ctx->host_mem);
    return st;
}

static zt_status muon_check(const zt_engine_config *cfg, zt_error *err) {
    if (!(cfg->muon_momentum >= 0.0f && cfg->muon_momentum < 1.0f))
        return ZT_FAIL(err, ZT_ERR_INVALID, "muon's momentum must be in [0, 1) (got %g)", (double)cfg->muon_momentum);
    if (cfg->muon_ns_steps < 1 || cfg->muon_ns_steps > 100)
        return ZT_FAIL(err, ZT_ERR_INVALID, "muon's Newton-Schulz steps must be in 1..100 (got %d)", cfg->muon_ns_steps);
    if (!(cfg->muon_eps > 0.0f))
        return ZT_FAIL(err, ZT_ERR_INVALID, "muon's eps must be > 0 (got %g): an all-zero update would divide by 0",
                       (double)cfg->muon_eps);
    if (!(cfg->muon_adamw_lr_scale >= 0.0f))
        return ZT_FAIL(err, ZT_ERR_INVALID, "muon's AdamW learning rate must be >= 0");
    for (int k = 0; k < 3; k++)
        if (!isfinite(cfg->muon_ns_coef[k]))
            return ZT_FAIL(err, ZT_ERR_INVALID, "muon's Newton-Schulz coefficients must be finite");
    return ZT_OK;
}

/* Checkpoint block 1 over this rank's slice: exp_avg_sq per element
 * outside the hidden matrices, zeros inside them. Block 0 is per element. */
static zt_status muon_get_block(zt_engine *e, int u, int b, float *dst) {
    if (b == 0) return zt_engine_get_elementwise_block(e, u, MOMENTUM, dst);
    const zt_unit_spec *us = &e->spec->units[u];
    size_t lo = owned_lo(e, u), slo = shard_lo(e, u), S = us->shard_numel;
    memset(dst, 0, S * sizeof(float));
    zt_tensor *vt = opt_slot(e, u, EXP_AVG_SQ);
    if (!vt->data) return ZT_OK; /* no element outside the matrices here */
    float *v = malloc(vt->numel * sizeof(float) + 4); /* the compact slot, fp32 */
    if (!v) return ZT_FAIL(&e->ctx->err, ZT_ERR_OOM, "muon: cannot allocate a staging buffer");
    zt_status r = zt_engine_fetch_values(e, vt, v);
    for (int i = 0; r == ZT_OK && i < us->nparams; i++) {
        const zt_param_spec *ps = &us->params[i];
        size_t a = ps->offset > slo ? ps->offset : slo, end = ps->offset + ps->numel < slo + S ? ps->offset + ps->numel : slo + S;
        if (ps->hidden || a >= end) continue;
        memcpy(dst + (a - slo), v + not_hidden_before(us, lo, a), (end - a) * sizeof(float));
    }
    free(v);
    return r;
}

/* Block 1 from vals over the owned range, into the compact slot. */
static zt_status muon_set_block(zt_engine *e, int u, int b, const float *vals) {
    if (b == 0) return zt_engine_set_elementwise_block(e, u, MOMENTUM, vals);
    const zt_unit_spec *us = &e->spec->units[u];
    size_t lo = owned_lo(e, u), hi = lo + owned_numel(e, u);
    zt_tensor *vt = opt_slot(e, u, EXP_AVG_SQ);
    if (!vt->data) return ZT_OK;
    float *mine = malloc(vt->numel * sizeof(float) + 4); /* the compact slot, fp32 */
    if (!mine) return ZT_FAIL(&e->ctx->err, ZT_ERR_OOM, "muon: cannot allocate a staging buffer");
    for (int i = 0; i < us->nparams; i++) {
        const zt_param_spec *ps = &us->params[i];
        size_t a = ps->offset > lo ? ps->offset : lo, end = ps->offset + ps->numel < hi ? ps->offset + ps->numel : hi;
        if (!ps->hidden && a < end) memcpy(mine + not_hidden_before(us, lo, a), vals + (a - lo), (end - a) * sizeof(float));
    }
    zt_status r = zt_engine_store_values(e, vt, mine);
    free(mine);
    return r;
}

static const zt_optim_matrix_hook muon_hook = {
    .update = muon_update,
    .scratch_numel = muon_scratch,
    .flops = muon_flops,
    .transform = muon_transform,
    .apply = muon_apply,
};

const zt_optim zt_optim_muon = {
    .name = "muon",
    .description = "Muon on the hidden matrices (momentum_buf, 4 bytes per parameter), AdamW on the rest (8 bytes)",
    .nslots = 2,
    .slots = {{"momentum_buf", ZT_SLOT_PER_ELEMENT, 32, -1}, {"exp_avg_sq", ZT_SLOT_NOT_HIDDEN, 32, -1}},
    .slot_words = muon_slot_words,
    .check = muon_check,
    .chunk_align = 1,
    .collective = 1,
    .host_step = muon_host_step,
    .ckpt_blocks = {"momentum_buf", "exp_avg_sq"},
    .get_block = muon_get_block,
    .set_block = muon_set_block,
    .matrix_hook = &muon_hook,
};
