/* The engine owns each unit's persistent state and implements the runtime API
 * the model calls:
 *   gather(u)      -> u's full parameters in the compute dtype, valid until release(u)
 *   grad_buffer(u) -> an fp32 buffer u's backward accumulates into (every dtype)
 *   grads_ready(u) -> u's backward is complete for this micro-batch
 * and the optimizer step. What these allocate, reduce or communicate is
 * decided here by the ZeRO stage, never by the model:
 *
 *   stage | params   grads    fp32 master + optimizer state
 *   0     | full     full     full        (every rank steps on everything)
 *   1     | full     full     shard       (each rank steps its slice, then all-gather)
 *   2     | full     shard    shard       (full grads live only until reduce-scattered)
 *   3     | shard    shard    shard       (params gathered just in time, freed after use)
 *
 * Every stage reduces gradients with the same deterministic reduce-scatter over
 * the same padded layout, averages once (x 1/N) after it, rounds to the
 * storage dtype only then, and computes the gradient norm per shard, summed
 * over ranks in rank order; so all stages give bitwise-identical results at
 * a given world size (in bf16 and fp16 too, with an fp32 reduce). */
#ifndef ZT_ENGINE_H
#define ZT_ENGINE_H

#include "zt_comm.h"
#include "zt_ctx.h"
#include "zt_nvme.h"
#include "zt_tensor.h"
#include "zt_units.h"

/* fp16 loss scaling, with DeepSpeed's fp16 block's knobs and rules: the loss
 * is multiplied by `scale` before backward and the gradients divided by it
 * (in fp32) before the optimizer. A step whose gradients are not finite on
 * any rank is skipped by every rank (they share the summed norm). Dynamic
 * scaling halves the scale after `hysteresis` such overflows and doubles it
 * after `window` overflow-free steps. In bf16 and fp32 the scale is 1. */
typedef struct {
    double loss_scale;       /* 0: dynamic; > 0: this fixed scale */
    int initial_scale_power; /* dynamic: the first scale is 2^this */
    int window;              /* dynamic: overflow-free steps before the scale doubles */
    int hysteresis;          /* dynamic: overflows tolerated before the scale halves */
    double min_loss_scale;   /* dynamic: an overflow at this scale cannot be answered */
} zt_loss_scale_config;

typedef struct {
    double scale;          /* the loss is multiplied by this before backward */
    int good_steps;        /* overflow-free steps since the scale last changed or overflowed */
    int hysteresis_left;   /* overflows still tolerated before the scale halves */
    long skipped_steps;    /* steps skipped so far (not-finite gradients) */
    int consecutive_skips; /* skipped in a row, up to the last step */
    int exhausted;         /* the last step overflowed at min_loss_scale (dynamic only) */
} zt_loss_scaler;

/* The optimizer: a table of optim/zt_optim.h (its state slots, steps and
 * checkpoint blocks), found by name in optim/registry.c. */
typedef struct zt_optim zt_optim;
#define ZT_OPTIM_MAX_SLOTS 3 /* state tensors an optimizer keeps per unit */

/* The NVMe tier (DeepSpeed's offload_optimizer / offload_param device
 * nvme with its aio block): a swap file per rank under dir; the CPU
 * optimizer streams the state through `buffers` host buffers, each holding
 * block_bytes of every fp32 array it keeps (one request per array). */
typedef struct {
    const char *dir;    /* must outlive the engine */
    size_t block_bytes; /* a multiple of 2 x ZT_NVME_ALIGN */
    int buffers;        /* >= 1 */
    zt_nvme_options io;
} zt_nvme_config;

/* Muon's learning-rate adjustment per [rows, cols] matrix. */
typedef enum {
    ZT_MUON_ADJUST_ORIGINAL = 0,      /* lr x sqrt(max(1, rows / cols)) (Keller Jordan's) */
    ZT_MUON_ADJUST_MATCH_RMS_ADAMW,   /* lr x 0.2 sqrt(max(rows, cols)): AdamW's update RMS (Moonshot's) */
} zt_muon_adjust;

