/* Parameter access for compute: the units' state machine (zt_unit_phase),
 * just-in-time all-gather at stage 3 with prefetch in the recorded use
 * order, DeepSpeed's stage-3 knobs as the schedule decides them
 * (zt_schedule.h: persistent units, a cap on live gathered parameters,
 * keeping a unit gathered for a reuse that comes soon), hpZ's secondary
 * parts, and the fp32 up-cast of 16-bit parameters on a backend that has
 * no kernels in their dtype. Owns the fields gather.h names. */
#include "gather.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives.h"
#include "zt_wire.h"
#include "placement.h"
#include "tier.h"
#include "unit_mem.h"

const char *zt_unit_phase_name(zt_unit_phase p) {
    static const char *const names[] = {"sharded", "gathering", "gathered", "in use"};
    return p >= ZT_UNIT_SHARDED && p <= ZT_UNIT_IN_USE ? names[p] : "?";
}

static zt_status check_unit(zt_engine *e, int unit) {
    if (unit < 0 || unit >= e->spec->nunits) return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "no unit %d", unit);
    return ZT_OK;
}

/* --- The phase machine: one function per change, each checking where it
 * comes from (an internal error otherwise: the callers check first what a
 * model can get wrong). */

static zt_status phase_error(zt_engine *e, int u, const char *change) {
    return ZT_FAIL(&e->ctx->err, ZT_ERR_INTERNAL, "unit %s: %s while %s", e->spec->units[u].name, change,
                   zt_unit_phase_name(e->units[u].phase));
}

void zt_gather_init(zt_engine *e) {
    for (int u = 0; u < e->spec->nunits; u++)
        e->units[u].phase = full_params(e, u) ? ZT_UNIT_GATHERED : ZT_UNIT_SHARDED;
}

/* SHARDED -> GATHERING (the all-gather in flight), or GATHERED when it
 * completed at once (no overlap). The buffer counts as live from here. */
static zt_status to_gathering(zt_engine *e, int u) {
    zt_unit_state *ust = &e->units[u];
    if (ust->phase != ZT_UNIT_SHARDED) return phase_error(e, u, "gather started");
    e->gathered_inflight_now += zt_tensor_bytes(&ust->gathered);
    if (e->gathered_inflight_now > e->gathered_inflight_peak) e->gathered_inflight_peak = e->gathered_inflight_now;
    ust->phase = e->cfg.overlap_comm ? ZT_UNIT_GATHERING : ZT_UNIT_GATHERED;
    return ZT_OK;
}

/* SHARDED | GATHERING | GATHERED -> IN_USE. */
static zt_status to_in_use(zt_engine *e, int u) {
    if (e->units[u].phase == ZT_UNIT_IN_USE) return phase_error(e, u, "taken");
    e->units[u].phase = ZT_UNIT_IN_USE;
    return ZT_OK;
}

/* IN_USE -> GATHERED. */
static zt_status to_gathered(zt_engine *e, int u) {
    if (e->units[u].phase != ZT_UNIT_IN_USE) return phase_error(e, u, "put back");
    e->units[u].phase = ZT_UNIT_GATHERED;
    return ZT_OK;
}

/* GATHERING | GATHERED -> SHARDED: the full copy goes (after its gather,
 * which nobody reads, when one is still in flight). */
static zt_status to_sharded(zt_engine *e, int u) {
    zt_unit_state *ust = &e->units[u];
    if (ust->phase != ZT_UNIT_GATHERING && ust->phase != ZT_UNIT_GATHERED) return phase_error(e, u, "resharded");
    if (ust->phase == ZT_UNIT_GATHERING) ZT_TRY(zt_coll_unit_gather_wait(e, ust->gather_comm, &ust->gather_handle));
    e->gathered_inflight_now -= zt_tensor_bytes(&ust->gathered);
    zt_tensor_free(&ust->gathered, &e->ctx->device_mem);
    zt_tensor_free(&ust->wire, &e->ctx->device_mem);
    ust->wire_pending = 0;
    ust->phase = ZT_UNIT_SHARDED;
    return ZT_OK;
}

/* --- Gathers. */

/* hpZ: unit u's part in its secondary group, [P / G'] at the group rank's place. */
static size_t secondary_numel(const zt_engine *e, int u) {
    return e->spec->units[u].padded_numel / (size_t)e->secondary->world_size;
}

/* Quantized weights: the wire of a unit's gathers, and the bytes of one
 * rank's part of unit u on it (its slice's codes and scales). */
static zt_wire weight_wire(const zt_engine *e) {
    zt_wire w = {e->cfg.dtype, e->cfg.quant_weights_bits, e->cfg.quant_block};
    return w;
}
static size_t wire_part_bytes(const zt_engine *e, int u) {
    zt_wire w = weight_wire(e);
    return zt_wire_bytes(&w, e->spec->units[u].shard_numel);
}

