/* The decoder scaffold: what every family laid out as embedding, L blocks
 * and a head runs the same way, so a family writes only its layers.
 *
 * It owns the unit walk of forward and backward through the engine
 * (gather / release / grad_buffer / grads_ready), the token ids' trip to
 * the device, the per-position losses' trip back (read once per step), the
 * recompute policies (full: a block keeps its output; selective: the
 * pieces its family names; every-K), activation offload of the kept inputs
 * (docs/memory.md, "Kept inputs in the host pool"), --freeze over
 * embedding / blocks / head, and the activation buffers' lifetimes. The
 * family supplies, through zt_decoder_ops, its buffer sizes at the current
 * [B,T] and the kernels of its embedding, block and head.
 *
 * Buffers of one kind of activation are one allocation each: a block's
 * activations [acts_bytes], what it keeps under recomputation, the head's,
 * the backward's workspace; the family lays out its tensors in them at
 * byte offsets (zt_decoder_place). */
#ifndef ZT_DECODER_H
#define ZT_DECODER_H

#include <stddef.h>
#include <stdint.h>

#include "zt_backend.h"
#include "zt_engine.h"
#include "zt_model_settings.h"
#include "zt_tensor.h"
#include "zt_train_model.h"
#include "zt_units.h"
#include "zt_seq_parallel.h"

#define ZT_DECODER_MAX_PIECES 8

/* A micro-batch's shape on this rank: B sequences of T positions held
 * here, out of T_full positions split over P ranks (sequence parallelism;
 * P = 1: T == T_full). Attention's head-split tensors are [B, T_full, .]
 * with NH/P heads; everything else is [B, T, .]. */
typedef struct {
    int B, T, T_full, P;
} zt_act_shape;

static inline zt_act_shape zt_act_shape_plain(int B, int T) { return (zt_act_shape){B, T, T, 1}; }

typedef struct zt_decoder zt_decoder;

/* A family's half. Sizes are in bytes at the decoder's current B, T and
 * compute dtype (d->B, d->T, d->act); `ws` is the backward's workspace of
 * backward_ws_bytes, laid out by the family, which carries the residual
 * stream's gradient from the head to the embedding. */
typedef struct {
    size_t (*block_acts_bytes)(const zt_decoder *d);
    /* Selective recomputation: the pieces of a block's activations it
     * keeps (offset in the activations, offset in the kept buffer,
     * bytes), the kept buffer's size in *total; returns their count. */
    int (*kept_pieces)(const zt_decoder *d, size_t *from, size_t *to, size_t *n, size_t *total);
    size_t (*block_output_offset)(const zt_decoder *d); /* the block's output [B,T,C] in its activations */
    size_t (*head_acts_bytes)(const zt_decoder *d);
    size_t (*head_losses_offset)(const zt_decoder *d);  /* losses [B*T] fp32 in the head's activations */
    size_t (*backward_ws_bytes)(const zt_decoder *d);
    /* out[B,T,C] from tokens [B,T] (device) and the embedding unit w. */
    void (*embed_forward)(zt_decoder *d, zt_stream *s, const zt_ops *ops, void *out, const int32_t *tokens,
                          const void *w);
    /* A block's forward from x [B,T,C] into acts (its output at block_output_offset). */
    void (*block_forward)(zt_decoder *d, zt_stream *s, const zt_ops *ops, char *acts, const void *x, const void *w,
                          int unit);
    /* Selective: the rest of a block's activations from its kept pieces (in place in acts) and x. */
    void (*block_replay)(zt_decoder *d, zt_stream *s, const zt_ops *ops, char *acts, const void *x, const void *w,
                         int unit);
    /* The head from the last block's output x [B,T,C]: losses at head_losses_offset. wemb: the
     * gathered embedding unit when the head is tied, else NULL. */
    void (*head_forward)(zt_decoder *d, zt_stream *s, const zt_ops *ops, char *acts, const void *x, const void *w,
                         const void *wemb, const int32_t *targets);
    /* Its backward: leaves the gradient of x in ws (dwemb: the embedding's gradients when tied). */
    void (*head_backward)(zt_decoder *d, zt_stream *s, const zt_ops *ops, char *acts, const void *x,
                          const void *w, float *dw, const void *wemb, float *dwemb, const int32_t *targets,
                          float dloss, char *ws);
    /* A block's backward: ws's residual gradient from its output's to its input's. */
    void (*block_backward)(zt_decoder *d, zt_stream *s, const zt_ops *ops, const char *acts, const void *x,
                           const void *w, float *dw, int unit, char *ws);
    /* The embedding's gradients dw from ws's residual gradient. */
    void (*embed_backward)(zt_decoder *d, zt_stream *s, const zt_ops *ops, float *dw, const int32_t *tokens,
                           char *ws);
} zt_decoder_ops;

