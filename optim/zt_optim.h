/* One optimizer interface. Each optimizer is a const table (zt_optim) in
 * its own file of optim/ and one line of optim/registry.c; the engine
 * (shard/), the NVMe tier, the planner and checkpointing reach it only
 * through the table, never by testing which optimizer runs. A table says:
 *
 *   what it keeps    named state slots, how each lies over a unit's flat
 *                    layout, and how many 32-bit words a slot takes over an
 *                    owned range [lo, hi) of a unit (Adafactor's depend on
 *                    the matrices the range touches, 8-bit Adam's on its
 *                    parameter segments); the planner's bytes come from the
 *                    same function, so plan and allocation agree exactly
 *   how it steps     on the device through the backend's ops, on the host
 *                    (offload) through the CPU kernels, and elementwise over
 *                    any sub-range (what the NVMe tier streams in chunks)
 *   how it is saved  as two fp32 blocks per world slice (the checkpoint
 *                    format's blocks 1 and 2), which is what makes a
 *                    checkpoint load onto another world size
 *   one hook         an optional whole-matrix transform between the state
 *                    update and the apply (zt_optim_matrix_hook)
 *
 * The step's shared parts stay with the engine (optim/step.c): the global
 * norm, unscale and clip, the all-gather of updated params, the 16-bit
 * params rounded from the fp32 master after the update. optim/ files read
 * the engine's half of this interface (shard/zt_optim_engine.h).
 *
 * Slots are named by what they hold (exp_avg, momentum_buf, ...). The
 * checkpoint files keep their block positions (master, optimizer block 0,
 * optimizer block 1, params) and no slot names, so checkpoints written
 * before the slots had names read as they did; `ckpt_blocks` names what
 * each block holds for a given optimizer. */
#ifndef ZT_OPTIM_H
#define ZT_OPTIM_H

#include "zt_engine.h"

/* How a slot's values lie over a unit's owned range. */
typedef enum {
    ZT_SLOT_PER_ELEMENT = 0, /* one fp32 per owned element: splits and reshards anywhere */
    ZT_SLOT_BLOCK_CODES,     /* one 8-bit code per owned element (4 to a word), blocks per parameter segment */
    ZT_SLOT_BLOCK_SCALES,    /* fp32 scales, one per block of each coded slot */
    ZT_SLOT_FACTORED,        /* per parameter touched: rows + cols statistics (a matrix) or one per element */
    ZT_SLOT_NOT_HIDDEN,      /* one fp32 per owned element outside the hidden matrices (Muon's AdamW group) */
} zt_slot_layout;

typedef struct {
    const char *name;     /* what it holds; also the allocation's label */
    zt_slot_layout layout;
    int bits_per_value;   /* 32 (fp32) or 8 (codes) */
    int fill;             /* -1: starts zeroed; else every byte starts at this value */
} zt_optim_slot;

/* One unit's step, as the engine hands it to the optimizer. */
typedef struct {
    float mult;     /* unscale-and-clip multiplier of the gradients */
    float lr;
    int t;          /* the step count (Adam's t), from 1 */
    float *p;       /* device: the fp32 values stepped; p[0] is unit element p_at */
    size_t p_at;
    zt_tensor *ws;  /* device: one chunk of widened 16-bit gradients (16-bit dtypes) */
    zt_tensor *wu;  /* device: one chunk for the update (update_workspace only) */
} zt_optim_step;

/* One logical matrix a hook transforms: part `part` of hidden parameter
 * `param` of unit `unit` (zt_param_spec.hidden), its elements
 * [offset, offset + rows x cols) of the unit, row-major [rows, cols]. */
typedef struct {
    int unit, param, part;
    size_t offset, rows, cols;
    int owner;    /* the rank of the shard group that transforms it */
    double flops; /* what its transform costs (the owners' balance) */
} zt_matrix;

/* The optional hook between the state update and the apply, for updates
 * that need whole matrices (Muon's orthogonalization): an optimizer with a
 * hook gives it instead of a device_step. The matrices are the hidden
 * parameters' logical matrices (zt_matrix); each has an owner, assigned
 * once at init, largest transform first, to the rank with the least work
 * so far (so a rank's share is at most total / N + the largest one's).
 * For each trained unit u the engine (optim/matrix_hook.c) runs
 *   update(e, u, s, upd)       the state update; upd [owned] fp32 receives
 *                              the update direction of the matrices'
 *                              elements (others: the optimizer's own use)
 *   transform(.., ops, s, m,   for each matrix of u on its owner, through
 *             whole)           the kernels ops on stream s (the device's, or
 *                              the CPU's for the host pool), on the whole
 *                              [rows, cols] fp32 update gathered from every
 *                              rank's slice (stage 0: every rank transforms
 *                              every matrix, in place), with
 *                              scratch[scratch_numel(rows, cols)]; every
 *                              rank then receives its slice back
 *   apply(e, u, s, upd)        the step of p with the transformed upd
 * The gathered matrix is a comm_buffers allocation, the scratch a
 * workspace one, both for the transform's duration (zt-plan counts them).
 * The gather and scatter are host collectives: on a GPU each matrix's
 * slices travel through host-pool copies (comm_buffers) to the owner's
 * device. Under offload the optimizer's host_step calls
 * zt_engine_transform_matrices with host = 1. docs/optimizers.md, "The
 * matrix hook". */
