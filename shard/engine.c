/* Engine set-up, teardown, closed-form state sizes and the parameter digest. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "engine_internal.h"

/* Both spaces: the device (zeroed on the compute stream) and the host pool. */
static zt_status alloc_in(zt_engine *e, int host, zt_tensor *t, zt_dtype dtype, size_t numel, zt_category cat,
                          const char *what, int unit) {
    char label[40];
    snprintf(label, sizeof label, "%s %s", unit >= 0 ? e->spec->units[unit].name : "engine", what);
    int64_t shape[1] = {(int64_t)numel};
    zt_ctx *ctx = e->ctx;
    zt_mem *mem = host ? &ctx->host_mem : &ctx->device_mem;
    ZT_TRY(zt_tensor_alloc(t, mem, host ? ZT_DEVICE_CPU : ctx->be->device, dtype, 1, shape, cat, label, &ctx->err));
    if (host) {
        memset(t->data, 0, zt_tensor_bytes(t));
        return ZT_OK;
    }
    return ctx->be->memset_async(ctx->be, t->data, 0, zt_tensor_bytes(t), &ctx->compute, &ctx->err);
}

zt_status zt_engine_alloc(zt_engine *e, zt_tensor *t, zt_dtype dtype, size_t numel, zt_category cat,
                          const char *what, int unit) {
    return alloc_in(e, 0, t, dtype, numel, cat, what, unit);
}

zt_status zt_engine_alloc_host(zt_engine *e, zt_tensor *t, zt_dtype dtype, size_t numel, zt_category cat,
                               const char *what, int unit) {
    return alloc_in(e, 1, t, dtype, numel, cat, what, unit);
}

zt_state_bytes zt_engine_state_bytes(const zt_model_spec *spec, int stage, zt_dtype dtype, int offload) {
    zt_state_bytes b;
    memset(&b, 0, sizeof b);
    size_t d = zt_dtype_size(dtype);
    for (int u = 0; u < spec->nunits; u++) {
        size_t P = spec->units[u].padded_numel, S = spec->units[u].shard_numel, owned = stage < 1 ? P : S;
        b.params += (stage < 3 ? P : S) * d;
        b.grads += (stage < 2 ? P : S) * d;
        /* Offload keeps an fp32 master of the owned part even in fp32, as the
         * host-side optimizer's copy of the parameters. */
        if (offload) {
            b.host_master_params += owned * 4;
            b.host_optimizer += owned * 8;
        } else {
            if (dtype != ZT_FP32) b.master_params += owned * 4;
            b.optimizer += owned * 8;
        }
    }
    return b;
}

/* Every rank must run the same layout and configuration, or collectives would
 * be called with mismatched sizes; compare a fingerprint up front. */
static zt_status check_agreement(zt_engine *e) {
    zt_ctx *ctx = e->ctx;
    XXH64_state_t *h = XXH64_createState();
    if (!h) return ZT_FAIL(&ctx->err, ZT_ERR_OOM, "engine: cannot allocate hash state");
    XXH64_reset(h, 0);
    int head[4] = {e->spec->nunits, e->cfg.stage, (int)e->cfg.dtype, (int)e->cfg.reduce_dtype};
    XXH64_update(h, head, sizeof head);
    for (int u = 0; u < e->spec->nunits; u++) {
        size_t sizes[2] = {e->spec->units[u].numel, e->spec->units[u].padded_numel};
        XXH64_update(h, sizes, sizeof sizes);
    }
    unsigned long long mine = XXH64_digest(h);
    XXH64_freeState(h);
    int N = e->comm->world_size;
    unsigned long long *all = calloc((size_t)N, sizeof *all);
    if (!all) return ZT_FAIL(&ctx->err, ZT_ERR_OOM, "engine: cannot allocate");
    zt_status st = zt_comm_all_gather_u64(e->comm, mine, all, &ctx->err);
    for (int r = 0; st == ZT_OK && r < N; r++)
        if (all[r] != all[0])
            st = ZT_FAIL(&ctx->err, ZT_ERR_INVALID,
                         "ranks disagree on the model layout or ZeRO configuration: rank %d has fingerprint "
                         "%016llx, rank 0 has %016llx (same flags on every rank?)",
                         r, all[r], all[0]);
    free(all);
    return st;
}

