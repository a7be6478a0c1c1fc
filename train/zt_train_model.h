/* The model interface of libzt_train: what a model family gives the
 * trainer, the planner (zt-plan) and the checkpoints. The trainer never
 * names a model: zt-train is built with a list of families (one per folder
 * of examples/, each a `zt_train_model` in its main.c) and --model picks
 * one; a test can register a family of its own the same way.
 *
 * A family declares its parameters in units (shard/zt_units.h) and runs
 * forward and backward unit by unit through the engine's gather /
 * grad_buffer / grads_ready calls; it knows nothing of ranks or stages.
 * Parameters are initialised straight into each rank's shard: the engine
 * asks the model (init_param) only for the elements this rank owns, so no
 * rank materialises the whole model, nor even a whole unit.
 *
 * Every hook takes the instance `self` that create returned (init_param's
 * `arg` is that instance too). Every hook is required except the three
 * planner hooks, which may all be NULL (zt-plan then refuses the family).
 * Forward, backward and take_losses run on the engine's context
 * (zt_engine_context(eng)); the host arrays forward receives are the
 * trainer's and are overwritten for the next micro-batch, so a model that
 * copies them asynchronously stages them first. */
#ifndef ZT_TRAIN_MODEL_H
#define ZT_TRAIN_MODEL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "zt_ctx.h"
#include "zt_engine.h"
#include "zt_error.h"
#include "zt_plan.h"
#include "zt_units.h"
#include "zt_model_settings.h"
#include "zt_seq_parallel.h"

/* Bytes and host seconds of a model's own device<->host copies
 * (--offload-activations), per direction, since creation. */
typedef struct {
    double d2h_bytes, h2d_bytes, d2h_s, h2d_s;
} zt_model_transfers;

/* What a model reports to the step's JSONL line. */
typedef struct {
    double recompute_time_s;  /* forward replays since creation */
    zt_model_transfers moved; /* its kept inputs' copies since creation */
} zt_model_stats;

/* One tensor for export (zt-export's users' formats map these names) (users' formats map these to their names): which
 * unit and parameter of the spec holds it, its shape as stored, and how
 * its elements are laid out there. */
typedef struct {
    char name[72];     /* zerotrain's name: "<unit>.<param>", as checkpoints name it */
    int unit, param;   /* in the spec */
    int ndim;
    int64_t shape[4];
    char layout[48];   /* "row-major [out, in]" for a linear's weight, "row-major" otherwise */
} zt_model_tensor;

/* The planner's view of a model: the settings and the spec's unit indices
 * of the embedding, the first block and the head (families laid out as
 * embedding, L blocks, head; a model planned from totals uses the same:
 * a family of another shape gives no planner hooks). */
typedef struct {
    zt_model_settings s;
    int unit_embed, first_block, unit_head;
    /* Sequence parallelism: ranks per group and the planned rank's place
     * in its group (whose span of positions it holds); 0 or 1: none. */
    int seq_parallel, seq_index;
} zt_model_plan;

typedef struct zt_train_model {
    const char *family;      /* the name --model takes: "gpt" */
    const char *description; /* one line for --help */
    /* Checks the settings a family needs and fills in its defaults (ffn_dim,
     * kv_heads...). Errors name the setting ("kv_heads"), not a flag. */
    zt_status (*resolve)(zt_model_settings *s, zt_error *err);
    /* An instance with its unit spec (vocab, shapes and recompute policy
     * from the resolved settings). */
    zt_status (*create)(void **self, const zt_model_settings *s, zt_error *err);
    void (*destroy)(void *self);
    zt_model_spec *(*spec)(void *self);
    /* Initial values of elements [first, first + count) of parameter
     * (unit, param): a zt_param_init_fn (arg: self), a pure function of
     * (unit, param, element). The engine asks only for what this rank owns. */
    zt_param_init_fn init_param;
    /* Marks units frozen from a list of names ("none" or "": nothing);
     * refuses names it does not know and a list that leaves nothing to train. */
    zt_status (*freeze)(void *self, const char *list, zt_error *err);
    /* Forward of a [B,T] micro-batch (host token ids): keeps what backward
     * needs; the losses stay pending for take_losses. */
    zt_status (*forward)(void *self, zt_engine *eng, const int32_t *tokens, const int32_t *targets, int B, int T);
    /* Backward of the last forward. dloss is the gradient of the step's
     * objective with respect to each position's loss: the loss scale over
     * (B x T x grad_accum), the mean over every position of the step. */
    zt_status (*backward)(void *self, zt_engine *eng, float dloss);
    /* Waits and returns the sum over pending micro-batches of their mean losses. */
    zt_status (*take_losses)(void *self, zt_ctx *ctx, double *sum_of_means);
    /* Frees activations still held (after an error). */
    void (*free_activations)(void *self, zt_engine *eng);
    zt_model_stats (*stats)(const void *self);
    /* The hyperparameters a checkpoint records and a resume must match
     * (a JSON object with "family" and every shape setting). */
    json_t *(*describe)(const zt_model_settings *s);
    /* Export: fills up to cap tensors, returns how many there are. */
    int (*tensors)(void *self, zt_model_tensor *out, int cap);
    /* The planner's walk over one micro-batch's forward and backward
     * (shard/zt_plan.h), its unit indices, and the bytes of kept inputs
     * in the host pool under offload_activations. NULL: zt-plan refuses
     * the family. */
    zt_plan_walk_fn plan_walk; /* arg: a const zt_model_plan * */
    void (*plan_units)(void *self, zt_model_plan *out);
    size_t (*plan_offloaded_bytes)(const zt_model_plan *m, zt_dtype act);
    /* Sequence parallelism (zt_seq_parallel.h): the group this instance's
     * forward and backward exchange with; the trainer sets sp->T before
     * each forward and passes each rank's span of the tokens. NULL: the
     * family refuses --seq-parallel. */
    zt_status (*set_seq_parallel)(void *self, zt_seq_parallel *sp, zt_error *err);
} zt_train_model;

/* The tensors of a spec in declaration order, with `layout` for every
 * 2-D parameter ("row-major" for the others); up to cap, returns the count.
 * Families whose layouts need more say so in their own tensors hook. */
int zt_train_model_spec_tensors(const zt_model_spec *spec, const char *matrix_layout, zt_model_tensor *out, int cap);

/* The family named `family` among n (NULL when none). */
const zt_train_model *zt_train_model_find(const zt_train_model *const *models, int n, const char *family);

#endif
