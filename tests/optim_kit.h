/* What the optimizer interface's tests share (test_optim_conformance.c,
 * test_optim_hook.c): a small model of matrices and vectors whose slices
 * split matrices across ranks, deterministic initial values and
 * gradients, a step with no model (the gradients are written straight
 * into the engine's buffers), and the full fp32 state gathered from every
 * rank's world slices. Run under mpirun (launch/zt-run); the CPU backend. */
#ifndef ZT_OPTIM_KIT_H
#define ZT_OPTIM_KIT_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_comm.h"
#include "test_util.h"
#include "zt_ctx.h"
#include "zt_engine.h"
#include "zt_optim.h"

/* Two units: u0 = w0 [7, 6], b0 [5], w1 [3, 4]; u1 = w2 [8, 9], b2 [9].
 * At 2 and 4 ranks (slices of 32 or 16 elements) w0 and w2 span two
 * slices or more; w1 lies in one. */
static inline void kit_spec(zt_model_spec *spec, int world) {
    static const int64_t shapes[5][2] = {{7, 6}, {5, 0}, {3, 4}, {8, 9}, {9, 0}};
    static const char *const names[5] = {"w0", "b0", "w1", "w2", "b2"};
    zt_error err = {0};
    int u, p;
    memset(spec, 0, sizeof *spec);
    for (int i = 0; i < 5; i++) {
        if (i == 0 || i == 3) zt_spec_add_unit(spec, i == 0 ? "u0" : "u1", &u, &err);
        int ndim = shapes[i][1] ? 2 : 1;
        zt_spec_add_param(spec, u, names[i], ndim, shapes[i], ndim == 2, &p, &err);
        if (ndim == 2) zt_spec_set_hidden(spec, u, p, 1, NULL, &err); /* what the matrix hook transforms */
    }
    zt_spec_layout(spec, world);
}

/* Initial values: depend on (unit, param) only, as the engine requires. */
static inline void kit_init(void *arg, int unit, int param, size_t first, size_t count, float *dst) {
    (void)arg;
    for (size_t k = 0; k < count; k++) {
        size_t i = first + k;
        dst[k] = 0.05f * (float)((int)((i * 7 + (size_t)param * 3 + (size_t)unit) % 13) - 6);
    }
}

/* The gradient of element i of unit u at step s: multiples of 2^-10, so a
 * sum over 2 or 4 equal copies and its average are exact. */
static inline float kit_grad(int s, int u, size_t i) {
    return (float)((int)((i * 5 + (size_t)u * 11 + (size_t)s * 3) % 17) - 8) / 1024.0f;
}

/* One optimizer step of the same gradients on every rank. */
static inline zt_status kit_step(zt_engine *e, int s, float lr) {
    const zt_model_spec *spec = zt_engine_spec(e);
    ZT_TRY(zt_engine_zero_grads(e));
    zt_engine_begin_micro(e, 1);
    ZT_TRY(zt_engine_begin_pass(e, ZT_PASS_BACKWARD));
    for (int u = spec->nunits - 1; u >= 0; u--) {
        float *g; /* [padded] fp32 */
        ZT_TRY(zt_engine_grad_buffer(e, u, &g));
        for (size_t i = 0; i < spec->units[u].numel; i++) g[i] = kit_grad(s, u, i);
        ZT_TRY(zt_engine_grads_ready(e, u));
    }
    ZT_TRY(zt_engine_sync_grads(e));
    return zt_engine_step(e, lr);
}

/* full[kind][u] = [padded] fp32: every rank's world slice of `kind`. */
typedef struct {
    float *v[3][2];
} kit_state;

static inline zt_status kit_gather(zt_engine *e, zt_comm *comm, kit_state *out) {
    const zt_model_spec *spec = zt_engine_spec(e);
    for (int k = 0; k < 3; k++)
        for (int u = 0; u < spec->nunits; u++) {
            size_t S = spec->units[u].shard_numel;
            float *full = calloc(spec->units[u].padded_numel + 1, sizeof(float));
            out->v[k][u] = full;
            if (!full) return ZT_ERR_OOM;
            ZT_TRY(zt_engine_get_slice(e, u, (zt_state_kind)k, full + (size_t)comm->rank * S));
            ZT_TRY(zt_comm_all_gather_host(comm, full, S * sizeof(float), &zt_engine_context(e)->err));
        }
    return ZT_OK;
}

static inline void kit_free(kit_state *s) {
    for (int k = 0; k < 3; k++)
        for (int u = 0; u < 2; u++) free(s->v[k][u]);
    memset(s, 0, sizeof *s);
}

/* Places a gathered state into engine e (any world size): each rank's
 * owned part, as a checkpoint load does. */
static inline zt_status kit_place(zt_engine *e, const kit_state *s) {
    const zt_model_spec *spec = zt_engine_spec(e);
    for (int u = 0; u < spec->nunits; u++) {
        size_t lo, n, vlo, vn;
        ZT_TRY(zt_engine_owned_range(e, u, &lo, &n));
        ZT_TRY(zt_engine_state_span(e, u, &vlo, &vn));
        ZT_TRY(zt_engine_set_owned(e, u, s->v[0][u] + lo, s->v[1][u] + lo, s->v[2][u] + vlo));
    }
    return zt_engine_gather_params(e);
}

/* Elements of unit u that differ between a and b (first numel). */
static inline size_t kit_diff(const float *a, const float *b, size_t numel) {
    size_t n = 0;
    for (size_t i = 0; i < numel; i++) n += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return n;
}

#endif
