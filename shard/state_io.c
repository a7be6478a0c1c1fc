/* Reading and writing the engine's state by world slice, for checkpoints. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

/* The buffer holding the fp32 master values and whether it is full (else
 * this rank's owned shard). */
static const zt_tensor *master_source(zt_engine *e, int u, int *is_full) {
    zt_unit_state *ust = &e->units[u];
    if (e->cfg.offload) return *is_full = full_optim(e), &ust->host_master;
    if (e->cfg.dtype != ZT_FP32) return *is_full = full_optim(e), &ust->master;
    return *is_full = full_params(e, u), &ust->params;
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

zt_status zt_engine_fetch_state(zt_engine *e, const zt_tensor *t, void *dst) {
    zt_ctx *ctx = e->ctx;
    size_t bytes = zt_tensor_bytes(t);
    if (bytes == 0) return ZT_OK;
    if (e->cfg.offload) {
        memcpy(dst, t->data, bytes);
        return ZT_OK;
    }
    ZT_TRY(ctx->be->memcpy_async(ctx->be, dst, t->data, bytes, ZT_COPY_D2H, &ctx->compute, &ctx->err));
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

zt_status zt_engine_store_state(zt_engine *e, zt_tensor *t, const void *src) {
    size_t bytes = zt_tensor_bytes(t);
    if (bytes == 0) return ZT_OK;
    ZT_TRY(put_f32(e, t->data, src, bytes));
    return e->cfg.offload ? ZT_OK : e->ctx->be->stream_sync(e->ctx->be, &e->ctx->compute, &e->ctx->err);
}

/* n values of t from element `at` (t's dtype) into host dst, waiting. */
static zt_status fetch_raw(zt_engine *e, const zt_tensor *t, size_t at, size_t n, void *dst) {
    zt_ctx *ctx = e->ctx;
    size_t d = zt_dtype_size(t->dtype);
    const char *from = (const char *)t->data + at * d;
    if (e->cfg.offload) { /* the host pool: plain host memory */
        memcpy(dst, from, n * d);
        return ZT_OK;
    }
    ZT_TRY(ctx->be->memcpy_async(ctx->be, dst, from, n * d, ZT_COPY_D2H, &ctx->compute, &ctx->err));
    return ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err);
}

/* dst[n] fp32 from n values of t at element `at`, widened from bf16 state. */
static zt_status fetch_f32(zt_engine *e, const zt_tensor *t, size_t at, size_t n, float *dst) {
    if (t->dtype == ZT_FP32) return fetch_raw(e, t, at, n, dst);
    uint16_t *half = malloc(n * sizeof *half + 2); /* [n] t's dtype */
    if (!half) return ZT_FAIL(&e->ctx->err, ZT_ERR_OOM, "engine: cannot allocate a staging buffer");
    zt_status st = fetch_raw(e, t, at, n, half);
    for (size_t i = 0; st == ZT_OK && i < n; i++) dst[i] = zt_dtype_load(half, t->dtype, i);
    free(half);
    return st;
}

zt_status zt_engine_fetch_values(zt_engine *e, const zt_tensor *t, float *dst) {
    return fetch_f32(e, t, 0, t->numel, dst);
}

zt_status zt_engine_store_values(zt_engine *e, zt_tensor *t, const float *src) {
    if (t->dtype == ZT_FP32) return zt_engine_store_state(e, t, src);
    uint16_t *half = malloc(t->numel * sizeof *half + 2); /* [numel] t's dtype, rounded to nearest */
    if (!half) return ZT_FAIL(&e->ctx->err, ZT_ERR_OOM, "engine: cannot allocate a staging buffer");
    for (size_t i = 0; i < t->numel; i++) zt_dtype_store(half, t->dtype, i, src[i]);
    zt_status st = zt_engine_store_state(e, t, half);
    free(half);
    return st;
}

/* dst[S] fp32: this rank's slice of `src` (full, or its owned shard). */
static zt_status copy_slice(zt_engine *e, int u, const zt_tensor *src, int full, float *dst) {
    size_t S = e->spec->units[u].shard_numel, lo = shard_lo(e, u);
    return fetch_f32(e, src, local_index(full, lo, lo), S, dst);
}

zt_status zt_engine_get_elementwise_block(zt_engine *e, int u, int i, float *dst) {
    size_t S = e->spec->units[u].shard_numel, lo = shard_lo(e, u);
    if (i >= optim_of(e)->nslots) { /* a block the optimizer does not keep reads as zeros */
        memset(dst, 0, S * sizeof(float));
        return ZT_OK;
    }
    if (e->nvme) /* the NVMe tier's file: this rank's slice of the owned part */
        return zt_engine_nvme_get(e, u, (zt_nvme_array)(ZT_NVME_SLOT0 + i), lo - owned_lo(e, u), S, dst);
    const zt_tensor *t = opt_slot(e, u, i);
    if (!t->data) { /* not kept under this configuration (Adafactor's exp_avg without beta1) */
        memset(dst, 0, S * sizeof(float));
        return ZT_OK;
    }
    return copy_slice(e, u, t, full_optim(e), dst);
}

zt_status zt_engine_get_slice(zt_engine *e, int u, zt_state_kind kind, float *dst) {
    if (u < 0 || u >= e->spec->nunits) return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "no unit %d", u);
    ZT_TRY(zt_engine_delayed_wait(e)); /* the state after every update started */
    if (kind != ZT_STATE_MASTER && frozen(e, u)) { /* a frozen unit keeps no optimizer state: zeros */
        memset(dst, 0, e->spec->units[u].shard_numel * sizeof(float));
        return ZT_OK;
    }
    if (frozen(e, u) || (kind == ZT_STATE_MASTER && e->cfg.master_none)) /* no master: the params are the values */
        return frozen_values(e, u, dst);
    if (kind != ZT_STATE_MASTER) {
        int b = kind == ZT_STATE_OPT0 ? 0 : 1;
        const zt_optim *opt = optim_of(e);
        return opt->get_block ? opt->get_block(e, u, b, dst) : zt_engine_get_elementwise_block(e, u, b, dst);
    }
    if (e->nvme) /* the NVMe tier's file: this rank's slice of the owned part */
        return zt_engine_nvme_get(e, u, ZT_NVME_MASTER, shard_lo(e, u) - owned_lo(e, u),
                                  e->spec->units[u].shard_numel, dst);
    int full;
    const zt_tensor *src = master_source(e, u, &full);
    return copy_slice(e, u, src, full, dst);
}

