#include "zt_engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static zt_status alloc_flat(zt_engine *eng, zt_tensor *t, zt_dtype dtype, size_t numel,
                            zt_category cat, const char *what, int unit) {
    char label[40];
    snprintf(label, sizeof label, "%s %s", eng->spec->units[unit].name, what);
    int64_t shape[1] = {(int64_t)numel};
    zt_ctx *ctx = eng->ctx;
    ZT_TRY(zt_tensor_alloc(t, &ctx->device_mem, ctx->be->device, dtype, 1, shape, cat, label, &ctx->err));
    return ctx->be->memset_async(ctx->be, t->data, 0, zt_tensor_bytes(t), &ctx->compute, &ctx->err);
}

zt_status zt_engine_init(zt_engine *eng, zt_ctx *ctx, const zt_model_spec *spec,
                         const zt_engine_config *cfg, zt_param_init_fn init, void *init_arg) {
    memset(eng, 0, sizeof *eng);
    eng->ctx = ctx;
    eng->spec = spec;
    eng->cfg = *cfg;
    if (cfg->stage != 0)
        return ZT_FAIL(&ctx->err, ZT_ERR_UNSUPPORTED,
                       "ZeRO stage %d is not available yet (sharding lands with the MPI issue); use stage 0",
                       cfg->stage);
    eng->units = calloc((size_t)spec->nunits, sizeof *eng->units);
    if (!eng->units) return ZT_FAIL(&ctx->err, ZT_ERR_OOM, "engine: cannot allocate unit table");

    const zt_ops *ops = ctx->be->ops;
    int bf16 = cfg->dtype == ZT_BF16;
    for (int u = 0; u < spec->nunits; u++) {
        const zt_unit_spec *us = &spec->units[u];
        zt_unit_state *st = &eng->units[u];
        size_t n = us->padded_numel;
        ZT_TRY(alloc_flat(eng, &st->params, cfg->dtype, n, ZT_CAT_PARAMS, "params", u));
        ZT_TRY(alloc_flat(eng, &st->grads, cfg->dtype, n, ZT_CAT_GRADS, "grads", u));
        if (bf16) ZT_TRY(alloc_flat(eng, &st->master, ZT_FP32, n, ZT_CAT_MASTER_PARAMS, "master", u));
        ZT_TRY(alloc_flat(eng, &st->adam_m, ZT_FP32, n, ZT_CAT_OPTIMIZER, "adam m", u));
        ZT_TRY(alloc_flat(eng, &st->adam_v, ZT_FP32, n, ZT_CAT_OPTIMIZER, "adam v", u));
        float *full = bf16 ? zt_f32(&st->master) : zt_f32(&st->params); /* [padded_numel] */
        for (int p = 0; p < us->nparams; p++) init(init_arg, u, p, full + us->params[p].offset);
        if (bf16) ops->cast_f32_to_bf16(&ctx->compute, st->params.data, full, n);
    }
    return ZT_OK;
}

void zt_engine_destroy(zt_engine *eng) {
    if (!eng->units) return;
    zt_mem *mem = &eng->ctx->device_mem;
    for (int u = 0; u < eng->spec->nunits; u++) {
        zt_unit_state *st = &eng->units[u];
        zt_tensor *all[] = {&st->params, &st->grads, &st->master, &st->adam_m,
                            &st->adam_v, &st->view32, &st->grad32};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) zt_tensor_free(all[i], mem);
    }
    free(eng->units);
    eng->units = NULL;
}

static zt_status check_unit(zt_engine *eng, int unit) {
    if (unit < 0 || unit >= eng->spec->nunits)
        return ZT_FAIL(&eng->ctx->err, ZT_ERR_INVALID, "no unit %d", unit);
    return ZT_OK;
}

zt_status zt_engine_gather(zt_engine *eng, int unit, const float **params32) {
    ZT_TRY(check_unit(eng, unit));
    zt_unit_state *st = &eng->units[unit];
    zt_ctx *ctx = eng->ctx;
    if (eng->cfg.dtype == ZT_FP32) {
        st->gather_count++;
        *params32 = zt_f32(&st->params);
        return ZT_OK;
    }
    if (st->gather_count == 0) {
        ZT_TRY(alloc_flat(eng, &st->view32, ZT_FP32, st->params.numel, ZT_CAT_WORKSPACE, "fp32 view", unit));
        ctx->be->ops->cast_bf16_to_f32(&ctx->compute, zt_f32(&st->view32), st->params.data, st->params.numel);
    }
    st->gather_count++;
    *params32 = zt_f32(&st->view32);
    return ZT_OK;
}

void zt_engine_release(zt_engine *eng, int unit) {
    if (unit < 0 || unit >= eng->spec->nunits) return;
    zt_unit_state *st = &eng->units[unit];
    if (st->gather_count <= 0) return;
    if (--st->gather_count == 0 && eng->cfg.dtype != ZT_FP32)
        zt_tensor_free(&st->view32, &eng->ctx->device_mem);
}

zt_status zt_engine_grad_buffer(zt_engine *eng, int unit, float **grads32) {
    ZT_TRY(check_unit(eng, unit));
    zt_unit_state *st = &eng->units[unit];
    if (eng->cfg.dtype == ZT_FP32) {
        st->grad_open = 1;
        *grads32 = zt_f32(&st->grads);
        return ZT_OK;
    }
    if (!st->grad_open) {
        ZT_TRY(alloc_flat(eng, &st->grad32, ZT_FP32, st->grads.numel, ZT_CAT_WORKSPACE, "fp32 grad", unit));
        st->grad_open = 1;
    }
    *grads32 = zt_f32(&st->grad32);
    return ZT_OK;
}

