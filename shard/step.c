/* The step skeleton (zt_step.h). */
#include "zt_step.h"

#include <math.h>
#include <stdio.h>

#include "gather.h"
#include "zt_optim_engine.h"
#include "tier.h"
#include "unit_mem.h"
#include "zt_time.h"

/* The optimizer step: the last reductions land, the passes end, the
 * gradients are judged (norm, skip, clip), then the tier updates every
 * unit where its state lives. */
zt_status zt_engine_step(zt_engine *e, float lr) {
    zt_ctx *ctx = e->ctx;
    ZT_TRY(zt_engine_sync_grads(e));
    ZT_TRY(zt_engine_end_passes(e));
    zt_tensor ws = {0}, wu = {0};
    size_t chunk = zt_engine_optimizer_chunk(e);
    if (e->cfg.dtype != ZT_FP32)
        ZT_TRY(zt_engine_alloc(e, &ws, ZT_FP32, chunk, ZT_CAT_WORKSPACE, "optimizer", -1));
    zt_update_args a = {&ws, &wu, 1.0f, lr, e->steps_taken + 1};
    zt_status st = ZT_OK;
    if (optim_of(e)->update_workspace && e->tier->on_device && chunk) /* its device update's */
        st = zt_engine_alloc(e, &wu, ZT_FP32, chunk, ZT_CAT_WORKSPACE, "optimizer update", -1);
    if (st == ZT_OK) st = zt_engine_judge_gradients(e, &ws, &a.mult);
    /* On the device, on the host or in the NVMe tier's stream (tier.h). */
    if (st == ZT_OK) st = e->tier->update(e, &a, e->last_step_skipped);
    if (st == ZT_OK && !e->last_step_skipped) e->steps_taken = a.t;
    zt_tensor_free(&wu, &ctx->device_mem);
    zt_tensor_free(&ws, &ctx->device_mem);
    return st;
}


/* Forward and backward of every micro-batch, each followed by its
 * reductions (stages 0-1 reduce on the last one only). */
static zt_status micro_batches(zt_engine *eng, const zt_step_model *m, const zt_step_options *o, int step,
                               zt_step_result *out) {
    zt_ctx *ctx = eng->ctx;
    for (int micro = 0; micro < o->micro_batches; micro++) {
        zt_engine_begin_micro(eng, micro == o->micro_batches - 1);
        zt_mem_set_phase(&ctx->device_mem, ZT_PHASE_FORWARD);
        double tf = zt_now_s();
        ZT_TRY(m->forward(m->arg, step, micro));
        zt_trace_span(ctx->trace, "forward", "phase", 0, tf);
        out->forward_s += zt_now_s() - tf;
        zt_mem_set_phase(&ctx->device_mem, ZT_PHASE_BACKWARD);
        double tb = zt_now_s();
        ZT_TRY(m->backward(m->arg, step, micro, (float)eng->scaler.scale));
        ZT_TRY(zt_engine_sync_grads(eng));
        zt_trace_span(ctx->trace, "backward", "phase", 0, tb);
        out->backward_s += zt_now_s() - tb;
    }
    return ZT_OK;
}

/* After a skipped step: reported; too many in a row, or an fp16 overflow at
 * the smallest loss scale allowed, stop the run. step is 1-based. */
static zt_status judge_skipped(const zt_engine *eng, const zt_step_options *o, int step) {
    zt_ctx *ctx = eng->ctx;
    const zt_loss_scaler *s = &eng->scaler;
    if (!eng->last_step_skipped) return ZT_OK;
    int dynamic = zt_loss_scaler_dynamic(&eng->cfg);
    if (s->exhausted)
        return ZT_FAIL(&ctx->err, ZT_ERR_NUMERIC,
                       "step %d: fp16 gradients overflowed at loss scale %g, and halving it would go below "
                       "`min_loss_scale` %g; the run stops (a lower `lr`, or bf16, may help)",
                       step, s->scale, eng->cfg.loss.min_loss_scale);
    if (!dynamic && s->consecutive_skips >= o->max_skipped_steps)
        return ZT_FAIL(&ctx->err, ZT_ERR_NUMERIC,
                       "step %d: the gradients were not finite in %d step(s) in a row (`max_skipped_steps` %d); "
                       "the run stops", step, s->consecutive_skips, o->max_skipped_steps);
    if (dynamic)
        zt_log_rank0(&ctx->log, "step %d skipped: fp16 gradients overflowed (loss scale now %g; %ld skipped so far)",
                     step, s->scale, s->skipped_steps);
    else
        zt_log_rank0(&ctx->log, "step %d skipped: the gradient norm is %g (%ld skipped so far)", step,
                     eng->last_grad_norm, s->skipped_steps);
    return ZT_OK;
}

/* The optimizer, the skip verdict and the step's losses. */
static zt_status optimizer(zt_engine *eng, const zt_step_model *m, const zt_step_options *o, int step,
                           double *loss_sum, zt_step_result *out) {
    zt_ctx *ctx = eng->ctx;
    zt_mem_set_phase(&ctx->device_mem, ZT_PHASE_OPTIMIZER);
    double to = zt_now_s();
    ZT_TRY(zt_engine_step(eng, o->lr));
    ZT_TRY(judge_skipped(eng, o, step + 1));
    ZT_TRY(m->take_losses(m->arg, loss_sum)); /* waits for the step's kernels */
    zt_trace_span(ctx->trace, "optimizer", "phase", 0, to);
    out->optimizer_s = zt_now_s() - to;
    return ZT_OK;
}

zt_status zt_train_step(zt_engine *eng, const zt_step_model *m, const zt_step_options *o, int step,
                        zt_step_result *out) {
    zt_ctx *ctx = eng->ctx;
    double t0 = zt_now_s(), loss_sum = 0.0;
    *out = (zt_step_result){0};
    zt_mem_window_reset(&ctx->device_mem);
    out->loss_scale = eng->scaler.scale;
    ZT_TRY(zt_engine_zero_grads(eng));
    ZT_TRY(micro_batches(eng, m, o, step, out));
    if (o->before_optimizer) o->before_optimizer(o->hook_arg, step);
    ZT_TRY(optimizer(eng, m, o, step, &loss_sum, out));
    char step_name[32];
    snprintf(step_name, sizeof step_name, "step %d", step + 1);
    zt_trace_span(ctx->trace, step_name, "step", 0, t0);
    zt_trace_profiler_step(ctx->trace, step + 1, t0);
    out->time_s = zt_now_s() - t0;
    out->grad_norm = eng->last_grad_norm;
    out->skipped = eng->last_step_skipped;
    out->skipped_steps = eng->scaler.skipped_steps;
    /* The global mean loss: per-rank means added in rank order; the votes
     * travel with it. */
    double mine[1 + ZT_STEP_VOTES] = {loss_sum / o->micro_batches}, sums[1 + ZT_STEP_VOTES];
    if (o->vote) o->vote(o->hook_arg, step, mine + 1);
    ZT_TRY(zt_comm_sum_f64v(eng->world, mine, 1 + ZT_STEP_VOTES, sums, &ctx->err));
    out->loss = sums[0] / eng->world->world_size;
    for (int i = 0; i < ZT_STEP_VOTES; i++) out->votes[i] = sums[i + 1];
    return ZT_OK;
}
