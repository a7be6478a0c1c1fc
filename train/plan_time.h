/* The planner's time half: a step-time model beside the memory model
 * (shard/zt_plan.h), and the machine profile it runs on. Per step it
 * counts the work of one rank (the GEMMs', attention's and pointwise
 * kernels' FLOPs and bytes in forward, backward and recomputation, the
 * optimizer's elements), its collectives' bytes per link class, and its
 * host-device and NVMe transfers, and prices each at the profile's rates.
 * The predicted step is the schedule's critical path, not a sum: what the
 * engine overlaps (prefetched gathers, bucketed reductions, the delayed
 * host update, activation copies) counts only where it outlasts the
 * compute it hides behind. docs/auto.md has the formulas. */
#ifndef ZT_PLAN_TIME_H
#define ZT_PLAN_TIME_H

#include <stddef.h>

#include "zt_dtype.h"
#include "zt_error.h"
#include "zt_model_settings.h"
#include "zt_plan.h"

/* GEMM shape classes by the FLOPs of one call: small ones pay their
 * overhead and poor blocking, large ones run at the machine's rate. */
typedef enum { ZT_GEMM_SMALL, ZT_GEMM_MEDIUM, ZT_GEMM_LARGE, ZT_GEMM_CLASSES } zt_gemm_class;
#define ZT_GEMM_SMALL_BELOW 2e7  /* FLOPs per call */
#define ZT_GEMM_LARGE_FROM 2e9
/* The profile's dtypes: fp32, bf16, fp16 (zt_dtype's order). */
#define ZT_TIME_DTYPES 3

/* A machine's rates, as zt-plan --calibrate measures them or as the
 * built-in tables give them. Every rate is per rank, measured with as many
 * ranks busy on the node as the profile's ranks_per_node. */
typedef struct {
    char device[8];      /* "cpu" or "cuda" */
    char source[160];    /* where the figures come from (printed with every prediction) */
    int measured;        /* 1: measured on a machine; 0: a built-in table */
    int ranks_per_node;  /* busy ranks during the measurement */
    int threads;         /* threads per rank during the measurement (cpu) */
    double gemm_flops[ZT_TIME_DTYPES][ZT_GEMM_CLASSES]; /* FLOP/s by dtype and shape class */
    double attn_flops[2][2]; /* [materialized, fused][forward, backward], FLOP/s (4 B T^2 C forward) */
    double pointwise_gbs;    /* GB/s of the elementwise, norm and softmax kernels (bytes read + written) */
    double kernel_overhead_s; /* per kernel call, beyond its FLOPs and bytes */
    double adam_device_eps;   /* the device optimizer's elements per second */
    double adam_host_eps;     /* the host optimizer's (offload), per rank */
    /* Collectives, per link class [intra-node, inter-node]: bus bandwidth
     * in GB/s and latency in seconds per collective call. */
    double coll_gbs[2], coll_latency_s[2];
    double nvme_gbs[2];   /* the swap file's read and write GB/s */
    double copy_gbs;      /* host-device copies where no link is modelled (cpu: memcpy) */
    double overlap;       /* fraction of overlappable transfers hidden behind compute, 0..1 */
    /* The host's bookkeeping: per optimizer step (the loss's and norm's
     * reductions, logging, memory accounting) and per unit per pass of a
     * micro-batch (the engine's gathers, releases and bucket entries). */
    double step_overhead_s, unit_overhead_s;
    double efficiency;    /* built-in cuda: the factor applied to the vendor's peaks (1 when measured) */
} zt_time_profile;

/* The built-in table for "cpu" or "cuda" (an H200-class GPU from vendor
 * peaks times a stated efficiency). */
zt_status zt_time_profile_builtin(const char *device, zt_time_profile *p, zt_error *err);
/* Reads and validates a profile file: every rate present, finite and
 * positive, overlap in [0, 1]; a clear message naming the field if not. */
zt_status zt_time_profile_load(const char *path, zt_time_profile *p, zt_error *err);
zt_status zt_time_profile_save(const char *path, const zt_time_profile *p, zt_error *err);
zt_status zt_time_profile_check(const zt_time_profile *p, zt_error *err);

/* What a step runs, from the training options (beside zt_plan_input). */
typedef struct {
    const zt_model_settings *model; /* resolved by the family (ffn_dim, kv_heads) */
    int gated_mlp;       /* 1: three MLP matrices (llama's SwiGLU), else two (GPT) */
    int seq_parallel;    /* P: this rank's span is T / P, attention's exchanges */
    int world, nodes, stage, grad_accum, shard_group, secondary;
    zt_dtype dtype, reduce_dtype;
    int offload;          /* 0 none, 1 cpu, 2 nvme: where the optimizer runs and its state lives */
    int offload_params;   /* stage 3: shards in the host pool (1) or the swap file (2) */
    int offload_delay;    /* the host update overlaps the next step */
    int prefetch;         /* stage 3: gathers in flight ahead of compute */
    int overlap_comm;
    int quant_weights_bits, quant_grads_bits;
    unsigned quant_block;
    double link_gbs[2];   /* the modelled host-device link (0: none given) */
    int gpu;              /* the cuda device: copies cross the link */
    size_t bucket_bytes;  /* gradient buckets: one reduction call each */
    double act_offload_bytes; /* --offload-activations cpu: kept inputs out and back per micro-batch, each way */
} zt_time_input;

/* The prediction, in seconds per optimizer step. */
typedef struct {
    double step_s, tokens_per_s;
    double compute_s;       /* forward, backward, recomputation on the device */
    double recompute_s;     /* of compute_s */
    double comm_s;          /* every collective's time, hidden or not */
    double comm_exposed_s;  /* the part on the critical path */
    double optimizer_s;     /* the update, on the device or the host */
    double transfer_s;      /* host-device and NVMe copies */
    double transfer_exposed_s;
    double flops;           /* per step, this rank */
} zt_time_pred;

/* Predicts the step of the plan p (zt_plan_compute's) for the options in. */
void zt_time_predict(const zt_time_input *in, const zt_plan *p, const zt_model_spec *spec,
                     const zt_time_profile *prof, zt_time_pred *out);

#endif
