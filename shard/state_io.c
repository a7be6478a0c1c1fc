/* Reading and writing the engine's state by world slice, for checkpoints. */
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

/* The buffer holding `kind` and whether it is full (else this rank's owned shard). */
static const zt_tensor *fp32_source(zt_engine *e, int u, zt_state_kind kind, int *is_full) {
    zt_unit_state *st = &e->units[u];
    if (kind == ZT_STATE_MASTER) {
        if (e->cfg.offload) return *is_full = full_optim(e), &st->host_master;
        if (e->cfg.dtype != ZT_FP32) return *is_full = full_optim(e), &st->master;
        return *is_full = full_params(e, u), &st->params;
    }
    *is_full = full_optim(e);
    if (e->cfg.offload) return kind == ZT_STATE_ADAM_M ? &st->host_m : &st->host_v;
    return kind == ZT_STATE_ADAM_M ? &st->adam_m : &st->adam_v;
}

/* A frozen unit's values are its params (it has no master): dst[S] fp32
 * from this rank's slice of them. */
static zt_status frozen_values(zt_engine *e, int u, float *dst) {
    size_t S = e->spec->units[u].shard_numel;
    if (e->cfg.dtype == ZT_FP32) return zt_engine_get_params_slice(e, u, dst);
    uint16_t *half = malloc(S * sizeof(uint16_t) + 2); /* [S] dtype */
    if (!half) return ZT_FAIL(&e->ctx->err, ZT_ERR_OOM, "engine: cannot allocate a staging buffer");
    zt_status st = zt_engine_get_params_slice(e, u, half);
    for (size_t i = 0; st == ZT_OK && i < S; i++) dst[i] = zt_dtype_load(half, e->cfg.dtype, i);
    free(half);
    return st;
}

zt_status zt_engine_get_slice(zt_engine *e, int u, zt_state_kind kind, float *dst) {
    if (u < 0 || u >= e->spec->nunits) return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "no unit %d", u);
    ZT_TRY(zt_engine_delayed_wait(e)); /* the state after every update started */
    if ((kind == ZT_STATE_ADAM_V && e->cfg.optimizer == ZT_OPT_SGD) || (kind != ZT_STATE_MASTER && frozen(e, u))) {
        /* SGD keeps no v, a frozen unit no optimizer state: their blocks read as zeros */
        memset(dst, 0, e->spec->units[u].shard_numel * sizeof(float));
        return ZT_OK;
    }
    if (frozen(e, u)) return frozen_values(e, u, dst);
    int full;
    const zt_tensor *src = fp32_source(e, u, kind, &full);
    size_t S = e->spec->units[u].shard_numel, lo = shard_lo(e, u);
    zt_ctx *ctx = e->ctx;
    const float *from = zt_f32(src) + local_index(full, lo, lo);
    if (e->cfg.offload) { /* the host pool: plain host memory */
        memcpy(dst, from, S * sizeof(float));
        return ZT_OK;
    }
    ZT_TRY(ctx->be->memcpy_async(ctx->be, dst, from, S * sizeof(float), ZT_COPY_D2H, &ctx->compute, &ctx->err));
    return ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err);
}

zt_status zt_engine_get_params_slice(zt_engine *e, int u, void *dst) {
    if (u < 0 || u >= e->spec->nunits) return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "no unit %d", u);
    size_t S = e->spec->units[u].shard_numel, lo = shard_lo(e, u), d = zt_dtype_size(e->cfg.dtype);
    zt_ctx *ctx = e->ctx;
    const char *src = (const char *)e->units[u].params.data + local_index(full_params(e, u), lo, lo) * d;
    ZT_TRY(ctx->be->memcpy_async(ctx->be, dst, src, S * d, ZT_COPY_D2H, &ctx->compute, &ctx->err));
    return ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err);
}

/* Copies n floats to dst (the host pool under offload, else the device). */
static zt_status put_f32(zt_engine *e, void *dst, const void *src, size_t bytes) {
    zt_ctx *ctx = e->ctx;
    if (e->cfg.offload) {
        memcpy(dst, src, bytes);
        return ZT_OK;
    }
    return ctx->be->memcpy_async(ctx->be, dst, src, bytes, ZT_COPY_H2D, &ctx->compute, &ctx->err);
}

zt_status zt_engine_owned_range(const zt_engine *e, int u, size_t *lo, size_t *n) {
    if (u < 0 || u >= e->spec->nunits) return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "no unit %d", u);
    *lo = owned_lo(e, u);
    *n = owned_numel(e, u);
    return ZT_OK;
}

