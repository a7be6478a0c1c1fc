/* The evaluation loss on --val-data: forward passes only, through the
 * same engine (gathers, recomputation and offload as in training), from
 * the start of the validation stream every time, so evaluations at
 * different steps see the same tokens. Nothing of training's state
 * changes: the next step is bitwise what it would have been without. */
#ifndef ZT_EVALUATE_H
#define ZT_EVALUATE_H

#include "data.h"
#include "seq_group.h"
#include "zt_comm.h"
#include "zt_train_model.h"

typedef struct {
    const zt_train_model *family;
    void *model;
    zt_engine *eng;
    zt_data *val;              /* token files (read: its open file changes) */
    int B, T, batches;         /* micro-batch, seq-len, micro-batches per rank */
    int32_t *tokens, *targets; /* host [B,T] each, the trainer's */
    zt_seq_group *seq;         /* sequence parallelism: rows keyed by the group, each rank its span */
} zt_eval_job;

/* The mean loss over every position of every micro-batch (data-parallel
 * index d's micro-batch m reads the rows zt_data_stream_batch gives at
 * position 0). Collective. */
zt_status zt_evaluate(const zt_eval_job *j, zt_comm *world, double *mean_loss, zt_error *err);

#endif