zt_status zt_engine_get_params_slice(zt_engine *e, int u, void *dst) {
    if (u < 0 || u >= e->spec->nunits) return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "no unit %d", u);
    size_t S = e->spec->units[u].shard_numel, lo = shard_lo(e, u), d = zt_dtype_size(e->cfg.dtype);
    zt_ctx *ctx = e->ctx;
    if (params_in_file(e, u)) return zt_engine_nvme_get(e, u, ZT_NVME_PARAMS, 0, S, dst);
    const char *src = (const char *)e->units[u].params.data + local_index(full_params(e, u), lo, lo) * d;
    ZT_TRY(ctx->be->memcpy_async(ctx->be, dst, src, S * d, params_copy_kind(e, u, ZT_COPY_D2H), &ctx->compute,
                                 &ctx->err));
    return ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err);
}

size_t zt_engine_feedback_bytes(const zt_engine *e) {
    size_t b = 0;
    for (int u = 0; u < e->spec->nunits; u++) b += zt_tensor_bytes(&e->units[u].feedback);
    return b;
}

/* Every unit's feedback to (to_host) or from host, in unit order. */
static zt_status copy_feedback(zt_engine *e, void *host, int to_host) {
    zt_ctx *ctx = e->ctx;
    char *at = host;
    for (int u = 0; u < e->spec->nunits; u++) {
        zt_tensor *f = &e->units[u].feedback;
        size_t n = zt_tensor_bytes(f);
        if (!n) continue;
        ZT_TRY(ctx->be->memcpy_async(ctx->be, to_host ? at : f->data, to_host ? f->data : at, n,
                                     to_host ? ZT_COPY_D2H : ZT_COPY_H2D, &ctx->compute, &ctx->err));
        at += n;
    }
    return ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err);
}

zt_status zt_engine_get_feedback(zt_engine *e, void *host) { return copy_feedback(e, host, 1); }
zt_status zt_engine_set_feedback(zt_engine *e, const void *host) { return copy_feedback(e, (void *)host, 0); }

zt_status zt_engine_owned_range(const zt_engine *e, int u, size_t *lo, size_t *n) {
    if (u < 0 || u >= e->spec->nunits) return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "no unit %d", u);
    *lo = owned_lo(e, u);
    *n = owned_numel(e, u);
    return ZT_OK;
}

zt_status zt_engine_state_span(const zt_engine *e, int u, size_t *lo, size_t *n) {
    if (u < 0 || u >= e->spec->nunits) return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "no unit %d", u);
    size_t a = owned_lo(e, u), b = a + owned_numel(e, u);
    if (optim_of(e)->block_span) optim_of(e)->block_span(&e->spec->units[u], 1, a, b, &a, &b);
    *lo = a;
    *n = b - a;
    return ZT_OK;
}

