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

static zt_status all_gather_coded_on(zt_engine *e, zt_comm *comm, void *buf, size_t bytes_per_rank,
                                     size_t uncompressed_per_rank, zt_stream *producer, const char *what,
                                     zt_comm_handle *h) {
    zt_ctx *ctx = e->ctx;
    void *ready = NULL;
    ZT_TRY(zt_coll_ready_event(e, producer, &ready));
    zt_status st = zt_comm_all_gather_coded_start(comm, NULL, buf, bytes_per_rank, uncompressed_per_rank, ready, h,
                                                  &ctx->err);
    zt_event_destroy(ctx->be, ready);
    ZT_TRY(st);
    snprintf(h->what, sizeof h->what, "%s", what); /* for the watchdog */
    if (!e->cfg.overlap_comm) return zt_comm_wait(comm, h, &ctx->err);
    return ZT_OK;
}

zt_status zt_coll_all_gather_on(zt_engine *e, zt_comm *comm, void *buf, size_t bytes_per_rank, zt_stream *producer,
                                const char *what, zt_comm_handle *h) {
    return all_gather_coded_on(e, comm, buf, bytes_per_rank, bytes_per_rank, producer, what, h);
}

zt_status zt_coll_unit_gather_start(zt_engine *e, zt_comm *comm, int u, void *buf, size_t bytes_per_rank,
                                    size_t uncompressed_per_rank, zt_stream *producer, zt_comm_handle *h) {
    char what[48]; /* what the watchdog names */
    snprintf(what, sizeof what, "unit %s", e->spec->units[u].name);
    return all_gather_coded_on(e, comm, buf, bytes_per_rank, uncompressed_per_rank, producer, what, h);
}

zt_status zt_coll_unit_gather_join(zt_engine *e, zt_comm *comm, zt_comm_handle *h) {
    return zt_comm_wait_stream(comm, h, e->ctx->compute.handle, &e->ctx->err);
}

zt_status zt_coll_unit_gather_wait(zt_engine *e, zt_comm *comm, zt_comm_handle *h) {
    return zt_comm_wait(comm, h, &e->ctx->err);
}

zt_status zt_coll_all_gather_after(zt_engine *e, void *buf, size_t bytes_per_rank, zt_stream *producer, int u) {
    zt_comm_handle h = {0};
    ZT_TRY(zt_coll_unit_gather_start(e, e->comm, u, buf, bytes_per_rank, bytes_per_rank, producer, &h));
    return zt_coll_unit_gather_join(e, e->comm, &h);
}

zt_wire zt_engine_grad_wire(const zt_engine *e) {
    zt_wire w = {e->cfg.reduce_dtype, e->cfg.quant_grads_bits, e->cfg.quant_block};
    return w;
}

/* Starts a reduce-scatter of `count` values per chunk over comm after
 * everything queued on compute so far, labelled for the watchdog. */
static zt_status reduce_scatter_on(zt_engine *e, zt_comm *comm, zt_bucket *b, const void *send, void *staging,
                                   float *out, size_t count, zt_comm_handle *h) {
    zt_ctx *ctx = e->ctx;
    void *ready = NULL;
    ZT_TRY(zt_coll_ready_event(e, &ctx->compute, &ready));
    zt_status st = zt_comm_reduce_scatter_start(comm, send, staging, out, count, zt_engine_grad_wire(e), ready, h,
                                                &ctx->err);
    zt_event_destroy(ctx->be, ready);
    ZT_TRY(st);
    snprintf(h->what, sizeof h->what, "the gradients of %d unit(s) from %.31s", b->nunits,
             e->spec->units[b->units[0]].name); /* for the watchdog */
    return ZT_OK;
}

zt_status zt_coll_reduce_scatter_start(zt_engine *e, zt_bucket *b) {
    size_t count = b->numel / (size_t)e->comm->world_size;
    /* After the pack (and whatever last read the blocks now in this bucket). */
    if (!e->hop_node)
        return reduce_scatter_on(e, e->comm, b, b->send.data, b->staging.data, zt_f32(&b->reduced), count, &b->handle);
    size_t K = (size_t)e->hop_cross->world_size; /* hop 1: within the node, K x count values per local rank */
    return reduce_scatter_on(e, e->hop_node, b, b->send.data, b->staging.data, zt_f32(&b->node_sums), K * count,
                             &b->handle);
}

/* Compute waits for h on comm (and the host too without overlap_comm). */
static zt_status join_on(zt_engine *e, zt_comm *comm, zt_comm_handle *h) {
    if (e->cfg.overlap_comm) return zt_comm_wait_stream(comm, h, e->ctx->compute.handle, &e->ctx->err);
    return zt_comm_wait(comm, h, &e->ctx->err);
}

/* Hop 2 of the hierarchical reduce-scatter: the node's sums for each node,
 * coded again, summed over the nodes in node order into b->reduced. */
static zt_status cross_nodes(zt_engine *e, zt_bucket *b) {
    zt_ctx *ctx = e->ctx;
    zt_wire w = zt_engine_grad_wire(e);
    size_t count = b->numel / (size_t)e->comm->world_size, chunk = zt_wire_bytes(&w, count);
    for (int k = 0; k < e->hop_cross->world_size; k++) {
        uint8_t *codes = (uint8_t *)b->cross_send.data + (size_t)k * chunk;
        ctx->be->ops->wire_quantize(&ctx->compute, codes, (float *)(codes + zt_wire_scales_at(count, w.bits)),
                                    zt_f32(&b->node_sums) + (size_t)k * count, ZT_FP32, NULL, ZT_FP32, count, w.bits,
                                    w.block);
    }
    ZT_TRY(reduce_scatter_on(e, e->hop_cross, b, b->cross_send.data, b->cross_staging.data, zt_f32(&b->reduced),
                             count, &b->cross_handle));
    return join_on(e, e->hop_cross, &b->cross_handle);
}

zt_status zt_coll_reduce_scatter_join(zt_engine *e, zt_bucket *b) {
    ZT_TRY(join_on(e, e->hop_node ? e->hop_node : e->comm, &b->handle));
    return e->hop_node ? cross_nodes(e, b) : ZT_OK;
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
    size_t piece = zt_tensor_bytes(&b->send) / sizeof(float) / R; /* elements that fit */
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
    return zt_comm_progress(e->hop_node ? e->hop_node : e->comm, &e->in_flight.handle, &e->ctx->err);
}
