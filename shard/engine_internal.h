/* Shared by the engine's source files (not a public interface). */
#ifndef ZT_ENGINE_INTERNAL_H
#define ZT_ENGINE_INTERNAL_H

#include "zt_engine.h"
#include "zt_optim.h"

/* Stage 3: does unit u persist (fewer parameters than persist_threshold,
 * DeepSpeed's stage3_param_persistence_threshold)? Its params stay full on
 * every rank and are never gathered; its grads and optimizer state stay
 * sharded. Gathering a small unit costs a collective's latency for few
 * bytes, so keeping it whole is cheaper than gathering it twice a step. */
static inline int persistent(const zt_engine *e, int u) {
    return e->cfg.stage == 3 && e->spec->units[u].numel < e->cfg.persist_threshold;
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

/* Parameter i of unit u clipped to the unit range [lo, hi): [*a, *b) and
 * its weight decay (only where the model asked for it); 0 when they
 * do not overlap. */
static inline int param_in_range(const zt_engine *e, int u, int i, size_t lo, size_t hi, size_t *a, size_t *b,
                                 float *wd) {
    const zt_param_spec *ps = &e->spec->units[u].params[i];
    *a = ps->offset > lo ? ps->offset : lo;
    *b = ps->offset + ps->numel < hi ? ps->offset + ps->numel : hi;
    *wd = ps->decay ? e->cfg.weight_decay : 0.0f;
    return *a < *b;
}

/* Optimizer-state layout (optim/layout.c). Over an owned range [lo, hi)
 * of whole world slices, a segment is one parameter's part [a, b) of one
 * slice; 8-bit Adam's blocks start at each segment (block: the index of
 * its first among the range's), Adafactor sums its statistics per segment. */
typedef struct {
    int slice, param;
    size_t a, b, block;
} zt_segment;
typedef struct {
    const zt_unit_spec *us;
    size_t lo, hi;
    int slice, param;
    size_t blocks;
} zt_segment_iter;
zt_segment_iter zt_segments(const zt_unit_spec *us, size_t lo, size_t hi);
int zt_next_segment(zt_segment_iter *it, zt_segment *seg);
/* 8-bit blocks of [lo, hi) (each segment's, rounded up). */
size_t zt_owned_qblocks(const zt_unit_spec *us, size_t lo, size_t hi);
/* Is parameter ps a matrix Adafactor factors (rows x cols, both >= 2; the
 * last dimension is the columns)? */
int zt_param_factored(const zt_param_spec *ps, size_t *rows, size_t *cols);
/* Where parameter i's statistics start in a slice's statistics vector:
 * rows + cols per factored parameter of the unit, in order (i = nparams:
 * its length). */
size_t zt_factored_stats_offset(const zt_unit_spec *us, int i);
/* Where parameter i's state starts in the compact Adafactor v of owned
 * range [lo, hi) (i = nparams: its length). */
size_t zt_adafactor_v_offset(const zt_unit_spec *us, size_t lo, size_t hi, int i);
/* [lo, hi) widened to the whole of every factored parameter it touches. */
void zt_adafactor_span(const zt_unit_spec *us, size_t lo, size_t hi, size_t *span_lo, size_t *span_hi);
/* Elements of Adafactor's device scratch for one unit (one fp32 tensor): the
 * statistics of the slices it owns ([slices][K]), the factors ([K]) and a
 * double per update piece of at most `chunk` elements (2 words each), and
 * 2 words more so that it is never empty. */
size_t zt_adafactor_scratch_numel(const zt_unit_spec *us, size_t lo, size_t hi, size_t chunk);
/* Update pieces of at most `chunk` elements over the segments of [lo, hi). */
size_t zt_adafactor_pieces(const zt_unit_spec *us, size_t lo, size_t hi, size_t chunk);

/* Offload's host optimizers: g[n] *= clip (the unscale-and-clip
 * multiplier), in place, before their update. */
static inline void scale_host_grads(float *g, size_t n, float clip) {
    if (clip != 1.0f)
        for (size_t i = 0; i < n; i++) g[i] *= clip;
}

/* Allocates a zeroed 1-d tensor labelled "<unit> <what>", on the device or
 * (zt_engine_alloc_host) in the host pool. */
zt_status zt_engine_alloc(zt_engine *e, zt_tensor *t, zt_dtype dtype, size_t numel, zt_category cat,
                          const char *what, int unit);
zt_status zt_engine_alloc_host(zt_engine *e, zt_tensor *t, zt_dtype dtype, size_t numel, zt_category cat,
                               const char *what, int unit);

/* Offload: copies unit u's owned reduced gradients device -> host (fp32). */
zt_status zt_engine_offload_grads(zt_engine *e, int u);
/* Offload: the CPU optimizer of unit u's owned part, new params copied to the device. */
zt_status zt_engine_offload_step_unit(zt_engine *e, int u, float clip, float lr, int t);
/* Offload: unit u's reduced gradients are on the host, in fp32 (host_grads). */
zt_status zt_engine_offload_grads_landed(zt_engine *e, int u);
/* Offload: the optimizer's host step on unit u's host master and state
 * with g[owned] (scaled by clip first); the new values in the params dtype
 * go to out[owned] when the step writes them (out not NULL): returns
 * whether it did. Thread-safe per unit (the delayed update's thread). */
int zt_engine_host_step(const zt_engine *e, int u, float *g, void *out, float clip, float lr, int t);
/* The host_step of an optimizer whose slots are all per element: its
 * host_range over the owned part (optim/step.c). */
zt_status zt_optim_host_step_elementwise(const zt_engine *e, int u, float *g, void *out, const zt_optim_step *s,
                                         int *written);

/* Unit u's gradients over [lo, lo + n) (unit coordinates) as fp32 pieces:
 * the grads themselves in fp32 (one piece), else widened chunk by chunk
 * into ws (zt_engine_optimizer_chunk at most, so no fp32 copy of a unit's
 * gradients ever exists). optim/step.c. */
typedef struct {
    zt_engine *e;
    int u;
    size_t next, end;
    zt_tensor *ws;
} zt_grad_pieces;
zt_grad_pieces zt_engine_grad_pieces(zt_engine *e, int u, size_t lo, size_t n, zt_tensor *ws);
/* The next piece: *g holds elements [*at, *at + *n); 0 when none is left. */
int zt_engine_next_grad_piece(zt_grad_pieces *it, float **g, size_t *at, size_t *n);

/* An optimizer with a matrix hook: unit u's device step through it
 * (optim/matrix_hook.c). */
zt_status zt_engine_matrix_step(zt_engine *e, int u, const zt_optim_step *s);

/* A per-element slot's checkpoint block: dst[shard_numel] from this
 * rank's slice of slot i (zeros where it is not kept); the owned part of
 * slot i from vals[owned] (ignored where it is not kept). */
zt_status zt_engine_get_elementwise_block(zt_engine *e, int u, int i, float *dst);
zt_status zt_engine_set_elementwise_block(zt_engine *e, int u, int i, const float *vals);

/* All of optimizer-state tensor t (device, or the host pool under
 * offload) into host dst; host src over all of t, waiting for the copy
 * (shard/state_io.c, for the optimizers' checkpoint blocks). */
zt_status zt_engine_fetch_state(zt_engine *e, const zt_tensor *t, void *dst);
zt_status zt_engine_store_state(zt_engine *e, zt_tensor *t, const void *src);

/* The NVMe tier (shard/nvme_state.c). Arrays of a unit in the file: the
 * fp32 master and the optimizer's slots 0 and 1 (per element) of the owned
 * part; the parameter shard. */
typedef enum { ZT_NVME_MASTER = 0, ZT_NVME_SLOT0, ZT_NVME_SLOT1, ZT_NVME_PARAMS, ZT_NVME_NARRAYS } zt_nvme_array;
/* Lays out the file, creates it and the host buffers (nvme_optimizer only). */
zt_status zt_engine_nvme_init(zt_engine *e);
void zt_engine_nvme_destroy(zt_engine *e);
/* Elements [i, i + n) of array a of unit u, read or written at once. */
zt_status zt_engine_nvme_get(zt_engine *e, int u, zt_nvme_array a, size_t i, size_t n, void *dst);
zt_status zt_engine_nvme_put(zt_engine *e, int u, zt_nvme_array a, size_t i, size_t n, const void *src);
/* The optimizer step through the buffers: begin (the first reads), each
 * trained unit in order (g: its [owned] fp32 gradients; out: its [owned]
 * new params, or NULL when they live in the file), end (every write done). */
zt_status zt_engine_nvme_begin_step(zt_engine *e);
zt_status zt_engine_nvme_step_unit(zt_engine *e, int u, float *g, void *out, float clip, float lr, int t);
zt_status zt_engine_nvme_end_step(zt_engine *e);
/* Unit u's parameter shard from the file into dst (on compute, `kind`). */
zt_status zt_engine_nvme_copy_shard(zt_engine *e, int u, void *dst, zt_copy_kind kind);

/* Offload: unit u's owned device params := its host master (rounded to the
 * params dtype), through an h2d slot, as the step's copies. */
zt_status zt_engine_offload_apply_unit(zt_engine *e, int u);

/* Runs update(e, u, arg) on every unit in order; where a unit's params are
 * full on every rank at stages 1-3 (stages 1-2, stage 3's persistent units)
 * its updated slice is all-gathered (after `producer`) while later units
 * update, and compute waits for all of them at the end, before the next
 * forward reads the parameters. */
typedef zt_status (*zt_unit_update_fn)(zt_engine *e, int u, void *arg);
zt_status zt_engine_update_each_unit(zt_engine *e, zt_unit_update_fn update, void *arg, zt_stream *producer);

/* Delayed update (shard/delayed_update.c): the optimizer part of a step
 * under --offload-delay 1, given the unscale-and-clip multiplier; skip: the
 * gradients were not finite (nothing new starts). */
zt_status zt_engine_delayed_step(zt_engine *e, float mult, float lr, int skip);
/* Waits for the update in flight, if any: the host master and m, v are
 * then current (the device params may still be behind: params_behind). */
zt_status zt_engine_delayed_wait(zt_engine *e);
/* Element i (unit coordinates) of a buffer that is full or holds [lo, lo+shard). */
static inline size_t local_index(int is_full, size_t i, size_t lo) { return is_full ? i : i - lo; }

/* Before the optimizer step: every unit must be released (else an error
 * naming it); stage 3 frees prefetches no pass used and units kept for a
 * reuse (they would hold parameters from before the step); the pass in
 * progress is recorded. */
zt_status zt_engine_end_passes(zt_engine *e);

/* Lets every collective in flight advance (MPI only moves nonblocking
 * collectives inside MPI calls, so the engine pokes them at each API call). */
zt_status zt_engine_progress(zt_engine *e);

/* The `ready` event for a collective that reads what `producer` wrote: an
 * event on it when the communicator orders itself after events, else NULL
 * after the host has waited for the producer (host buffers). */
zt_status zt_engine_ready_event(zt_engine *e, zt_stream *producer, void **ready);

/* All-gathers buf (in place, this rank's part at rank x bytes_per_rank)
 * after the work queued on `producer`, and makes compute wait for it (a
 * host wait when overlap_comm is off). */
zt_status zt_engine_all_gather_after(zt_engine *e, void *buf, size_t bytes_per_rank, zt_stream *producer, int unit);
/* zt_engine_all_gather_start_after's first half over any communicator (a
 * shard group, hpZ's secondary group, the replicas), `what` naming the
 * gather for the watchdog. */
zt_status zt_engine_all_gather_on(zt_engine *e, zt_comm *comm, void *buf, size_t bytes_per_rank, zt_stream *producer,
                                  const char *what, zt_comm_handle *h);
/* The same in two halves, so compute waits only when it needs the result:
 * start (a host wait at once when overlap_comm is off), then finish (a no-op
 * for a handle already waited for). */
zt_status zt_engine_all_gather_start_after(zt_engine *e, void *buf, size_t bytes_per_rank, zt_stream *producer, int unit,
                                           zt_comm_handle *h);
zt_status zt_engine_all_gather_finish(zt_engine *e, zt_comm_handle *h);

/* Offload: orders the h2d stream after everything enqueued on compute so
 * far. Start of the optimizer step's CPU part. */
zt_status zt_engine_offload_begin(zt_engine *e);

/* Offload: waits for the last parameter copies and releases their host
 * buffers; compute is ordered after them. End of the optimizer step. */
zt_status zt_engine_offload_finish(zt_engine *e);

/* Offload: waits for every copy still in flight (a step that failed) and
 * frees the transfer buffers. Engine teardown. */
void zt_engine_offload_release(zt_engine *e);

/* Frees a bucket's buffers and empties it. */
void zt_engine_free_bucket(zt_engine *e, zt_bucket *b);

/* Completes the bucket in flight (if any). */
zt_status zt_engine_complete_bucket(zt_engine *e);

#endif