typedef struct {
    int stage;      /* ZeRO stage 0..3 */
    const zt_optim *optimizer; /* NULL: AdamW (zt_optim_default) */
    float momentum; /* SGD */
    int nesterov;   /* SGD */
    /* Adafactor with the schedule's learning rate (relative_step off): its
     * second-moment decay at step t is 1 - t^adafactor_decay; the update is
     * scaled down to RMS adafactor_clip where larger; adafactor_eps is added
     * to g^2; adafactor_beta1 > 0 keeps a first moment of the update. */
    float adafactor_decay, adafactor_clip, adafactor_eps, adafactor_beta1;
    /* Muon (optim/muon.c, torch.optim.Muon's definition) on the hidden
     * matrices: momentum EMA, Nesterov blend, muon_ns_steps Newton-Schulz
     * steps with coefficients muon_ns_coef and eps muon_eps, the learning
     * rate adjusted per matrix shape (zt_muon_adjust); AdamW (beta1, beta2,
     * eps) on the other parameters at muon_adamw_lr_scale x the lr. */
    float muon_momentum;
    int muon_nesterov, muon_ns_steps;
    float muon_ns_coef[3], muon_eps;
    int muon_adjust_lr; /* ZT_MUON_ADJUST_ORIGINAL or ZT_MUON_ADJUST_MATCH_RMS_ADAMW */
    float muon_adamw_lr_scale;
    int muon_ns_host; /* 1: Newton-Schulz on the host's CPU BLAS (--muon-ns-device host; on a GPU with offload) */
    /* dtype of params and grads, and the compute dtype of gathered units
     * (when the backend has kernels in it; else compute is fp32) */
    zt_dtype dtype;
    zt_dtype reduce_dtype; /* what gradient buckets travel in; summed in fp32 either way */
    float beta1, beta2, eps, weight_decay;
    float grad_clip;     /* global-norm clipping threshold; 0 disables */
    size_t bucket_bytes; /* reduce-scatter bucket size (bytes of fp32 gradients it holds) */
    int prefetch;        /* stage 3: units gathered ahead of the one in use */
    int overlap_comm;    /* 0: wait for every collective right after starting it */
    int offload;         /* 1: fp32 master and optimizer state of the owned part live in the host pool */
    /* 1 (stage 3 with offload): each gathered-on-demand unit's parameter
     * shard lives in the host pool too; its all-gather starts from there
     * and the CPU optimizer writes it in place (DeepSpeed's offload_param). */
    int offload_params;
    /* Offload to NVMe: the fp32 master and optimizer state (nvme_optimizer)
     * and, with offload_params, the parameter shards (nvme_params) live in
     * the swap file instead of the host pool (optimizers kept per element;
     * no delayed update). */
    int nvme_optimizer, nvme_params;
    zt_nvme_config nvme;
    int host_threads;    /* threads of the CPU optimizer under offload */
    /* 1: ZeRO-Offload's delayed parameter update (offload only): the CPU
     * Adam of step t runs on its own thread during the forward and backward
     * of step t + 1, which use the parameters from before step t. */
    int offload_delay;
    /* DeepSpeed's stage-3 knobs, in parameters (0: off): units of fewer
     * parameters stay whole on every rank and are never gathered; at most
     * this many gathered parameters at once (prefetches wait); a unit used
     * again within this many parameters of other units' gathers stays
     * gathered. */
    size_t persist_threshold, max_live_params, max_reuse_distance;
    /* Elements the optimizer widens and steps at a time (DeepSpeed's
     * sub_group_size): its fp32 workspace (0: ZT_OPTIMIZER_CHUNK). */
    size_t sub_group_size;
    zt_loss_scale_config loss; /* fp16 only */
    /* Low-memory state (bf16 params; elementwise optimizers: AdamW, SGD,
     * Muon): master_none keeps no fp32 master, the optimizer steps the
     * bf16 params; state_bf16 keeps the optimizer's slots in bf16. Either
     * way a unit's step widens them to fp32, steps, and rounds them back
     * stochastically (zt_sround.h) with bits keyed by sr_seed. */
    int master_none, state_bf16;
    uint64_t sr_seed;
    /* ZeRO++'s quantized communication (zt_wire.h): stage 3's parameter
     * all-gathers travel as int8 codes (quant_weights_bits 8; 0: off), the
     * gradients' reduce-scatters as int8 or int4 codes (quant_grads_bits),
     * quant_block values per fp32 scale; the layout's slices are then whole
     * blocks (zt_spec_layout_aligned). With quant_feedback each rank keeps
     * what its gradient codes lost ([padded] per unit in feedback_dtype,
     * comm_buffers) and adds it to its next contribution. */
    int quant_weights_bits, quant_grads_bits;
    unsigned quant_block;
    int quant_feedback;
    zt_dtype feedback_dtype;
} zt_engine_config;

