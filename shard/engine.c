/* Engine set-up, teardown, closed-form state sizes and the parameter digest. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "engine_internal.h"

zt_status zt_engine_alloc(zt_engine *e, zt_tensor *t, zt_dtype dtype, size_t numel, zt_category cat,
                          const char *what, int unit) {
    char label[40];
    snprintf(label, sizeof label, "%s %s", unit >= 0 ? e->spec->units[unit].name : "engine", what);
    int64_t shape[1] = {(int64_t)numel};
    zt_ctx *ctx = e->ctx;
    ZT_TRY(zt_tensor_alloc(t, &ctx->device_mem, ctx->be->device, dtype, 1, shape, cat, label, &ctx->err));
    return ctx->be->memset_async(ctx->be, t->data, 0, zt_tensor_bytes(t), &ctx->compute, &ctx->err);
}

zt_status zt_engine_alloc_host(zt_engine *e, zt_tensor *t, zt_dtype dtype, size_t numel, zt_category cat,
                               const char *what, int unit) {
    char label[40];
    snprintf(label, sizeof label, "%s %s", unit >= 0 ? e->spec->units[unit].name : "engine", what);
    int64_t shape[1] = {(int64_t)numel};
    zt_ctx *ctx = e->ctx;
    ZT_TRY(zt_tensor_alloc(t, &ctx->host_mem, ZT_DEVICE_CPU, dtype, 1, shape, cat, label, &ctx->err));
    memset(t->data, 0, zt_tensor_bytes(t));
    return ZT_OK;
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
            if (dtype == ZT_BF16) b.master_params += owned * 4;
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
    int head[3] = {e->spec->nunits, e->cfg.stage, (int)e->cfg.dtype};
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
    e->units = calloc((size_t)spec->nunits, sizeof *e->units);
    if (!e->units) return ZT_FAIL(&ctx->err, ZT_ERR_OOM, "engine: cannot allocate unit table");
    ZT_TRY(check_agreement(e));

    const zt_ops *ops = ctx->be->ops;
    int bf16 = cfg->dtype == ZT_BF16;
    for (int u = 0; u < spec->nunits; u++) {
        const zt_unit_spec *us = &spec->units[u];
        zt_unit_state *st = &e->units[u];
        size_t P = us->padded_numel, S = us->shard_numel, lo = shard_lo(e, u);
        ZT_TRY(zt_engine_alloc(e, &st->params, cfg->dtype, full_params(e) ? P : S, ZT_CAT_PARAMS, "params", u));
        ZT_TRY(zt_engine_alloc(e, &st->grads, cfg->dtype, full_grads(e) ? P : S, ZT_CAT_GRADS, "grads", u));
        size_t owned = owned_numel(e, u);
        if (cfg->offload) {
            ZT_TRY(zt_engine_alloc_host(e, &st->host_master, ZT_FP32, owned, ZT_CAT_MASTER_PARAMS, "master", u));
            ZT_TRY(zt_engine_alloc_host(e, &st->host_m, ZT_FP32, owned, ZT_CAT_OPTIMIZER, "adam m", u));
            ZT_TRY(zt_engine_alloc_host(e, &st->host_v, ZT_FP32, owned, ZT_CAT_OPTIMIZER, "adam v", u));
        } else {
            if (bf16) ZT_TRY(zt_engine_alloc(e, &st->master, ZT_FP32, owned, ZT_CAT_MASTER_PARAMS, "master", u));
            ZT_TRY(zt_engine_alloc(e, &st->adam_m, ZT_FP32, owned, ZT_CAT_OPTIMIZER, "adam m", u));
            ZT_TRY(zt_engine_alloc(e, &st->adam_v, ZT_FP32, owned, ZT_CAT_OPTIMIZER, "adam v", u));
        }

        /* The full initial values, then each buffer takes its part. They are
         * generated straight into the fp32 buffer that holds the whole unit
         * when there is one, else into a temporary. */
        zt_tensor *fp32_store = cfg->offload ? &st->host_master : bf16 ? &st->master : &st->params;
        int store_full = cfg->offload || bf16 ? full_optim(e) : full_params(e);
        zt_tensor temp = {0};
        if (!store_full) ZT_TRY(zt_engine_alloc(e, &temp, ZT_FP32, P, ZT_CAT_WORKSPACE, "init values", u));
        float *vals = zt_f32(store_full ? fp32_store : &temp); /* [P] */
        for (int p = 0; p < us->nparams; p++) init(init_arg, u, p, vals + us->params[p].offset);
        if (!store_full) memcpy(fp32_store->data, vals + lo, S * sizeof(float));
        if (cfg->offload && !bf16) {
            /* fp32 offload: the device params are a copy of the host master. */
            size_t plo = full_params(e) ? 0 : lo, pn = full_params(e) ? P : S;
            memcpy(st->params.data, vals + plo, pn * sizeof(float));
        }
        if (bf16) {
            size_t plo = full_params(e) ? 0 : lo, pn = full_params(e) ? P : S;
            ops->cast_f32_to_bf16(&ctx->compute, st->params.data, vals + plo, pn);
        }
        zt_tensor_free(&temp, &ctx->device_mem);
    }
    return ZT_OK;
}