/* hpZ: the bytes of this rank's secondary part of unit u, and where it
 * starts in the gathered buffer (codes: the wire of N / G' rank parts). */
static size_t secondary_bytes(const zt_engine *e, int u) {
    if (e->cfg.quant_weights_bits)
        return wire_part_bytes(e, u) * (size_t)(e->comm->world_size / e->secondary->world_size);
    return secondary_numel(e, u) * zt_dtype_size(e->cfg.dtype);
}
static char *secondary_home(const zt_engine *e, int u) {
    const zt_unit_state *ust = &e->units[u];
    char *base = e->cfg.quant_weights_bits ? ust->wire.data : ust->gathered.data;
    return base + (size_t)e->secondary->rank * secondary_bytes(e, u);
}

/* Quantized weights: this rank's slice, loaded into the full buffer, as
 * codes at its place in the wire buffer. */
static void encode_own_slice(zt_engine *e, int u, const char *slice) {
    zt_unit_state *ust = &e->units[u];
    size_t S = e->spec->units[u].shard_numel;
    uint8_t *codes = (uint8_t *)ust->wire.data + (size_t)e->comm->rank * wire_part_bytes(e, u);
    float *scales = (float *)(codes + zt_wire_scales_at(S, e->cfg.quant_weights_bits));
    e->ctx->be->ops->wire_quantize(&e->ctx->compute, codes, scales, slice, e->cfg.dtype, NULL, ZT_FP32, S,
                                   e->cfg.quant_weights_bits, e->cfg.quant_block);
}

/* Quantized weights: every rank's codes decoded into the full buffer, so
 * every rank (this one too) computes with the same values. */
static void decode_gathered(zt_engine *e, int u) {
    zt_unit_state *ust = &e->units[u];
    size_t S = e->spec->units[u].shard_numel, wb = wire_part_bytes(e, u), d = zt_dtype_size(e->cfg.dtype);
    int bits = e->cfg.quant_weights_bits;
    for (int r = 0; r < e->comm->world_size; r++) {
        const uint8_t *codes = (const uint8_t *)ust->wire.data + (size_t)r * wb;
        e->ctx->be->ops->wire_dequantize(&e->ctx->compute, (char *)ust->gathered.data + (size_t)r * S * d,
                                         e->cfg.dtype, codes, (const float *)(codes + zt_wire_scales_at(S, bits)), S,
                                         bits, e->cfg.quant_block);
    }
    ust->wire_pending = 0;
}

/* Puts this rank's part of unit u where its all-gather expects it: the
 * shard (from wherever the tier keeps it; quantized weights: as codes), or,
 * for a backward after hpZ kept it, its secondary part, which then goes.
 * Returns the communicator, the bytes per rank of the gather and what
 * they stand for. */
static zt_status place_own_part(zt_engine *e, int u, zt_comm **comm, size_t *bytes_per_rank, size_t *uncompressed) {
    zt_unit_state *ust = &e->units[u];
    zt_ctx *ctx = e->ctx;
    size_t d = zt_dtype_size(e->cfg.dtype);
    if (ust->secondary.data) {
        size_t n = secondary_bytes(e, u);
        ZT_TRY(ctx->be->memcpy_async(ctx->be, secondary_home(e, u), ust->secondary.data, n, ZT_COPY_D2D,
                                     &ctx->compute, &ctx->err));
        *comm = e->secondary; /* the part goes at the unit's backward release, where zt-plan counts it out */
        *bytes_per_rank = n;
        *uncompressed = secondary_numel(e, u) * d;
        return ZT_OK;
    }
    *comm = e->comm;
    *bytes_per_rank = *uncompressed = e->spec->units[u].shard_numel * d;
    char *slice = (char *)ust->gathered.data + shard_lo(e, u) * d;
    ZT_TRY(e->tier->load_shard(e, u, slice));
    if (e->cfg.quant_weights_bits) {
        encode_own_slice(e, u, slice);
        *bytes_per_rank = wire_part_bytes(e, u);
    }
    return ZT_OK;
}

/* Stage 3: allocate u's full buffer (and its codes' when quantized), put
 * our part in place, start the gather. */
