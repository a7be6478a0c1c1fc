/* Gradient buffers and their bucketed, deterministic reduce-scatter.
 *
 * One rounding point at every stage: backward sums a micro-batch's
 * gradients in fp32 (grad32, or the fp32 grads themselves); they travel in
 * the reduce dtype, are summed in fp32 in rank order, scaled by 1/N, and only
 * then stored in the grads' dtype. Stages 0-1 reduce once per step, so in a
 * 16-bit dtype their grad32 sums every micro-batch of the step; stages 2-3
 * reduce each micro-batch and add it to their shard. */
#include "reduce.h"

#include <string.h>

#include "collectives.h"
#include "zt_wire.h"
#include "placement.h"
#include "tier.h"
#include "unit_mem.h"

zt_status zt_engine_zero_grads(zt_engine *e) {
    zt_ctx *ctx = e->ctx;
    for (int u = 0; u < e->spec->nunits; u++) {
        zt_tensor *g = &e->units[u].grads;
        if (g->data) ZT_TRY(ctx->be->memset_async(ctx->be, g->data, 0, zt_tensor_bytes(g), &ctx->compute, &ctx->err));
        /* fp32 gradients of a step that was never reduced (no micro-batch
         * was marked last) must not leak into this one. */
        zt_tensor_free(&e->units[u].grad32, &ctx->device_mem);
        e->units[u].grad_open = 0;
    }
    return ZT_OK;
}

void zt_engine_begin_micro(zt_engine *e, int is_last_micro) { e->sync_this_micro = is_last_micro; }

/* Does u accumulate straight into its persistent grads (fp32, full grads)? */
static int direct_grads(const zt_engine *e) { return e->cfg.dtype == ZT_FP32 && full_grads(e); }

zt_status zt_engine_grad_buffer(zt_engine *e, int unit, float **grads32) {
    if (unit < 0 || unit >= e->spec->nunits) return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "no unit %d", unit);
    zt_unit_state *ust = &e->units[unit];
    ZT_TRY(zt_coll_progress(e));
    if (frozen(e, unit)) { /* backward still writes them: a scratch, dropped at grads_ready */
        if (!ust->grad32.data)
            ZT_TRY(zt_engine_alloc(e, &ust->grad32, ZT_FP32, e->spec->units[unit].padded_numel, ZT_CAT_WORKSPACE,
                                   "frozen grad scratch", unit));
        ust->grad_open = 1;
        *grads32 = zt_f32(&ust->grad32);
        return ZT_OK;
    }
    if (direct_grads(e)) {
        ust->grad_open = 1;
        *grads32 = zt_f32(&ust->grads);
        return ZT_OK;
    }
    if (!ust->grad32.data) {
        /* Full-size grads waiting to be reduce-scattered are comm buffers. */
        zt_category cat = full_grads(e) ? ZT_CAT_WORKSPACE : ZT_CAT_COMM_BUFFERS;
        ZT_TRY(zt_engine_alloc(e, &ust->grad32, ZT_FP32, e->spec->units[unit].padded_numel, cat, "fp32 grad", unit));
    }
    ust->grad_open = 1;
    *grads32 = zt_f32(&ust->grad32);
    return ZT_OK;
}

/* Quantized gradients: where the values for rank r go in send. Flat: its
 * own segment r of `count` values. By hops (K nodes of L ranks): segment
 * j = r mod L, which goes to local rank j in hop 1, holds the values of
 * every rank k x L + j, node k's at k x count, K x count in all. */
static void coded_place(const zt_engine *e, int r, size_t count, int *seg, size_t *first, size_t *seg_numel) {
    if (!e->hop_node) {
        *seg = r, *first = 0, *seg_numel = count;
        return;
    }
    int L = e->hop_node->world_size, K = e->hop_cross->world_size;
    *seg = r % L, *first = (size_t)(r / L) * count, *seg_numel = (size_t)K * count;
}

