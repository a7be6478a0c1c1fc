/* The engine's collectives (collectives.h): each starts after its
 * producer, carries a label for the watchdog and, without overlap_comm,
 * completes before it returns (the serial baseline). */
#include "collectives.h"

#include <stdio.h>

zt_status zt_coll_ready_event(zt_engine *e, zt_stream *producer, void **ready) {
    zt_ctx *ctx = e->ctx;
    *ready = NULL;
    if (e->comm->ops->takes_events) return zt_event_record(ctx->be, producer, ready, &ctx->err);
    return ctx->be->stream_sync(ctx->be, producer, &ctx->err);
}

zt_status zt_coll_all_gather_on(zt_engine *e, zt_comm *comm, void *buf, size_t bytes_per_rank, zt_stream *producer,
                                const char *what, zt_comm_handle *h) {
    zt_ctx *ctx = e->ctx;
    void *ready = NULL;
    ZT_TRY(zt_coll_ready_event(e, producer, &ready));
    zt_status st = zt_comm_all_gather_start(comm, NULL, buf, bytes_per_rank, ready, h, &ctx->err);
    zt_event_destroy(ctx->be, ready);
    ZT_TRY(st);
    snprintf(h->what, sizeof h->what, "%s", what); /* for the watchdog */
    if (!e->cfg.overlap_comm) return zt_comm_wait(comm, h, &ctx->err);
    return ZT_OK;
}

zt_status zt_coll_unit_gather_start(zt_engine *e, zt_comm *comm, int u, void *buf, size_t bytes_per_rank,
                                    zt_stream *producer, zt_comm_handle *h) {
    char what[48]; /* what the watchdog names */
    snprintf(what, sizeof what, "unit %s", e->spec->units[u].name);
    return zt_coll_all_gather_on(e, comm, buf, bytes_per_rank, producer, what, h);
}

zt_status zt_coll_unit_gather_join(zt_engine *e, zt_comm *comm, zt_comm_handle *h) {
    return zt_comm_wait_stream(comm, h, e->ctx->compute.handle, &e->ctx->err);
}

zt_status zt_coll_unit_gather_wait(zt_engine *e, zt_comm *comm, zt_comm_handle *h) {
    return zt_comm_wait(comm, h, &e->ctx->err);
}

zt_status zt_coll_all_gather_after(zt_engine *e, void *buf, size_t bytes_per_rank, zt_stream *producer, int u) {
    zt_comm_handle h = {0};
    ZT_TRY(zt_coll_unit_gather_start(e, e->comm, u, buf, bytes_per_rank, producer, &h));
    return zt_coll_unit_gather_join(e, e->comm, &h);
}

zt_status zt_coll_reduce_scatter_start(zt_engine *e, zt_bucket *b) {
    zt_ctx *ctx = e->ctx;
    size_t N = (size_t)e->comm->world_size;
    /* After the pack (and whatever last read the blocks now in this bucket). */
    void *ready = NULL;
    ZT_TRY(zt_coll_ready_event(e, &ctx->compute, &ready));
    zt_status st = zt_comm_reduce_scatter_start(e->comm, b->send.data, b->staging.data, zt_f32(&b->reduced),
                                                b->numel / N, e->cfg.reduce_dtype, ready, &b->handle, &ctx->err);
    zt_event_destroy(ctx->be, ready);
    ZT_TRY(st);
    snprintf(b->handle.what, sizeof b->handle.what, "the gradients of %d unit(s) from %.31s", b->nunits,
             e->spec->units[b->units[0]].name); /* for the watchdog */
    return ZT_OK;
}

zt_status zt_coll_reduce_scatter_join(zt_engine *e, zt_bucket *b) {
    if (e->cfg.overlap_comm) return zt_comm_wait_stream(e->comm, &b->handle, e->ctx->compute.handle, &e->ctx->err);
    return zt_comm_wait(e->comm, &b->handle, &e->ctx->err);
}

/* Piece by piece, every replica's sums are all-gathered into `send` (free
 * since the all-to-all ended: [R][piece] fp32) and added in replica order
 * into a total in `staging` (total = c0, then += c1, ...: the same adds on
 * every replica and at every stage), which then replaces the sums. Device
 * kernels and the replicas' communicator (MPI on host buffers, NCCL on
 * device ones); docs/sharding.md, "Hybrid sharding". */
zt_status zt_coll_sum_over_replicas(zt_engine *e, zt_bucket *b) {
    zt_comm *rep = e->replicas;
    if (!rep) return ZT_OK;
    zt_ctx *ctx = e->ctx;
    const zt_ops *ops = ctx->be->ops;
    size_t R = (size_t)rep->world_size, n = b->numel / (size_t)e->comm->world_size;
    size_t piece = b->numel * zt_dtype_size(e->cfg.reduce_dtype) / sizeof(float) / R; /* elements that fit */
    float *mine = zt_f32(&b->reduced), *all = zt_f32(&b->send), *total = zt_f32(&b->staging); /* fp32 */
    for (size_t at = 0; at < n; at += piece) {
        size_t k = n - at < piece ? n - at : piece;
        ZT_TRY(ctx->be->memcpy_async(ctx->be, all + (size_t)rep->rank * k, mine + at, k * sizeof(float), ZT_COPY_D2D,
                                     &ctx->compute, &ctx->err));
        zt_comm_handle h = {0};
        ZT_TRY(zt_coll_all_gather_on(e, rep, all, k * sizeof(float), &ctx->compute, "the replicas' gradient sums", &h));
        ZT_TRY(zt_comm_wait_stream(rep, &h, ctx->compute.handle, &ctx->err));
        for (size_t r = 0; r < R; r++) ops->scaled_store(&ctx->compute, total + at, ZT_FP32, all + r * k, 1.0f, r > 0, k);
    }
    return ctx->be->memcpy_async(ctx->be, mine, total, n * sizeof(float), ZT_COPY_D2D, &ctx->compute, &ctx->err);
}

zt_status zt_coll_progress(zt_engine *e) {
    if (e->comm->world_size == 1) return ZT_OK;
    for (int u = 0; u < e->spec->nunits; u++) /* the gathers in flight (an idle handle is skipped) */
        ZT_TRY(zt_comm_progress(e->units[u].gather_comm, &e->units[u].gather_handle, &e->ctx->err));
    return zt_comm_progress(e->comm, &e->in_flight.handle, &e->ctx->err);
}