zt_status zt_engine_set_owned(zt_engine *e, int u, const float *master, const float *m, const float *v) {
    if (u < 0 || u >= e->spec->nunits) return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "no unit %d", u);
    ZT_TRY(zt_engine_delayed_wait(e));
    zt_ctx *ctx = e->ctx;
    zt_unit_state *st = &e->units[u];
    size_t lo = shard_lo(e, u), olo = owned_lo(e, u), on = owned_numel(e, u);
    size_t pat = local_index(full_params(e, u), olo, lo); /* the owned part's place in params */
    int full;
    const zt_tensor *mt = fp32_source(e, u, ZT_STATE_ADAM_M, &full), *vt = fp32_source(e, u, ZT_STATE_ADAM_V, &full);
    int trained = !frozen(e, u); /* a frozen unit has its params only */
    if (m && trained) ZT_TRY(put_f32(e, mt->data, m, on * sizeof(float)));
    if (v && vt->data && trained) ZT_TRY(put_f32(e, vt->data, v, on * sizeof(float))); /* SGD has no v */
    const zt_tensor *master_t = fp32_source(e, u, ZT_STATE_MASTER, &full);
    if (master_t == &st->params) /* fp32 without offload: the params are the master values */
        ZT_TRY(ctx->be->memcpy_async(ctx->be, zt_f32(&st->params) + pat, master, on * sizeof(float), ZT_COPY_H2D,
                                     &ctx->compute, &ctx->err));
    else if (trained) ZT_TRY(put_f32(e, master_t->data, master, on * sizeof(float)));
    /* Compute params of the owned part from the master values (16-bit
     * values rounded on the host, as at init); the rest arrives by
     * zt_engine_gather_params. */
    if (e->cfg.dtype != ZT_FP32) {
        uint16_t *half = malloc(on * sizeof(uint16_t)); /* [on] dtype */
        if (!half) return ZT_FAIL(&ctx->err, ZT_ERR_OOM, "engine: cannot allocate a staging buffer");
        for (size_t k = 0; k < on; k++) zt_dtype_store(half, e->cfg.dtype, k, master[k]);
        zt_status s = ctx->be->memcpy_async(ctx->be, (uint16_t *)st->params.data + pat, half, on * sizeof(uint16_t),
                                            ZT_COPY_H2D, &ctx->compute, &ctx->err);
        if (s == ZT_OK) s = ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err);
        free(half);
        return s;
    }
    if (e->cfg.offload)
        ZT_TRY(ctx->be->memcpy_async(ctx->be, zt_f32(&st->params) + pat, master, on * sizeof(float), ZT_COPY_H2D,
                                     &ctx->compute, &ctx->err));
    return ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err);
}

zt_status zt_engine_gather_params(zt_engine *e) {
    if (full_optim(e)) return ZT_OK; /* stage 0 owns all */
    size_t d = zt_dtype_size(e->cfg.dtype);
    for (int u = 0; u < e->spec->nunits; u++)
        if (full_params(e, u)) /* stages 1-2, stage 3's persistent units; the rest keep their shard */
            ZT_TRY(zt_engine_all_gather_after(e, e->units[u].params.data, e->spec->units[u].shard_numel * d,
                                              &e->ctx->compute));
    return e->ctx->be->stream_sync(e->ctx->be, &e->ctx->compute, &e->ctx->err);
}

zt_status zt_engine_set_owned_params(zt_engine *e, int u, const void *vals) {
    if (u < 0 || u >= e->spec->nunits) return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "no unit %d", u);
    zt_ctx *ctx = e->ctx;
    size_t d = zt_dtype_size(e->cfg.dtype), olo = owned_lo(e, u);
    size_t pat = local_index(full_params(e, u), olo, shard_lo(e, u));
    ZT_TRY(ctx->be->memcpy_async(ctx->be, (char *)e->units[u].params.data + pat * d, vals, owned_numel(e, u) * d,
                                 ZT_COPY_H2D, &ctx->compute, &ctx->err));
    return ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err);
}

zt_engine_state_counters zt_engine_get_counters(const zt_engine *e) {
    zt_engine_state_counters p = {e->steps_taken, e->scaler, e->params_behind};
    return p;
}

void zt_engine_set_counters(zt_engine *e, const zt_engine_state_counters *p) {
    e->steps_taken = p->steps_taken;
    e->scaler = p->scaler;
    e->params_behind = p->params_behind && e->cfg.offload_delay;
}
