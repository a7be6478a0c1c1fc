/* The engine's side of optimizer offload: reduced gradients go device->host
 * on the d2h copy stream while backward continues, the optimizer's host
 * step (optim/, on offload/'s CPU kernels) updates the host master and
 * state, and the new compute-dtype parameters go host->device on the h2d
 * copy stream while the CPU steps the next unit. On the CPU backend the copies are synchronous and the events
 * NULL, so the same code runs in program order. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "zt_time.h"
#include "engine_internal.h"

/* Where unit u's gradients land on the host: fp32 directly, or 16-bit as sent. */
static zt_tensor *grads_in_flight(zt_engine *e, zt_unit_state *st) {
    return e->cfg.dtype != ZT_FP32 ? &st->host_grads16 : &st->host_grads;
}

zt_status zt_engine_offload_grads(zt_engine *e, int u) {
    zt_ctx *ctx = e->ctx;
    zt_backend *be = ctx->be;
    zt_unit_state *st = &e->units[u];
    size_t n = owned_numel(e, u), lo = owned_lo(e, u), at = local_index(full_grads(e), lo, shard_lo(e, u));
    size_t d = zt_dtype_size(e->cfg.dtype);
    /* 16-bit crosses as 16-bit (half the bytes) and is widened to fp32 at the
     * step, one unit at a time, so the host holds 2 bytes per waiting
     * parameter, not 6. */
    zt_tensor *dst = grads_in_flight(e, st);
    if (!dst->data)
        ZT_TRY(zt_engine_alloc_host(e, dst, e->cfg.dtype, n, ZT_CAT_COMM_BUFFERS,
                                    e->cfg.dtype != ZT_FP32 ? "grad staging" : "host grads", u));
    double t0 = zt_now_s();
    /* The copy follows the kernels that stored the reduced gradients. */
    ZT_TRY(zt_stream_after(be, &ctx->d2h, &ctx->compute, &ctx->err));
    ZT_TRY(be->memcpy_async(be, dst->data, (const char *)st->grads.data + at * d, n * d, ZT_COPY_D2H, &ctx->d2h,
                            &ctx->err));
    zt_event_destroy(be, st->d2h_done);
    st->d2h_done = NULL;
    zt_status rs = zt_event_record(be, &ctx->d2h, &st->d2h_done, &ctx->err);
    if (rs != ZT_OK) { /* no event to wait on later: wait now, before dst can be freed */
        zt_error ignore = {0};
        (void)be->stream_sync(be, &ctx->d2h, &ignore);
        return rs;
    }
    e->d2h_bytes += (double)(n * d);
    e->d2h_time_s += zt_now_s() - t0;
    char name[48];
    snprintf(name, sizeof name, "d2h grads %s", e->spec->units[u].name);
    zt_trace_span(ctx->trace, name, "offload", 2, t0);
    return ZT_OK;
}

/* Waits for unit u's gradient copy, if one is in flight. */
static zt_status wait_d2h(zt_engine *e, zt_unit_state *st) {
    zt_ctx *ctx = e->ctx;
    zt_status s = zt_event_sync(ctx->be, st->d2h_done, &ctx->err);
    zt_event_destroy(ctx->be, st->d2h_done);
    st->d2h_done = NULL;
    return s;
}

/* Waits until unit u's gradients are on the host (fp32). */
static zt_status host_grads_ready(zt_engine *e, int u, size_t n) {
    zt_ctx *ctx = e->ctx;
    zt_unit_state *st = &e->units[u];
    double t0 = zt_now_s();
    zt_status s = wait_d2h(e, st);
    e->d2h_time_s += zt_now_s() - t0;
    ZT_TRY(s);
    if (st->host_grads16.data) {
        ZT_TRY(zt_engine_alloc_host(e, &st->host_grads, ZT_FP32, n, ZT_CAT_COMM_BUFFERS, "host grads", u));
        float *dst = zt_f32(&st->host_grads);
        for (size_t i = 0; i < n && !ctx->dry; i++) dst[i] = zt_dtype_load(st->host_grads16.data, e->cfg.dtype, i);
        zt_tensor_free(&st->host_grads16, &ctx->host_mem);
    }
    return ZT_OK;
}

