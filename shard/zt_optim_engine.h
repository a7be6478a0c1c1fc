/* The engine's half of the optimizer interface: what optim/ (the tables
 * of zt_optim.h and their common step) reads and calls in the engine, and
 * what the engine and its offload tiers call in optim/: where a unit's
 * state lies (placement.h), the state layout, the gradients as fp32
 * pieces, the host and device updates and the loop over units that
 * all-gathers updated slices. */
#ifndef ZT_OPTIM_ENGINE_H
#define ZT_OPTIM_ENGINE_H

#include "collectives.h"
#include "offload.h"
#include "placement.h"
#include "tier.h"
#include "unit_mem.h"

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

/* An optimizer with a matrix hook (optim/matrix_hook.c): its matrices
 * and their owners, made at init and freed at destroy; unit u's device
 * step through the hook; and the transform of every matrix of unit u in
 * upd[owned] fp32 (device memory, or with host = 1 the host pool's: the
 * offload step's), gathered to each owner and scattered back. */
zt_status zt_engine_plan_matrices(zt_engine *e);
void zt_engine_free_matrices(zt_engine *e);
zt_status zt_engine_matrix_step(zt_engine *e, int u, const zt_optim_step *s);
zt_status zt_engine_transform_matrices(const zt_engine *e, int u, float *upd, int host);

/* Unit u's step on the device through the optimizer's table (its matrix
 * hook or device_step), and where the owned part of its 16-bit params
 * starts (optim/step.c). */
zt_status zt_engine_unit_step(zt_engine *e, int u, const zt_optim_step *s);
uint16_t *zt_engine_owned_params16(const zt_engine *e, int u);

/* Unit u's device step with low-memory state (optim/lowmem.c): its bf16
 * params (master none) and bf16 slots widened to fp32 for the step and
 * rounded back stochastically; base as device_update_unit makes it. */
zt_status zt_engine_lowmem_update(zt_engine *e, int u, const zt_optim_step *base);

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
/* The same as fp32 values whatever t's dtype: all t->numel of them (bf16
 * state widened; stored rounded to nearest, exact for values that came
 * from bf16). */
zt_status zt_engine_fetch_values(zt_engine *e, const zt_tensor *t, float *dst);
zt_status zt_engine_store_values(zt_engine *e, zt_tensor *t, const float *src);
/* Runs update(e, u, arg) on every unit in order; where a unit's params are
 * full on every rank at stages 1-3 (stages 1-2, stage 3's persistent units)
 * its updated slice is all-gathered (after `producer`) while later units
 * update, and compute waits for all of them at the end, before the next
 * forward reads the parameters. */
typedef zt_status (*zt_unit_update_fn)(zt_engine *e, int u, void *arg);
zt_status zt_engine_update_each_unit(zt_engine *e, zt_unit_update_fn update, void *arg, zt_stream *producer);

/* The global gradient norm: per-unit sums over this rank's slice, added in
 * unit order, then over ranks in rank order (the same partition at every
 * stage). Sets last_grad_norm and last_step_skipped, moves the loss scaler
 * on, and returns the unscale-and-clip multiplier in *mult (ws: one chunk
 * of widened 16-bit gradients). */
zt_status zt_engine_judge_gradients(zt_engine *e, zt_tensor *ws, float *mult);
/* The step's update of every unit on the device (optim/step.c): the
 * device tier's update. */
zt_status zt_engine_device_update(zt_engine *e, const zt_update_args *a);

#endif
