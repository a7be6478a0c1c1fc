/* Parameter access for compute: just-in-time all-gather with prefetch at
 * stage 3, and the fp32 up-cast of 16-bit parameters on a backend that has
 * no kernels in their dtype. */
#include <stdio.h>
#include <string.h>

#include "engine_internal.h"

static zt_status check_unit(zt_engine *e, int unit) {
    if (unit < 0 || unit >= e->spec->nunits) return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "no unit %d", unit);
    return ZT_OK;
}

/* Stage 3: allocate u's full buffer, put our shard in place, start the gather. */
static zt_status start_gather(zt_engine *e, int u) {
    zt_unit_state *st = &e->units[u];
    const zt_unit_spec *us = &e->spec->units[u];
    size_t d = zt_dtype_size(e->cfg.dtype);
    ZT_TRY(zt_engine_alloc(e, &st->gathered, e->cfg.dtype, us->padded_numel, ZT_CAT_GATHERED_PARAMS, "gathered", u));
    e->gathered_inflight_now += zt_tensor_bytes(&st->gathered);
    if (e->gathered_inflight_now > e->gathered_inflight_peak) e->gathered_inflight_peak = e->gathered_inflight_now;
    zt_ctx *ctx = e->ctx;
    ZT_TRY(ctx->be->memcpy_async(ctx->be, (char *)st->gathered.data + shard_lo(e, u) * d, st->params.data,
                                 us->shard_numel * d, ZT_COPY_D2D, &ctx->compute, &ctx->err));
    char name[48];
    snprintf(name, sizeof name, "gather %s", us->name);
    zt_trace_instant(e->ctx->trace, name, "unit", 1);
    /* The collective runs after everything queued on compute so far: this
     * copy, and every kernel that read a block freed before the buffer was
     * allocated, so reusing a cached block is safe on any stream. Without
     * overlap it has also completed on return. */
    ZT_TRY(zt_engine_all_gather_start_after(e, st->gathered.data, us->shard_numel * d, &ctx->compute,
                                            &st->gather_handle));
    st->gather_state = e->cfg.overlap_comm ? ZT_GATHER_IN_FLIGHT : ZT_GATHER_READY;
    return ZT_OK;
}

/* Forward visits units in increasing order, backward in decreasing order. */
static zt_status prefetch_after(zt_engine *e, int u) {
    int dir = e->ctx->device_mem.phase == ZT_PHASE_BACKWARD ? -1 : 1;
    for (int k = 1; k <= e->cfg.prefetch; k++) {
        int v = u + dir * k;
        if (v < 0 || v >= e->spec->nunits) break;
        if (e->units[v].gather_state == ZT_GATHER_NONE) ZT_TRY(start_gather(e, v));
    }
    return ZT_OK;
}

zt_status zt_engine_gather(zt_engine *e, int unit, const void **params) {
    ZT_TRY(check_unit(e, unit));
    ZT_TRY(zt_engine_progress(e));
    zt_ctx *ctx = e->ctx;
    zt_unit_state *st = &e->units[unit];
    const void *full = st->params.data; /* [padded] dtype */
    if (e->cfg.stage == 3) {
        if (st->gather_state == ZT_GATHER_NONE) ZT_TRY(start_gather(e, unit));
        if (st->gather_state == ZT_GATHER_IN_FLIGHT) {
            /* Kernels queued from here on read the gathered values: the
             * compute stream waits for the collective, the host does not. */
            ZT_TRY(zt_comm_wait_stream(e->comm, &st->gather_handle, ctx->compute.handle, &ctx->err));
            st->gather_state = ZT_GATHER_READY;
        }
        if (st->gather_count == 0) ZT_TRY(prefetch_after(e, unit));
        full = st->gathered.data;
    }
    int widen = e->compute_dtype != e->cfg.dtype;
    if (widen && st->gather_count == 0) {
        size_t P = e->spec->units[unit].padded_numel;
        ZT_TRY(zt_engine_alloc(e, &st->view32, ZT_FP32, P, ZT_CAT_WORKSPACE, "fp32 view", unit));
        ctx->be->ops->cast(&ctx->compute, st->view32.data, ZT_FP32, full, e->cfg.dtype, P);
    }
    st->gather_count++;
    *params = widen ? st->view32.data : full;
    return ZT_OK;
}

