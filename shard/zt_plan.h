/* The memory planner's engine half (zt-plan): per-rank device bytes per
 * category at the moment of peak, host bytes, for a ZeRO stage, offload,
 * dtype, prefetch, bucket size and DeepSpeed's stage-3 knobs. The model
 * walks its passes (its activations and workspaces at every moment where
 * the peak can occur, in its use order, examples/<family> sizes over train/decoder/decoder_plan.c for the GPT)
 * and asks this half what the engine holds at each: persistent state (the
 * closed form), gathered units (replayed as the engine gathers,
 * prefetches, keeps and frees them, from the uses and releases the walk
 * reports), fp32 views, gradients waiting for their bucket, buckets in
 * flight; this half adds the optimizer step and the host pool. Validated
 * against measured runs by tests/mpi (planner cases) and docs/memory.md. */
#ifndef ZT_PLAN_H
#define ZT_PLAN_H

#include <stddef.h>

#include "zt_dtype.h"
#include "zt_mem.h"
#include "zt_engine.h"
#include "zt_units.h"

typedef struct {
    int world, stage, offload, offload_delay, prefetch;
    int offload_params; /* stage 3: the on-demand units' parameter shards in the host pool */
    /* The NVMe tier (zt_engine_config's): the state, and the shards, in the
     * swap file; its buffers' block size and count. */
    int nvme_optimizer, nvme_params;
    size_t nvme_block_bytes;
    int nvme_buffers;
    int secondary; /* hpZ: G', the secondary group's size (0 or 1: off) */
    int rank; /* whose memory: Adafactor's and 8-bit Adam's state depend on the parameters its slices touch */
    const zt_optim *optimizer;   /* what the optimizer keeps per parameter (NULL: AdamW) */
    float adafactor_beta1;       /* > 0: Adafactor keeps a first moment */
    int master_none, state_bf16; /* low-memory state (zt_engine_config's): no master; slots in bf16 */
    int gpu; /* a GPU's engine: a matrix hook's slices go through host-pool copies (optim/matrix_hook.c) */
    int overlap_comm; /* 0: each bucket's reduce-scatter completes (and frees) as it is sent */
    long long prefetch_params; /* DeepSpeed's stage3_prefetch_bucket_size: sets prefetch (0: unused) */
    zt_dtype dtype;         /* of params and grads (zt-train's --dtype) */
    zt_dtype compute_dtype; /* of gathered units: dtype where the backend has kernels in it, else fp32 */
    zt_dtype reduce_dtype;  /* of gradient buckets */
    size_t bucket_bytes;
    /* DeepSpeed's stage-3 knobs, as zt_engine_config has them (parameters;
     * 0: off): persistent units, the cap on live gathered parameters, the
     * reuse distance within which a released unit stays gathered. */
    size_t persist_threshold, max_live_params, max_reuse_distance;
    size_t sub_group_size; /* the optimizer's 16-bit widening chunk in elements (0: ZT_OPTIMIZER_CHUNK) */
    /* Quantized communication (zt_engine_config's): weight and gradient
     * code bits (0: off), values per scale, error feedback and its dtype. */
    int quant_weights_bits, quant_grads_bits;
    unsigned quant_block;
    int quant_feedback;
    zt_dtype feedback_dtype;
    int grad_nodes; /* quantized gradients: the nodes of the hierarchical reduce-scatter (0 or 1: flat) */
    const zt_model_spec *spec; /* laid out for `world` (zt_spec_layout) */
} zt_plan_input;

typedef struct {
    size_t by_category[ZT_NUM_CATEGORIES];      /* at the peak moment */
    size_t peak_by_category[ZT_NUM_CATEGORIES]; /* each category's own peak over the moments */
    size_t peak_bytes;
    const char *peak_moment;
    size_t persistent_bytes; /* params + grads + master + optimizer on the device */
    size_t feedback_bytes;   /* quantized gradients' error feedback (comm_buffers, not sharded) */
    size_t activations_kept_bytes; /* the model's, between its forward and backward */
    size_t host_bytes;       /* the host pool (offload; an asynchronous save's staging) */
    size_t checkpoint_staging_bytes; /* --async-save: the rank file staged in the host pool (part of host_bytes) */
    /* The engine's host-device copies per step (offload: the owned
     * gradients out, the updated parameters back), [ZT_LINK_H2D], [ZT_LINK_D2H];
     * and per micro-batch, offload_params' shards in at every gather. */
    size_t transfer_bytes[2];
    size_t shard_bytes_per_micro;
    /* Stage 3: the per-rank bytes of every all-gather a micro-batch makes
     * (a shard of each unit it gathers, in the params dtype or as its
     * codes), summed. */
    size_t gathered_shard_bytes_per_micro;
    /* The NVMe tier: the swap file, the host buffers (part of host_bytes),
     * the optimizer's reads and writes per step (in aligned requests), and
     * the shards read per micro-batch for the gathers. */
    size_t nvme_file_bytes, nvme_buffer_bytes, nvme_read_bytes, nvme_write_bytes, nvme_shard_read_bytes_per_micro;
} zt_plan;

/* Bytes per category at one moment of a pass. */
typedef struct {
    size_t c[ZT_NUM_CATEGORIES];
    const char *name;
} zt_plan_moment;