static void free_bucket(zt_engine *e, zt_bucket *b) {
    zt_mem *mem = &e->ctx->device_mem;
    zt_tensor_free(&b->send, mem);
    zt_tensor_free(&b->staging, mem);
    zt_tensor_free(&b->reduced, mem);
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
        zt_tensor *host[] = {&st->host_master, &st->host_m, &st->host_v, &st->host_grads};
        for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) zt_tensor_free(host[i], &e->ctx->host_mem);
    }
    if (e->in_flight.handle.active) zt_comm_wait(e->comm, &e->in_flight.handle, &ignore);
    free_bucket(e, &e->filling);
    free_bucket(e, &e->in_flight);
    free(e->units);
    e->units = NULL;
}

zt_status zt_engine_digest(zt_engine *e, char hex[33]) {
    zt_ctx *ctx = e->ctx;
    XXH3_state_t *h = XXH3_createState();
    if (!h) return ZT_FAIL(&ctx->err, ZT_ERR_OOM, "digest: cannot allocate hash state");
    XXH3_128bits_reset(h);
    zt_status st = ZT_OK;
    for (int u = 0; st == ZT_OK && u < e->spec->nunits; u++) {
        zt_unit_state *us = &e->units[u];
        size_t P = e->spec->units[u].padded_numel, S = e->spec->units[u].shard_numel, lo = shard_lo(e, u);
        /* The fp32 source of truth: the host master (offload), the master
         * (bf16) or the params (fp32). */
        const zt_tensor *src = e->cfg.offload ? &us->host_master : e->cfg.dtype == ZT_BF16 ? &us->master : &us->params;
        int src_full = e->cfg.offload || e->cfg.dtype == ZT_BF16 ? full_optim(e) : full_params(e);
        zt_tensor full;
        if ((st = zt_engine_alloc(e, &full, ZT_FP32, P, ZT_CAT_WORKSPACE, "digest", u)) != ZT_OK) break;
        float *dst = zt_f32(&full); /* [P] */
        memcpy(dst + lo, zt_f32(src) + local_index(src_full, lo, lo), S * sizeof(float));
        zt_comm_handle hd = {0};
        st = zt_comm_all_gather_start(e->comm, NULL, dst, S * sizeof(float), &hd, &ctx->err);
        if (st == ZT_OK) st = zt_comm_wait(e->comm, &hd, &ctx->err);
        if (st == ZT_OK) XXH3_128bits_update(h, dst, e->spec->units[u].numel * sizeof(float));
        zt_tensor_free(&full, &ctx->device_mem);
    }
    XXH128_hash_t d = XXH3_128bits_digest(h);
    XXH3_freeState(h);
    snprintf(hex, 33, "%016llx%016llx", (unsigned long long)d.high64, (unsigned long long)d.low64);
    return st;
}
