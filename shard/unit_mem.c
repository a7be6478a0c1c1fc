/* The engine's allocations: every buffer a unit or a bucket holds is a
 * labelled 1-d tensor from the tracked allocator (device) or the host
 * pool, zeroed, with its memory category; and each unit's persistent
 * buffers where the stage and the offload tiers place them (placement.h),
 * and the closed form of their bytes, which the planner reads.
 * Files that need a buffer call down into this file; it calls only the
 * allocator and the backend. */
#include "unit_mem.h"

#include <stdio.h>
#include <string.h>

#include "zt_optim_engine.h"
#include "placement.h"

/* Both spaces: the device (zeroed on the compute stream) and the host pool. */
static zt_status alloc_in(const zt_engine *e, int host, zt_tensor *t, zt_dtype dtype, size_t numel, zt_category cat,
                          const char *what, int unit) {
    char label[40];
    snprintf(label, sizeof label, "%s %s", unit >= 0 ? e->spec->units[unit].name : "engine", what);
    int64_t shape[1] = {(int64_t)numel};
    zt_ctx *ctx = e->ctx;
    zt_mem *mem = host ? &ctx->host_mem : &ctx->device_mem;
    ZT_TRY(zt_tensor_alloc(t, mem, host ? ZT_DEVICE_CPU : ctx->be->device, dtype, 1, shape, cat, label, &ctx->err));
    if (host) {
        if (!ctx->dry) memset(t->data, 0, zt_tensor_bytes(t));
        return ZT_OK;
    }
    return ctx->be->memset_async(ctx->be, t->data, 0, zt_tensor_bytes(t), &ctx->compute, &ctx->err);
}

zt_status zt_engine_alloc(const zt_engine *e, zt_tensor *t, zt_dtype dtype, size_t numel, zt_category cat,
                          const char *what, int unit) {
    return alloc_in(e, 0, t, dtype, numel, cat, what, unit);
}

zt_status zt_engine_alloc_host(const zt_engine *e, zt_tensor *t, zt_dtype dtype, size_t numel, zt_category cat,
                               const char *what, int unit) {
    return alloc_in(e, 1, t, dtype, numel, cat, what, unit);
}

zt_status zt_engine_alloc_bytes(const zt_engine *e, zt_tensor *t, size_t bytes, zt_category cat, const char *what,
                                int unit) {
    return alloc_in(e, 0, t, ZT_FP32, (bytes + 3) / 4, cat, what, unit);
}

/* Quantized gradients with feedback: what each contribution lost, for
 * every element a rank sends (the whole unit). */
static int keeps_feedback(const zt_engine_config *cfg, const zt_unit_spec *usp) {
    return cfg->quant_grads_bits && cfg->quant_feedback && !usp->frozen;
}

/* One optimizer-state tensor of unit u (none when numel is 0), on the
 * device or, under offload, in the host pool. */
static zt_status alloc_state(zt_engine *e, zt_tensor *dev, zt_tensor *host, size_t numel, const char *what, int u) {
    if (numel == 0 || e->cfg.nvme_optimizer) return ZT_OK; /* the NVMe tier keeps it in its file */
    zt_dtype dt = e->cfg.state_bf16 ? ZT_BF16 : ZT_FP32; /* bf16: one value per word slot_words counts */
    if (e->cfg.offload) return zt_engine_alloc_host(e, host, dt, numel, ZT_CAT_OPTIMIZER, what, u);
    return zt_engine_alloc(e, dev, dt, numel, ZT_CAT_OPTIMIZER, what, u);
}

/* A slot whose bytes start at a value other than 0 (8-bit Adam's exp_avg
 * codes at their map's zero). */
static zt_status fill_slot(zt_engine *e, zt_tensor *t, int value) {
    zt_ctx *ctx = e->ctx;
    if (!t->data || value < 0) return ZT_OK;
    if (e->cfg.offload) {
        if (!ctx->dry) memset(t->data, value, zt_tensor_bytes(t));
        return ZT_OK;
    }
    return ctx->be->memset_async(ctx->be, t->data, value, zt_tensor_bytes(t), &ctx->compute, &ctx->err);
}

/* Unit u's optimizer state: each slot of the optimizer's table, sized over
 * the owned part and labelled by its name. */
static zt_status alloc_optimizer_state(zt_engine *e, int u) {
    zt_unit_state *ust = &e->units[u];
    const zt_unit_spec *usp = &e->spec->units[u];
    const zt_optim *opt = optim_of(e);
    size_t lo = owned_lo(e, u), hi = lo + owned_numel(e, u);
    for (int i = 0; i < opt->nslots; i++) {
        size_t words = opt->slot_words(&e->cfg, i, usp, lo, hi);
        ZT_TRY(alloc_state(e, &ust->opt_state[i], &ust->host_opt_state[i], words, opt->slots[i].name, u));
        ZT_TRY(fill_slot(e, opt_slot(e, u, i), opt->slots[i].fill));
    }
    return ZT_OK;
}