/* A unit's parameters, as the model sees them (FSDP2's sharded/unsharded
 * states with the training state made explicit):
 *   SHARDED   stage 3: only this rank's shard is held
 *   GATHERING stage 3: an all-gather (a prefetch) is in flight
 *   GATHERED  the full parameters are there, nobody uses them (stages 0-2
 *             always; stage 3 when a prefetch has landed, a unit is kept
 *             for its reuse (max_reuse_distance), or it is persistent)
 *   IN_USE    between the model's gather and its release
 * gather: SHARDED | GATHERING | GATHERED -> IN_USE; release: IN_USE ->
 * SHARDED (stage 3, the full copy freed) or GATHERED. Anything else is an
 * error naming the unit, and so is an optimizer step while a unit is IN_USE. */
typedef enum { ZT_UNIT_SHARDED = 0, ZT_UNIT_GATHERING, ZT_UNIT_GATHERED, ZT_UNIT_IN_USE } zt_unit_phase;
const char *zt_unit_phase_name(zt_unit_phase p);

/* Which pass the model is in: prefetch follows the order in which units
 * were gathered in the previous pass of the same kind. */
typedef enum { ZT_PASS_NONE = 0, ZT_PASS_FORWARD, ZT_PASS_BACKWARD, ZT_NPASSES } zt_pass;

/* The units gathered in one pass, in order (a unit used twice appears twice). */
typedef struct {
    int *units; /* [cap] */
    int n, cap;
} zt_use_order;

/* A unit's state. Each field has one file that writes it (the others
 * read): shard/unit_mem.c allocates the persistent buffers (params, grads,
 * master, opt_state[], host_master, host_opt_state[]), whose values the
 * optimizer (optim/) and its tier step and
 * shard/state_io.c loads; shard/gather.c owns the parameter side (phase,
 * gathered, view32, secondary, wire, wire_pending, gather_handle,
 * gather_comm: shard/gather.h);
 * shard/reduce.c the gradient side (grad32, grad_open, queued, and grads'
 * values until the step: shard/reduce.h); the offload tiers their
 * transfers (host_grads, host_grads16, d2h_done: shard/offload_step.c). */
