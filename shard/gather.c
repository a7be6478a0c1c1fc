/* Parameter access for compute: the units' state machine (zt_unit_phase),
 * just-in-time all-gather at stage 3 with prefetch in the recorded use
 * order, DeepSpeed's stage-3 knobs (persistent units, a cap on live
 * gathered parameters, keeping a unit gathered for a reuse that comes
 * soon), and the fp32 up-cast of 16-bit parameters on a backend that has
 * no kernels in their dtype. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

const char *zt_unit_phase_name(zt_unit_phase p) {
    static const char *const names[] = {"sharded", "gathering", "gathered", "in use"};
    return p >= ZT_UNIT_SHARDED && p <= ZT_UNIT_IN_USE ? names[p] : "?";
}

static zt_status check_unit(zt_engine *e, int unit) {
    if (unit < 0 || unit >= e->spec->nunits) return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "no unit %d", unit);
    return ZT_OK;
}

zt_status zt_engine_all_gather_on(zt_engine *e, zt_comm *comm, void *buf, size_t bytes_per_rank, zt_stream *producer,
                                  const char *what, zt_comm_handle *h) {
    zt_ctx *ctx = e->ctx;
    void *ready = NULL;
    ZT_TRY(zt_engine_ready_event(e, producer, &ready));
    zt_status st = zt_comm_all_gather_start(comm, NULL, buf, bytes_per_rank, ready, h, &ctx->err);
    zt_event_destroy(ctx->be, ready);
    ZT_TRY(st);
    snprintf(h->what, sizeof h->what, "%s", what); /* for the watchdog */
    if (!e->cfg.overlap_comm) return zt_comm_wait(comm, h, &ctx->err);
    return ZT_OK;
}

/* What the watchdog names for a gather of unit u. */
static const char *unit_label(const zt_engine *e, int u, char *buf, size_t cap) {
    snprintf(buf, cap, "unit %s", e->spec->units[u].name);
    return buf;
}

/* hpZ: unit u's part in its secondary group, [P / G'] at the group rank's place. */
static size_t secondary_numel(const zt_engine *e, int u) {
    return e->spec->units[u].padded_numel / (size_t)e->secondary->world_size;
}

/* Puts this rank's part of unit u where its all-gather expects it: the
 * shard (from the device, the host pool or the NVMe file), or, for a
 * backward after hpZ kept it, its secondary part, which then goes. Returns
 * the communicator and the bytes per rank of the gather. */
static zt_status place_own_part(zt_engine *e, int u, zt_comm **comm, size_t *bytes_per_rank) {
    zt_unit_state *st = &e->units[u];
    const zt_unit_spec *us = &e->spec->units[u];
    zt_ctx *ctx = e->ctx;
    size_t d = zt_dtype_size(e->cfg.dtype);
    if (st->secondary.data) {
        size_t n = secondary_numel(e, u);
        char *mine = (char *)st->gathered.data + (size_t)e->secondary->rank * n * d;
        ZT_TRY(ctx->be->memcpy_async(ctx->be, mine, st->secondary.data, n * d, ZT_COPY_D2D, &ctx->compute, &ctx->err));
        *comm = e->secondary; /* the part goes at the unit's backward release, where zt-plan counts it out */
        *bytes_per_rank = n * d;
        return ZT_OK;
    }
    char *mine = (char *)st->gathered.data + shard_lo(e, u) * d;
    *comm = e->comm;
    *bytes_per_rank = us->shard_numel * d;
    if (params_in_file(e, u)) return zt_engine_nvme_copy_shard(e, u, mine, ZT_COPY_H2D);
    return ctx->be->memcpy_async(ctx->be, mine, st->params.data, us->shard_numel * d,
                                 params_on_host(e, u) ? ZT_COPY_H2D : ZT_COPY_D2D, &ctx->compute, &ctx->err);
}

/* Stage 3: allocate u's full buffer, put our part in place, start the gather. */
static zt_status start_gather(zt_engine *e, int u) {
    zt_unit_state *st = &e->units[u];
    const zt_unit_spec *us = &e->spec->units[u];
    ZT_TRY(zt_engine_alloc(e, &st->gathered, e->cfg.dtype, us->padded_numel, ZT_CAT_GATHERED_PARAMS, "gathered", u));
    e->gathered_inflight_now += zt_tensor_bytes(&st->gathered);
    if (e->gathered_inflight_now > e->gathered_inflight_peak) e->gathered_inflight_peak = e->gathered_inflight_now;
    zt_ctx *ctx = e->ctx;
    size_t bytes_per_rank;
    ZT_TRY(place_own_part(e, u, &st->gather_comm, &bytes_per_rank));
    char name[48];
    snprintf(name, sizeof name, "gather %s", us->name);
    zt_trace_instant(e->ctx->trace, name, "unit", 1);
    /* The collective runs after everything queued on compute so far: this
     * copy, and every kernel that read a block freed before the buffer was
     * allocated, so reusing a cached block is safe on any stream. Without
     * overlap it has also completed on return. */
    char what[48];
    ZT_TRY(zt_engine_all_gather_on(e, st->gather_comm, st->gathered.data, bytes_per_rank, &ctx->compute,
                                   unit_label(e, u, what, sizeof what), &st->gather_handle));
    st->phase = e->cfg.overlap_comm ? ZT_UNIT_GATHERING : ZT_UNIT_GATHERED;
    return ZT_OK;
}

