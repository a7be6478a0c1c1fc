/* Reading and writing the engine's state by world slice, for checkpoints. */
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

/* The buffer holding `kind` and whether it is full (else this rank's owned shard). */
static const zt_tensor *fp32_source(zt_engine *e, int u, zt_state_kind kind, int *is_full) {
    zt_unit_state *st = &e->units[u];
    if (kind == ZT_STATE_MASTER) {
        if (e->cfg.offload) return *is_full = full_optim(e), &st->host_master;
        if (e->cfg.dtype == ZT_BF16) return *is_full = full_optim(e), &st->master;
        return *is_full = full_params(e), &st->params;
    }
    *is_full = full_optim(e);
    if (e->cfg.offload) return kind == ZT_STATE_ADAM_M ? &st->host_m : &st->host_v;
    return kind == ZT_STATE_ADAM_M ? &st->adam_m : &st->adam_v;
}

zt_status zt_engine_get_slice(zt_engine *e, int u, zt_state_kind kind, float *dst) {
    if (u < 0 || u >= e->spec->nunits) return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "no unit %d", u);
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
    const char *src = (const char *)e->units[u].params.data + local_index(full_params(e), lo, lo) * d;
    ZT_TRY(ctx->be->memcpy_async(ctx->be, dst, src, S * d, ZT_COPY_D2H, &ctx->compute, &ctx->err));
    return ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err);
}

zt_status zt_engine_set_state(zt_engine *e, int u, const float *master_full, const float *m_full,
                              const float *v_full) {
    if (u < 0 || u >= e->spec->nunits) return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "no unit %d", u);
    zt_ctx *ctx = e->ctx;
    zt_unit_state *st = &e->units[u];
    size_t P = e->spec->units[u].padded_numel, S = e->spec->units[u].shard_numel, lo = shard_lo(e, u);
    size_t olo = owned_lo(e, u), on = owned_numel(e, u);
    size_t plo = full_params(e) ? 0 : lo, pn = full_params(e) ? P : S;
    /* Optimizer state and master: the owned part. */
    struct {
        zt_state_kind kind;
        const float *full;
    } parts[] = {{ZT_STATE_MASTER, master_full}, {ZT_STATE_ADAM_M, m_full}, {ZT_STATE_ADAM_V, v_full}};
    for (size_t i = 0; i < 3; i++) {
        int full;
        const zt_tensor *dst = fp32_source(e, u, parts[i].kind, &full);
        size_t from = parts[i].kind == ZT_STATE_MASTER && dst == &st->params ? plo : olo;
        size_t n = parts[i].kind == ZT_STATE_MASTER && dst == &st->params ? pn : on;
        if (e->cfg.offload) memcpy(dst->data, parts[i].full + from, n * sizeof(float)); /* host pool */
        else
            ZT_TRY(ctx->be->memcpy_async(ctx->be, dst->data, parts[i].full + from, n * sizeof(float), ZT_COPY_H2D,
                                         &ctx->compute, &ctx->err));
    }
    /* Compute params from the master values (bf16 rounded on the host). */
    if (e->cfg.dtype == ZT_BF16) {
        zt_bf16 *half = malloc(pn * sizeof(zt_bf16));
        if (!half) return ZT_FAIL(&ctx->err, ZT_ERR_OOM, "engine: cannot allocate a staging buffer");
        for (size_t k = 0; k < pn; k++) half[k] = zt_f32_to_bf16(master_full[plo + k]);
        zt_status s = ctx->be->memcpy_async(ctx->be, st->params.data, half, pn * sizeof(zt_bf16), ZT_COPY_H2D,
                                            &ctx->compute, &ctx->err);
        if (s == ZT_OK) s = ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err);
        free(half);
        ZT_TRY(s);
    } else if (e->cfg.offload) {
        ZT_TRY(ctx->be->memcpy_async(ctx->be, st->params.data, master_full + plo, pn * sizeof(float), ZT_COPY_H2D,
                                     &ctx->compute, &ctx->err));
    }
    return ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err);
}