typedef struct {
    zt_tensor params;   /* [padded] or [shard] dtype: the compute copy */
    zt_tensor grads;    /* [padded] or [shard] dtype */
    zt_tensor master;   /* [padded] or [shard] fp32, only when dtype is 16-bit */
    /* The optimizer's state slots (optim/zt_optim.h names each and sizes
     * it over the owned part): AdamW's exp_avg, exp_avg_sq; SGD's
     * momentum_buf; Adafactor's exp_avg, exp_avg_sq_factors; 8-bit Adam's
     * codes and block scales. [slot words] fp32 words, device. */
    zt_tensor opt_state[ZT_OPTIM_MAX_SLOTS];
    zt_tensor gathered; /* [padded] dtype, stage 3 while gathered (gathered_params) */
    zt_tensor view32;   /* [padded] fp32 up-cast of 16-bit params while in use, only on a
                         * backend without kernels in that dtype (workspace) */
    zt_tensor grad32;   /* [padded] fp32 gradients until reduced: one micro-batch at stage
                         * >= 2 (comm_buffers); the step's micro-batches at stages 0-1 in
                         * a 16-bit dtype (workspace) */
    /* Offload (host pool): the owned part ([padded] at stage 0, else [shard]). */
    zt_tensor host_master; /* fp32 master_params */
    zt_tensor host_opt_state[ZT_OPTIM_MAX_SLOTS]; /* opt_state's slots, in the host pool (optimizer) */
    zt_tensor host_grads;  /* fp32 reduced gradients copied device->host (comm_buffers, one step) */
    zt_tensor host_grads16; /* 16-bit runs: the same as sent (16-bit), widened into host_grads at the step */
    void *d2h_done;        /* backend event: the device->host gradient copy has landed */
    /* hpZ (zt_engine_set_secondary): this rank's part of the unit, [P / G']
     * in the params dtype (quantized weights: its N / G' rank parts' codes),
     * kept from the end of its forward to its backward gather, which then
     * runs inside the secondary group (gathered_params). */
    zt_tensor secondary;
    /* Quantized weights: the gathered codes, [N] rank parts of
     * zt_wire_bytes(S) bytes (comm_buffers), held with the gathered copy
     * (hpZ's secondary part is cut from them); wire_pending: not yet
     * decoded into `gathered`. */
    zt_tensor wire;
    int wire_pending;
    /* Quantized gradients with feedback: [padded] feedback_dtype, what this
     * rank's codes lost, added to its next contribution (comm_buffers;
     * shard/reduce.c owns its values). */
    zt_tensor feedback;
    zt_unit_phase phase;
    zt_comm_handle gather_handle;
    zt_comm *gather_comm; /* the communicator gather_handle runs on */
    int grad_open;
    int queued; /* in the bucket being filled or in flight */
} zt_unit_state;

/* Gradients of several units on their way through one reduce-scatter. */
typedef struct {
    int units[ZT_MAX_UNITS > 64 ? 64 : ZT_MAX_UNITS];
    int nunits;
    size_t numel;       /* sum of padded sizes */
    zt_tensor send;     /* [numel] reduce dtype, packed rank-major: slice r of every unit, then r+1;
                         * quantized: N chunks of zt_wire_bytes(numel / N) bytes */
    zt_tensor staging;  /* the chunks received from every rank, as send */
    zt_tensor reduced;  /* [numel / N] fp32, this rank's summed slices */
    zt_comm_handle handle;
    /* Quantized gradients across K nodes of L ranks (zt_engine_set_grad_hops):
     * send's chunks go by local rank (chunk j: the slices of ranks k x L + j
     * for every node k), hop 1 sums them within the node into node_sums; its
     * K parts travel again as codes (cross_send -> cross_staging), summed
     * over the nodes into reduced by hop 2. */
    zt_tensor node_sums;     /* [K x numel / N] fp32 */
    zt_tensor cross_send;    /* K chunks of zt_wire_bytes(numel / N) bytes */
    zt_tensor cross_staging; /* as cross_send */
    zt_comm_handle cross_handle;
} zt_bucket;