zt_status zt_engine_init(zt_engine *e, zt_ctx *ctx, zt_comm *comm, const zt_model_spec *spec,
                         const zt_engine_config *cfg, zt_param_init_fn init, void *init_arg) {
    memset(e, 0, sizeof *e);
    e->ctx = ctx;
    e->comm = comm;
    e->spec = spec;
    e->cfg = *cfg;
    if (cfg->stage < 0 || cfg->stage > 3) return ZT_FAIL(&ctx->err, ZT_ERR_INVALID, "ZeRO stage %d", cfg->stage);
    if (cfg->bucket_bytes == 0) e->cfg.bucket_bytes = 1;
    e->kernels = ctx->be->ops_for[cfg->dtype] ? ctx->be->ops_for[cfg->dtype] : ctx->be->ops;
    e->compute_dtype = e->kernels->dtype;
    e->scaler = zt_loss_scaler_initial(cfg);
    e->units = calloc((size_t)spec->nunits, sizeof *e->units);
    if (!e->units) return ZT_FAIL(&ctx->err, ZT_ERR_OOM, "engine: cannot allocate unit table");
    ZT_TRY(check_agreement(e));

    int half = cfg->dtype != ZT_FP32; /* 16-bit params: fp32 master copy */
    for (int u = 0; u < spec->nunits; u++) {
        const zt_unit_spec *us = &spec->units[u];
        zt_unit_state *st = &e->units[u];
        size_t P = us->padded_numel, S = us->shard_numel, lo = shard_lo(e, u);
        st->phase = full_params(e) ? ZT_UNIT_GATHERED : ZT_UNIT_SHARDED;
        ZT_TRY(zt_engine_alloc(e, &st->params, cfg->dtype, full_params(e) ? P : S, ZT_CAT_PARAMS, "params", u));
        ZT_TRY(zt_engine_alloc(e, &st->grads, cfg->dtype, full_grads(e) ? P : S, ZT_CAT_GRADS, "grads", u));
        size_t owned = owned_numel(e, u);
        if (cfg->offload) {
            ZT_TRY(zt_engine_alloc_host(e, &st->host_master, ZT_FP32, owned, ZT_CAT_MASTER_PARAMS, "master", u));
            ZT_TRY(zt_engine_alloc_host(e, &st->host_m, ZT_FP32, owned, ZT_CAT_OPTIMIZER, "adam m", u));
            ZT_TRY(zt_engine_alloc_host(e, &st->host_v, ZT_FP32, owned, ZT_CAT_OPTIMIZER, "adam v", u));
        } else {
            if (half) ZT_TRY(zt_engine_alloc(e, &st->master, ZT_FP32, owned, ZT_CAT_MASTER_PARAMS, "master", u));
            ZT_TRY(zt_engine_alloc(e, &st->adam_m, ZT_FP32, owned, ZT_CAT_OPTIMIZER, "adam m", u));
            ZT_TRY(zt_engine_alloc(e, &st->adam_v, ZT_FP32, owned, ZT_CAT_OPTIMIZER, "adam v", u));
        }

        /* The full initial values are made on the host, then each buffer
         * takes its part (a copy to the device; 16-bit values rounded on the
         * host with the same rounding as the cast kernels). */
        float *vals = malloc(P * sizeof(float)); /* [P] */
        uint16_t *vals16 = half ? malloc(P * sizeof(uint16_t)) : NULL; /* [P] dtype */
        if (!vals || (half && !vals16)) {
            free(vals);
            free(vals16);
            return ZT_FAIL(&ctx->err, ZT_ERR_OOM, "engine: cannot allocate init values for unit %d", u);
        }
        memset(vals, 0, P * sizeof(float));
        for (int p = 0; p < us->nparams; p++) init(init_arg, u, p, vals + us->params[p].offset);
        zt_tensor *fp32_store = cfg->offload ? &st->host_master : half ? &st->master : &st->params;
        int store_full = cfg->offload || half ? full_optim(e) : full_params(e);
        size_t slo = store_full ? 0 : lo, sn = store_full ? P : S;
        size_t plo = full_params(e) ? 0 : lo, pn = full_params(e) ? P : S;
        zt_status s = ZT_OK;
        if (cfg->offload) memcpy(fp32_store->data, vals + slo, sn * sizeof(float)); /* host pool */
        else s = ctx->be->memcpy_async(ctx->be, fp32_store->data, vals + slo, sn * sizeof(float), ZT_COPY_H2D,
                                       &ctx->compute, &ctx->err);
        if (s == ZT_OK && cfg->offload && !half) /* fp32 offload: the device params copy the host master */
            s = ctx->be->memcpy_async(ctx->be, st->params.data, vals + plo, pn * sizeof(float), ZT_COPY_H2D,
                                      &ctx->compute, &ctx->err);
        if (s == ZT_OK && half) {
            for (size_t k = 0; k < pn; k++) zt_dtype_store(vals16, cfg->dtype, k, vals[plo + k]);
            s = ctx->be->memcpy_async(ctx->be, st->params.data, vals16, pn * sizeof(uint16_t), ZT_COPY_H2D,
                                      &ctx->compute, &ctx->err);
        }
        if (s == ZT_OK) s = ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err);
        free(vals);
        free(vals16);
        ZT_TRY(s);
    }
    return ZT_OK;
}

