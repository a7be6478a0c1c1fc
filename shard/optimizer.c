/* The optimizer step on each rank's part of the state: the non-finite check
 * (and fp16's unscaling), global-norm clipping and AdamW (weight decay only
 * where the model asked for it), then the all-gather of updated parameters
 * where the stage keeps them full. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "zt_quant.h"

/* Elements of 16-bit gradients widened to fp32 at a time: sub_group_size
 * (DeepSpeed's knob), else ZT_OPTIMIZER_CHUNK. The norm is summed in the
 * same pieces, so it rounds alike at every stage for a given size. */
static size_t chunk_elems(const zt_engine *e) {
    size_t c = e->cfg.sub_group_size ? e->cfg.sub_group_size : ZT_OPTIMIZER_CHUNK;
    if (e->cfg.optimizer == ZT_OPT_ADAM8BIT) c = (c + ZT_QBLOCK - 1) / ZT_QBLOCK * ZT_QBLOCK; /* whole blocks */
    return c;
}

/* Unit u's gradients over [lo, lo + n) (unit coordinates) as fp32 pieces:
 * the grads themselves in fp32 (one piece), else widened chunk by chunk into
 * ws (chunk_elems at most, so no fp32 copy of a unit's gradients ever
 * exists). */
typedef struct {
    zt_engine *e;
    int u;
    size_t next, end;
    zt_tensor *ws;
} grad_pieces;

static grad_pieces pieces_of(zt_engine *e, int u, size_t lo, size_t n, zt_tensor *ws) {
    grad_pieces it = {e, u, lo, frozen(e, u) ? lo : lo + n, ws}; /* a frozen unit has no gradients */
    return it;
}

/* The next piece: *g holds elements [*at, *at + *n); 0 when none is left. */
static int next_piece(grad_pieces *it, float **g, size_t *at, size_t *n) {
    zt_engine *e = it->e;
    zt_unit_state *st = &e->units[it->u];
    if (it->next >= it->end) return 0;
    size_t i = local_index(full_grads(e), it->next, shard_lo(e, it->u)); /* in the grads buffer */
    *at = it->next;
    if (e->cfg.dtype == ZT_FP32) {
        *n = it->end - it->next;
        *g = zt_f32(&st->grads) + i;
    } else {
        size_t chunk = chunk_elems(e);
        *n = it->end - it->next < chunk ? it->end - it->next : chunk;
        e->ctx->be->ops->cast(&e->ctx->compute, it->ws->data, ZT_FP32, (const uint16_t *)st->grads.data + i,
                              e->cfg.dtype, *n);
        *g = zt_f32(it->ws);
    }
    it->next += *n;
    return 1;
}

/* Pieces the norm of unit u's slice is summed in (1 in fp32). */
static size_t norm_pieces(const zt_engine *e, int u) {
    size_t S = e->spec->units[u].shard_numel;
    if (frozen(e, u)) return 0;
    return e->cfg.dtype == ZT_FP32 ? 1 : (S + chunk_elems(e) - 1) / chunk_elems(e);
}

/* The optimizer (AdamW, or SGD with its momentum in m and no v) over unit
 * coordinates [lo, hi) on buffers p, g, m, v whose element 0 is unit
 * element p_at, g_at, mv_at respectively, parameter segment by segment. */
static void optimizer_range(zt_engine *e, int u, size_t lo, size_t hi, float *p, size_t p_at, const float *g,
                            size_t g_at, float *m, float *v, size_t mv_at, float lr, int t) {
    const zt_unit_spec *us = &e->spec->units[u];
    const zt_ops *ops = e->ctx->be->ops;
    for (int i = 0; i < us->nparams; i++) {
        size_t a, b;
        float wd;
        if (!param_in_range(e, u, i, lo, hi, &a, &b, &wd)) continue;
        if (e->cfg.optimizer == ZT_OPT_SGD)
            ops->sgd(&e->ctx->compute, p + (a - p_at), g + (a - g_at), m + (a - mv_at), b - a, lr, e->cfg.momentum,
                     e->cfg.nesterov, wd);
        else
            ops->adamw(&e->ctx->compute, p + (a - p_at), g + (a - g_at), m + (a - mv_at), v + (a - mv_at), b - a, lr,
                       e->cfg.beta1, e->cfg.beta2, e->cfg.eps, wd, t);
    }
}

/* 8-bit Adam over the segments of unit u's owned part (each its own
 * blocks; a 16-bit piece is whole blocks, as the chunk is), on p (fp32
 * values; element 0 is unit element p_at). */