typedef struct {
    zt_ctx *ctx;
    /* Sharding is over comm, the shard group (the world, or G ranks under
     * hybrid sharding); replicas (NULL or one rank: none) joins the ranks
     * that hold the same shard in the other groups, over which reduced
     * gradients are summed; world is every rank (losses, agreement). */
    zt_comm *comm;
    zt_comm *replicas;
    zt_comm *world;
    /* hpZ / FSDP2's reshard_after_forward=G': after a unit's forward each
     * rank keeps a 1/G' part of it and its backward gathers inside this
     * group of G' ranks (a node); NULL: off. */
    zt_comm *secondary;
    /* Quantized gradients over several nodes (zt_engine_set_grad_hops): the
     * node's ranks in local-rank order, and the ranks of this local rank on
     * every node in node order; NULL: one flat reduce-scatter. */
    zt_comm *hop_node, *hop_cross;
    const zt_model_spec *spec;
    zt_engine_config cfg;
    const zt_ops *kernels;  /* the backend's kernels in compute_dtype, for the model */
    zt_dtype compute_dtype; /* cfg.dtype, or fp32 where the backend has no kernels in it */
    zt_unit_state *units; /* [spec->nunits] */
    /* Where the optimizer state and parameter shards live: the hooks the
     * step calls (shard/tier.h), chosen at init. */
    const struct zt_tier_ops *tier;
    /* The pass in progress, its use order so far, and the last complete
     * order of each kind of pass (empty until one has run: no prefetch). */
    zt_pass pass;
    zt_use_order now, recorded[ZT_NPASSES];
    int follows_record; /* this pass has gathered exactly recorded[pass]'s first now.n units */
    zt_bucket filling, in_flight;
    int sync_this_micro; /* stages 0-1 reduce once per step, on the last micro-batch */
    int steps_taken;       /* optimizer updates applied (skipped steps excluded): Adam's t */
    double last_grad_norm; /* of the unscaled gradients; inf or NaN when the step was skipped */
    int last_step_skipped;
    zt_loss_scaler scaler;
    size_t gathered_inflight_peak; /* stage 3: most bytes of gathered params at once */
    size_t gathered_inflight_now;
    /* Stage 3 with max_reuse_distance: the reuse look-ahead's scratch, one
     * flag per unit it has counted (zt_sched_keep); NULL otherwise. */
    unsigned char *reuse_seen; /* [spec->nunits] */
    /* Offload transfers since init: bytes, and seconds the host spent
     * issuing them and waiting for them (the exposed part: on CUDA the copies
     * run on their own streams, overlapped with backward and the CPU Adam). */
    double d2h_bytes, d2h_time_s, h2d_bytes, h2d_time_s;
    /* Offload: host buffers of new parameters on their way to the device,
     * double-buffered so the CPU Adam of one unit overlaps the copy of the
     * previous one; each is released when its event has happened. */
    zt_tensor h2d_src[2];
    void *h2d_done[2];
    int h2d_slot;
    /* offload_delay: the CPU Adam in flight (NULL: none), whether the device
     * params are one update behind the host master, and the seconds that
     * Adam ran on its thread and the seconds the step waited for it. */
    struct zt_delayed_update *delayed;
    /* The NVMe tier's file, layout and buffers (shard/nvme_state.c); NULL
     * without it. */
    struct zt_nvme_state *nvme;
    int params_behind;
    double delayed_adam_s, delayed_wait_s;
    /* An optimizer with a matrix hook: the matrices it transforms and
     * their owners (optim/matrix_hook.c); NULL otherwise. */
    struct zt_matrix_plan *matrices;
} zt_engine;

/* Fills dst[count] with elements [first, first + count) of the initial
 * values of parameter `param` of `unit`. The values must depend only on
 * (unit, param, element) so every stage and world size starts from the same
 * model; the engine asks only for the part this rank owns, so no rank
 * materialises more than its shard. */
typedef void (*zt_param_init_fn)(void *arg, int unit, int param, size_t first, size_t count, float *dst);

/* spec must already be laid out for comm->world_size (zt_spec_layout). All
 * ranks must call this; they check they agree on layout and configuration. */