typedef struct {
    zt_status (*update)(zt_engine *e, int u, const zt_optim_step *s, float *upd);
    size_t (*scratch_numel)(size_t rows, size_t cols); /* NULL: none */
    double (*flops)(size_t rows, size_t cols);          /* relative cost of a transform (NULL: rows x cols) */
    zt_status (*transform)(const zt_engine_config *cfg, const zt_ops *ops, zt_stream *s, const zt_matrix *m,
                           float *whole, float *scratch, zt_error *err);
    zt_status (*apply)(zt_engine *e, int u, const zt_optim_step *s, const float *upd);
} zt_optim_matrix_hook;

/* The matrices of an engine whose optimizer has a hook, in unit order
 * (NULL, *n = 0: none). */
const zt_matrix *zt_engine_matrices(const zt_engine *e, int *n);
/* The matrices opt's hook transforms in spec's trained units, in unit
 * order, with their owners among `world` ranks, into out (NULL: counts
 * them); returns how many. What the engine and the planner both use. */
int zt_optim_matrices(const zt_optim *opt, const zt_model_spec *spec, int world, zt_matrix *out);
/* fp32 elements of the scratch opt's transform takes for matrix m. */
size_t zt_matrix_scratch(const zt_optim *opt, const zt_matrix *m);
/* The part of matrix m in world slice r of a unit of shard_numel-element
 * slices: unit elements [*a, *b) (empty: a == b). */
void zt_matrix_slice(const zt_matrix *m, size_t shard_numel, int r, size_t *a, size_t *b);

/* slot_words of an optimizer whose every slot holds one fp32 word per
 * owned element (AdamW's moments, SGD's momentum). */
size_t zt_optim_words_per_element(const zt_engine_config *cfg, int slot, const zt_unit_spec *us, size_t lo,
                                  size_t hi);

struct zt_optim {
    const char *name;        /* --optimizer's value, the checkpoint manifest's "optimizer" */
    const char *description; /* one line for help and logs */
    int nslots;
    zt_optim_slot slots[ZT_OPTIM_MAX_SLOTS];
    /* 32-bit words of slot `slot` over owned range [lo, hi) of unit us (0:
     * not kept under cfg, e.g. Adafactor's exp_avg without beta1). */
    size_t (*slot_words)(const zt_engine_config *cfg, int slot, const zt_unit_spec *us, size_t lo, size_t hi);
    /* Refuses settings it cannot run (NULL: runs any). */
    zt_status (*check)(const zt_engine_config *cfg, zt_error *err);
    size_t chunk_align;   /* the 16-bit widening chunk is rounded up to a multiple of this (8-bit blocks) */
    int update_workspace; /* the device step needs one fp32 chunk for its update, in every dtype */
    /* Elements of per-unit device scratch the device step allocates for
     * owned range [lo, hi) at a chunk size (NULL: none): the planner's. */
    size_t (*scratch_numel)(const zt_unit_spec *us, size_t lo, size_t hi, size_t chunk);
    int collective; /* its step sums over ranks: never on the delayed update's thread */

    /* The device step of unit u's owned part (NULL with a matrix hook). */
    zt_status (*device_step)(zt_engine *e, int u, const zt_optim_step *s);
    /* The host step (offload) on unit u's host master and slots with
     * g[owned] fp32 (scaled by s->mult first, in place or not); may write
     * the new params in the params dtype to out[owned] (not NULL): sets
     * *written when it did. Thread-safe per unit unless `collective`. */
    zt_status (*host_step)(const zt_engine *e, int u, float *g, void *out, const zt_optim_step *s, int *written);
    /* Elementwise over unit coordinates [lo, hi) with every buffer at
     * element lo: p, g, slot[i] per slot, out as host_step's (NULL: not
     * written). Returns whether out was written. NULL: the state does not
     * split into chunks, and the NVMe tier refuses the optimizer. */
    int (*host_range)(const zt_engine *e, int u, size_t lo, size_t hi, float *p, float *g, float *const *slot,
                      void *out, float clip, float lr, int t);

    /* Checkpoints: two fp32 blocks per world slice. */
    const char *ckpt_blocks[2]; /* what each holds ("-": nothing, saved as zeros) */
    /* dst[shard_numel]: this rank's world slice of block b (NULL: slot b
     * per element, zeros where the slot is not kept). */
    zt_status (*get_block)(zt_engine *e, int u, int b, float *dst);
    /* Sets block b of the owned part from vals over block_span (NULL: slot
     * b per element; a slot not kept ignores it). */
    zt_status (*set_block)(zt_engine *e, int u, int b, const float *vals);
    /* The unit range whose block b set_block reads, from owned range
     * [lo, hi) (NULL: the owned range). */
    void (*block_span)(const zt_unit_spec *us, int b, size_t lo, size_t hi, size_t *span_lo, size_t *span_hi);
    const char *reshard_note; /* logged when a load reshards (NULL: exact, nothing to say) */

    const zt_optim_matrix_hook *matrix_hook; /* NULL: device_step */
};

/* The registry (optim/registry.c): the optimizers zt-train knows. */
int zt_optim_count(void);
const zt_optim *zt_optim_at(int i);
const zt_optim *zt_optim_find(const char *name); /* NULL: no such name */
/* AdamW, what a configuration without an optimizer runs. */
const zt_optim *zt_optim_default(void);
/* opt, or the default where NULL. */
const zt_optim *zt_optim_or_default(const zt_optim *opt);

/* Bytes of state over owned range [lo, hi) of unit us: the slots' words x 4,
 * or x 2 for state kept in bf16 (what the engine allocates, what the
 * planner counts). */
size_t zt_optim_state_bytes(const zt_optim *opt, const zt_engine_config *cfg, const zt_unit_spec *us, size_t lo,
                            size_t hi);
/* Is every slot kept per element (splits anywhere: equal bytes on every
 * rank, a chunked stream, an exact reshard)? */
int zt_optim_elementwise(const zt_optim *opt);

#endif
