/* Where each of a unit's buffers lives and which part of it this rank
 * owns, as the ZeRO stage, the stage-3 schedule (persistence) and the
 * offload tiers decide (the table in zt_engine.h). Read-only questions
 * every engine file asks; nothing here writes state. */
#ifndef ZT_PLACEMENT_H
#define ZT_PLACEMENT_H

#include "zt_engine.h"
#include "zt_optim.h"
#include "zt_schedule.h"

/* The schedule's view of the engine's knobs (shard/schedule.c). */
static inline zt_sched_knobs zt_engine_sched_knobs(const zt_engine *e) {
    zt_sched_knobs k = {e->cfg.stage, e->cfg.prefetch, e->cfg.persist_threshold, e->cfg.max_live_params,
                        e->cfg.max_reuse_distance};
    return k;
}
/* Stage 3: does unit u persist (zt_sched_persistent)? Its params stay full
 * on every rank and are never gathered; its grads and optimizer state stay
 * sharded. */
static inline int persistent(const zt_engine *e, int u) {
    zt_sched_knobs k = zt_engine_sched_knobs(e);
    return zt_sched_persistent(&e->spec->units[u], &k);
}
/* Does unit u keep the full (padded) buffer of each kind, or a shard? The
 * params are per unit (stages 0-2, and persistent units at stage 3). */
static inline int full_params(const zt_engine *e, int u) { return e->cfg.stage < 3 || persistent(e, u); }
/* Is unit u all-gathered just in time (stage 3, not persistent)? */
static inline int gathered_on_demand(const zt_engine *e, int u) { return !full_params(e, u); }
static inline int full_grads(const zt_engine *e) { return e->cfg.stage < 2; }
/* Is unit u's parameter shard in the host pool (offload_params)? */
static inline int params_on_host(const zt_engine *e, int u) { return e->cfg.offload_params && gathered_on_demand(e, u); }
/* Is it in the NVMe tier's file rather than the host pool (nvme_params)? */
static inline int params_in_file(const zt_engine *e, int u) { return e->cfg.nvme_params && params_on_host(e, u); }
/* A copy into or out of unit u's params: `device_kind` where they are on the device. */
static inline zt_copy_kind params_copy_kind(const zt_engine *e, int u, zt_copy_kind device_kind) {
    return params_on_host(e, u) ? ZT_COPY_H2H : device_kind;
}
static inline int full_optim(const zt_engine *e) { return e->cfg.stage < 1; }

/* The optimizer's table (zt_engine_init resolves a NULL one to AdamW). */
static inline const zt_optim *optim_of(const zt_engine *e) { return e->cfg.optimizer; }
/* Unit u's optimizer state slot i where it lives: the host pool under
 * offload, else the device. */
static inline zt_tensor *opt_slot(const zt_engine *e, int u, int i) {
    return e->cfg.offload ? &e->units[u].host_opt_state[i] : &e->units[u].opt_state[i];
}

/* This rank's slice [lo, hi) of unit u in unit coordinates. */
static inline size_t shard_lo(const zt_engine *e, int u) {
    return (size_t)e->comm->rank * e->spec->units[u].shard_numel;
}

/* The part of unit u whose optimizer state this rank owns: everything at
 * stage 0, its slice otherwise. */
static inline size_t owned_lo(const zt_engine *e, int u) { return full_optim(e) ? 0 : shard_lo(e, u); }
static inline size_t owned_numel(const zt_engine *e, int u) {
    return full_optim(e) ? e->spec->units[u].padded_numel : e->spec->units[u].shard_numel;
}

/* A frozen unit keeps only its params; its backward's weight gradients go
 * to a scratch buffer that is dropped when they are ready. */
static inline int frozen(const zt_engine *e, int u) { return e->spec->units[u].frozen; }

/* Element i (unit coordinates) of a buffer that is full or holds [lo, lo+shard). */
static inline size_t local_index(int is_full, size_t i, size_t lo) { return is_full ? i : i - lo; }

#endif