zt_status zt_engine_init(zt_engine *eng, zt_ctx *ctx, zt_comm *comm, const zt_model_spec *spec,
                         const zt_engine_config *cfg, zt_param_init_fn init, void *init_arg);
/* Hybrid sharding (FSDP2's HSDP, DeepSpeed's MiCS): state sharded over
 * `shard` (spec laid out for its size), replicated across `replicas` (the
 * same shard rank in every group, in group order), `world` all ranks.
 * Gradients are reduce-scattered in the group, then summed over the
 * replicas in replica order, so every stage rounds alike at a given world
 * and group size (docs/sharding.md, "Hybrid sharding"). CPU (MPI) only. */
zt_status zt_engine_init_hybrid(zt_engine *eng, zt_ctx *ctx, zt_comm *shard, zt_comm *replicas, zt_comm *world,
                                const zt_model_spec *spec, const zt_engine_config *cfg, zt_param_init_fn init,
                                void *init_arg);
void zt_engine_destroy(zt_engine *eng);
/* What the NVMe tier runs with (zt_engine_init checks it): the CPU
 * optimizer's elementwise kinds, no delayed update, parameter shards only
 * beside the state, a folder for the swap files. ZT_ERR_INVALID naming
 * the setting otherwise; ZT_OK when cfg has no NVMe tier. */
zt_status zt_engine_check_nvme(const zt_engine_config *cfg, zt_error *err);

/* Stage 3, world sharding: after a unit's forward keep a part of it over
 * `secondary` (G' consecutive ranks dividing the world; a node's ranks for
 * DeepSpeed's hpZ) so that its backward all-gather stays inside that group.
 * Call after init, before the first pass. */
zt_status zt_engine_set_secondary(zt_engine *eng, zt_comm *secondary);

/* Quantized gradients (quant_grads_bits) over K nodes of L ranks each,
 * numbered node by node (rank = node x L + local rank): each bucket is
 * reduce-scattered first within the node (`node`: its L ranks in local-rank
 * order), then its K partial sums, coded again, across the nodes (`cross`:
 * the ranks of this local rank, in node order), as ZeRO++'s hierarchical
 * qgZ. Call after init, before the first pass. */
zt_status zt_engine_set_grad_hops(zt_engine *eng, zt_comm *node, zt_comm *cross);

/* *params: [padded] in eng->compute_dtype. */
/* Starts a forward or backward pass; the model calls it before its first
 * gather of the pass. The previous pass's use order becomes the record the
 * next pass of its kind prefetches from. */
zt_status zt_engine_begin_pass(zt_engine *eng, zt_pass pass);
zt_status zt_engine_gather(zt_engine *eng, int unit, const void **params);
zt_status zt_engine_release(zt_engine *eng, int unit);
/* After forward passes with no backward (an evaluation): frees every unit
 * they left gathered, kept or prefetched, as the optimizer step does, so
 * the next step starts from the state it would have had without them. */
zt_status zt_engine_end_forward_only(zt_engine *eng);
/* The use order recorded for passes of this kind (n = 0 before one ran). */
const zt_use_order *zt_engine_use_order(const zt_engine *eng, zt_pass pass);
zt_status zt_engine_grad_buffer(zt_engine *eng, int unit, float **grads32);
zt_status zt_engine_grads_ready(zt_engine *eng, int unit);

/* Step structure: zero_grads; for each micro-batch: begin_micro, forward,
 * backward, sync_grads; then step. */
zt_status zt_engine_zero_grads(zt_engine *eng);
void zt_engine_begin_micro(zt_engine *eng, int is_last_micro);
/* Flushes the partly filled bucket and completes every reduction in flight. */
zt_status zt_engine_sync_grads(zt_engine *eng);
/* The optimizer widens 16-bit gradients to fp32 this many elements at a
 * time (its workspace: 4 bytes each, at most). */