static zt_status start_gather(zt_engine *e, int u) {
    zt_unit_state *ust = &e->units[u];
    const zt_unit_spec *usp = &e->spec->units[u];
    ZT_TRY(zt_engine_alloc(e, &ust->gathered, e->cfg.dtype, usp->padded_numel, ZT_CAT_GATHERED_PARAMS, "gathered", u));
    if (e->cfg.quant_weights_bits) {
        ZT_TRY(zt_engine_alloc_bytes(e, &ust->wire, wire_part_bytes(e, u) * (size_t)e->comm->world_size,
                                     ZT_CAT_COMM_BUFFERS, "gathered codes", u));
        ust->wire_pending = 1;
    }
    ZT_TRY(to_gathering(e, u));
    size_t bytes_per_rank, uncompressed;
    ZT_TRY(place_own_part(e, u, &ust->gather_comm, &bytes_per_rank, &uncompressed));
    char name[48];
    snprintf(name, sizeof name, "gather %s", usp->name);
    zt_trace_instant(e->ctx->trace, name, "unit", 1);
    /* The collective runs after everything queued on compute so far: this
     * copy, and every kernel that read a block freed before the buffer was
     * allocated, so reusing a cached block is safe on any stream. Without
     * overlap it has also completed on return. */
    void *buf = e->cfg.quant_weights_bits ? ust->wire.data : ust->gathered.data;
    return zt_coll_unit_gather_start(e, ust->gather_comm, u, buf, bytes_per_rank, uncompressed, &e->ctx->compute,
                                     &ust->gather_handle);
}

/* --- The pass and its use order. */

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

/* The schedule's look-ahead from the use just noted: this pass's record
 * and, in forward, the recorded backward, which comes next in the same
 * step; backward ends at the optimizer step, which changes the parameters.
 * A pass that left its record has none. */
static zt_sched_ahead ahead_of(const zt_engine *e) {
    if (!e->follows_record) return zt_sched_no_ahead();
    const zt_use_order *rec = &e->recorded[e->pass], *bwd = &e->recorded[ZT_PASS_BACKWARD];
    zt_sched_ahead a = {rec->units, rec->n, e->now.n, NULL, 0};
    if (e->pass == ZT_PASS_FORWARD) {
        a.next = bwd->units;
        a.next_n = bwd->n;
    }
    return a;
}

/* Stage 3: starts the prefetches the schedule picks after the use just
 * noted (zt_sched_prefetch: in record order, stopped by max_live_params),
 * so the planner replays them exactly. */