/* Quantized gradients: slice r of every unit as codes and scales at its
 * place (coded_place); the slices are whole blocks, so each is encoded on
 * its own into the segment's codes and scales. With feedback, what a
 * slice's codes lost last time is added first and what they lose now is
 * kept. */
static void pack_bucket_coded(zt_engine *e, zt_bucket *b) {
    zt_ctx *ctx = e->ctx;
    int N = e->comm->world_size;
    zt_wire w = zt_engine_grad_wire(e);
    size_t count = b->numel / (size_t)N, fd = zt_dtype_size(e->cfg.feedback_dtype);
    for (int r = 0; r < N; r++) {
        int seg;
        size_t at, seg_numel; /* at: the slice's first value in the segment (a block multiple) */
        coded_place(e, r, count, &seg, &at, &seg_numel);
        uint8_t *codes = (uint8_t *)b->send.data + (size_t)seg * zt_wire_bytes(&w, seg_numel);
        float *scales = (float *)(codes + zt_wire_scales_at(seg_numel, w.bits));
        for (int i = 0; i < b->nunits; i++) {
            zt_unit_state *ust = &e->units[b->units[i]];
            size_t S = e->spec->units[b->units[i]].shard_numel, off = (size_t)r * S;
            const float *src = (ust->grad32.data ? zt_f32(&ust->grad32) : zt_f32(&ust->grads)) + off; /* fp32 */
            char *fb = ust->feedback.data ? (char *)ust->feedback.data + off * fd : NULL;
            ctx->be->ops->wire_quantize(&ctx->compute, codes + (w.bits == 4 ? at / 2 : at), scales + at / w.block, src,
                                        ZT_FP32, fb, e->cfg.feedback_dtype, S, w.bits, w.block);
            at += S;
        }
    }
}

zt_status zt_engine_set_grad_hops(zt_engine *e, zt_comm *node, zt_comm *cross) {
    if (!node || !cross || node->world_size <= 1 || cross->world_size <= 1) return ZT_OK;
    if (!e->cfg.quant_grads_bits || e->replicas)
        return ZT_FAIL(&e->ctx->err, ZT_ERR_INTERNAL, "the hierarchical reduce-scatter is quantized gradients' with "
                       "world sharding");
    if (node->world_size * cross->world_size != e->comm->world_size ||
        e->comm->rank != cross->rank * node->world_size + node->rank)
        return ZT_FAIL(&e->ctx->err, ZT_ERR_INTERNAL, "the hops' groups (%d x %d) are not the world's nodes in order",
                       cross->world_size, node->world_size);
    e->hop_node = node;
    e->hop_cross = cross;
    return ZT_OK;
}

/* Packs slice r of every unit of the bucket into send (rank-major, in the
 * reduce dtype or its codes), so that the all-to-all delivers to rank r
 * exactly its slices. */
static zt_status pack_bucket(zt_engine *e, zt_bucket *b) {
    zt_ctx *ctx = e->ctx;
    int N = e->comm->world_size;
    if (e->cfg.quant_grads_bits) {
        pack_bucket_coded(e, b);
        return ZT_OK;
    }
    zt_dtype rd = e->cfg.reduce_dtype;
    char *dst = b->send.data;
    for (int r = 0; r < N; r++)
        for (int i = 0; i < b->nunits; i++) {
            int u = b->units[i];
            zt_unit_state *ust = &e->units[u];
            size_t S = e->spec->units[u].shard_numel, off = (size_t)r * S;
            const float *src = (ust->grad32.data ? zt_f32(&ust->grad32) : zt_f32(&ust->grads)) + off; /* fp32 */
            if (rd == ZT_FP32)
                ZT_TRY(ctx->be->memcpy_async(ctx->be, dst, src, S * sizeof(float), ZT_COPY_D2D, &ctx->compute,
                                             &ctx->err));
            else ctx->be->ops->cast(&ctx->compute, dst, rd, src, ZT_FP32, S);
            dst += S * zt_dtype_size(rd);
        }
    return ZT_OK;
}