zt_status zt_engine_set_elementwise_block(zt_engine *e, int u, int i, const float *vals) {
    size_t on = owned_numel(e, u);
    if (i >= optim_of(e)->nslots) return ZT_OK; /* a block it does not keep */
    if (e->nvme) return zt_engine_nvme_put(e, u, (zt_nvme_array)(ZT_NVME_SLOT0 + i), 0, on, vals);
    zt_tensor *t = opt_slot(e, u, i);
    if (t->data && t->dtype != ZT_FP32) return zt_engine_store_values(e, t, vals); /* bf16 state, on owned */
    return t->data ? put_f32(e, t->data, vals, on * sizeof(float)) : ZT_OK; /* not kept: nothing to set */
}

/* The optimizer's part of zt_engine_set_owned (b0, b1 NULL: left as they are). */
static zt_status set_owned_state(zt_engine *e, int u, const float *b0, const float *b1) {
    const zt_optim *opt = optim_of(e);
    const float *blocks[2] = {b0, b1};
    for (int b = 0; b < 2; b++) {
        if (!blocks[b]) continue;
        ZT_TRY(opt->set_block ? opt->set_block(e, u, b, blocks[b])
                              : zt_engine_set_elementwise_block(e, u, b, blocks[b]));
    }
    return ZT_OK;
}

zt_status zt_engine_set_owned(zt_engine *e, int u, const float *master, const float *b0, const float *b1) {
    if (u < 0 || u >= e->spec->nunits) return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "no unit %d", u);
    ZT_TRY(zt_engine_delayed_wait(e));
    zt_ctx *ctx = e->ctx;
    zt_unit_state *st = &e->units[u];
    size_t lo = shard_lo(e, u), olo = owned_lo(e, u), on = owned_numel(e, u);
    size_t pat = local_index(full_params(e, u), olo, lo); /* the owned part's place in params */
    int full;
    int trained = !frozen(e, u); /* a frozen unit has its params only */
    if (trained) ZT_TRY(set_owned_state(e, u, b0, b1));
    const zt_tensor *master_t = master_source(e, u, &full);
    if (e->nvme) {
        if (trained) ZT_TRY(zt_engine_nvme_put(e, u, ZT_NVME_MASTER, 0, on, master));
    } else if (e->cfg.master_none) { /* no master: only the params below, rounded from the values */
    } else if (master_t == &st->params) /* fp32 without offload: the params are the master values */
        ZT_TRY(ctx->be->memcpy_async(ctx->be, zt_f32(&st->params) + pat, master, on * sizeof(float), ZT_COPY_H2D,
                                     &ctx->compute, &ctx->err));
    else if (trained) ZT_TRY(put_f32(e, master_t->data, master, on * sizeof(float)));
    /* Compute params of the owned part from the master values (16-bit
     * values rounded on the host, as at init); the rest arrives by
     * zt_engine_gather_params. fp32 without offload wrote them above. */
    if (e->cfg.dtype == ZT_FP32)
        return master_t == &st->params ? ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err)
                                       : zt_engine_set_owned_params(e, u, master);
    uint16_t *half = malloc(on * sizeof(uint16_t)); /* [on] dtype */
    if (!half) return ZT_FAIL(&ctx->err, ZT_ERR_OOM, "engine: cannot allocate a staging buffer");
    for (size_t k = 0; k < on; k++) zt_dtype_store(half, e->cfg.dtype, k, master[k]);
    zt_status s = zt_engine_set_owned_params(e, u, half);
    free(half);
    return s;
}

zt_status zt_engine_gather_params(zt_engine *e) {
    if (full_optim(e)) return ZT_OK; /* stage 0 owns all */
    size_t d = zt_dtype_size(e->cfg.dtype);
    for (int u = 0; u < e->spec->nunits; u++)
        if (full_params(e, u)) /* stages 1-2, stage 3's persistent units; the rest keep their shard */
            ZT_TRY(zt_coll_all_gather_after(e, e->units[u].params.data, e->spec->units[u].shard_numel * d,
                                           &e->ctx->compute, u));
    return e->ctx->be->stream_sync(e->ctx->be, &e->ctx->compute, &e->ctx->err);
}

zt_status zt_engine_set_owned_params(zt_engine *e, int u, const void *vals) {
    if (u < 0 || u >= e->spec->nunits) return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "no unit %d", u);
    zt_ctx *ctx = e->ctx;
    size_t d = zt_dtype_size(e->cfg.dtype), olo = owned_lo(e, u);
    size_t pat = local_index(full_params(e, u), olo, shard_lo(e, u));
    if (params_in_file(e, u)) return zt_engine_nvme_put(e, u, ZT_NVME_PARAMS, 0, owned_numel(e, u), vals);
    ZT_TRY(ctx->be->memcpy_async(ctx->be, (char *)e->units[u].params.data + pat * d, vals, owned_numel(e, u) * d,
                                 params_copy_kind(e, u, ZT_COPY_H2D), &ctx->compute, &ctx->err));
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
