/* The engine's side of optimizer offload: reduced gradients go device->host,
 * the fused CPU Adam (offload/) updates the host master and m, v, and the new
 * compute-dtype parameters go host->device. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "zt_time.h"
#include "engine_internal.h"
#include "zt_cpu_adam.h"

zt_status zt_engine_offload_grads(zt_engine *e, int u) {
    zt_ctx *ctx = e->ctx;
    zt_unit_state *st = &e->units[u];
    size_t n = owned_numel(e, u), lo = owned_lo(e, u), at = local_index(full_grads(e), lo, shard_lo(e, u));
    if (!st->host_grads.data)
        ZT_TRY(zt_engine_alloc_host(e, &st->host_grads, ZT_FP32, n, ZT_CAT_COMM_BUFFERS, "host grads", u));
    double t0 = zt_now_s();
    size_t d = zt_dtype_size(e->cfg.dtype);
    if (e->cfg.dtype == ZT_FP32) {
        ZT_TRY(ctx->be->memcpy_async(ctx->be, st->host_grads.data, zt_f32(&st->grads) + at, n * 4, ZT_COPY_D2H,
                                     &ctx->compute, &ctx->err));
        ZT_TRY(ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err));
    } else {
        /* bf16 crosses as bf16 (half the bytes) and widens on the host. */
        zt_tensor staging;
        ZT_TRY(zt_engine_alloc_host(e, &staging, ZT_BF16, n, ZT_CAT_COMM_BUFFERS, "grad staging", u));
        zt_status s = ctx->be->memcpy_async(ctx->be, staging.data, (const zt_bf16 *)st->grads.data + at, n * 2,
                                            ZT_COPY_D2H, &ctx->compute, &ctx->err);
        if (s == ZT_OK) s = ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err);
        if (s == ZT_OK) {
            const zt_bf16 *src = staging.data;
            float *dst = zt_f32(&st->host_grads);
            for (size_t i = 0; i < n; i++) dst[i] = zt_bf16_to_f32(src[i]);
        }
        zt_tensor_free(&staging, &ctx->host_mem);
        ZT_TRY(s);
    }
    e->d2h_bytes += (double)(n * d);
    e->d2h_time_s += zt_now_s() - t0;
    char name[48];
    snprintf(name, sizeof name, "d2h grads %s", e->spec->units[u].name);
    zt_trace_span(ctx->trace, name, "offload", 2, t0);
    return ZT_OK;
}

/* One unit's CPU step: AdamW per parameter segment of the owned range on the
 * host buffers, the compute-dtype copy written to host staging, then copied
 * into the device parameters. */
zt_status zt_engine_offload_step_unit(zt_engine *e, int u, float clip, float lr, int t) {
    zt_ctx *ctx = e->ctx;
    zt_unit_state *st = &e->units[u];
    const zt_unit_spec *us = &e->spec->units[u];
    size_t n = owned_numel(e, u), lo = owned_lo(e, u);
    if (!st->host_grads.data) ZT_TRY(zt_engine_offload_grads(e, u)); /* no bucket carried it */
    size_t d = zt_dtype_size(e->cfg.dtype);
    zt_tensor out;
    ZT_TRY(zt_engine_alloc_host(e, &out, e->cfg.dtype, n, ZT_CAT_COMM_BUFFERS, "params out", u));
    float *p = zt_f32(&st->host_master), *g = zt_f32(&st->host_grads);
    float *m = zt_f32(&st->host_m), *v = zt_f32(&st->host_v);
    zt_adam_isa isa = zt_cpu_adam_best_isa();
    for (int i = 0; i < us->nparams; i++) {
        const zt_param_spec *ps = &us->params[i];
        size_t a = ps->offset > lo ? ps->offset : lo;
        size_t b = ps->offset + ps->numel < lo + n ? ps->offset + ps->numel : lo + n;
        if (a >= b) continue;
        size_t k = a - lo;
        float wd = ps->decay ? e->cfg.weight_decay : 0.0f;
        zt_cpu_adam_fused(isa, e->cfg.host_threads, p + k, g + k, m + k, v + k, (char *)out.data + k * d,
                          e->cfg.dtype, b - a, clip, lr, e->cfg.beta1, e->cfg.beta2, e->cfg.eps, wd, t);
    }
    /* Padding never changes, but the device copy is rewritten whole. */
    for (size_t k = 0; k < n; k++) {
        size_t i = lo + k;
        if (i >= us->numel) {
            if (e->cfg.dtype == ZT_FP32) ((float *)out.data)[k] = p[k];
            else ((zt_bf16 *)out.data)[k] = zt_f32_to_bf16(p[k]);
        }
    }
    double t0 = zt_now_s();
    size_t at = local_index(full_params(e), lo, shard_lo(e, u));
    zt_status s = ctx->be->memcpy_async(ctx->be, (char *)st->params.data + at * d, out.data, n * d, ZT_COPY_H2D,
                                        &ctx->compute, &ctx->err);
    if (s == ZT_OK) s = ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err);
    e->h2d_bytes += (double)(n * d);
    e->h2d_time_s += zt_now_s() - t0;
    char name[48];
    snprintf(name, sizeof name, "h2d params %s", us->name);
    zt_trace_span(ctx->trace, name, "offload", 2, t0);
    zt_tensor_free(&out, &ctx->host_mem);
    zt_tensor_free(&st->host_grads, &ctx->host_mem);
    return s;
}
