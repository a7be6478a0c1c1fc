/* The optimizer step on each rank's part of the state: global-norm clipping
 * and AdamW (weight decay only where the model asked for it), then the
 * all-gather of updated parameters where the stage keeps them full. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

/* fp32 view of this rank's reduced gradient slice [lo, lo+S) of unit u; bf16
 * gradients are up-cast into ws. */
static float *grad_slice_f32(zt_engine *e, int u, zt_tensor *ws) {
    zt_unit_state *st = &e->units[u];
    size_t S = e->spec->units[u].shard_numel, lo = shard_lo(e, u);
    size_t at = local_index(full_grads(e), lo, lo);
    if (e->cfg.dtype == ZT_FP32) return zt_f32(&st->grads) + at;
    e->ctx->be->ops->cast_bf16_to_f32(&e->ctx->compute, zt_f32(ws), (const zt_bf16 *)st->grads.data + at, S);
    return zt_f32(ws);
}

/* AdamW over unit coordinates [lo, hi) on buffers p, g, m, v whose element 0
 * is unit element p_at, g_at, mv_at respectively. */
static void adamw_range(zt_engine *e, int u, size_t lo, size_t hi, float *p, size_t p_at, const float *g,
                        size_t g_at, float *m, float *v, size_t mv_at, float lr, int t) {
    const zt_unit_spec *us = &e->spec->units[u];
    const zt_ops *ops = e->ctx->be->ops;
    for (int i = 0; i < us->nparams; i++) {
        const zt_param_spec *ps = &us->params[i];
        size_t a = ps->offset > lo ? ps->offset : lo;
        size_t b = ps->offset + ps->numel < hi ? ps->offset + ps->numel : hi;
        if (a >= b) continue;
        float wd = ps->decay ? e->cfg.weight_decay : 0.0f;
        ops->adamw(&e->ctx->compute, p + (a - p_at), g + (a - g_at), m + (a - mv_at), v + (a - mv_at), b - a, lr,
                   e->cfg.beta1, e->cfg.beta2, e->cfg.eps, wd, t);
    }
}

/* *local = sum over units (in unit order) of the squared norm of this rank's
 * gradient slice. On a GPU each unit's sum lands in a device slot and all
 * come back in one copy: one host wait per step instead of one per unit. */
static zt_status unit_norms_squared(zt_engine *e, zt_tensor *ws, double *local) {
    zt_ctx *ctx = e->ctx;
    const zt_ops *ops = ctx->be->ops;
    int n = e->spec->nunits;
    *local = 0.0;
    if (!ctx->be->event_record) { /* CPU: results are on the host at once */
        for (int u = 0; u < n; u++) {
            double s = 0.0;
            ops->sum_squares(&ctx->compute, &s, grad_slice_f32(e, u, ws), e->spec->units[u].shard_numel);
            *local += s;
        }
        return ZT_OK;
    }
    zt_tensor slots; /* [n] double, as 2n fp32 words */
    ZT_TRY(zt_engine_alloc(e, &slots, ZT_FP32, 2 * (size_t)n, ZT_CAT_WORKSPACE, "norm slots", -1));
    double *dev = slots.data, *host = malloc((size_t)n * sizeof *host);
    zt_status st = host ? ZT_OK : ZT_FAIL(&ctx->err, ZT_ERR_OOM, "optimizer: cannot allocate %d norms", n);
    for (int u = 0; st == ZT_OK && u < n; u++)
        ops->sum_squares(&ctx->compute, dev + u, grad_slice_f32(e, u, ws), e->spec->units[u].shard_numel);
    if (st == ZT_OK)
        st = ctx->be->memcpy_async(ctx->be, host, dev, (size_t)n * sizeof *host, ZT_COPY_D2H, &ctx->compute,
                                   &ctx->err);
    if (st == ZT_OK) st = ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err);
    for (int u = 0; st == ZT_OK && u < n; u++) *local += host[u];
    free(host);
    zt_tensor_free(&slots, &ctx->device_mem);
    return st;
}