/* Appends unit u to the pass's use order (growing it) and notes whether the
 * pass still follows the recorded order of its kind. */
static zt_status note_use(zt_engine *e, int u) {
    zt_use_order *o = &e->now;
    if (o->n == o->cap) {
        int cap = o->cap ? 2 * o->cap : 2 * e->spec->nunits + 2;
        int *units = realloc(o->units, (size_t)cap * sizeof *units);
        if (!units) return ZT_FAIL(&e->ctx->err, ZT_ERR_OOM, "engine: cannot record %d unit uses", cap);
        o->units = units;
        o->cap = cap;
    }
    const zt_use_order *rec = &e->recorded[e->pass];
    e->follows_record = e->follows_record && o->n < rec->n && rec->units[o->n] == u;
    o->units[o->n++] = u;
    return ZT_OK;
}

/* Would gathering unit v now take the gathered parameters (in use,
 * prefetched, in flight, kept for a reuse; every gathered buffer is
 * [padded] in the dtype) over max_live_params (0: no cap)? */
static int over_live_cap(const zt_engine *e, int v) {
    size_t live = e->gathered_inflight_now / zt_dtype_size(e->cfg.dtype);
    return e->cfg.max_live_params && live + e->spec->units[v].padded_numel > e->cfg.max_live_params;
}

/* Stage 3: the next `prefetch` units of the recorded order, after the use
 * just noted, start gathering (when the pass has kept to the record), in
 * that order. The first one that would go over max_live_params stops them
 * (DeepSpeed's stage3_max_live_parameters): it waits until the model asks
 * for it, or for a later prefetch once units are freed, so prefetches
 * never overtake each other and the planner can replay them. */
static zt_status prefetch_next(zt_engine *e) {
    const zt_use_order *rec = &e->recorded[e->pass];
    if (!e->follows_record) return ZT_OK;
    for (int k = 0; k < e->cfg.prefetch && e->now.n + k < rec->n; k++) {
        int v = rec->units[e->now.n + k];
        if (e->units[v].phase != ZT_UNIT_SHARDED) continue; /* in use, on its way, kept or persistent */
        if (over_live_cap(e, v)) break;
        ZT_TRY(start_gather(e, v));
    }
    return ZT_OK;
}

/* max_reuse_distance (DeepSpeed's stage3_max_reuse_distance): is unit u,
 * just released, used again before the model gathers more than `limit`
 * parameters of other units? The look-ahead follows the recorded order of
 * this pass from the use just noted and, in forward, on into the recorded
 * backward, which comes next in the same step; backward ends at the
 * optimizer step, which changes the parameters, so its look-ahead ends
 * with it. Each other unit counts once with its padded size; persistent
 * units count nothing (they are never gathered). A pass that left its
 * record has no look-ahead. */
static int reused_within(zt_engine *e, int u, size_t limit) {
    if (!e->follows_record) return 0;
    const zt_use_order *ahead[2] = {&e->recorded[e->pass],
                                    e->pass == ZT_PASS_FORWARD ? &e->recorded[ZT_PASS_BACKWARD] : NULL};
    int from[2] = {e->now.n, 0};
    size_t dist = 0;
    memset(e->reuse_seen, 0, (size_t)e->spec->nunits);
    for (int s = 0; s < 2 && ahead[s]; s++)
        for (int i = from[s]; i < ahead[s]->n; i++) {
            int v = ahead[s]->units[i];
            if (v == u) return 1;
            if (e->reuse_seen[v] || !gathered_on_demand(e, v)) continue;
            e->reuse_seen[v] = 1;
            dist += e->spec->units[v].padded_numel;
            if (dist > limit) return 0;
        }
    return 0; /* not used again before the step */
}

/* The pass in progress (if any) ends: its use order becomes its kind's
 * record, and the old record's buffer takes the next pass's uses. */
static void end_pass(zt_engine *e) {
    if (e->pass != ZT_PASS_NONE) {
        zt_use_order done = e->recorded[e->pass];
        e->recorded[e->pass] = e->now;
        e->now = done;
    }
    e->now.n = 0;
    e->pass = ZT_PASS_NONE;
}