zt_status zt_engine_grads_ready(zt_engine *eng, int unit) {
    ZT_TRY(check_unit(eng, unit));
    zt_unit_state *st = &eng->units[unit];
    if (!st->grad_open) return ZT_OK; /* no gradient flowed into this unit */
    st->grad_open = 0;
    if (eng->cfg.dtype == ZT_FP32) return ZT_OK;
    /* Fold this micro-batch's fp32 gradients into the bf16 gradient store,
     * rounding once per micro-batch. */
    zt_bf16 *g = st->grads.data;
    const float *g32 = zt_f32(&st->grad32);
    for (size_t i = 0; i < st->grads.numel; i++) g[i] = zt_f32_to_bf16(zt_bf16_to_f32(g[i]) + g32[i]);
    zt_tensor_free(&st->grad32, &eng->ctx->device_mem);
    return ZT_OK;
}

zt_status zt_engine_zero_grads(zt_engine *eng) {
    zt_ctx *ctx = eng->ctx;
    for (int u = 0; u < eng->spec->nunits; u++) {
        zt_tensor *g = &eng->units[u].grads;
        ZT_TRY(ctx->be->memset_async(ctx->be, g->data, 0, zt_tensor_bytes(g), &ctx->compute, &ctx->err));
    }
    return ZT_OK;
}

/* fp32 gradients of unit u: the grads themselves, or an up-cast into ws. */
static float *grads_f32(zt_engine *eng, int u, zt_tensor *ws) {
    zt_unit_state *st = &eng->units[u];
    if (eng->cfg.dtype == ZT_FP32) return zt_f32(&st->grads);
    eng->ctx->be->ops->cast_bf16_to_f32(&eng->ctx->compute, zt_f32(ws), st->grads.data, st->grads.numel);
    return zt_f32(ws);
}

zt_status zt_engine_step(zt_engine *eng, float lr) {
    zt_ctx *ctx = eng->ctx;
    const zt_ops *ops = ctx->be->ops;
    const zt_model_spec *spec = eng->spec;
    int bf16 = eng->cfg.dtype == ZT_BF16;

    zt_tensor ws = {0}; /* [largest unit] fp32 up-cast of bf16 grads */
    if (bf16) {
        int64_t shape[1] = {(int64_t)spec->largest_unit_numel};
        ZT_TRY(zt_tensor_alloc(&ws, &ctx->device_mem, ctx->be->device, ZT_FP32, 1, shape,
                               ZT_CAT_WORKSPACE, "optimizer grad up-cast", &ctx->err));
    }
    /* Global gradient norm: per-unit sums of squares added in unit order. */
    double sumsq = 0.0;
    for (int u = 0; u < spec->nunits; u++) {
        double s = 0.0;
        ops->sum_squares(&ctx->compute, &s, grads_f32(eng, u, &ws), spec->units[u].padded_numel);
        sumsq += s;
    }
    double norm = sqrt(sumsq);
    eng->last_grad_norm = norm;
    float clip_scale = 1.0f;
    if (eng->cfg.grad_clip > 0.0f && norm > eng->cfg.grad_clip)
        clip_scale = (float)(eng->cfg.grad_clip / (norm + 1e-6));

    int t = eng->steps_taken + 1;
    for (int u = 0; u < spec->nunits; u++) {
        const zt_unit_spec *us = &spec->units[u];
        zt_unit_state *st = &eng->units[u];
        float *g = grads_f32(eng, u, &ws);
        if (clip_scale != 1.0f) ops->scale(&ctx->compute, g, clip_scale, us->padded_numel);
        float *p = bf16 ? zt_f32(&st->master) : zt_f32(&st->params);
        for (int i = 0; i < us->nparams; i++) {
            const zt_param_spec *ps = &us->params[i];
            float wd = ps->decay ? eng->cfg.weight_decay : 0.0f;
            ops->adamw(&ctx->compute, p + ps->offset, g + ps->offset, zt_f32(&st->adam_m) + ps->offset,
                       zt_f32(&st->adam_v) + ps->offset, ps->numel, lr, eng->cfg.beta1, eng->cfg.beta2,
                       eng->cfg.eps, wd, t);
        }
        if (bf16) ops->cast_f32_to_bf16(&ctx->compute, st->params.data, p, us->padded_numel);
    }
    zt_tensor_free(&ws, &ctx->device_mem);
    eng->steps_taken = t;
    return ZT_OK;
}

zt_status zt_engine_digest(zt_engine *eng, char hex[33]) {
    XXH3_state_t *h = XXH3_createState();
    if (!h) return ZT_FAIL(&eng->ctx->err, ZT_ERR_OOM, "digest: cannot allocate hash state");
    XXH3_128bits_reset(h);
    for (int u = 0; u < eng->spec->nunits; u++) {
        zt_unit_state *st = &eng->units[u];
        const zt_tensor *full = eng->cfg.dtype == ZT_BF16 ? &st->master : &st->params;
        XXH3_128bits_update(h, full->data, eng->spec->units[u].numel * sizeof(float));
    }
    XXH128_hash_t d = XXH3_128bits_digest(h);
    XXH3_freeState(h);
    snprintf(hex, 33, "%016llx%016llx", (unsigned long long)d.high64, (unsigned long long)d.low64);
    return ZT_OK;
}