zt_status zt_engine_step(zt_engine *e, float lr) {
    zt_ctx *ctx = e->ctx;
    const zt_ops *ops = ctx->be->ops;
    const zt_model_spec *spec = e->spec;
    int bf16 = e->cfg.dtype == ZT_BF16;
    ZT_TRY(zt_engine_sync_grads(e));
    ZT_TRY(zt_engine_drop_prefetched(e));

    /* Work buffer: the largest unit's fp32 gradients (bf16 up-cast). Stage 0
     * steps on the full buffer; the others on their slice. */
    zt_tensor ws = {0};
    if (bf16) ZT_TRY(zt_engine_alloc(e, &ws, ZT_FP32, spec->largest_unit_numel, ZT_CAT_WORKSPACE, "optimizer", -1));

    /* Gradient norm: per-unit sums over this rank's slice, added in unit
     * order, then over ranks in rank order: the same partition at every stage. */
    double local = 0.0;
    zt_status st = unit_norms_squared(e, &ws, &local);
    if (st != ZT_OK) goto done;
    double total;
    st = zt_comm_sum_f64(e->comm, local, &total, &ctx->err);
    if (st != ZT_OK) goto done;
    double norm = sqrt(total);
    e->last_grad_norm = norm;
    float clip = 1.0f;
    if (e->cfg.grad_clip > 0.0f && norm > e->cfg.grad_clip) clip = (float)(e->cfg.grad_clip / (norm + 1e-6));

    int t = e->steps_taken + 1;
    /* Stages 1-2: each unit's updated slices are all-gathered while later
     * units step; compute waits for all of them at the end, before the next
     * forward reads the parameters. */
    zt_comm_handle *gathers = calloc((size_t)spec->nunits, sizeof *gathers);
    if (!gathers) {
        st = ZT_FAIL(&ctx->err, ZT_ERR_OOM, "optimizer: cannot allocate %d handles", spec->nunits);
        goto done;
    }
    if (e->cfg.offload) st = zt_engine_offload_begin(e);
    for (int u = 0; u < spec->nunits && st == ZT_OK; u++) {
        zt_unit_state *us = &e->units[u];
        size_t P = spec->units[u].padded_numel, S = spec->units[u].shard_numel, lo = shard_lo(e, u);
        if (e->cfg.offload) {
            st = zt_engine_offload_step_unit(e, u, clip, lr, t);
            /* The new slice arrives on the h2d stream; the gather follows it. */
            if (st == ZT_OK && (e->cfg.stage == 1 || e->cfg.stage == 2))
                st = zt_engine_all_gather_start_after(e, us->params.data, S * zt_dtype_size(e->cfg.dtype), &ctx->h2d,
                                                      &gathers[u]);
            continue;
        }
        /* Stage 0 updates everything on every rank; others their slice. */
        size_t rlo = full_optim(e) ? 0 : lo, rn = full_optim(e) ? P : S;
        float *g;
        size_t g_at;
        if (full_optim(e)) {
            if (bf16) {
                ops->cast_bf16_to_f32(&ctx->compute, zt_f32(&ws), us->grads.data, P);
                g = zt_f32(&ws);
            } else {
                g = zt_f32(&us->grads);
            }
            g_at = 0;
        } else {
            g = grad_slice_f32(e, u, &ws);
            g_at = lo;
        }
        if (clip != 1.0f) ops->scale(&ctx->compute, g, clip, rn);
        float *p;
        size_t p_at;
        if (bf16) {
            p = zt_f32(&us->master);
            p_at = full_optim(e) ? 0 : lo;
        } else {
            p = zt_f32(&us->params);
            p_at = full_params(e) ? 0 : lo;
        }
        adamw_range(e, u, rlo, rlo + rn, p, p_at, g, g_at, zt_f32(&us->adam_m), zt_f32(&us->adam_v),
                    full_optim(e) ? 0 : lo, lr, t);
        if (bf16) {
            zt_bf16 *dst = (zt_bf16 *)us->params.data + local_index(full_params(e), rlo, lo);
            ops->cast_f32_to_bf16(&ctx->compute, dst, p + (rlo - p_at), rn);
        }
        if (e->cfg.stage == 1 || e->cfg.stage == 2)
            /* Everyone needs everyone's updated slice of the full params. */
            st = zt_engine_all_gather_start_after(e, us->params.data, S * zt_dtype_size(e->cfg.dtype),
                                                  &ctx->compute, &gathers[u]);
    }
    for (int u = 0; u < spec->nunits; u++) {
        zt_status f = zt_engine_all_gather_finish(e, &gathers[u]); /* every started one, even after a failure */
        if (st == ZT_OK) st = f;
    }
    free(gathers);
    if (e->cfg.offload) {
        zt_status fin = zt_engine_offload_finish(e);
        if (st == ZT_OK) st = fin;
    }
    e->steps_taken = t;
done:
    zt_tensor_free(&ws, &ctx->device_mem);
    return st;
}
