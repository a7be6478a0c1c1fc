/* The stage-3 gather schedule as pure decisions: which units stay whole
 * (persistence), which units start gathering ahead of their use (prefetch
 * under the live cap) and which units stay gathered after a release (the
 * reuse distance). Inputs are unit sizes, the recorded use order and the
 * knobs; the output is the decision. No engine, no allocation, no
 * communication: the engine (shard/gather.c) acts on these decisions and
 * the planner (shard/plan.c) replays them, so the two cannot drift.
 *
 * The knobs are DeepSpeed's, counted in parameters (0: off):
 *   persist_threshold   stage3_param_persistence_threshold: a unit of fewer
 *                       parameters is never gathered (it stays whole)
 *   max_live_params     stage3_max_live_parameters: a prefetch that would
 *                       take the gathered parameters over this waits
 *   max_reuse_distance  stage3_max_reuse_distance: a released unit used
 *                       again within this many parameters of other units'
 *                       gathers stays gathered
 * and `prefetch`, the units gathered ahead of the one in use. */
#ifndef ZT_SCHEDULE_H
#define ZT_SCHEDULE_H

#include <stddef.h>

#include "zt_units.h"

typedef struct {
    int stage;
    int prefetch; /* units */
    size_t persist_threshold, max_live_params, max_reuse_distance;
} zt_sched_knobs;

/* Where the pass stands in its look-ahead: the recorded order of this kind
 * of pass, the uses made so far (pos), and the recorded order of the pass
 * that follows it in the same step (forward: the backward; NULL after
 * backward, which ends at the optimizer step). A pass that left its record
 * has no look-ahead: n = 0, next = NULL (zt_sched_no_ahead). */
typedef struct {
    const int *order; /* [n] */
    int n, pos;
    const int *next; /* [next_n] or NULL */
    int next_n;
} zt_sched_ahead;

static inline zt_sched_ahead zt_sched_no_ahead(void) {
    zt_sched_ahead a = {NULL, 0, 0, NULL, 0};
    return a;
}

/* Does unit u stay whole on every rank at stage 3 (fewer parameters than
 * persist_threshold)? Gathering a small unit costs a collective's latency
 * for few bytes, so keeping it whole is cheaper than gathering it twice a
 * step; its grads and optimizer state stay sharded. */
int zt_sched_persistent(const zt_unit_spec *usp, const zt_sched_knobs *k);
/* Is unit u all-gathered just in time (stage 3, not persistent)? */
int zt_sched_on_demand(const zt_unit_spec *usp, const zt_sched_knobs *k);

/* The prefetches to start after the use just counted in a->pos: the next
 * `prefetch` units of a->order, in order, skipping those not sharded
 * (sharded[v] == 0: in use, on their way, kept, persistent) or already
 * chosen; the first one that would take live (padded elements of every
 * gathered unit now) over max_live_params stops them, so prefetches never
 * overtake each other. Writes the units to out[] (room for k->prefetch)
 * and returns their count. */
int zt_sched_prefetch(const zt_model_spec *spec, const zt_sched_knobs *k, const zt_sched_ahead *a,
                      const unsigned char *sharded, size_t live, int *out);

/* Does unit u, just released, stay gathered (max_reuse_distance)? It does
 * when the look-ahead (the rest of this pass, then the next pass) uses it
 * again before more than max_reuse_distance padded parameters of other
 * on-demand units are gathered, each unit counted once. seen: scratch of
 * spec->nunits bytes. */
int zt_sched_keep(const zt_model_spec *spec, const zt_sched_knobs *k, const zt_sched_ahead *a, int u,
                  unsigned char *seen);

#endif