#define ZT_OPTIMIZER_CHUNK ((size_t)1 << 16)
/* The optimizer's fp32 workspace in elements for this engine (0 in fp32,
 * except under Adafactor, whose update takes one): ZT_OPTIMIZER_CHUNK or
 * sub_group_size (8-bit Adam: rounded up to whole 2048-value blocks), or
 * the largest part it widens (an owned range) if that is smaller. */
size_t zt_engine_optimizer_chunk(const zt_engine *eng);
/* Unscales (fp16), clips by the global gradient norm and applies the optimizer with
 * learning rate lr; or, when the gradients are not finite on any rank,
 * leaves every parameter and optimizer state as it was and sets
 * last_step_skipped (every rank decides alike). Updates the loss scaler. */
zt_status zt_engine_step(zt_engine *eng, float lr);
/* The loss scaler's state for a fresh run (scale 1 unless fp16). */
zt_loss_scaler zt_loss_scaler_initial(const zt_engine_config *cfg);
/* Does the scale change with overflows (fp16 with --loss-scale 0)? */
int zt_loss_scaler_dynamic(const zt_engine_config *cfg);
/* Its update after a step (finite: the gradients were finite). */
void zt_loss_scaler_update(zt_loss_scaler *s, const zt_engine_config *cfg, int finite);
/* Hex XXH3-128 digest of the full fp32 parameters (master where it exists),
 * units in order, padding excluded. Collective: every rank must call it. */
zt_status zt_engine_digest(zt_engine *eng, char hex[33]);

/* What the model and the programs read of a running engine. */
const zt_ops *zt_engine_kernels(const zt_engine *eng);  /* the backend's kernels in the compute dtype */
zt_dtype zt_engine_compute_dtype(const zt_engine *eng); /* of gathered units and activations */
zt_ctx *zt_engine_context(const zt_engine *eng);
const zt_engine_config *zt_engine_settings(const zt_engine *eng); /* as given to zt_engine_init */
const zt_model_spec *zt_engine_spec(const zt_engine *eng);
/* Offload transfers and the delayed update's CPU Adam, since init. */
typedef struct {
    double d2h_bytes, d2h_s, h2d_bytes, h2d_s; /* bytes, and host seconds issuing and waiting for them */
    double delayed_adam_s; /* offload_delay: seconds the CPU Adam ran on its thread */
    double delayed_wait_s; /* offload_delay: seconds the steps waited for it (the part not hidden) */
} zt_transfer_stats;
zt_transfer_stats zt_engine_transfers(const zt_engine *eng);
/* The NVMe tier's I/O since init (zeros and NULLs without it). */
typedef struct {
    double read_bytes, write_bytes; /* requested, in aligned requests */
    double wait_s;                  /* seconds the host waited for them */
    size_t file_bytes;
    const char *path, *how; /* the swap file; which I/O path runs and why */
} zt_nvme_stats;
zt_nvme_stats zt_engine_nvme_stats(const zt_engine *eng);
/* The NVMe tier's host buffers for a spec and configuration: the K
 * buffers (returned) and, in *stage_bytes, the parameter shards' two
 * staging buffers (0 without them); each with ZT_NVME_ALIGN for alignment.
 * The swap file's size is zt_engine_state_bytes' nvme. */
size_t zt_nvme_buffer_bytes(const zt_model_spec *spec, const zt_engine_config *cfg, size_t *stage_bytes);
/* Stage 3: the most bytes of gathered parameters alive at once, since init. */
size_t zt_engine_gathered_peak(const zt_engine *eng);

/* Closed-form bytes rank `rank` owns per persistent category, for a spec
 * laid out for its world size and cfg's stage, dtype, offload, optimizer and
 * persist_threshold (at stage 3 a unit of fewer parameters keeps its params
 * full, its grads and optimizer state sharded). Adafactor's and 8-bit
 * Adam's state depend on which parameters the rank's slices touch. */