zt_status zt_engine_begin_pass(zt_engine *e, zt_pass pass) {
    if (pass != ZT_PASS_FORWARD && pass != ZT_PASS_BACKWARD)
        return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "begin_pass: pass %d is neither forward nor backward", (int)pass);
    end_pass(e);
    e->pass = pass;
    e->follows_record = 1;
    return ZT_OK;
}

const zt_use_order *zt_engine_use_order(const zt_engine *e, zt_pass pass) {
    static const zt_use_order none = {NULL, 0, 0};
    return pass > ZT_PASS_NONE && pass < ZT_NPASSES ? &e->recorded[pass] : &none;
}

zt_status zt_engine_gather(zt_engine *e, int unit, const void **params) {
    ZT_TRY(check_unit(e, unit));
    zt_ctx *ctx = e->ctx;
    zt_unit_state *st = &e->units[unit];
    const char *name = e->spec->units[unit].name;
    if (e->pass == ZT_PASS_NONE)
        return ZT_FAIL(&ctx->err, ZT_ERR_INVALID, "gather of unit %s outside a pass (zt_engine_begin_pass first)", name);
    if (st->phase == ZT_UNIT_IN_USE)
        return ZT_FAIL(&ctx->err, ZT_ERR_INVALID, "unit %s gathered twice without a release", name);
    ZT_TRY(zt_engine_progress(e));
    const void *full = st->params.data; /* [padded] dtype */
    if (gathered_on_demand(e, unit)) {
        if (st->phase == ZT_UNIT_SHARDED) ZT_TRY(start_gather(e, unit));
        if (st->phase == ZT_UNIT_GATHERING)
            /* Kernels queued from here on read the gathered values: the
             * compute stream waits for the collective, the host does not. */
            ZT_TRY(zt_comm_wait_stream(st->gather_comm, &st->gather_handle, ctx->compute.handle, &ctx->err));
        full = st->gathered.data;
    }
    st->phase = ZT_UNIT_IN_USE;
    ZT_TRY(note_use(e, unit));
    if (e->cfg.stage == 3) ZT_TRY(prefetch_next(e));
    if (e->compute_dtype != e->cfg.dtype) {
        size_t P = e->spec->units[unit].padded_numel;
        ZT_TRY(zt_engine_alloc(e, &st->view32, ZT_FP32, P, ZT_CAT_WORKSPACE, "fp32 view", unit));
        ctx->be->ops->cast(&ctx->compute, st->view32.data, ZT_FP32, full, e->cfg.dtype, P);
        full = st->view32.data;
    }
    *params = full;
    return ZT_OK;
}

/* Does the backward gather unit u, by the recorded backward (an untied
 * model's embedding backward needs no weights)? Before a backward has run,
 * no: the first step gathers its backward over the shard group, and never
 * holds a part no backward frees. */
static int backward_gathers(const zt_engine *e, int u) {
    const zt_use_order *b = &e->recorded[ZT_PASS_BACKWARD];
    for (int i = 0; i < b->n; i++)
        if (b->units[i] == u) return 1;
    return 0;
}

/* hpZ, after unit u's forward: this rank's part of it in the secondary
 * group is copied out of the full buffer before that goes (once: a unit
 * used twice in forward already has it). */
static zt_status keep_secondary(zt_engine *e, int u) {
    zt_unit_state *st = &e->units[u];
    zt_ctx *ctx = e->ctx;
    size_t n = secondary_numel(e, u), d = zt_dtype_size(e->cfg.dtype);
    if (st->secondary.data) return ZT_OK;
    ZT_TRY(zt_engine_alloc(e, &st->secondary, e->cfg.dtype, n, ZT_CAT_GATHERED_PARAMS, "secondary shard", u));
    return ctx->be->memcpy_async(ctx->be, st->secondary.data,
                                 (const char *)st->gathered.data + (size_t)e->secondary->rank * n * d, n * d,
                                 ZT_COPY_D2D, &ctx->compute, &ctx->err);
}

zt_status zt_engine_set_secondary(zt_engine *e, zt_comm *secondary) {
    if (!secondary || secondary->world_size <= 1) return ZT_OK;
    if (e->cfg.stage != 3 || e->replicas)
        return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "--reshard-after-forward needs stage 3 with world sharding (got "
                       "stage %d%s)", e->cfg.stage, e->replicas ? " and --shard-group" : "");
    if (e->comm->world_size % secondary->world_size)
        return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "--reshard-after-forward: groups of %d do not divide the %d ranks",
                       secondary->world_size, e->comm->world_size);
    e->secondary = secondary;
    return ZT_OK;
}