/* Averages (once, here) and stores this rank's reduced slices. */
static zt_status unpack_bucket(zt_engine *e, zt_bucket *b) {
    zt_ctx *ctx = e->ctx;
    ZT_TRY(zt_coll_sum_over_replicas(e, b));
    float inv_n = 1.0f / (float)e->world->world_size; /* every rank's gradients are in the sum */
    const float *src = zt_f32(&b->reduced);
    for (int i = 0; i < b->nunits; i++) {
        int u = b->units[i];
        zt_unit_state *ust = &e->units[u];
        size_t S = e->spec->units[u].shard_numel, lo = shard_lo(e, u);
        size_t at = local_index(full_grads(e), lo, lo);
        /* Full grads were reduced once per step: overwrite. A shard
         * accumulates across micro-batches (0 + x is exact for the first). */
        int accumulate = !full_grads(e);
        size_t d = zt_dtype_size(e->cfg.dtype);
        ctx->be->ops->scaled_store(&ctx->compute, (char *)ust->grads.data + at * d, e->cfg.dtype, src, inv_n,
                                   accumulate, S);
        src += S;
        if (e->cfg.stage == 0) {
            /* Stage 0 all-reduces as reduce-scatter + all-gather over the same layout. */
            ZT_TRY(zt_coll_all_gather_after(e, ust->grads.data, S * d, &ctx->compute, u));
        }
        /* The tier takes the reduced gradients now (offload: to the host,
         * while the rest of backward runs); shards that still accumulate
         * further micro-batches go after the last one. */
        if (e->sync_this_micro) ZT_TRY(e->tier->grads_reduced(e, u));
        ust->queued = 0;
    }
    return ZT_OK;
}

/* Quantized gradients' buffers: send and staging as N chunks of codes, or
 * by hops L chunks of K x count values, then the node's sums and the K
 * chunks of codes of hop 2. */
static zt_status alloc_coded(zt_engine *e, zt_bucket *b) {
    zt_wire w = zt_engine_grad_wire(e);
    size_t count = b->numel / (size_t)e->comm->world_size, bytes = zt_wire_bytes(&w, count) * e->comm->world_size;
    size_t K = e->hop_node ? (size_t)e->hop_cross->world_size : 1, L = (size_t)e->comm->world_size / K;
    if (e->hop_node) bytes = zt_wire_bytes(&w, K * count) * L;
    ZT_TRY(zt_engine_alloc_bytes(e, &b->send, bytes, ZT_CAT_COMM_BUFFERS, "bucket send", -1));
    ZT_TRY(zt_engine_alloc_bytes(e, &b->staging, bytes, ZT_CAT_COMM_BUFFERS, "bucket recv", -1));
    if (!e->hop_node) return ZT_OK;
    ZT_TRY(zt_engine_alloc(e, &b->node_sums, ZT_FP32, K * count, ZT_CAT_COMM_BUFFERS, "bucket node sums", -1));
    size_t cross = zt_wire_bytes(&w, count) * K;
    ZT_TRY(zt_engine_alloc_bytes(e, &b->cross_send, cross, ZT_CAT_COMM_BUFFERS, "bucket cross send", -1));
    return zt_engine_alloc_bytes(e, &b->cross_staging, cross, ZT_CAT_COMM_BUFFERS, "bucket cross recv", -1);
}

/* Frees a bucket's buffers and empties it. */
static void free_bucket(zt_engine *e, zt_bucket *b) {
    zt_mem *mem = &e->ctx->device_mem;
    zt_tensor *all[] = {&b->send, &b->staging, &b->reduced, &b->node_sums, &b->cross_send, &b->cross_staging};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) zt_tensor_free(all[i], mem);
    b->nunits = 0;
    b->numel = 0;
}