/* Waits for the copy out of h2d slot k and frees its host buffer. */
static zt_status retire_h2d_slot(zt_engine *e, int k) {
    zt_ctx *ctx = e->ctx;
    double t0 = zt_now_s();
    zt_status s = zt_event_sync(ctx->be, e->h2d_done[k], &ctx->err);
    zt_event_destroy(ctx->be, e->h2d_done[k]);
    e->h2d_done[k] = NULL;
    zt_tensor_free(&e->h2d_src[k], &ctx->host_mem);
    e->h2d_time_s += zt_now_s() - t0;
    return s;
}

/* The next h2d slot for unit u's new parameters: the slot's previous copy
 * (two units ago) has had a whole CPU step to finish and is retired first,
 * so its buffer is gone before u's is taken. */
static zt_status retire_next_slot(zt_engine *e) { return retire_h2d_slot(e, e->h2d_slot); }

static zt_status take_next_slot(zt_engine *e, int u, zt_tensor **out) {
    *out = &e->h2d_src[e->h2d_slot];
    return zt_engine_alloc_host(e, *out, e->cfg.dtype, owned_numel(e, u), ZT_CAT_COMM_BUFFERS, "params out", u);
}

/* Copies the slot just filled into unit u's owned part of the device
 * parameters on the h2d stream (which already follows compute:
 * zt_engine_offload_begin), and moves on to the other slot. */
static zt_status send_slot(zt_engine *e, int u) {
    zt_ctx *ctx = e->ctx;
    zt_backend *be = ctx->be;
    zt_unit_state *st = &e->units[u];
    int k = e->h2d_slot;
    size_t n = owned_numel(e, u), d = zt_dtype_size(e->cfg.dtype);
    size_t at = local_index(full_params(e, u), owned_lo(e, u), shard_lo(e, u));
    double t0 = zt_now_s();
    ZT_TRY(be->memcpy_async(be, (char *)st->params.data + at * d, e->h2d_src[k].data, n * d, ZT_COPY_H2D, &ctx->h2d,
                            &ctx->err));
    zt_status rs = zt_event_record(be, &ctx->h2d, &e->h2d_done[k], &ctx->err);
    if (rs != ZT_OK) { /* no event to retire the slot with: wait now */
        zt_error ignore = {0};
        (void)be->stream_sync(be, &ctx->h2d, &ignore);
        return rs;
    }
    e->h2d_slot = k ^ 1;
    e->h2d_bytes += (double)(n * d);
    e->h2d_time_s += zt_now_s() - t0;
    char name[48];
    snprintf(name, sizeof name, "h2d params %s", e->spec->units[u].name);
    zt_trace_span(ctx->trace, name, "offload", 2, t0);
    return ZT_OK;
}

zt_status zt_engine_offload_grads_landed(zt_engine *e, int u) {
    zt_unit_state *st = &e->units[u];
    if (!grads_in_flight(e, st)->data && !st->host_grads.data)
        ZT_TRY(zt_engine_offload_grads(e, u)); /* no bucket carried them */
    return host_grads_ready(e, u, owned_numel(e, u));
}

/* Unit u's optimizer on its host master and state, the new params (its
 * [owned] range, params dtype) into out. */
static zt_status host_update(zt_engine *e, int u, void *out, float clip, float lr, int t) {
    zt_unit_state *st = &e->units[u];
    size_t n = owned_numel(e, u), lo = owned_lo(e, u), numel = e->spec->units[u].numel;
    /* A step may write the fp32 and bf16 copies itself (the fused Adam);
     * fp16, and the others', are rounded below. */
    zt_optim_step s = {clip, lr, t, NULL, 0, NULL, NULL};
    int written = 0;
    /* a replay: the buffers, not their values (a matrix hook's exchange
     * buffers included) */
    if (e->ctx->dry) return optim_of(e)->matrix_hook ? zt_engine_transform_matrices(e, u, NULL, 1) : ZT_OK;
    ZT_TRY(optim_of(e)->host_step(e, u, zt_f32(&st->host_grads), e->cfg.dtype == ZT_FP16 ? NULL : out, &s, &written));
    /* Padding never changes, but the device copy is rewritten whole. */
    const float *p = zt_f32(&st->host_master);
    for (size_t j = 0; j < n; j++)
        if (lo + j >= numel || !written) zt_dtype_store(out, e->cfg.dtype, j, p[j]);
    return ZT_OK;
}