typedef struct {
    size_t params, grads, master_params, optimizer; /* on the device */
    size_t host_master_params, host_optimizer;      /* in the host pool (offload) */
    size_t host_params;                             /* the parameter shards in the host pool (offload_params) */
    size_t nvme;                                    /* the swap file (the NVMe tier) */
    size_t feedback;                                /* quantized gradients' error feedback (comm_buffers) */
} zt_state_bytes;
zt_state_bytes zt_engine_state_bytes(const zt_model_spec *spec, const zt_engine_config *cfg, int rank);


/* State access for checkpoints. "Slice" means this rank's world slice
 * [rank x S, (rank+1) x S) of unit u's padded layout, which every rank holds
 * at every stage, so a checkpoint's layout depends on the world size only. */
typedef enum { ZT_STATE_MASTER = 0, ZT_STATE_OPT0, ZT_STATE_OPT1 } zt_state_kind; /* OPTb: the optimizer's block b */
/* dst[shard_numel] fp32 (master: the fp32 values of the parameters; OPTb:
 * the optimizer's checkpoint block b in its get_block encoding, e.g.
 * 8-bit Adam's moments dequantized, Adafactor's factors at each matrix's
 * start: optim/zt_optim.h). */
zt_status zt_engine_get_slice(zt_engine *eng, int unit, zt_state_kind kind, float *dst);
/* dst[shard_numel] in the compute dtype. */
zt_status zt_engine_get_params_slice(zt_engine *eng, int unit, void *dst);
/* Quantized gradients' error feedback (rank-local: a checkpoint keeps it
 * per rank): its bytes, every unit's [padded] in unit order (0: none), and
 * a copy of it out to or in from host[zt_engine_feedback_bytes]. */
size_t zt_engine_feedback_bytes(const zt_engine *eng);
zt_status zt_engine_get_feedback(zt_engine *eng, void *host);
zt_status zt_engine_set_feedback(zt_engine *eng, const void *host);
/* The part of unit u this rank keeps optimizer state for: elements
 * [*lo, *lo + *n) (everything at stage 0, its world slice otherwise). */
zt_status zt_engine_owned_range(const zt_engine *eng, int unit, size_t *lo, size_t *n);
/* The range of unit u whose block 1 zt_engine_set_owned reads: the owned
 * range, or as the optimizer's block_span widens it (Adafactor: to the
 * whole of every matrix it touches, whose statistics lie at its start). */
zt_status zt_engine_state_span(const zt_engine *eng, int unit, size_t *lo, size_t *n);
/* Sets unit u's owned part from fp32 master values and optimizer block 0
 * (b0), each [n] of zt_engine_owned_range, and block 1 (b1) [n] of
 * zt_engine_state_span, in zt_engine_get_slice's encoding (b0, b1 NULL:
 * left as they are), and the compute params of that part (rounded to the
 * params dtype). Init and checkpoint loads both place values this way. */
zt_status zt_engine_set_owned(zt_engine *eng, int unit, const float *master, const float *b0, const float *b1);
/* Unit u's owned part of the compute params from vals[n] in the params
 * dtype (a checkpoint of a delayed update: the params from before its last
 * update, while the master is after it). */
zt_status zt_engine_set_owned_params(zt_engine *eng, int unit, const void *vals);
/* What a checkpoint records of the engine besides its state arrays. */
typedef struct {
    int steps_taken;       /* optimizer updates applied (Adam's t) */
    zt_loss_scaler scaler;
    int params_behind;     /* offload_delay: the params lag the master by the update in flight */
} zt_engine_state_counters;
zt_engine_state_counters zt_engine_get_counters(const zt_engine *eng);
void zt_engine_set_counters(zt_engine *eng, const zt_engine_state_counters *p);
/* After zt_engine_set_owned on every unit: stages 1-2 all-gather the full
 * params from each rank's part, as after an optimizer step. Collective. */
zt_status zt_engine_gather_params(zt_engine *eng);
#endif