/* Unit u's persistent buffers, as the stage and offload place them (zeroed). */
static zt_status alloc_unit_state(zt_engine *e, int u) {
    const zt_unit_spec *usp = &e->spec->units[u];
    zt_unit_state *ust = &e->units[u];
    size_t P = usp->padded_numel, S = usp->shard_numel, owned = owned_numel(e, u);
    zt_dtype dt = e->cfg.dtype;
    if (params_in_file(e, u)) { /* the NVMe tier's file holds the shard */
    } else if (params_on_host(e, u)) {
        ZT_TRY(zt_engine_alloc_host(e, &ust->params, dt, S, ZT_CAT_PARAMS, "params", u));
    } else {
        ZT_TRY(zt_engine_alloc(e, &ust->params, dt, full_params(e, u) ? P : S, ZT_CAT_PARAMS, "params", u));
    }
    if (frozen(e, u)) return ZT_OK;
    ZT_TRY(zt_engine_alloc(e, &ust->grads, dt, full_grads(e) ? P : S, ZT_CAT_GRADS, "grads", u));
    if (keeps_feedback(&e->cfg, usp))
        ZT_TRY(zt_engine_alloc(e, &ust->feedback, e->cfg.feedback_dtype, P, ZT_CAT_COMM_BUFFERS, "error feedback", u));
    if (e->cfg.nvme_optimizer) return ZT_OK; /* master and optimizer state: the file */
    if (e->cfg.offload)
        ZT_TRY(zt_engine_alloc_host(e, &ust->host_master, ZT_FP32, owned, ZT_CAT_MASTER_PARAMS, "master", u));
    else if (dt != ZT_FP32 && !e->cfg.master_none) /* 16-bit params: an fp32 master copy */
        ZT_TRY(zt_engine_alloc(e, &ust->master, ZT_FP32, owned, ZT_CAT_MASTER_PARAMS, "master", u));
    return alloc_optimizer_state(e, u);
}

zt_status zt_unit_mem_alloc(zt_engine *e, int u) { return alloc_unit_state(e, u); }

/* The closed form of what alloc_unit_state allocates (zt_engine.h), beside it
 * so that the two change together. */
zt_state_bytes zt_engine_state_bytes(const zt_model_spec *spec, const zt_engine_config *cfg, int rank) {
    zt_state_bytes b;
    memset(&b, 0, sizeof b);
    size_t d = zt_dtype_size(cfg->dtype);
    int stage = cfg->stage;
    const zt_optim *optim = zt_optim_or_default(cfg->optimizer);
    for (int u = 0; u < spec->nunits; u++) {
        const zt_unit_spec *usp = &spec->units[u];
        size_t P = usp->padded_numel, S = usp->shard_numel, owned = stage < 1 ? P : S;
        size_t lo = stage < 1 ? 0 : (size_t)rank * S;
        zt_sched_knobs k = {stage, cfg->prefetch, cfg->persist_threshold, 0, 0};
        int full = !zt_sched_on_demand(usp, &k);
        if (!full && cfg->nvme_params) b.nvme += zt_nvme_round(S * d);
        else if (!full && cfg->offload_params) b.host_params += S * d;
        else b.params += (full ? P : S) * d;
        if (usp->frozen) continue; /* params only */
        b.grads += (stage < 2 ? P : S) * d;
        if (keeps_feedback(cfg, usp)) b.feedback += P * zt_dtype_size(cfg->feedback_dtype);
        size_t opt = zt_optim_state_bytes(optim, cfg, usp, lo, lo + owned);
        /* Offload keeps an fp32 master of the owned part even in fp32, as the
         * host-side optimizer's copy of the parameters. */
        if (cfg->nvme_optimizer) { /* master and per-element slot regions */
            b.nvme += (1 + (size_t)optim->nslots) * zt_nvme_round(owned * 4);
        } else if (cfg->offload) {
            b.host_master_params += owned * 4;
            b.host_optimizer += opt;
        } else {
            if (cfg->dtype != ZT_FP32 && !cfg->master_none) b.master_params += owned * 4;
            b.optimizer += opt;
        }
    }
    return b;
}


void zt_unit_mem_free(zt_engine *e, int u) {
    zt_mem *mem = &e->ctx->device_mem, *host_mem = &e->ctx->host_mem;
    zt_unit_state *ust = &e->units[u];
    zt_tensor_free(&ust->params, params_on_host(e, u) ? host_mem : mem);
    zt_tensor *all[] = {&ust->grads,     &ust->master, &ust->gathered, &ust->view32,
                        &ust->grad32,    &ust->secondary, &ust->wire, &ust->feedback};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) zt_tensor_free(all[i], mem);
    zt_tensor_free(&ust->host_master, host_mem);
    for (int i = 0; i < ZT_OPTIM_MAX_SLOTS; i++) {
        zt_tensor_free(&ust->opt_state[i], mem);
        zt_tensor_free(&ust->host_opt_state[i], host_mem);
    }
}
