/* The save cadence, asynchronous saves and storage faults (checkpointer.h). */
#include "checkpointer.h"

#include <stdio.h>
#include <string.h>

#include "zt_time.h"

void zt_checkpointer_init(zt_checkpointer *k, const zt_train_config *c, zt_ctx *ctx, zt_comm *world, zt_comm *group,
                          int writes, zt_engine *eng, const json_t *run_info, const zt_ckpt_hooks *hooks) {
    *k = (zt_checkpointer){c, ctx, world, group, writes, eng, run_info, hooks, NULL, 0, 0, -1, zt_now_s(), 0.0};
}

void zt_checkpointer_vote(const zt_checkpointer *k, double votes[ZT_STEP_VOTES]) {
    const zt_train_config *c = k->c;
    votes[VOTE_SAVE_DUE] = k->world->rank == 0 && c->save_every_minutes > 0 &&
                           zt_now_s() - k->last_save_s >= 60.0 * c->save_every_minutes;
    votes[VOTE_WRITING] = k->pending && !zt_ckpt_save_done(k->pending);
}

/* The save group's outcome, agreed by the world (the other groups hold the
 * same state and write nothing). */
static zt_status world_agrees(zt_checkpointer *k, zt_status st) {
    if (k->group == k->world) return st;
    return zt_comm_agree(k->world, st, &k->ctx->err);
}

/* A failed save: reported and forgiven, unless it was a stop's or the
 * --save-failures-th in a row. */
static zt_status judge(zt_checkpointer *k, int step, zt_status st, int stopping) {
    zt_ctx *ctx = k->ctx;
    const zt_train_config *c = k->c;
    if (st == ZT_OK) {
        k->failures = 0;
        k->last_saved = step;
        return ZT_OK;
    }
    if (st != ZT_ERR_IO || stopping) return st;
    k->failures++;
    char newest[600];
    if (k->last_saved >= 0) snprintf(newest, sizeof newest, "%s/step-%06d", c->save_dir, k->last_saved);
    else snprintf(newest, sizeof newest, "whatever %s held before this run", c->save_dir);
    if (k->failures >= c->save_failures) {
        char last[sizeof ctx->err.msg];
        snprintf(last, sizeof last, "%s", ctx->err.msg);
        zt_error_clear(&ctx->err);
        return ZT_FAIL(&ctx->err, ZT_ERR_IO, "%d checkpoint saves in a row failed (--save-failures %d); the run "
                       "stops; the newest complete checkpoint is %s; the last failure: %.600s", k->failures,
                       c->save_failures, newest, last);
    }
    if (ctx->rank == 0) /* every rank holds the agreed message */
        zt_log_warn(&ctx->log, "checkpoint step %d was not saved: %s; its partial files are removed, the newest complete "
                "checkpoint is still %s, and training goes on (%d of --save-failures %d in a row)", step, ctx->err.msg,
                newest, k->failures, c->save_failures);
    zt_error_clear(&ctx->err);
    return ZT_OK;
}

/* The save in flight: its writer joined, committed or removed. */
static zt_status commit(zt_checkpointer *k, int stopping) {
    int step = k->in_flight;
    double t0 = zt_now_s();
    zt_status st = ZT_OK;
    if (k->writes)
        st = zt_ckpt_save_end(k->pending, k->run_info, k->c->keep_checkpoints, &k->ctx->err);
    k->pending = NULL;
    k->in_flight = 0;
    st = world_agrees(k, st);
    k->stall_s += zt_now_s() - t0;
    if (st == ZT_OK)
        zt_log_rank0(&k->ctx->log, "committed checkpoint step %d in %s (written in the background; the commit took "
                     "%.3f s)", step, k->c->save_dir, zt_now_s() - t0);
    return judge(k, step, st, stopping);
}

static zt_status save_blocking(zt_checkpointer *k, int done, int stopping) {
    double t0 = zt_now_s();
    zt_status st = ZT_OK;
    if (k->writes)
        st = zt_ckpt_save(k->eng, k->group, k->c->save_dir, done, k->run_info, k->c->keep_checkpoints, k->hooks,
                          &k->ctx->err);
    st = world_agrees(k, st);
    k->stall_s += zt_now_s() - t0;
    zt_trace_span(k->ctx->trace, "checkpoint save", "io", 0, t0);
    if (st == ZT_OK)
        zt_log_rank0(&k->ctx->log, "saved checkpoint step %d in %s (%.3f s)", done, k->c->save_dir, zt_now_s() - t0);
    return judge(k, done, st, stopping);
}

static zt_status save_async(zt_checkpointer *k, int done) {
    double t0 = zt_now_s();
    zt_status st = ZT_OK;
    if (k->writes) st = zt_ckpt_save_begin(k->eng, k->group, k->c->save_dir, done, k->hooks, &k->pending, &k->ctx->err);
    st = world_agrees(k, st); /* only group 0 can fail, and then it holds no pending save */
    k->stall_s += zt_now_s() - t0;
    zt_trace_span(k->ctx->trace, "checkpoint staging", "io", 0, t0);
    if (st != ZT_OK) return judge(k, done, st, 0);
    k->in_flight = done;
    zt_log_rank0(&k->ctx->log, "staged checkpoint step %d in %.3f s; its files are written in the background", done,
                 zt_now_s() - t0);
    return ZT_OK;
}

zt_status zt_checkpointer_after_step(zt_checkpointer *k, int done, const double *votes, int stopping) {
    const zt_train_config *c = k->c;
    k->stall_s = 0.0;
    if (!c->save_dir[0]) return ZT_OK;
    if (k->in_flight && votes[VOTE_WRITING] == 0) ZT_TRY(commit(k, 0));
    int periodic = c->save_every > 0 && done % c->save_every == 0;
    int timed = votes[VOTE_SAVE_DUE] > 0;
    int signal_save = stopping && strcmp(c->on_signal, "save-exit") == 0 && k->last_saved != done;
    if (!periodic && !timed && !signal_save) return ZT_OK;
    if (k->in_flight) ZT_TRY(commit(k, stopping)); /* at most one in flight: the new one waits for it */
    if (timed || periodic) k->last_save_s = zt_now_s();
    if (c->async_save && !stopping) return save_async(k, done);
    return save_blocking(k, done, stopping);
}

zt_status zt_checkpointer_finish(zt_checkpointer *k) {
    if (!k->in_flight) return ZT_OK;
    return commit(k, 1);
}