zt_status zt_engine_release(zt_engine *e, int unit) {
    ZT_TRY(check_unit(e, unit));
    zt_unit_state *st = &e->units[unit];
    if (st->phase != ZT_UNIT_IN_USE)
        return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "unit %s released while %s (not gathered)",
                       e->spec->units[unit].name, zt_unit_phase_name(st->phase));
    zt_mem *mem = &e->ctx->device_mem;
    zt_tensor_free(&st->view32, mem);
    st->phase = ZT_UNIT_GATHERED;
    if (!gathered_on_demand(e, unit)) return ZT_OK;
    /* A unit used again soon stays gathered (max_reuse_distance; it counts
     * toward max_live_params) and its next gather is free;
     * zt_engine_end_passes frees it at the latest. Otherwise
     * reshard_after_forward: the full copy goes as soon as it is unused.
     * Its readers may still be queued on compute; the block is reused
     * either by compute (after them, in stream order) or by a collective
     * that first waits for compute (start_gather, flush_bucket). */
    int keep = e->cfg.max_reuse_distance && reused_within(e, unit, e->cfg.max_reuse_distance);
    if (!keep && e->secondary && e->pass == ZT_PASS_FORWARD && backward_gathers(e, unit))
        ZT_TRY(keep_secondary(e, unit));
    if (e->pass == ZT_PASS_BACKWARD) zt_tensor_free(&st->secondary, mem); /* its backward has its full copy */
    if (!keep) {
        e->gathered_inflight_now -= zt_tensor_bytes(&st->gathered);
        zt_tensor_free(&st->gathered, mem);
        st->phase = ZT_UNIT_SHARDED;
    }
    char name[48];
    snprintf(name, sizeof name, "%s %s", keep ? "keep" : "free", e->spec->units[unit].name);
    zt_trace_instant(e->ctx->trace, name, "unit", 0);
    return ZT_OK;
}

zt_status zt_engine_end_passes(zt_engine *e) {
    for (int u = 0; u < e->spec->nunits; u++) {
        zt_unit_state *st = &e->units[u];
        if (st->phase == ZT_UNIT_IN_USE)
            return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "optimizer step while unit %s is gathered (not released)",
                           e->spec->units[u].name);
        zt_tensor_free(&st->secondary, &e->ctx->device_mem); /* hpZ: a part no backward gathered is stale now */
        if (!gathered_on_demand(e, u) || st->phase == ZT_UNIT_SHARDED) continue;
        /* A prefetch the pass did not use (its order changed), or a unit
         * kept for a reuse: it would hold parameters from before the step. */
        if (st->phase == ZT_UNIT_GATHERING) ZT_TRY(zt_comm_wait(st->gather_comm, &st->gather_handle, &e->ctx->err));
        e->gathered_inflight_now -= zt_tensor_bytes(&st->gathered);
        zt_tensor_free(&st->gathered, &e->ctx->device_mem);
        st->phase = ZT_UNIT_SHARDED;
    }
    end_pass(e);
    return ZT_OK;
}

zt_status zt_engine_progress(zt_engine *e) {
    if (e->comm->world_size == 1) return ZT_OK;
    for (int u = 0; u < e->spec->nunits; u++)
        if (e->units[u].phase == ZT_UNIT_GATHERING)
            ZT_TRY(zt_comm_progress(e->units[u].gather_comm, &e->units[u].gather_handle, &e->ctx->err));
    return zt_comm_progress(e->comm, &e->in_flight.handle, &e->ctx->err);
}

zt_status zt_engine_ready_event(zt_engine *e, zt_stream *producer, void **ready) {
    zt_ctx *ctx = e->ctx;
    *ready = NULL;
    if (e->comm->ops->takes_events) return zt_event_record(ctx->be, producer, ready, &ctx->err);
    return ctx->be->stream_sync(ctx->be, producer, &ctx->err);
}

zt_status zt_engine_all_gather_start_after(zt_engine *e, void *buf, size_t bytes_per_rank, zt_stream *producer,
                                           int unit, zt_comm_handle *h) {
    char what[48];
    return zt_engine_all_gather_on(e, e->comm, buf, bytes_per_rank, producer, unit_label(e, unit, what, sizeof what), h);
}

zt_status zt_engine_all_gather_finish(zt_engine *e, zt_comm_handle *h) {
    return zt_comm_wait_stream(e->comm, h, e->ctx->compute.handle, &e->ctx->err);
}

zt_status zt_engine_all_gather_after(zt_engine *e, void *buf, size_t bytes_per_rank, zt_stream *producer, int unit) {
    zt_comm_handle h = {0};
    ZT_TRY(zt_engine_all_gather_start_after(e, buf, bytes_per_rank, producer, unit, &h));
    return zt_engine_all_gather_finish(e, &h);
}
