/* The training step every model shares (docs/sharding.md walks one through
 * the files): zero the gradients; per micro-batch the model's forward and
 * backward, which gather, release and hand gradients to the engine, then
 * the micro-batch's reductions; then the optimizer step; then the loss,
 * averaged over micro-batches and over ranks in rank order. The model
 * supplies its passes; this sets the memory phases, the trace spans and the
 * window each step's peaks are measured over, and stops the run on
 * gradients that stay non-finite. */
#ifndef ZT_STEP_H
#define ZT_STEP_H

#include "zt_engine.h"

/* The model's half of a step. */
typedef struct {
    void *arg;
    /* Forward of micro-batch `micro` of step `step` (0-based); the loss is
     * read back only after the step, so nothing waits in between. */
    zt_status (*forward)(void *arg, int step, int micro);
    /* Its backward, the mean loss's gradient multiplied by loss_scale. */
    zt_status (*backward)(void *arg, int step, int micro, float loss_scale);
    /* After the step's kernels: the sum over its micro-batches of their mean losses. */
    zt_status (*take_losses)(void *arg, double *sum);
} zt_step_model;

/* Values each rank adds to the step's closing reduction (the world's sum of
 * the losses, in rank order), handed back summed: a decision every rank
 * must take at the same step boundary (the trainer's stop on a signal, a
 * save that is due, an asynchronous save that finished) rides on the
 * collective every step has anyway. */
#define ZT_STEP_VOTES 8

typedef struct {
    int micro_batches; /* per optimizer step (gradient accumulation) */
    float lr;
    int max_skipped_steps; /* non-finite steps in a row that stop the run (fixed loss scale) */
    /* Called after the micro-batches, before the optimizer (NULL: none):
     * the trainer's fault injection. */
    void (*before_optimizer)(void *arg, int step);
    /* Called just before the closing reduction (NULL: every vote 0): this
     * rank's votes, read as late as the step allows. */
    void (*vote)(void *arg, int step, double votes[ZT_STEP_VOTES]);
    void *hook_arg; /* both hooks' */
} zt_step_options;

typedef struct {
    double loss;       /* mean over micro-batches and ranks */
    double grad_norm;  /* of the unscaled gradients; inf or NaN when skipped */
    int skipped;       /* the gradients were not finite: nothing was updated */
    long skipped_steps;
    double loss_scale; /* what this step's backward used (1 unless fp16) */
    double time_s;     /* the whole step, host wall clock */
    double forward_s, backward_s, optimizer_s; /* its phases (forward and backward over the micro-batches;
                                                * backward includes the reductions' waits) */
    double votes[ZT_STEP_VOTES]; /* every rank's votes, summed */
} zt_step_result;

/* One optimizer step (step is 0-based). Collective. ZT_ERR_NUMERIC when
 * the gradients stayed non-finite (--max-skipped-steps) or overflowed at
 * fp16's smallest loss scale. */
zt_status zt_train_step(zt_engine *eng, const zt_step_model *model, const zt_step_options *opt, int step,
                        zt_step_result *out);

#endif
