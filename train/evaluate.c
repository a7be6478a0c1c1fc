/* Evaluation passes on --val-data (evaluate.h). */
#include "evaluate.h"

#include <string.h>

#include "zt_mem.h"
#include "zt_trace.h"
#include "zt_time.h"

/* This rank's sum of its micro-batches' mean losses; the model's
 * activations and the engine's gathered units are freed whatever happens. */
static zt_status local_losses(const zt_eval_job *j, double *sum) {
    zt_ctx *ctx = zt_engine_context(j->eng);
    zt_seq_group *q = j->seq;
    int32_t *rows = zt_seq_group_rows(q, j->tokens), *targets = zt_seq_group_targets(q, j->targets); /* [B,T] */
    zt_status st = ZT_OK;
    *sum = 0.0;
    for (int m = 0; st == ZT_OK && m < j->batches; m++) {
        double one = 0.0;
        st = zt_data_stream_batch(j->val, 0, q->dp_world, q->dp_rank, m, j->B, j->T, j->T, rows, targets, NULL,
                                  &ctx->err);
        int T = zt_seq_group_split(q, j->B, j->T, j->tokens, j->targets);
        if (st == ZT_OK) st = j->family->forward(j->model, j->eng, j->tokens, j->targets, j->B, T);
        if (st == ZT_OK) st = j->family->take_losses(j->model, ctx, &one);
        *sum += one * zt_seq_group_loss_weight(q, j->T);
    }
    j->family->free_activations(j->model, j->eng);
    zt_status ended = zt_engine_end_forward_only(j->eng);
    return st != ZT_OK ? st : ended;
}

/* A memory's step window (zt_mem_window_reset's peaks). */
typedef struct {
    size_t cat[ZT_NUM_CATEGORIES], allocated, reserved, phase[ZT_NUM_PHASES];
} step_window;

static void window_save(const zt_mem *m, step_window *w) {
    memcpy(w->cat, m->window_cat_peak, sizeof w->cat);
    memcpy(w->phase, m->window_phase_peak, sizeof w->phase);
    w->allocated = m->window_allocated_peak;
    w->reserved = m->window_reserved_peak;
}

static void window_restore(zt_mem *m, const step_window *w) {
    memcpy(m->window_cat_peak, w->cat, sizeof w->cat);
    memcpy(m->window_phase_peak, w->phase, sizeof w->phase);
    m->window_allocated_peak = w->allocated;
    m->window_reserved_peak = w->reserved;
}

zt_status zt_evaluate(const zt_eval_job *j, zt_comm *world, double *mean_loss, zt_error *err) {
    zt_ctx *ctx = zt_engine_context(j->eng);
    double t0 = zt_now_s(), mine = 0.0, total = 0.0;
    /* The step's peaks stay the training step's (what the planner predicts);
     * the run's peaks keep the evaluation's. */
    step_window dev, host;
    window_save(&ctx->device_mem, &dev);
    window_save(&ctx->host_mem, &host);
    zt_mem_set_phase(&ctx->device_mem, ZT_PHASE_FORWARD);
    zt_status st = local_losses(j, &mine);
    window_restore(&ctx->device_mem, &dev);
    window_restore(&ctx->host_mem, &host);
    ZT_TRY(st);
    ZT_TRY(zt_comm_sum_f64v(world, &mine, 1, &total, err));
    *mean_loss = total / ((double)j->batches * (double)world->world_size);
    zt_trace_span(ctx->trace, "evaluation", "phase", 0, t0);
    return ZT_OK;
}
