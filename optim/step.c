/* The optimizer step on each rank's part of the state: the non-finite check
 * (and fp16's unscaling), global-norm clipping, the optimizer's update
 * through its table (optim/zt_optim.h; its matrix hook where it has one),
 * then the all-gather of updated parameters where the stage keeps them
 * full. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "zt_optim_engine.h"
#include "zt_quant.h"

/* Elements of 16-bit gradients widened to fp32 at a time: sub_group_size
 * (DeepSpeed's knob), else ZT_OPTIMIZER_CHUNK. The norm is summed in the
 * same pieces, so it rounds alike at every stage for a given size. */
static size_t chunk_elems(const zt_engine *e) {
    size_t c = e->cfg.sub_group_size ? e->cfg.sub_group_size : ZT_OPTIMIZER_CHUNK;
    size_t align = optim_of(e)->chunk_align; /* 8-bit Adam: whole blocks */
    if (align > 1) c = (c + align - 1) / align * align;
    return c;
}

zt_grad_pieces zt_engine_grad_pieces(zt_engine *e, int u, size_t lo, size_t n, zt_tensor *ws) {
    zt_grad_pieces it = {e, u, lo, frozen(e, u) ? lo : lo + n, ws}; /* a frozen unit has no gradients */
    return it;
}

int zt_engine_next_grad_piece(zt_grad_pieces *it, float **g, size_t *at, size_t *n) {
    zt_engine *e = it->e;
    zt_unit_state *ust = &e->units[it->u];
    if (it->next >= it->end) return 0;
    size_t i = local_index(full_grads(e), it->next, shard_lo(e, it->u)); /* in the grads buffer */
    *at = it->next;
    if (e->cfg.dtype == ZT_FP32) {
        *n = it->end - it->next;
        *g = zt_f32(&ust->grads) + i;
    } else {
        size_t chunk = chunk_elems(e);
        *n = it->end - it->next < chunk ? it->end - it->next : chunk;
        e->ctx->be->ops->cast(&e->ctx->compute, it->ws->data, ZT_FP32, (const uint16_t *)ust->grads.data + i,
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
            for (zt_grad_pieces it = zt_engine_grad_pieces(e, u, shard_lo(e, u), e->spec->units[u].shard_numel, ws);
                 zt_engine_next_grad_piece(&it, &g, &at, &gn);) {
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
        for (zt_grad_pieces it = zt_engine_grad_pieces(e, u, shard_lo(e, u), e->spec->units[u].shard_numel, ws);
             zt_engine_next_grad_piece(&it, &g, &at, &gn);)
            ops->sum_squares(&ctx->compute, dev + k++, g, gn);
    if (st == ZT_OK)
        st = ctx->be->memcpy_async(ctx->be, host, dev, nslots * sizeof *host, ZT_COPY_D2H, &ctx->compute, &ctx->err);
    if (st == ZT_OK) st = ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err);
    for (size_t i = 0; st == ZT_OK && i < nslots; i++) *local += host[i];
    free(host);
    zt_tensor_free(&slots, &ctx->device_mem);
    return st;
}

/* Bytes of unit u's slice in the params dtype. */
static size_t slice_bytes(const zt_engine *e, int u) {
    return e->spec->units[u].shard_numel * zt_dtype_size(e->cfg.dtype);
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
            st = zt_coll_unit_gather_start(e, e->comm, u, e->units[u].params.data, slice_bytes(e, u),
                                           slice_bytes(e, u), producer, &gathers[u]);
    }
    for (int u = 0; u < spec->nunits; u++) {
        zt_status f = zt_coll_unit_gather_join(e, e->comm, &gathers[u]); /* every started one, even after a failure */
        if (st == ZT_OK) st = f;
    }
    free(gathers);
    return st;
}

typedef zt_update_args step_args; /* tier.h */

/* The optimizer on the device over the part of unit u this rank owns
 * (stage 0: everything), then the 16-bit params rounded from the fp32
 * master. */
zt_status zt_engine_unit_step(zt_engine *e, int u, const zt_optim_step *s) {
    return optim_of(e)->matrix_hook ? zt_engine_matrix_step(e, u, s) : optim_of(e)->device_step(e, u, s);
}

uint16_t *zt_engine_owned_params16(const zt_engine *e, int u) {
    size_t rlo = owned_lo(e, u);
    return (uint16_t *)e->units[u].params.data + local_index(full_params(e, u), rlo, shard_lo(e, u));
}

static zt_status device_update_unit(zt_engine *e, int u, void *arg) {
    const step_args *a = arg;
    zt_ctx *ctx = e->ctx;
    zt_unit_state *ust = &e->units[u];
    int half = e->cfg.dtype != ZT_FP32;
    size_t rlo = owned_lo(e, u);
    float *p = half ? zt_f32(&ust->master) : zt_f32(&ust->params);
    size_t p_at = (half ? full_optim(e) : full_params(e, u)) ? 0 : shard_lo(e, u);
    zt_optim_step s = {a->mult, a->lr, a->t, p, p_at, a->ws, a->wu};
    if (e->cfg.master_none || e->cfg.state_bf16) return zt_engine_lowmem_update(e, u, &s);
    ZT_TRY(zt_engine_unit_step(e, u, &s));
    if (half) /* the 16-bit params rounded to nearest from the fp32 master */
        ctx->be->ops->cast(&ctx->compute, zt_engine_owned_params16(e, u), e->cfg.dtype, p + (rlo - p_at), ZT_FP32,
                           owned_numel(e, u));
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
    /* fp32 widens nothing; an update_workspace takes a chunk in every dtype */
    if (e->cfg.dtype == ZT_FP32 && !optim_of(e)->update_workspace) return 0;
    size_t most = 0; /* the largest part widened at once: an owned range, or a slice for the norm */
    for (int u = 0; u < e->spec->nunits; u++) {
        size_t n = frozen(e, u) ? 0 : owned_numel(e, u);
        if (n > most) most = n;
    }
    return most < chunk_elems(e) ? most : chunk_elems(e);
}

int zt_engine_host_step(const zt_engine *e, int u, float *g, void *out, float clip, float lr, int t) {
    zt_optim_step s = {clip, lr, t, NULL, 0, NULL, NULL};
    int written = 0;
    if (e->ctx->dry) return 0; /* a replay: the buffers, not their values */
    /* The delayed update's thread: elementwise host steps cannot fail, and a
     * collective one (which can) never runs there (zt_engine_init refuses
     * it with offload_delay). */
    (void)optim_of(e)->host_step(e, u, g, out, &s, &written);
    return written;
}

zt_status zt_optim_host_step_elementwise(const zt_engine *e, int u, float *g, void *out, const zt_optim_step *s,
                                         int *written) {
    const zt_optim *opt = optim_of(e);
    float *slot[ZT_OPTIM_MAX_SLOTS] = {NULL}; /* each [owned] fp32, host pool */
    for (int i = 0; i < opt->nslots; i++) slot[i] = zt_f32(&e->units[u].host_opt_state[i]);
    size_t lo = owned_lo(e, u);
    *written = opt->host_range(e, u, lo, lo + owned_numel(e, u), zt_f32(&e->units[u].host_master), g, slot, out,
                               s->mult, s->lr, s->t);
    return ZT_OK;
}
