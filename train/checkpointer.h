/* When zt-train saves and what a failed save costs: every --save-every
 * steps, every --save-every-minutes of rank 0's clock, and at a stop on a
 * signal; blocking, or asynchronous (--async-save 1: one save in flight at
 * most, committed at the first step boundary where every rank's writer has
 * ended, and before exit). A save that fails on the file system (ENOSPC,
 * EIO, EROFS, EDQUOT: ZT_ERR_IO on any rank, agreed) is reported and
 * training goes on; --save-failures of them in a row stop the run.
 *
 * Decisions every rank must take at the same step ride on the step's
 * closing reduction as votes (zt_step.h); the slots are below. */
#ifndef ZT_CHECKPOINTER_H
#define ZT_CHECKPOINTER_H

#include "stop_signals.h"
#include "train_config.h"
#include "zt_checkpoint.h"
#include "zt_step.h"

/* The step votes' slots: the ranks that received each stop signal, rank
 * 0's verdict that a timed save is due, the ranks whose writer still runs;
 * and the step's tokens digest (token files: each rank's term below 2^32,
 * so the sum is exact), which rides on the same reduction. */
enum { VOTE_SIGNAL = 0, VOTE_SAVE_DUE = VOTE_SIGNAL + ZT_STOP_SIGNALS, VOTE_WRITING, VOTE_DATA_DIGEST, VOTE_SLOTS };
_Static_assert(VOTE_SLOTS <= ZT_STEP_VOTES, "grow ZT_STEP_VOTES");

typedef struct {
    const zt_train_config *c;
    zt_ctx *ctx;
    zt_comm *world;
    zt_comm *group; /* where a save runs: the world, or shard group 0 under hybrid sharding */
    int writes;     /* this rank is in that group */
    zt_engine *eng;
    const json_t *run_info;
    const zt_ckpt_hooks *hooks;
    zt_ckpt_pending *pending; /* this rank's part of the save in flight */
    int in_flight;            /* the step of the save in flight (every rank knows it); 0 none */
    int failures;             /* saves failed in a row */
    int last_saved;           /* the step of the newest committed save; -1 none */
    double last_save_s;       /* rank 0: when the timed cadence last started */
    double stall_s;           /* what the last step boundary spent on saves */
} zt_checkpointer;

void zt_checkpointer_init(zt_checkpointer *k, const zt_train_config *c, zt_ctx *ctx, zt_comm *world, zt_comm *group,
                          int writes, zt_engine *eng, const json_t *run_info, const zt_ckpt_hooks *hooks);
/* This rank's save votes (VOTE_SAVE_DUE, VOTE_WRITING). */
void zt_checkpointer_vote(const zt_checkpointer *k, double votes[ZT_STEP_VOTES]);
/* After step `done` (1-based) with the summed votes: commits a finished
 * asynchronous save, then saves when one is due or `stopping` (a signal's
 * save, always blocking). A failed save is counted and forgiven until
 * --save-failures in a row, except a stop's, which fails the run. */
zt_status zt_checkpointer_after_step(zt_checkpointer *k, int done, const double *votes, int stopping);
/* The save in flight, committed (before exit). */
zt_status zt_checkpointer_finish(zt_checkpointer *k);

#endif