static zt_status prefetch_next(zt_engine *e) {
    zt_sched_knobs k = zt_engine_sched_knobs(e);
    zt_sched_ahead a = ahead_of(e);
    if (a.n == 0 || k.prefetch <= 0) return ZT_OK;
    unsigned char sharded[ZT_MAX_UNITS]; /* [nunits] */
    int picks[ZT_MAX_UNITS];              /* [min(prefetch, nunits)] */
    for (int u = 0; u < e->spec->nunits; u++) sharded[u] = e->units[u].phase == ZT_UNIT_SHARDED;
    size_t live = e->gathered_inflight_now / zt_dtype_size(e->cfg.dtype); /* every buffer is [padded] dtype */
    int n = zt_sched_prefetch(e->spec, &k, &a, sharded, live, picks);
    for (int i = 0; i < n; i++) ZT_TRY(start_gather(e, picks[i]));
    return ZT_OK;
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

/* --- The model's API. */

zt_status zt_engine_gather(zt_engine *e, int unit, const void **params) {
    ZT_TRY(check_unit(e, unit));
    zt_ctx *ctx = e->ctx;
    zt_unit_state *ust = &e->units[unit];
    const char *name = e->spec->units[unit].name;
    if (e->pass == ZT_PASS_NONE)
        return ZT_FAIL(&ctx->err, ZT_ERR_INVALID, "gather of unit %s outside a pass (zt_engine_begin_pass first)", name);
    if (ust->phase == ZT_UNIT_IN_USE)
        return ZT_FAIL(&ctx->err, ZT_ERR_INVALID, "unit %s gathered twice without a release", name);
    ZT_TRY(zt_coll_progress(e));
    const void *full = ust->params.data; /* [padded] dtype */
    if (gathered_on_demand(e, unit)) {
        if (ust->phase == ZT_UNIT_SHARDED) ZT_TRY(start_gather(e, unit));
        if (ust->phase == ZT_UNIT_GATHERING)
            /* Kernels queued from here on read the gathered values: the
             * compute stream waits for the collective, the host does not. */
            ZT_TRY(zt_coll_unit_gather_join(e, ust->gather_comm, &ust->gather_handle));
        if (ust->wire_pending) decode_gathered(e, unit);
        full = ust->gathered.data;
    }
    ZT_TRY(to_in_use(e, unit));
    ZT_TRY(note_use(e, unit));
    if (e->cfg.stage == 3) ZT_TRY(prefetch_next(e));
    if (e->compute_dtype != e->cfg.dtype) {
        size_t P = e->spec->units[unit].padded_numel;
        ZT_TRY(zt_engine_alloc(e, &ust->view32, ZT_FP32, P, ZT_CAT_WORKSPACE, "fp32 view", unit));
        ctx->be->ops->cast(&ctx->compute, ust->view32.data, ZT_FP32, full, e->cfg.dtype, P);
        full = ust->view32.data;
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
 * group is copied out of the full buffer (quantized weights: out of the
 * codes, so backward decodes the same values) before that goes (once: a
 * unit used twice in forward already has it). */
static zt_status keep_secondary(zt_engine *e, int u) {
    zt_unit_state *ust = &e->units[u];
    zt_ctx *ctx = e->ctx;
    size_t n = secondary_bytes(e, u);
    if (ust->secondary.data) return ZT_OK;
    ZT_TRY(zt_engine_alloc_bytes(e, &ust->secondary, n, ZT_CAT_GATHERED_PARAMS, "secondary shard", u));
    return ctx->be->memcpy_async(ctx->be, ust->secondary.data, secondary_home(e, u), n, ZT_COPY_D2D, &ctx->compute,
                                 &ctx->err);
}

zt_status zt_engine_set_secondary(zt_engine *e, zt_comm *secondary) {
    if (!secondary || secondary->world_size <= 1) return ZT_OK;
    if (e->cfg.stage != 3 || e->replicas)
        return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "`reshard_after_forward` needs stage 3 with world sharding (got "
                       "stage %d%s)", e->cfg.stage, e->replicas ? " and `shard_group`" : "");
    if (e->comm->world_size % secondary->world_size)
        return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "`reshard_after_forward`: groups of %d do not divide the %d ranks",
                       secondary->world_size, e->comm->world_size);
    e->secondary = secondary;
    return ZT_OK;
}

zt_status zt_engine_release(zt_engine *e, int unit) {
    ZT_TRY(check_unit(e, unit));
    zt_unit_state *ust = &e->units[unit];
    if (ust->phase != ZT_UNIT_IN_USE)
        return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "unit %s released while %s (not gathered)",
                       e->spec->units[unit].name, zt_unit_phase_name(ust->phase));
    zt_mem *mem = &e->ctx->device_mem;
    zt_tensor_free(&ust->view32, mem);
    ZT_TRY(to_gathered(e, unit));
    if (!gathered_on_demand(e, unit)) return ZT_OK;
    /* A unit used again soon stays gathered (max_reuse_distance; it counts
     * toward max_live_params) and its next gather is free;
     * zt_engine_end_passes frees it at the latest. Otherwise
     * reshard_after_forward: the full copy goes as soon as it is unused.
     * Its readers may still be queued on compute; the block is reused
     * either by compute (after them, in stream order) or by a collective
     * that first waits for compute (start_gather, the bucket's flush). */
    zt_sched_knobs k = zt_engine_sched_knobs(e);
    zt_sched_ahead a = ahead_of(e);
    int keep = zt_sched_keep(e->spec, &k, &a, unit, e->reuse_seen);
    if (!keep && e->secondary && e->pass == ZT_PASS_FORWARD && backward_gathers(e, unit))
        ZT_TRY(keep_secondary(e, unit));
    if (e->pass == ZT_PASS_BACKWARD) zt_tensor_free(&ust->secondary, mem); /* its backward has its full copy */
    if (!keep) ZT_TRY(to_sharded(e, unit));
    char name[48];
    snprintf(name, sizeof name, "%s %s", keep ? "keep" : "free", e->spec->units[unit].name);
    zt_trace_instant(e->ctx->trace, name, "unit", 0);
    return ZT_OK;
}

zt_status zt_engine_end_passes(zt_engine *e) {
    for (int u = 0; u < e->spec->nunits; u++) {
        zt_unit_state *ust = &e->units[u];
        if (ust->phase == ZT_UNIT_IN_USE)
            return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "optimizer step while unit %s is gathered (not released)",
                           e->spec->units[u].name);
        zt_tensor_free(&ust->secondary, &e->ctx->device_mem); /* hpZ: a part no backward gathered is stale now */
        /* A prefetch the pass did not use (its order changed), or a unit
         * kept for a reuse: it would hold parameters from before the step. */
        if (gathered_on_demand(e, u) && ust->phase != ZT_UNIT_SHARDED) ZT_TRY(to_sharded(e, u));
    }
    end_pass(e);
    return ZT_OK;
}

zt_status zt_engine_end_forward_only(zt_engine *e) { return zt_engine_end_passes(e); }

void zt_gather_quiesce(zt_engine *e) {
    zt_error ignore = {0};
    for (int u = 0; u < e->spec->nunits; u++) {
        zt_unit_state *ust = &e->units[u];
        if (ust->gather_handle.active) zt_comm_wait(ust->gather_comm, &ust->gather_handle, &ignore);
    }
}