/* Host memory that copies to and from the device go through within a step:
 * pinned where the backend provides it (raw_host), so the copies are truly
 * asynchronous. Filled front to back and emptied only after a stream sync,
 * so no queued copy ever sees its bytes reused. */
typedef struct {
    char *buf;
    size_t cap, used; /* bytes */
    zt_raw_allocator alloc;
} zt_host_staging;

struct zt_decoder {
    const zt_decoder_ops *ops;
    void *family;            /* the family's model, which its hooks read */
    zt_model_settings cfg;   /* layers, d_model, seq_len, tied, recompute, offload_activations */
    zt_model_spec *spec;     /* heap: the unit table is large */
    int unit_embed, first_block, unit_head;

    /* Sequence parallelism (NULL: none): the group, set by the trainer. */
    zt_seq_parallel *sp;
    /* The first failure of an exchange inside the family's kernels (which
     * return nothing): the scaffold reports it after the kernel returns. */
    zt_status sp_status;
    zt_ctx *ctx; /* the engine's, from the first forward on (the exchanges allocate and fail through it) */

    /* Per micro-batch state between forward and backward. */
    int B, T;                  /* shapes of the current micro-batch (T: this rank's positions) */
    int T_full, t0;            /* the whole sequence's length and this rank's first position */
    zt_dtype act;              /* compute dtype of its activations (the engine's) */
    zt_tensor tokens;          /* [B,T] int32, category other */
    zt_tensor targets;         /* [B,T] int32 */
    zt_tensor encoded;         /* [B,T,C] act: the embedding's output */
    zt_tensor *block_acts;     /* [layers] one buffer each [block_acts_bytes] */
    zt_tensor *block_out;      /* [layers] what a recomputed block keeps: its output [B,T,C]
                                * (full) or its kept pieces (selective) */
    double recompute_time_s;   /* forward replays since creation */
    /* Activation offload: block l's kept input while it is in the host
     * pool, and the event of its copy out or back that its next step
     * waits on. */
    zt_tensor *input_host;     /* [layers] [B,T,C] act, host pool, category activations */
    void **input_copy;         /* [layers] backend events; NULL: none in flight */
    zt_model_transfers moved;  /* the kept inputs' copies since creation */
    zt_tensor head_acts;       /* [head_acts_bytes] */

    /* Per-position losses of the micro-batches forwarded since the last
     * take_losses, copied to the host behind the compute stream, and the
     * token ids on their way to the device; emptied by take_losses. */
    zt_host_staging losses_host; /* fp32 [positions of the pending micro-batches] */
    zt_host_staging ids_host;    /* int32 [2 x positions]: tokens, targets per micro-batch */
    size_t *loss_micro_n;        /* [loss_micros_cap] positions of each pending micro-batch */
    int loss_micros, loss_micros_cap;
};

/* An empty spec with its unit tables for cfg->layers blocks; the family
 * then declares its units with zt_decoder_add_* in order. Refuses activation
 * offload without full recomputation. */
zt_status zt_decoder_init(zt_decoder *d, const zt_decoder_ops *ops, void *family, const zt_model_settings *cfg,
                          zt_error *err);
void zt_decoder_destroy(zt_decoder *d);
/* Declares the embedding unit, block l's, or the head's (call in that order). */
zt_status zt_decoder_add_unit(zt_decoder *d, const char *name, int *unit, zt_error *err);
/* A parameter of `unit`: [d0] (ndim 1) or [d0, d1]; decay: weight decay applies. */
zt_status zt_decoder_add_param(zt_decoder *d, int unit, const char *name, int ndim, int64_t d0, int64_t d1,
                               int decay, int *param, zt_error *err);
/* Marks parameter `param` of `unit` a hidden layer's weight matrix of
 * nparts logical matrices stacked by rows (zt_spec_set_hidden). */
zt_status zt_decoder_set_hidden(zt_decoder *d, int unit, int param, int nparts, const int64_t *rows, zt_error *err);

zt_status zt_decoder_forward(zt_decoder *d, zt_engine *eng, const int32_t *tokens, const int32_t *targets, int B,
                             int T, float *mean_loss);