/* One unit's CPU step: the optimizer on the host buffers, the compute-dtype copy
 * written to an h2d slot, then copied into the device parameters. */
zt_status zt_engine_offload_step_unit(zt_engine *e, int u, float clip, float lr, int t) {
    zt_unit_state *st = &e->units[u];
    size_t n = owned_numel(e, u);
    if (!grads_in_flight(e, st)->data) ZT_TRY(zt_engine_offload_grads(e, u)); /* no bucket carried it */
    int in_place = params_on_host(e, u); /* the shard is the output: nothing to copy to the device */
    if (!in_place) ZT_TRY(retire_next_slot(e));
    ZT_TRY(host_grads_ready(e, u, n));
    zt_tensor *out = &st->params;
    if (!in_place) ZT_TRY(take_next_slot(e, u, &out));
    if (e->nvme) /* the state streams through the NVMe tier's buffers */
        ZT_TRY(zt_engine_nvme_step_unit(e, u, zt_f32(&st->host_grads), params_in_file(e, u) ? NULL : out->data, clip,
                                        lr, t));
    else ZT_TRY(host_update(e, u, out->data, clip, lr, t));
    zt_tensor_free(&st->host_grads, &e->ctx->host_mem);
    return in_place ? ZT_OK : send_slot(e, u);
}

/* The delayed update's (never with offload_params: zt_engine_init refuses it). */
zt_status zt_engine_offload_apply_unit(zt_engine *e, int u) {
    ZT_TRY(retire_next_slot(e));
    zt_tensor *out;
    ZT_TRY(take_next_slot(e, u, &out));
    const float *p = zt_f32(&e->units[u].host_master);
    size_t n = owned_numel(e, u);
    for (size_t j = 0; j < n && !e->ctx->dry; j++) zt_dtype_store(out->data, e->cfg.dtype, j, p[j]);
    return send_slot(e, u);
}

zt_status zt_engine_offload_begin(zt_engine *e) {
    /* Once per step, not per unit: the device parameters were last read by
     * this step's kernels, all enqueued by now; waiting again per unit would
     * chain each copy behind the all-gathers compute has since waited for. */
    zt_ctx *ctx = e->ctx;
    /* offload_params: the CPU Adam rewrites the host shards in place, which
     * the gathers' copies on compute read: those must be done, not only
     * ordered (compute is idle by now: the gradients have landed). */
    if (e->cfg.offload_params) ZT_TRY(ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err));
    ZT_TRY(zt_stream_after(ctx->be, &ctx->h2d, &ctx->compute, &ctx->err));
    return e->nvme ? zt_engine_nvme_begin_step(e) : ZT_OK;
}

zt_status zt_engine_offload_finish(zt_engine *e) {
    zt_ctx *ctx = e->ctx;
    /* The next forward reads the new parameters on compute. */
    zt_status s = zt_stream_after(ctx->be, &ctx->compute, &ctx->h2d, &ctx->err);
    if (e->nvme) { /* every write of the step lands before the next one reads */
        zt_status w = zt_engine_nvme_end_step(e);
        if (s == ZT_OK) s = w;
    }
    for (int k = 0; k < 2; k++) {
        zt_status r = retire_h2d_slot(e, k);
        if (s == ZT_OK) s = r;
    }
    e->h2d_slot = 0;
    return s;
}

void zt_engine_offload_release(zt_engine *e) {
    zt_mem *host = &e->ctx->host_mem;
    zt_error reported = e->ctx->err; /* teardown after a failure must not replace its message */
    for (int u = 0; u < e->spec->nunits; u++) {
        zt_unit_state *st = &e->units[u];
        (void)wait_d2h(e, st); /* a copy may still be writing its buffer */
        zt_tensor_free(&st->host_grads, host);
        zt_tensor_free(&st->host_grads16, host);
    }
    for (int k = 0; k < 2; k++) (void)retire_h2d_slot(e, k);
    e->ctx->err = reported;
}