/* The planner's state while the model walks its passes. */
typedef struct {
    zt_plan_input in;                /* prefetch resolved */
    size_t bucket;                   /* bucket_bytes (>= 1) */
    int cap;                         /* most units per bucket */
    size_t filling_numel, waiting;   /* the filling bucket: its elements; its units' fp32 grads */
    int filling_units;
    size_t in_flight;                /* the bucket sent last: send + receive + sums */
    int waits;                       /* full fp32 gradients wait for their bucket (stages 2-3, or 16-bit) */
    zt_category wait_cat;            /* where they are counted: comm_buffers (2-3) or workspace (0-1) */
    size_t best_c[ZT_NUM_CATEGORIES], best_total, cat_peak[ZT_NUM_CATEGORIES];
    const char *best;
    size_t activations_kept;
    /* Stage 3, the pass being replayed: its use order and the order of the
     * pass after it in the step (NULL after backward), the uses so far,
     * each unit's phase (zt_unit_phase) and the padded elements gathered. */
    const int *order, *next; /* [n], [next_n] */
    int n, next_n, pos;
    unsigned char phase[ZT_MAX_UNITS];
    unsigned char seen[ZT_MAX_UNITS]; /* the reuse look-ahead's scratch */
    size_t live;
    size_t shard_copies_in; /* offload_params: bytes of shards copied in for the gathers replayed */
    size_t shard_reads;     /* nvme_params: bytes of those read from the file (aligned requests) */
    size_t gathered_shards; /* stage 3: each gather's per-rank bytes (shard x params dtype), summed */
    size_t secondary_live;  /* hpZ: bytes of the units' secondary parts kept from forward to backward */
    size_t wire_live;       /* quantized weights: the gathered units' codes (comm_buffers, with their full copy) */
    size_t feedback;        /* quantized gradients' error feedback (comm_buffers, every moment) */
    unsigned char has_secondary[ZT_MAX_UNITS];
    zt_state_bytes state; /* the persistent state (the plan's inputs fix it), once state_ready */
    int state_ready;
} zt_plan_sim;

/* The model's half: walks its forward and backward passes on S. */
typedef void (*zt_plan_walk_fn)(void *arg, zt_plan_sim *S);

void zt_plan_compute(const zt_plan_input *in, zt_plan_walk_fn walk, void *walk_arg, zt_plan *out);

/* For the walk. The persistent state, every moment's base. */
zt_plan_moment zt_plan_base(const zt_plan_sim *S);
/* A moment where the peak can occur. */
void zt_plan_consider(zt_plan_sim *S, const zt_plan_moment *m);
/* Stage 3, the engine's gathered units replayed (nothing at stages 0-2; the
 * walk reports every gather and release, as the model makes them): a pass
 * whose uses are order[n] as the engine records them, followed in the step
 * by next[next_n] (backward after forward; NULL after backward, which ends
 * at the optimizer step). Both arrays must outlive the pass. The steady
 * state from the second step on, when every pass prefetches from its record. */
void zt_plan_begin_pass(zt_plan_sim *S, const int *order, int n, const int *next, int next_n);
/* The model gathers unit u, its next use: gathered if it is not (even over
 * max_live_params), then the prefetch after it, stopped by the cap. */
void zt_plan_use(zt_plan_sim *S, int u);
/* The model releases u: kept gathered when its next use is within
 * max_reuse_distance, else freed. */
void zt_plan_release(zt_plan_sim *S, int u);
/* Bytes of gathered parameters now: in use, prefetched, kept (persistent
 * units never). */
size_t zt_plan_gathered(const zt_plan_sim *S);
/* The fp32 view of gathered unit u in use, where the backend computes in
 * fp32 on 16-bit params (0 otherwise; workspace). */
size_t zt_plan_view_bytes(const zt_plan_sim *S, int u);
/* Unit u's full-size fp32 gradients (grad32) while its backward runs. */
size_t zt_plan_grad32_bytes(const zt_plan_sim *S, int u);
/* Adds unit u's open fp32 gradients to m where the engine keeps them
 * while its backward runs: waiting for their bucket (zt_plan_add_waiting),
 * or, for a frozen unit, a workspace scratch. */
void zt_plan_open_grads(const zt_plan_sim *S, zt_plan_moment *m, int u);
/* Adds gradients waiting for their bucket to m, where the engine counts them. */
void zt_plan_add_waiting(const zt_plan_sim *S, zt_plan_moment *m, size_t bytes);
size_t zt_plan_waiting(const zt_plan_sim *S);   /* of the filling bucket's units */
size_t zt_plan_in_flight(const zt_plan_sim *S); /* the bucket sent last (comm_buffers) */
/* Unit u's gradients are complete at moment m: into the filling bucket,
 * which is sent when full (a moment named `name`). */
void zt_plan_grads_ready(zt_plan_sim *S, int u, const zt_plan_moment *m, const char *name);
/* Sends the filling bucket at moment m (the end of backward). */
void zt_plan_flush(zt_plan_sim *S, const zt_plan_moment *m, const char *name);
/* The dtype the model's activations are computed in. */
zt_dtype zt_plan_compute_dtype(const zt_plan_sim *S);
/* What the model keeps between its forward and its backward (reported). */
void zt_plan_set_kept(zt_plan_sim *S, size_t bytes);

/* The bytes an allocator in `mode` is expected to reserve when its
 * allocated peak is peak_bytes, uncapped (as nvidia-smi would show them),
 * and the band its measured reserved peak fell in around that figure, as
 * fractions of it (measured = expected * (1 + x), lo <= x <= hi) over the
 * configurations in docs/memory.md. */
typedef struct {
    double lo, hi;
} zt_plan_band;
size_t zt_plan_expected_reserved(size_t peak_bytes, zt_alloc_mode mode);
zt_plan_band zt_plan_reserved_band(zt_alloc_mode mode);

#endif