void zt_engine_destroy(zt_engine *e) {
    if (!e->units) return;
    zt_mem *mem = &e->ctx->device_mem;
    zt_error ignore = {0};
    for (int u = 0; u < e->spec->nunits; u++) {
        zt_unit_state *st = &e->units[u];
        if (st->gather_handle.active) zt_comm_wait(e->comm, &st->gather_handle, &ignore);
        zt_tensor *all[] = {&st->params, &st->grads,    &st->master, &st->adam_m,
                            &st->adam_v, &st->gathered, &st->view32, &st->grad32};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) zt_tensor_free(all[i], mem);
        zt_tensor *host[] = {&st->host_master, &st->host_m, &st->host_v};
        for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) zt_tensor_free(host[i], &e->ctx->host_mem);
    }
    zt_engine_offload_release(e);
    if (e->in_flight.handle.active) zt_comm_wait(e->comm, &e->in_flight.handle, &ignore);
    zt_engine_free_bucket(e, &e->filling);
    zt_engine_free_bucket(e, &e->in_flight);
    free(e->units);
    e->units = NULL;
    free(e->now.units);
    for (int p = 0; p < ZT_NPASSES; p++) free(e->recorded[p].units);
}

zt_status zt_engine_digest(zt_engine *e, char hex[33]) {
    zt_ctx *ctx = e->ctx;
    XXH3_state_t *h = XXH3_createState();
    float *full = malloc(e->spec->largest_unit_numel * sizeof(float) + 64); /* host [P] */
    if (!h || !full) {
        XXH3_freeState(h);
        free(full);
        return ZT_FAIL(&ctx->err, ZT_ERR_OOM, "digest: cannot allocate");
    }
    XXH3_128bits_reset(h);
    zt_status st = ZT_OK;
    for (int u = 0; st == ZT_OK && u < e->spec->nunits; u++) {
        size_t S = e->spec->units[u].shard_numel, lo = shard_lo(e, u);
        /* This rank's slice of the fp32 values, then everyone's. */
        st = zt_engine_get_slice(e, u, ZT_STATE_MASTER, full + lo);
        if (st == ZT_OK) st = zt_comm_all_gather_host(e->comm, full, S * sizeof(float), &ctx->err);
        if (st == ZT_OK) XXH3_128bits_update(h, full, e->spec->units[u].numel * sizeof(float));
    }
    XXH128_hash_t d = XXH3_128bits_digest(h);
    XXH3_freeState(h);
    free(full);
    snprintf(hex, 33, "%016llx%016llx", (unsigned long long)d.high64, (unsigned long long)d.low64);
    return st;
}
