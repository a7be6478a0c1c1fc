/* ZeRO-Offload's delayed parameter update (--offload-delay 1), experimental.
 * The CPU Adam of step t runs on its own thread while step t + 1's forward
 * and backward run on the device with the parameters from before step t;
 * at step t + 1's optimizer step the engine waits for it, copies the
 * updated master to the device, and starts step t + 1's update. So each
 * update applies gradients that are one step stale, and the CPU step is
 * hidden behind a whole forward and backward instead of exposed after it.
 *
 * The thread touches only the host master, m, v and the gradients handed to
 * it; everything that allocates, communicates or copies stays on the
 * calling thread. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "zt_time.h"

struct zt_delayed_update {
    pthread_t thread;
    const zt_engine *e;
    zt_tensor *grads; /* [nunits], each [owned] fp32 on the host: step t's reduced gradients */
    float mult, lr;   /* unscale-and-clip multiplier and learning rate of step t */
    int t;            /* Adam's step count for this update */
    double busy_s;    /* seconds the update ran */
};

static void *run_update(void *arg) {
    struct zt_delayed_update *d = arg;
    double t0 = zt_now_s();
    for (int u = 0; u < d->e->spec->nunits; u++)
        if (d->grads[u].data) (void)zt_engine_host_step(d->e, u, zt_f32(&d->grads[u]), NULL, d->mult, d->lr, d->t);
    d->busy_s = zt_now_s() - t0;
    return NULL;
}

static void free_update(zt_engine *e, struct zt_delayed_update *d) {
    for (int u = 0; d->grads && u < e->spec->nunits; u++) zt_tensor_free(&d->grads[u], &e->ctx->host_mem);
    free(d->grads);
    free(d);
}

zt_status zt_engine_delayed_wait(zt_engine *e) {
    struct zt_delayed_update *d = e->delayed;
    if (!d) return ZT_OK;
    double t0 = zt_now_s();
    int rc = pthread_join(d->thread, NULL);
    e->delayed_wait_s += zt_now_s() - t0;
    e->delayed_adam_s += d->busy_s;
    e->delayed = NULL;
    free_update(e, d);
    if (rc != 0) return ZT_FAIL(&e->ctx->err, ZT_ERR_INTERNAL, "delayed update: cannot join its thread (error %d)", rc);
    zt_trace_span(e->ctx->trace, "delayed update joined", "offload", 2, t0);
    return ZT_OK;
}

/* The device params := the host master, every unit (stages 1-2: each
 * rank's updated slice all-gathered as after an optimizer step). */
static zt_status apply_unit(zt_engine *e, int u, void *arg) {
    (void)arg;
    return zt_engine_offload_apply_unit(e, u);
}

static zt_status apply_master(zt_engine *e) {
    ZT_TRY(zt_engine_offload_begin(e));
    zt_status st = zt_engine_update_each_unit(e, apply_unit, NULL, &e->ctx->h2d);
    zt_status fin = zt_engine_offload_finish(e);
    ZT_TRY(st);
    ZT_TRY(fin);
    e->params_behind = 0;
    return ZT_OK;
}

/* Hands every unit's reduced gradients (on the host, fp32) to a new update
 * and starts its thread. */
static zt_status launch(zt_engine *e, float mult, float lr) {
    int N = e->spec->nunits;
    struct zt_delayed_update *d = calloc(1, sizeof *d);
    if (d) d->grads = calloc((size_t)N, sizeof *d->grads);
    if (!d || !d->grads) {
        free(d);
        return ZT_FAIL(&e->ctx->err, ZT_ERR_OOM, "delayed update: cannot allocate its state");
    }
    for (int u = 0; u < N; u++) {
        if (frozen(e, u)) continue; /* no gradients, no update */
        zt_status s = zt_engine_offload_grads_landed(e, u);
        if (s != ZT_OK) {
            free_update(e, d);
            return s;
        }
        d->grads[u] = e->units[u].host_grads; /* the next step's gradients land in new buffers */
        memset(&e->units[u].host_grads, 0, sizeof e->units[u].host_grads);
    }
    *d = (struct zt_delayed_update){.e = e, .grads = d->grads, .mult = mult, .lr = lr, .t = e->steps_taken + 1};
    int rc = pthread_create(&d->thread, NULL, run_update, d);
    if (rc != 0) {
        free_update(e, d);
        return ZT_FAIL(&e->ctx->err, ZT_ERR_INTERNAL, "delayed update: cannot start its thread (error %d)", rc);
    }
    e->delayed = d;
    e->steps_taken = d->t;
    e->params_behind = 1;
    return ZT_OK;
}

zt_status zt_engine_delayed_step(zt_engine *e, float mult, float lr, int skip) {
    ZT_TRY(zt_engine_delayed_wait(e));
    if (e->params_behind) ZT_TRY(apply_master(e));
    if (skip) return ZT_OK;
    return launch(e, mult, lr);
}