zt_status zt_decoder_backward(zt_decoder *d, zt_engine *eng, float dloss);
zt_status zt_decoder_take_losses(zt_decoder *d, zt_ctx *ctx, double *sum_of_means);
void zt_decoder_free_activations(zt_decoder *d, zt_engine *eng);
/* --freeze over embedding, head, blocks, blocks:K, blocks:A-B. */
zt_status zt_decoder_freeze(zt_decoder *d, const char *list, zt_error *err);
zt_model_stats zt_decoder_stats(const zt_decoder *d);

/* The current micro-batch's shape on this rank. */
zt_act_shape zt_decoder_shape(const zt_decoder *d);

/* Ulysses' exchanges on stream s, for a family's attention. A row of the
 * sequence split holds nparts parts of widths[k] elements (compute dtype),
 * each the concatenation of P head groups; the head split's row holds, for
 * this rank's group j, part k's slice j of each, in part order.
 * seq_to_heads: dst [B, T_full, sum widths / P] from src [B, T, sum widths];
 * heads_to_seq: the inverse. With P = 1 they are copies. A failure is kept
 * in d->sp_status (the kernels around them return nothing). */
void zt_decoder_seq_to_heads(zt_decoder *d, zt_stream *s, void *dst, const void *src, int nparts,
                             const size_t *widths);
void zt_decoder_heads_to_seq(zt_decoder *d, zt_stream *s, void *dst, const void *src, int nparts,
                             const size_t *widths);

/* Parameter `param` of `unit` in a gathered unit (compute dtype), and its
 * gradient in the unit's fp32 gradient buffer. */
const void *zt_decoder_param(const zt_decoder *d, const void *unit_base, int unit, int param);
float *zt_decoder_grad(const zt_decoder *d, float *unit_base, int unit, int param);
/* Places n elements of `size` bytes at *o on a 4-byte boundary (fp32
 * statistics after an odd number of 16-bit values); returns the offset. */
size_t zt_decoder_place(size_t *o, size_t n, size_t size);
/* Bytes of one [B,T,C] act tensor in whole 4-byte words: a block's kept
 * input (full recomputation, activation offload). */
size_t zt_decoder_input_bytes(int d_model, int B, int T, zt_dtype act);
/* Zeroes n elements of `size` bytes of device memory on stream s. */
void zt_decoder_zero(zt_stream *s, void *p, size_t n, size_t size);

/* The model interface's hooks every decoder family shares: `self` is the
 * family's instance, whose first member is its zt_decoder. */
zt_model_spec *zt_decoder_model_spec(void *self);
zt_status zt_decoder_model_freeze(void *self, const char *list, zt_error *err);
zt_status zt_decoder_model_forward(void *self, zt_engine *eng, const int32_t *tokens, const int32_t *targets, int B,
                                   int T);
zt_status zt_decoder_model_backward(void *self, zt_engine *eng, float dloss);
zt_status zt_decoder_model_take_losses(void *self, zt_ctx *ctx, double *sum_of_means);
void zt_decoder_model_free_activations(void *self, zt_engine *eng);
zt_model_stats zt_decoder_model_stats(const void *self);
int zt_decoder_model_tensors(void *self, zt_model_tensor *out, int cap);
zt_status zt_decoder_model_set_seq_parallel(void *self, zt_seq_parallel *sp, zt_error *err);
void zt_decoder_model_plan_units(void *self, zt_model_plan *out);

/* The shared hooks in a family's zt_train_model table (its main.c). */
#define ZT_DECODER_MODEL_HOOKS                                                                              \
    .spec = zt_decoder_model_spec, .freeze = zt_decoder_model_freeze, .forward = zt_decoder_model_forward,   \
    .backward = zt_decoder_model_backward, .take_losses = zt_decoder_model_take_losses,                    \
    .free_activations = zt_decoder_model_free_activations, .stats = zt_decoder_model_stats,                \
    .tensors = zt_decoder_model_tensors, .plan_units = zt_decoder_model_plan_units,                        \
    .set_seq_parallel = zt_decoder_model_set_seq_parallel

/* Elements [first, first + count) of one parameter's initial values into
 * dst[count]: normal(0, stddev) draws from a stream keyed by (seed,
 * family_key, unit, param), element i the stream's i-th value, when
 * stddev > 0; else `fill` everywhere. */
void zt_decoder_init_values(uint64_t seed, uint32_t family_key, int unit, int param, float stddev, float fill,
                            size_t first, size_t count, float *dst);

#endif