static void adam8bit_unit(zt_engine *e, int u, float *p, size_t p_at, zt_tensor *ws, float mult, float lr, int t) {
    zt_unit_state *st = &e->units[u];
    const zt_unit_spec *us = &e->spec->units[u];
    const zt_ops *ops = e->ctx->be->ops;
    size_t lo = owned_lo(e, u), hi = lo + owned_numel(e, u);
    uint8_t *m8 = st->adam_m.data, *v8 = st->adam_v.data;
    float *ms = zt_f32(&st->opt_scales), *vs = ms + zt_owned_qblocks(us, lo, hi);
    zt_segment_iter it = zt_segments(us, lo, hi);
    zt_segment seg;
    float *g;
    size_t at, gn;
    while (zt_next_segment(&it, &seg)) {
        float wd = us->params[seg.param].decay ? e->cfg.weight_decay : 0.0f;
        for (grad_pieces gp = pieces_of(e, u, seg.a, seg.b - seg.a, ws); next_piece(&gp, &g, &at, &gn);) {
            if (mult != 1.0f) ops->scale(&e->ctx->compute, g, mult, gn);
            size_t b = seg.block + (at - seg.a) / ZT_QBLOCK;
            ops->adam8bit(&e->ctx->compute, p + (at - p_at), g, m8 + (at - lo), v8 + (at - lo), ms + b, vs + b, gn, lr,
                          e->cfg.beta1, e->cfg.beta2, e->cfg.eps, wd, t);
        }
    }
}

/* *local = sum over units (in unit order) of the squared norm of this rank's
 * gradient slice (summed piece by piece in 16-bit dtypes). On a GPU each
 * piece's sum lands in a device slot and all come back in one copy: one host
 * wait per step instead of one per unit. */
static zt_status unit_norms_squared(zt_engine *e, zt_tensor *ws, double *local) {
    zt_ctx *ctx = e->ctx;
    const zt_ops *ops = ctx->be->ops;
    int n = e->spec->nunits;
    float *g;
    size_t at, gn;
    *local = 0.0;
    if (!ctx->be->event_record) { /* CPU: results are on the host at once */
        for (int u = 0; u < n; u++)
            for (grad_pieces it = pieces_of(e, u, shard_lo(e, u), e->spec->units[u].shard_numel, ws);
                 next_piece(&it, &g, &at, &gn);) {
                double s = 0.0;
                ops->sum_squares(&ctx->compute, &s, g, gn);
                *local += s;
            }
        return ZT_OK;
    }
    size_t nslots = 0;
    for (int u = 0; u < n; u++) nslots += norm_pieces(e, u);
    if (nslots == 0) return ZT_OK; /* every unit frozen */
    zt_tensor slots; /* [nslots] double, as 2 nslots fp32 words */
    ZT_TRY(zt_engine_alloc(e, &slots, ZT_FP32, 2 * nslots, ZT_CAT_WORKSPACE, "norm slots", -1));
    double *dev = slots.data, *host = malloc(nslots * sizeof *host);
    zt_status st = host ? ZT_OK : ZT_FAIL(&ctx->err, ZT_ERR_OOM, "optimizer: cannot allocate %zu norms", nslots);
    size_t k = 0;
    for (int u = 0; st == ZT_OK && u < n; u++)
        for (grad_pieces it = pieces_of(e, u, shard_lo(e, u), e->spec->units[u].shard_numel, ws);
             next_piece(&it, &g, &at, &gn);)
            ops->sum_squares(&ctx->compute, dev + k++, g, gn);
    if (st == ZT_OK)
        st = ctx->be->memcpy_async(ctx->be, host, dev, nslots * sizeof *host, ZT_COPY_D2H, &ctx->compute, &ctx->err);
    if (st == ZT_OK) st = ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err);
    for (size_t i = 0; st == ZT_OK && i < nslots; i++) *local += host[i];
    free(host);
    zt_tensor_free(&slots, &ctx->device_mem);
    return st;
}

zt_status zt_engine_update_each_unit(zt_engine *e, zt_unit_update_fn update, void *arg, zt_stream *producer) {
    zt_ctx *ctx = e->ctx;
    const zt_model_spec *spec = e->spec;
    zt_comm_handle *gathers = calloc((size_t)spec->nunits, sizeof *gathers);
    if (!gathers) return ZT_FAIL(&ctx->err, ZT_ERR_OOM, "optimizer: cannot allocate %d handles", spec->nunits);
    zt_status st = ZT_OK;
    for (int u = 0; u < spec->nunits && st == ZT_OK; u++) {
        if (frozen(e, u)) continue; /* nothing to update, nothing changed to gather */
        st = update(e, u, arg);
        if (st == ZT_OK && !full_optim(e) && full_params(e, u))
            /* Everyone needs everyone's updated slice of the full params
             * (stages 1-2, and stage 3's persistent units). */
            st = zt_coll_unit_gather_start(e, e->comm, u, e->units[u].params.data,
                                           spec->units[u].shard_numel * zt_dtype_size(e->cfg.dtype), producer,
                                           &gathers[u]);
    }
    for (int u = 0; u < spec->nunits; u++) {
        zt_status f = zt_coll_unit_gather_join(e, e->comm, &gathers[u]); /* every started one, even after a failure */
        if (st == ZT_OK) st = f;
    }
    free(gathers);
    return st;
}