void zt_engine_release(zt_engine *e, int unit) {
    if (unit < 0 || unit >= e->spec->nunits) return;
    zt_unit_state *st = &e->units[unit];
    if (st->gather_count <= 0 || --st->gather_count > 0) return;
    zt_mem *mem = &e->ctx->device_mem;
    zt_tensor_free(&st->view32, mem);
    if (e->cfg.stage == 3) {
        /* reshard_after_forward: the full copy goes as soon as it is unused.
         * Its readers may still be queued on compute; the block is reused
         * either by compute (after them, in stream order) or by a collective
         * that first waits for compute (start_gather, flush_bucket). */
        e->gathered_inflight_now -= zt_tensor_bytes(&st->gathered);
        zt_tensor_free(&st->gathered, mem);
        st->gather_state = ZT_GATHER_NONE;
        char name[48];
        snprintf(name, sizeof name, "free %s", e->spec->units[unit].name);
        zt_trace_instant(e->ctx->trace, name, "unit", 0);
    }
}

zt_status zt_engine_drop_prefetched(zt_engine *e) {
    for (int u = 0; u < e->spec->nunits; u++) {
        zt_unit_state *st = &e->units[u];
        if (st->gather_state == ZT_GATHER_NONE || st->gather_count > 0) continue;
        if (st->gather_state == ZT_GATHER_IN_FLIGHT) ZT_TRY(zt_comm_wait(e->comm, &st->gather_handle, &e->ctx->err));
        e->gathered_inflight_now -= zt_tensor_bytes(&st->gathered);
        zt_tensor_free(&st->gathered, &e->ctx->device_mem);
        st->gather_state = ZT_GATHER_NONE;
    }
    return ZT_OK;
}

zt_status zt_engine_progress(zt_engine *e) {
    if (e->comm->world_size == 1) return ZT_OK;
    for (int u = 0; u < e->spec->nunits; u++)
        if (e->units[u].gather_state == ZT_GATHER_IN_FLIGHT)
            ZT_TRY(zt_comm_progress(e->comm, &e->units[u].gather_handle, &e->ctx->err));
    return zt_comm_progress(e->comm, &e->in_flight.handle, &e->ctx->err);
}

zt_status zt_engine_ready_event(zt_engine *e, zt_stream *producer, void **ready) {
    zt_ctx *ctx = e->ctx;
    *ready = NULL;
    if (e->comm->ops->takes_events) return zt_event_record(ctx->be, producer, ready, &ctx->err);
    return ctx->be->stream_sync(ctx->be, producer, &ctx->err);
}

zt_status zt_engine_all_gather_start_after(zt_engine *e, void *buf, size_t bytes_per_rank, zt_stream *producer,
                                           zt_comm_handle *h) {
    zt_ctx *ctx = e->ctx;
    void *ready = NULL;
    ZT_TRY(zt_engine_ready_event(e, producer, &ready));
    zt_status st = zt_comm_all_gather_start(e->comm, NULL, buf, bytes_per_rank, ready, h, &ctx->err);
    zt_event_destroy(ctx->be, ready);
    ZT_TRY(st);
    if (!e->cfg.overlap_comm) return zt_comm_wait(e->comm, h, &ctx->err);
    return ZT_OK;
}

zt_status zt_engine_all_gather_finish(zt_engine *e, zt_comm_handle *h) {
    return zt_comm_wait_stream(e->comm, h, e->ctx->compute.handle, &e->ctx->err);
}

zt_status zt_engine_all_gather_after(zt_engine *e, void *buf, size_t bytes_per_rank, zt_stream *producer) {
    zt_comm_handle h = {0};
    ZT_TRY(zt_engine_all_gather_start_after(e, buf, bytes_per_rank, producer, &h));
    return zt_engine_all_gather_finish(e, &h);
}
