/* Engine set-up (configuration checks, agreement across ranks), teardown and the parameter digest. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "gather.h"
#include "zt_optim_engine.h"
#include "placement.h"
#include "reduce.h"
#include "tier.h"
#include "unit_mem.h"

/* Every rank must run the same layout and configuration, or collectives would
 * be called with mismatched sizes; compare a fingerprint up front. */
static zt_status check_agreement(zt_engine *e) {
    zt_ctx *ctx = e->ctx;
    XXH64_state_t *h = XXH64_createState();
    if (!h) return ZT_FAIL(&ctx->err, ZT_ERR_OOM, "engine: cannot allocate hash state");
    XXH64_reset(h, 0);
    int head[9] = {e->spec->nunits, e->cfg.stage,          (int)e->cfg.dtype,     (int)e->cfg.reduce_dtype,
                   e->cfg.offload,  e->cfg.offload_delay,  e->cfg.offload_params, e->cfg.nvme_optimizer,
                   e->cfg.nvme_params}; /* NVMe adds the step's agreement */
    XXH64_update(h, head, sizeof head);
    XXH64_update(h, optim_of(e)->name, strlen(optim_of(e)->name));
    /* The stage-3 knobs decide which collectives run and in what order. */
    size_t knobs[3] = {e->cfg.persist_threshold, e->cfg.max_live_params, e->cfg.max_reuse_distance};
    XXH64_update(h, knobs, sizeof knobs);
    float opt[4] = {e->cfg.adafactor_beta1, e->cfg.adafactor_decay, e->cfg.adafactor_clip, e->cfg.adafactor_eps};
    XXH64_update(h, opt, sizeof opt); /* Adafactor's first moment changes its state's layout */
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

/* Unit u's initial values for the part this rank owns only (each
 * parameter's overlap with it, asked of the model), placed as a
 * checkpoint's are; stages 1-2 then all-gather the rest of the compute
 * params. */
static zt_status set_initial_values(zt_engine *e, int u, zt_param_init_fn init, void *init_arg) {
    const zt_unit_spec *usp = &e->spec->units[u];
    size_t lo, n;
    if (e->ctx->dry) return ZT_OK; /* a replay: values allocate nothing, and nothing reads them */
    ZT_TRY(zt_engine_owned_range(e, u, &lo, &n));
    float *vals = calloc(n ? n : 1, sizeof(float)); /* [n] the owned part, padding zero */
    if (!vals) return ZT_FAIL(&e->ctx->err, ZT_ERR_OOM, "engine: cannot allocate init values for unit %d", u);
    for (int p = 0; p < usp->nparams; p++) {
        size_t off = usp->params[p].offset, end = off + usp->params[p].numel;
        size_t a = off > lo ? off : lo, b = end < lo + n ? end : lo + n;
        if (a < b) init(init_arg, u, p, a - off, b - a, vals + (a - lo));
    }
    zt_status st = zt_engine_set_owned(e, u, vals, NULL, NULL);
    free(vals);
    return st;
}

/* What the NVMe tier runs with: the CPU optimizer's elementwise kinds
 * (their state splits into chunks anywhere), no delayed update (its thread
 * would need the stream too), parameter shards only beside the state. */
zt_status zt_engine_check_nvme(const zt_engine_config *cfg, zt_error *err) {
    if (cfg->nvme_params && !cfg->nvme_optimizer)
        return ZT_FAIL(err, ZT_ERR_INVALID, "`offload_params` nvme needs `offload` nvme (the CPU optimizer writes the "
                       "shards in the file as it streams the state)");
    if (!cfg->nvme_optimizer) return ZT_OK;
    if (!cfg->offload || (cfg->nvme_params && !cfg->offload_params))
        return ZT_FAIL(err, ZT_ERR_INTERNAL, "nvme: set without offload (%d) or offload_params (%d)", cfg->offload,
                       cfg->offload_params);
    const zt_optim *opt = zt_optim_or_default(cfg->optimizer);
    if (!opt->host_range || opt->nslots > 2) {
        char names[256] = ""; /* the registry's optimizers that stream */
        for (int i = 0; i < zt_optim_count(); i++) {
            const zt_optim *o = zt_optim_at(i);
            if (!o->host_range) continue;
            size_t len = strlen(names);
            snprintf(names + len, sizeof names - len, "%s%s", len ? " or " : "", o->name);
        }
        return ZT_FAIL(err, ZT_ERR_INVALID, "`offload` nvme runs `optimizer` %s, not %s: its state is streamed in "
                       "chunks, which a state kept per block or per matrix does not split into", names, opt->name);
    }
    if (cfg->offload_delay)
        return ZT_FAIL(err, ZT_ERR_INVALID, "`offload` nvme cannot run with `offload_delay` 1 (the delayed update's "
                       "thread does not stream the file)");
    if (!cfg->nvme.dir || !cfg->nvme.dir[0])
        return ZT_FAIL(err, ZT_ERR_INVALID, "`offload` nvme needs `nvme_path` DIR");
    return ZT_OK;
}

/* The optimizer's own checks, and what the engine needs of it: a step that
 * is a collective cannot run on the delayed update's thread. */
static zt_status check_optimizer(zt_engine *e) {
    const zt_optim *opt = optim_of(e);
    zt_error *err = &e->ctx->err;
    if (e->cfg.offload_delay && opt->collective)
        return ZT_FAIL(err, ZT_ERR_INVALID, "`offload_delay` 1 cannot run `optimizer` %s: its update sums over the "
                       "ranks (e.g. each matrix's statistics), a collective the delayed update's thread cannot make",
                       opt->name);
    if (e->cfg.master_none && e->cfg.dtype != ZT_BF16)
        return ZT_FAIL(err, ZT_ERR_INVALID, "no fp32 master (--master-dtype none) needs bf16 params (--dtype bf16): "
                       "the params are the only copy, stepped with stochastic rounding");
    if (e->cfg.master_none || e->cfg.state_bf16) {
        for (int i = 0; i < opt->nslots; i++)
            if (opt->slots[i].layout != ZT_SLOT_PER_ELEMENT && opt->slots[i].layout != ZT_SLOT_NOT_HIDDEN)
                return ZT_FAIL(err, ZT_ERR_INVALID, "--master-dtype none and --optim-state-dtype bf16 run elementwise "
                               "optimizers (adamw, sgd, muon), not %s: its %s is not one value per parameter",
                               opt->name, opt->slots[i].name);
        if (e->cfg.offload || e->cfg.nvme_optimizer || e->cfg.offload_delay)
            return ZT_FAIL(err, ZT_ERR_INVALID, "--master-dtype none and --optim-state-dtype bf16 run without "
                           "--offload (the CPU optimizer keeps an fp32 master and fp32 state in the host pool; "
                           "host memory is not what they save)");
    }
    if (!opt->matrix_hook && !opt->device_step)
        return ZT_FAIL(err, ZT_ERR_INTERNAL, "optimizer %s has neither a device step nor a matrix hook", opt->name);
    return opt->check ? opt->check(&e->cfg, err) : ZT_OK;
}

zt_status zt_engine_init(zt_engine *e, zt_ctx *ctx, zt_comm *comm, const zt_model_spec *spec,
                         const zt_engine_config *cfg, zt_param_init_fn init, void *init_arg) {
    return zt_engine_init_hybrid(e, ctx, comm, NULL, comm, spec, cfg, init, init_arg);
}

zt_status zt_engine_init_hybrid(zt_engine *e, zt_ctx *ctx, zt_comm *comm, zt_comm *replicas, zt_comm *world,
                                const zt_model_spec *spec, const zt_engine_config *cfg, zt_param_init_fn init,
                                void *init_arg) {
    memset(e, 0, sizeof *e);
    e->ctx = ctx;
    e->comm = comm;
    e->replicas = replicas && replicas->world_size > 1 ? replicas : NULL;
    e->world = world ? world : comm;
    /* The replicas' sums go through the bucket's buffers, whose total has
     * room for them only if group size x reduce-dtype bytes >= 4
     * (shard/reduce.c). */
    if (e->replicas && comm->world_size * zt_dtype_size(cfg->reduce_dtype) < 4)
        return ZT_FAIL(&ctx->err, ZT_ERR_UNSUPPORTED, "hybrid sharding needs groups of at least %d rank(s) for a %s "
                       "reduce dtype (got %d)", 4 / (int)zt_dtype_size(cfg->reduce_dtype),
                       zt_dtype_name(cfg->reduce_dtype), comm->world_size);
    e->spec = spec;
    e->cfg = *cfg;
    e->cfg.optimizer = zt_optim_or_default(cfg->optimizer);
    e->tier = zt_tier_for(&e->cfg);
    if (cfg->stage < 0 || cfg->stage > 3) return ZT_FAIL(&ctx->err, ZT_ERR_INVALID, "ZeRO stage %d", cfg->stage);
    if (cfg->bucket_bytes == 0) e->cfg.bucket_bytes = 1;
    if (cfg->offload_delay && !cfg->offload)
        return ZT_FAIL(&ctx->err, ZT_ERR_INVALID, "`offload_delay` 1 needs `offload` cpu (the delayed update is the "
                       "CPU Adam's)");
    if (cfg->offload_params && (cfg->stage != 3 || !cfg->offload || cfg->offload_delay))
        return ZT_FAIL(&ctx->err, ZT_ERR_INVALID, "`offload_params` cpu needs `stage` 3 and `offload` cpu, without "
                       "`offload_delay` (got stage %d, offload %s, offload-delay %d): the CPU optimizer updates the "
                       "offloaded shards in place", cfg->stage, cfg->offload ? "cpu" : "none", cfg->offload_delay);
    ZT_TRY(zt_engine_check_nvme(cfg, &e->ctx->err));
    ZT_TRY(check_optimizer(e));
    e->kernels = ctx->be->ops_for[cfg->dtype] ? ctx->be->ops_for[cfg->dtype] : ctx->be->ops;
    e->compute_dtype = e->kernels->dtype;
    e->scaler = zt_loss_scaler_initial(cfg);
    e->units = calloc((size_t)spec->nunits, sizeof *e->units);
    if (!e->units) return ZT_FAIL(&ctx->err, ZT_ERR_OOM, "engine: cannot allocate unit table");
    ZT_TRY(check_agreement(e));
    ZT_TRY(zt_engine_plan_matrices(e));
    if (cfg->stage == 3 && cfg->max_reuse_distance) {
        e->reuse_seen = calloc((size_t)spec->nunits, 1);
        if (!e->reuse_seen) return ZT_FAIL(&ctx->err, ZT_ERR_OOM, "engine: cannot allocate the reuse look-ahead");
    }

    for (int u = 0; u < spec->nunits; u++) ZT_TRY(zt_unit_mem_alloc(e, u));
    zt_gather_init(e);
    zt_status st = e->tier->init(e);
    for (int u = 0; st == ZT_OK && u < spec->nunits; u++) st = set_initial_values(e, u, init, init_arg);
    /* A swap file that cannot be made or written on one rank stops every
     * rank here, before the first collective of the parameters. */
    if (cfg->nvme_optimizer) st = zt_comm_agree(e->world, st, &ctx->err);
    ZT_TRY(st);
    return zt_engine_gather_params(e);
}

void zt_engine_destroy(zt_engine *e) {
    if (!e->units) return;
    e->tier->quiesce(e); /* a thread may write the host buffers freed below */
    zt_gather_quiesce(e);
    for (int u = 0; u < e->spec->nunits; u++) zt_unit_mem_free(e, u);
    e->tier->release(e);
    zt_reduce_release(e);
    free(e->units);
    e->units = NULL;
    free(e->reuse_seen);
    e->reuse_seen = NULL;
    zt_engine_free_matrices(e);
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

const zt_ops *zt_engine_kernels(const zt_engine *e) { return e->kernels; }
zt_dtype zt_engine_compute_dtype(const zt_engine *e) { return e->compute_dtype; }
zt_ctx *zt_engine_context(const zt_engine *e) { return e->ctx; }
const zt_engine_config *zt_engine_settings(const zt_engine *e) { return &e->cfg; }
const zt_model_spec *zt_engine_spec(const zt_engine *e) { return e->spec; }
size_t zt_engine_gathered_peak(const zt_engine *e) { return e->gathered_inflight_peak; }

zt_transfer_stats zt_engine_transfers(const zt_engine *e) {
    zt_transfer_stats t = {e->d2h_bytes,      e->d2h_time_s,    e->h2d_bytes,
                           e->h2d_time_s,     e->delayed_adam_s, e->delayed_wait_s};
    return t;
}
