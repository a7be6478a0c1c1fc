/* The memory planner behind zt-plan: per-rank device bytes per category at
 * the moment of peak, host bytes, and whether it fits, for the toy GPT (or a
 * GPT-shaped model described by its totals) under a ZeRO stage, offload,
 * recompute, dtype, prefetch and bucket size. Persistent state comes from
 * the engine's closed form (zt_engine_state_bytes); activations and
 * transient buffers from the same layouts the runtime allocates, evaluated at
 * the moments where the peak can occur. Validated against measured runs by
 * tests/mpi (planner case) and docs/memory.md. */
#ifndef ZT_PLANNER_H
#define ZT_PLANNER_H

#include <stddef.h>

#include "zt_dtype.h"
#include "zt_mem.h"
#include "zt_recompute.h"
#include "zt_units.h"

typedef struct {
    /* parallelism and memory levers */
    int world, stage, offload, prefetch, tied;
    zt_recompute_policy recompute;
    int overlap_comm; /* 0: each bucket's reduce-scatter completes (and frees) as it is sent */
    long long prefetch_params; /* DeepSpeed's stage3_prefetch_bucket_size: sets prefetch (0: unused) */
    int attention_fused; /* --attention fused: lse[B,NH,T] kept instead of [B,NH,T,T] */
    zt_dtype dtype;         /* of params and grads (zt-train's --dtype) */
    zt_dtype compute_dtype; /* of activations: dtype where the backend has kernels in it, else fp32 */
    zt_dtype reduce_dtype;  /* of gradient buckets */
    size_t bucket_bytes;
    /* model shape (activations) */
    int layers, d_model, heads, seq_len, vocab, micro_batch;
    /* units, already laid out for `world` (zt_spec_layout) */
    const zt_model_spec *spec;
    int unit_embed, first_block, unit_head; /* indices in spec */
} zt_plan_input;

typedef struct {
    size_t by_category[ZT_NUM_CATEGORIES]; /* at the peak moment */
    size_t peak_by_category[ZT_NUM_CATEGORIES]; /* each category's own peak over the moments */
    size_t peak_bytes;
    const char *peak_moment;
    size_t persistent_bytes; /* params + grads + master + optimizer on the device */
    size_t activations_kept_bytes;
    size_t host_bytes; /* the host pool (offload) */
} zt_plan;

void zt_plan_compute(const zt_plan_input *in, zt_plan *out);

#endif
