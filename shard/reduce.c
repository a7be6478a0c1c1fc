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

/* Packs slice r of every unit of the bucket into send (rank-major, in the
 * reduce dtype), so that the all-to-all delivers to rank r exactly its
 * slices. */
static zt_status pack_bucket(zt_engine *e, zt_bucket *b) {
    zt_ctx *ctx = e->ctx;
    int N = e->comm->world_size;
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

/* Frees a bucket's buffers and empties it. */
static void free_bucket(zt_engine *e, zt_bucket *b) {
    zt_mem *mem = &e->ctx->device_mem;
    zt_tensor_free(&b->send, mem);
    zt_tensor_free(&b->staging, mem);
    zt_tensor_free(&b->reduced, mem);
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
    zt_dtype rd = e->cfg.reduce_dtype;
    ZT_TRY(zt_engine_alloc(e, &b->send, rd, b->numel, ZT_CAT_COMM_BUFFERS, "bucket send", -1));
    ZT_TRY(zt_engine_alloc(e, &b->staging, rd, b->numel, ZT_CAT_COMM_BUFFERS, "bucket recv", -1));
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
    if (e->in_flight.handle.active) zt_comm_wait(e->comm, &e->in_flight.handle, &ignore);
    free_bucket(e, &e->filling);
    free_bucket(e, &e->in_flight);
}
