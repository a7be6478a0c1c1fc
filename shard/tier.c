/* The four tiers (tier.h): each a table of hooks over the entry points of
 * the optimizer (the device), shard/offload_step.c (the host pool),
 * shard/delayed_update.c and shard/nvme_state.c. */
#include "tier.h"

#include "offload.h"
#include "zt_optim_engine.h"
#include "placement.h"

static zt_status nothing(zt_engine *e) {
    (void)e;
    return ZT_OK;
}
static zt_status nothing_for(zt_engine *e, int u) {
    (void)e;
    (void)u;
    return ZT_OK;
}
static void nothing_left(zt_engine *e) { (void)e; }

/* The shard copied from where the params live: the device, or the host
 * pool (offload_params). */
static zt_status copy_shard(zt_engine *e, int u, void *dst, zt_copy_kind kind) {
    zt_ctx *ctx = e->ctx;
    size_t bytes = e->spec->units[u].shard_numel * zt_dtype_size(e->cfg.dtype);
    return ctx->be->memcpy_async(ctx->be, dst, e->units[u].params.data, bytes, kind, &ctx->compute, &ctx->err);
}

static zt_status device_update(zt_engine *e, const zt_update_args *a, int skip) {
    return skip ? ZT_OK : zt_engine_device_update(e, a);
}

static zt_status device_load_shard(zt_engine *e, int u, void *dst) { return copy_shard(e, u, dst, ZT_COPY_D2D); }

static zt_status host_load_shard(zt_engine *e, int u, void *dst) {
    return copy_shard(e, u, dst, params_on_host(e, u) ? ZT_COPY_H2D : ZT_COPY_D2D);
}

static zt_status nvme_load_shard(zt_engine *e, int u, void *dst) {
    if (params_in_file(e, u)) return zt_engine_nvme_copy_shard(e, u, dst, ZT_COPY_H2D);
    return host_load_shard(e, u, dst);
}

/* The CPU optimizer of unit u; its new slice arrives on the h2d stream. */
static zt_status host_update_unit(zt_engine *e, int u, void *arg) {
    const zt_update_args *a = arg;
    return zt_engine_offload_step_unit(e, u, a->mult, a->lr, a->t);
}

static zt_status host_update(zt_engine *e, const zt_update_args *a, int skip) {
    if (skip) return ZT_OK;
    zt_status st = zt_engine_offload_begin(e);
    if (st == ZT_OK) st = zt_engine_update_each_unit(e, host_update_unit, (void *)a, &e->ctx->h2d);
    zt_status fin = zt_engine_offload_finish(e);
    return st == ZT_OK ? fin : st;
}

/* An I/O error of one rank's NVMe file stops every rank here, not in the
 * next collective. */
static zt_status nvme_update(zt_engine *e, const zt_update_args *a, int skip) {
    if (skip) return ZT_OK;
    return zt_comm_agree(e->world, host_update(e, a, skip), &e->ctx->err);
}

static zt_status delayed_update(zt_engine *e, const zt_update_args *a, int skip) {
    return zt_engine_delayed_step(e, a->mult, a->lr, skip);
}

/* Its thread writes the host buffers teardown frees; a failure's message
 * stays the one reported. */
static void delayed_quiesce(zt_engine *e) {
    zt_error reported = e->ctx->err;
    (void)zt_engine_delayed_wait(e);
    e->ctx->err = reported;
}

static void nvme_release(zt_engine *e) {
    zt_engine_offload_release(e);
    zt_engine_nvme_destroy(e);
}

static const zt_tier_ops device_tier = {"device", 1, nothing, nothing_for, device_update, device_load_shard,
                                        nothing_left, nothing_left};
static const zt_tier_ops host_tier = {"host", 0, nothing, zt_engine_offload_grads, host_update, host_load_shard,
                                      nothing_left, zt_engine_offload_release};
static const zt_tier_ops delayed_tier = {"host, delayed update", 0, nothing, zt_engine_offload_grads, delayed_update,
                                         host_load_shard, delayed_quiesce, zt_engine_offload_release};
static const zt_tier_ops nvme_tier = {"nvme", 0, zt_engine_nvme_init, zt_engine_offload_grads, nvme_update,
                                      nvme_load_shard, nothing_left, nvme_release};

const zt_tier_ops *zt_tier_for(const zt_engine_config *cfg) {
    if (!cfg->offload) return &device_tier;
    if (cfg->offload_delay) return &delayed_tier;
    return cfg->nvme_optimizer ? &nvme_tier : &host_tier;
}