typedef zt_update_args step_args; /* tier.h */

/* AdamW on the device over the part of unit u this rank owns (stage 0:
 * everything), then the 16-bit params rounded from the fp32 master. */
static zt_status device_update_unit(zt_engine *e, int u, void *arg) {
    const step_args *a = arg;
    zt_ctx *ctx = e->ctx;
    const zt_ops *ops = ctx->be->ops;
    zt_unit_state *us = &e->units[u];
    int half = e->cfg.dtype != ZT_FP32;
    size_t P = e->spec->units[u].padded_numel, S = e->spec->units[u].shard_numel, lo = shard_lo(e, u);
    size_t rlo = full_optim(e) ? 0 : lo, rn = full_optim(e) ? P : S;
    float *p = half ? zt_f32(&us->master) : zt_f32(&us->params);
    size_t p_at = (half ? full_optim(e) : full_params(e, u)) ? 0 : lo;
    float *g;
    size_t at, gn;
    if (e->cfg.optimizer == ZT_OPT_ADAFACTOR)
        ZT_TRY(zt_engine_adafactor_device(e, u, a->mult, a->lr, a->t, p, p_at, a->ws, a->wu));
    else if (e->cfg.optimizer == ZT_OPT_ADAM8BIT)
        adam8bit_unit(e, u, p, p_at, a->ws, a->mult, a->lr, a->t);
    else
        for (grad_pieces it = pieces_of(e, u, rlo, rn, a->ws); next_piece(&it, &g, &at, &gn);) {
            if (a->mult != 1.0f) ops->scale(&ctx->compute, g, a->mult, gn);
            optimizer_range(e, u, at, at + gn, p, p_at, g, at, zt_f32(&us->adam_m), zt_f32(&us->adam_v),
                            full_optim(e) ? 0 : lo, a->lr, a->t);
        }
    if (half) {
        uint16_t *dst = (uint16_t *)us->params.data + local_index(full_params(e, u), rlo, lo);
        ops->cast(&ctx->compute, dst, e->cfg.dtype, p + (rlo - p_at), ZT_FP32, rn);
    }
    return ZT_OK;
}

zt_status zt_engine_device_update(zt_engine *e, const zt_update_args *a) {
    return zt_engine_update_each_unit(e, device_update_unit, (void *)a, &e->ctx->compute);
}

/* The global gradient norm: per-unit sums over this rank's slice, added in
 * unit order, then over ranks in rank order (the same partition at every
 * stage). Every rank holds the same total, so a non-finite gradient
 * anywhere skips the step everywhere; the loss scaler moves on. Returns the
 * unscale-and-clip multiplier in *mult. */
zt_status zt_engine_judge_gradients(zt_engine *e, zt_tensor *ws, float *mult) {
    double local = 0.0, total;
    ZT_TRY(unit_norms_squared(e, ws, &local));
    ZT_TRY(zt_comm_sum_f64(e->comm, local, &total, &e->ctx->err));
    double inv_scale = 1.0 / e->scaler.scale; /* exact: scales are powers of two or 1 */
    double norm = sqrt(total) * inv_scale;
    e->last_grad_norm = norm;
    e->last_step_skipped = !isfinite(norm);
    zt_loss_scaler_update(&e->scaler, &e->cfg, !e->last_step_skipped);
    float clip = 1.0f;
    if (!e->last_step_skipped && e->cfg.grad_clip > 0.0f && norm > e->cfg.grad_clip)
        clip = (float)(e->cfg.grad_clip / (norm + 1e-6));
    *mult = clip * (float)inv_scale; /* clip itself when the scale is 1 */
    return ZT_OK;
}

size_t zt_engine_optimizer_chunk(const zt_engine *e) {
    /* fp32 widens nothing; Adafactor's update takes a chunk in every dtype */
    if (e->cfg.dtype == ZT_FP32 && e->cfg.optimizer != ZT_OPT_ADAFACTOR) return 0;
    size_t most = 0; /* the largest part widened at once: an owned range, or a slice for the norm */
    for (int u = 0; u < e->spec->nunits; u++) {
        size_t n = frozen(e, u) ? 0 : owned_numel(e, u);
        if (n > most) most = n;
    }
    return most < chunk_elems(e) ? most : chunk_elems(e);
}