/* Completes the bucket in flight (if any). */
static zt_status complete_bucket(zt_engine *e) {
    zt_bucket *b = &e->in_flight;
    if (b->nunits == 0) return ZT_OK;
    /* unpack_bucket's kernels run on compute after the reduce-scatter (the
     * host waits too without overlap: the serial baseline). */
    ZT_TRY(zt_coll_reduce_scatter_join(e, b));
    ZT_TRY(unpack_bucket(e, b));
    free_bucket(e, b);
    return ZT_OK;
}

/* Sends the filling bucket: pack, free the units' full grads (their data is
 * in the packed buffer now), start the all-to-all. One bucket in flight. */
static zt_status flush_bucket(zt_engine *e) {
    zt_bucket *b = &e->filling;
    if (b->nunits == 0) return ZT_OK;
    ZT_TRY(complete_bucket(e));
    int N = e->comm->world_size;
    zt_wire w = zt_engine_grad_wire(e);
    if (w.bits) ZT_TRY(alloc_coded(e, b));
    else {
        ZT_TRY(zt_engine_alloc(e, &b->send, w.dtype, b->numel, ZT_CAT_COMM_BUFFERS, "bucket send", -1));
        ZT_TRY(zt_engine_alloc(e, &b->staging, w.dtype, b->numel, ZT_CAT_COMM_BUFFERS, "bucket recv", -1));
    }
    ZT_TRY(zt_engine_alloc(e, &b->reduced, ZT_FP32, b->numel / (size_t)N, ZT_CAT_COMM_BUFFERS, "bucket reduced", -1));
    ZT_TRY(pack_bucket(e, b));
    for (int i = 0; i < b->nunits; i++) zt_tensor_free(&e->units[b->units[i]].grad32, &e->ctx->device_mem);
    ZT_TRY(zt_coll_reduce_scatter_start(e, b));
    e->in_flight = *b;
    memset(b, 0, sizeof *b);
    if (!e->cfg.overlap_comm) ZT_TRY(complete_bucket(e));
    return ZT_OK;
}

zt_status zt_engine_grads_ready(zt_engine *e, int unit) {
    if (unit < 0 || unit >= e->spec->nunits) return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "no unit %d", unit);
    zt_unit_state *ust = &e->units[unit];
    if (!ust->grad_open) return ZT_OK; /* no gradient flowed into this unit */
    ust->grad_open = 0;
    if (frozen(e, unit)) { /* never reduced; the compute stream orders the block's reuse after its writers */
        zt_tensor_free(&ust->grad32, &e->ctx->device_mem);
        return ZT_OK;
    }
    /* Stages 0-1 reduce once per step; until then grad32 (or the fp32
     * grads) keeps summing micro-batches. */
    if (full_grads(e) && !e->sync_this_micro) return ZT_OK;
    zt_bucket *b = &e->filling;
    if (ust->queued) return ZT_FAIL(&e->ctx->err, ZT_ERR_INTERNAL, "unit %d reported ready twice", unit);
    ust->queued = 1;
    b->units[b->nunits++] = unit;
    b->numel += e->spec->units[unit].padded_numel;
    int cap = (int)(sizeof b->units / sizeof b->units[0]);
    if (b->numel * sizeof(float) >= e->cfg.bucket_bytes || b->nunits == cap) ZT_TRY(flush_bucket(e));
    return ZT_OK;
}

zt_status zt_engine_sync_grads(zt_engine *e) {
    ZT_TRY(flush_bucket(e));
    return complete_bucket(e);
}

void zt_reduce_release(zt_engine *e) {
    zt_error ignore = {0};
    if (e->in_flight.handle.active)
        zt_comm_wait(e->hop_node ? e->hop_node : e->comm, &e->in_flight.handle, &ignore);
    if (e->in_flight.cross_handle.active) zt_comm_wait(e->hop_cross, &e->in_flight.cross_handle, &ignore);
    free_bucket(e, &e->filling);
    free_bucket(e, &e->in_flight);
}
