/* Reading and writing the engine's state by world slice, for checkpoints. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "zt_quant.h"

/* The buffer holding `kind` and whether it is full (else this rank's owned shard). */
static const zt_tensor *fp32_source(zt_engine *e, int u, zt_state_kind kind, int *is_full) {
    zt_unit_state *st = &e->units[u];
    if (kind == ZT_STATE_MASTER) {
        if (e->cfg.offload) return *is_full = full_optim(e), &st->host_master;
        if (e->cfg.dtype != ZT_FP32) return *is_full = full_optim(e), &st->master;
        return *is_full = full_params(e, u), &st->params;
    }
    *is_full = full_optim(e);
    if (e->cfg.offload) return kind == ZT_STATE_ADAM_M ? &st->host_m : &st->host_v;
    return kind == ZT_STATE_ADAM_M ? &st->adam_m : &st->adam_v;
}

static zt_nvme_array nvme_array_of(zt_state_kind kind) {
    return kind == ZT_STATE_MASTER ? ZT_NVME_MASTER : kind == ZT_STATE_ADAM_M ? ZT_NVME_M : ZT_NVME_V;
}

/* A frozen unit's values are its params (it has no master): dst[S] fp32
 * from this rank's slice of them. */
static zt_status frozen_values(zt_engine *e, int u, float *dst) {
    size_t S = e->spec->units[u].shard_numel;
    if (e->cfg.dtype == ZT_FP32) return zt_engine_get_params_slice(e, u, dst);
    uint16_t *half = malloc(S * sizeof(uint16_t) + 2); /* [S] dtype */
    if (!half) return ZT_FAIL(&e->ctx->err, ZT_ERR_OOM, "engine: cannot allocate a staging buffer");
    zt_status st = zt_engine_get_params_slice(e, u, half);
    for (size_t i = 0; st == ZT_OK && i < S; i++) dst[i] = zt_dtype_load(half, e->cfg.dtype, i);
    free(half);
    return st;
}

/* All of optimizer-state tensor t (device, or the host pool under offload)
 * into host dst. */
static zt_status fetch_state(zt_engine *e, const zt_tensor *t, void *dst) {
    zt_ctx *ctx = e->ctx;
    size_t bytes = zt_tensor_bytes(t);
    if (bytes == 0) return ZT_OK;
    if (e->cfg.offload) {
        memcpy(dst, t->data, bytes);
        return ZT_OK;
    }
    ZT_TRY(ctx->be->memcpy_async(ctx->be, dst, t->data, bytes, ZT_COPY_D2H, &ctx->compute, &ctx->err));
    return ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err);
}

/* Copies n floats to dst (the host pool under offload, else the device). */
static zt_status put_f32(zt_engine *e, void *dst, const void *src, size_t bytes) {
    zt_ctx *ctx = e->ctx;
    if (e->cfg.offload) {
        memcpy(dst, src, bytes);
        return ZT_OK;
    }
    return ctx->be->memcpy_async(ctx->be, dst, src, bytes, ZT_COPY_H2D, &ctx->compute, &ctx->err);
}

/* Copies host src over optimizer-state tensor t (which it fills), waiting
 * for the copy: the caller frees src. */
static zt_status store_state(zt_engine *e, zt_tensor *t, const void *src) {
    size_t bytes = zt_tensor_bytes(t);
    if (bytes == 0) return ZT_OK;
    ZT_TRY(put_f32(e, t->data, src, bytes));
    return e->cfg.offload ? ZT_OK : e->ctx->be->stream_sync(e->ctx->be, &e->ctx->compute, &e->ctx->err);
}

static zt_tensor *state_tensor(zt_engine *e, zt_tensor *dev, zt_tensor *host) { return e->cfg.offload ? host : dev; }

/* 8-bit Adam's m or v over this rank's slice, dequantized into dst[S]. */
static zt_status get_slice_8bit(zt_engine *e, int u, int is_m, float *dst) {
    zt_unit_state *st = &e->units[u];
    const zt_unit_spec *us = &e->spec->units[u];
    size_t lo = owned_lo(e, u), hi = lo + owned_numel(e, u), blocks = zt_owned_qblocks(us, lo, hi);
    size_t slo = shard_lo(e, u), shi = slo + us->shard_numel;
    zt_tensor *codes_t = is_m ? state_tensor(e, &st->adam_m, &st->host_m) : state_tensor(e, &st->adam_v, &st->host_v);
    uint8_t *codes = malloc(zt_tensor_bytes(codes_t) + 1);
    float *scales = malloc((2 * blocks + 1) * sizeof(float)), map[ZT_QMAP_LEN];
    zt_status r = codes && scales ? ZT_OK : ZT_FAIL(&e->ctx->err, ZT_ERR_OOM, "engine: cannot allocate a staging buffer");
    if (r == ZT_OK) r = fetch_state(e, codes_t, codes);
    if (r == ZT_OK) r = fetch_state(e, state_tensor(e, &st->opt_scales, &st->host_scales), scales);
    zt_qmap_fill(map, is_m);
    memset(dst, 0, us->shard_numel * sizeof(float));
    zt_segment_iter it = zt_segments(us, lo, hi);
    zt_segment seg;
    while (r == ZT_OK && zt_next_segment(&it, &seg))
        if (seg.a >= slo && seg.b <= shi)
            zt_dequantize(map, codes + (seg.a - lo), scales + (is_m ? 0 : blocks) + seg.block, seg.b - seg.a,
                          dst + (seg.a - slo));
    for (size_t i = 0; !is_m && i < us->shard_numel; i++) dst[i] *= dst[i]; /* v is kept as sqrt(v) */
    free(codes);
    free(scales);
    return r;
}

/* Adafactor's v over this rank's slice in the checkpoint's encoding
 * (zt_engine.h: a vector's v per element, a matrix's rows then columns of
 * statistics at its start). */
static zt_status get_slice_adafactor_v(zt_engine *e, int u, float *dst) {
    zt_unit_state *st = &e->units[u];
    const zt_unit_spec *us = &e->spec->units[u];
    size_t lo = owned_lo(e, u), hi = lo + owned_numel(e, u), slo = shard_lo(e, u), S = us->shard_numel;
    zt_tensor *vt = state_tensor(e, &st->adam_v, &st->host_v);
    float *v = malloc(zt_tensor_bytes(vt) + 4);
    if (!v) return ZT_FAIL(&e->ctx->err, ZT_ERR_OOM, "engine: cannot allocate a staging buffer");
    zt_status r = fetch_state(e, vt, v);
    memset(dst, 0, S * sizeof(float));
    for (int i = 0; r == ZT_OK && i < us->nparams; i++) {
        const zt_param_spec *ps = &us->params[i];
        size_t a = ps->offset > slo ? ps->offset : slo, b = ps->offset + ps->numel < slo + S ? ps->offset + ps->numel : slo + S;
        size_t rows, cols, first = ps->offset > lo ? ps->offset : lo;
        const float *mine = v + zt_adafactor_v_offset(us, lo, hi, i);
        int factored = zt_param_factored(ps, &rows, &cols);
        for (size_t x = a; x < b; x++) /* x - first: the element's place in a vector's v */
            dst[x - slo] = !factored ? mine[x - first] : x - ps->offset < rows + cols ? mine[x - ps->offset] : 0.0f;
    }
    free(v);
    return r;
}

zt_status zt_engine_get_slice(zt_engine *e, int u, zt_state_kind kind, float *dst) {
    if (u < 0 || u >= e->spec->nunits) return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "no unit %d", u);
    ZT_TRY(zt_engine_delayed_wait(e)); /* the state after every update started */
    if ((kind == ZT_STATE_ADAM_V && e->cfg.optimizer == ZT_OPT_SGD) || (kind != ZT_STATE_MASTER && frozen(e, u))) {
        /* SGD keeps no v, a frozen unit no optimizer state: their blocks read as zeros */
        memset(dst, 0, e->spec->units[u].shard_numel * sizeof(float));
        return ZT_OK;
    }
    if (frozen(e, u)) return frozen_values(e, u, dst);
    zt_optimizer_kind opt = e->cfg.optimizer;
    if (kind != ZT_STATE_MASTER && opt == ZT_OPT_ADAM8BIT) return get_slice_8bit(e, u, kind == ZT_STATE_ADAM_M, dst);
    if (kind == ZT_STATE_ADAM_V && opt == ZT_OPT_ADAFACTOR) return get_slice_adafactor_v(e, u, dst);
    if (kind == ZT_STATE_ADAM_M && opt == ZT_OPT_ADAFACTOR && !e->units[u].adam_m.data && !e->units[u].host_m.data) {
        memset(dst, 0, e->spec->units[u].shard_numel * sizeof(float)); /* no first moment */
        return ZT_OK;
    }
    size_t S = e->spec->units[u].shard_numel, lo = shard_lo(e, u);
    if (e->nvme) /* the NVMe tier's file: this rank's slice of the owned part */
        return zt_engine_nvme_get(e, u, nvme_array_of(kind), lo - owned_lo(e, u), S, dst);
    int full;
    const zt_tensor *src = fp32_source(e, u, kind, &full);
    zt_ctx *ctx = e->ctx;
    const float *from = zt_f32(src) + local_index(full, lo, lo);
    if (e->cfg.offload) { /* the host pool: plain host memory */
        memcpy(dst, from, S * sizeof(float));
        return ZT_OK;
    }
    ZT_TRY(ctx->be->memcpy_async(ctx->be, dst, from, S * sizeof(float), ZT_COPY_D2H, &ctx->compute, &ctx->err));
    return ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err);
}

zt_status zt_engine_get_params_slice(zt_engine *e, int u, void *dst) {
    if (u < 0 || u >= e->spec->nunits) return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "no unit %d", u);
    size_t S = e->spec->units[u].shard_numel, lo = shard_lo(e, u), d = zt_dtype_size(e->cfg.dtype);
    zt_ctx *ctx = e->ctx;
    if (params_in_file(e, u)) return zt_engine_nvme_get(e, u, ZT_NVME_PARAMS, 0, S, dst);
    const char *src = (const char *)e->units[u].params.data + local_index(full_params(e, u), lo, lo) * d;
    ZT_TRY(ctx->be->memcpy_async(ctx->be, dst, src, S * d, params_copy_kind(e, u, ZT_COPY_D2H), &ctx->compute,
                                 &ctx->err));
    return ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err);
}

zt_status zt_engine_owned_range(const zt_engine *e, int u, size_t *lo, size_t *n) {
    if (u < 0 || u >= e->spec->nunits) return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "no unit %d", u);
    *lo = owned_lo(e, u);
    *n = owned_numel(e, u);
    return ZT_OK;
}

zt_status zt_engine_state_span(const zt_engine *e, int u, size_t *lo, size_t *n) {
    if (u < 0 || u >= e->spec->nunits) return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "no unit %d", u);
    size_t a = owned_lo(e, u), b = a + owned_numel(e, u);
    if (e->cfg.optimizer == ZT_OPT_ADAFACTOR) zt_adafactor_span(&e->spec->units[u], a, b, &a, &b);
    *lo = a;
    *n = b - a;
    return ZT_OK;
}

/* 8-bit Adam's m (signed map) or v (sqrt(v), unsigned map) from
 * vals[owned], quantized per segment. sqrt of a square gives back the
 * value it squared, so a saved v quantizes to the codes it came from. */
static zt_status set_owned_8bit(zt_engine *e, int u, const float *given, int is_m) {
    zt_unit_state *st = &e->units[u];
    const zt_unit_spec *us = &e->spec->units[u];
    size_t lo = owned_lo(e, u), hi = lo + owned_numel(e, u), blocks = zt_owned_qblocks(us, lo, hi);
    zt_tensor *codes_t = is_m ? state_tensor(e, &st->adam_m, &st->host_m) : state_tensor(e, &st->adam_v, &st->host_v);
    zt_tensor *scales_t = state_tensor(e, &st->opt_scales, &st->host_scales);
    uint8_t *codes = calloc(zt_tensor_bytes(codes_t) + 1, 1);
    float *scales = malloc((2 * blocks + 1) * sizeof(float)), map[ZT_QMAP_LEN];
    size_t n = hi - lo;
    float *roots = is_m ? NULL : malloc(n * sizeof(float) + 4); /* [owned] sqrt(v) */
    const float *vals = is_m ? given : roots;
    zt_status r = codes && scales && (is_m || roots)
                      ? ZT_OK
                      : ZT_FAIL(&e->ctx->err, ZT_ERR_OOM, "engine: cannot allocate a staging buffer");
    for (size_t i = 0; r == ZT_OK && roots && i < n; i++) roots[i] = sqrtf(given[i]);
    if (r == ZT_OK) r = fetch_state(e, scales_t, scales); /* the other moment's scales stay */
    zt_qmap_fill(map, is_m);
    zt_segment_iter it = zt_segments(us, lo, hi);
    zt_segment seg;
    while (r == ZT_OK && zt_next_segment(&it, &seg))
        zt_quantize(map, vals + (seg.a - lo), seg.b - seg.a, codes + (seg.a - lo), scales + (is_m ? 0 : blocks) + seg.block);
    if (r == ZT_OK) r = store_state(e, codes_t, codes);
    if (r == ZT_OK) r = store_state(e, scales_t, scales);
    free(codes);
    free(scales);
    free(roots);
    return r;
}

/* Adafactor's compact v from v[span] in the checkpoint's encoding. */
static zt_status set_owned_adafactor_v(zt_engine *e, int u, const float *v) {
    zt_unit_state *st = &e->units[u];
    const zt_unit_spec *us = &e->spec->units[u];
    size_t lo = owned_lo(e, u), hi = lo + owned_numel(e, u), span_lo, span_hi;
    zt_adafactor_span(us, lo, hi, &span_lo, &span_hi);
    zt_tensor *vt = state_tensor(e, &st->adam_v, &st->host_v);
    float *mine = malloc(zt_tensor_bytes(vt) + 4);
    if (!mine) return ZT_FAIL(&e->ctx->err, ZT_ERR_OOM, "engine: cannot allocate a staging buffer");
    for (int i = 0; i < us->nparams; i++) {
        const zt_param_spec *ps = &us->params[i];
        if (ps->offset >= hi || ps->offset + ps->numel <= lo) continue;
        size_t rows, cols, at = zt_adafactor_v_offset(us, lo, hi, i);
        if (zt_param_factored(ps, &rows, &cols)) {
            memcpy(mine + at, v + (ps->offset - span_lo), (rows + cols) * sizeof(float));
            continue;
        }
        size_t a = ps->offset > lo ? ps->offset : lo, b = ps->offset + ps->numel < hi ? ps->offset + ps->numel : hi;
        memcpy(mine + at, v + (a - span_lo), (b - a) * sizeof(float));
    }
    zt_status r = store_state(e, vt, mine);
    free(mine);
    return r;
}

/* The optimizer's part of zt_engine_set_owned (m, v NULL: left as they are). */
static zt_status set_owned_state(zt_engine *e, int u, const float *m, const float *v) {
    size_t on = owned_numel(e, u);
    int full;
    if (e->nvme) {
        if (m) ZT_TRY(zt_engine_nvme_put(e, u, ZT_NVME_M, 0, on, m));
        return v && e->cfg.optimizer == ZT_OPT_ADAMW ? zt_engine_nvme_put(e, u, ZT_NVME_V, 0, on, v) : ZT_OK;
    }
    if (e->cfg.optimizer == ZT_OPT_ADAM8BIT) {
        if (m) ZT_TRY(set_owned_8bit(e, u, m, 1));
        return v ? set_owned_8bit(e, u, v, 0) : ZT_OK;
    }
    const zt_tensor *mt = fp32_source(e, u, ZT_STATE_ADAM_M, &full), *vt = fp32_source(e, u, ZT_STATE_ADAM_V, &full);
    if (m && mt->data) ZT_TRY(put_f32(e, mt->data, m, on * sizeof(float))); /* Adafactor may keep no m */
    if (e->cfg.optimizer == ZT_OPT_ADAFACTOR) return v ? set_owned_adafactor_v(e, u, v) : ZT_OK;
    if (v && vt->data) ZT_TRY(put_f32(e, vt->data, v, on * sizeof(float))); /* SGD has no v */
    return ZT_OK;
}

zt_status zt_engine_set_owned(zt_engine *e, int u, const float *master, const float *m, const float *v) {
    if (u < 0 || u >= e->spec->nunits) return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "no unit %d", u);
    ZT_TRY(zt_engine_delayed_wait(e));
    zt_ctx *ctx = e->ctx;
    zt_unit_state *st = &e->units[u];
    size_t lo = shard_lo(e, u), olo = owned_lo(e, u), on = owned_numel(e, u);
    size_t pat = local_index(full_params(e, u), olo, lo); /* the owned part's place in params */
    int full;
    int trained = !frozen(e, u); /* a frozen unit has its params only */
    if (trained) ZT_TRY(set_owned_state(e, u, m, v));
    const zt_tensor *master_t = fp32_source(e, u, ZT_STATE_MASTER, &full);
    if (e->nvme) {
        if (trained) ZT_TRY(zt_engine_nvme_put(e, u, ZT_NVME_MASTER, 0, on, master));
    } else if (master_t == &st->params) /* fp32 without offload: the params are the master values */
        ZT_TRY(ctx->be->memcpy_async(ctx->be, zt_f32(&st->params) + pat, master, on * sizeof(float), ZT_COPY_H2D,
                                     &ctx->compute, &ctx->err));
    else if (trained) ZT_TRY(put_f32(e, master_t->data, master, on * sizeof(float)));
    /* Compute params of the owned part from the master values (16-bit
     * values rounded on the host, as at init); the rest arrives by
     * zt_engine_gather_params. fp32 without offload wrote them above. */
    if (e->cfg.dtype == ZT_FP32)
        return master_t == &st->params ? ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err)
                                       : zt_engine_set_owned_params(e, u, master);
    uint16_t *half = malloc(on * sizeof(uint16_t)); /* [on] dtype */
    if (!half) return ZT_FAIL(&ctx->err, ZT_ERR_OOM, "engine: cannot allocate a staging buffer");
    for (size_t k = 0; k < on; k++) zt_dtype_store(half, e->cfg.dtype, k, master[k]);
    zt_status s = zt_engine_set_owned_params(e, u, half);
    free(half);
    return s;
}

zt_status zt_engine_gather_params(zt_engine *e) {
    if (full_optim(e)) return ZT_OK; /* stage 0 owns all */
    size_t d = zt_dtype_size(e->cfg.dtype);
    for (int u = 0; u < e->spec->nunits; u++)
        if (full_params(e, u)) /* stages 1-2, stage 3's persistent units; the rest keep their shard */
            ZT_TRY(zt_coll_all_gather_after(e, e->units[u].params.data, e->spec->units[u].shard_numel * d,
                                           &e->ctx->compute, u));
    return e->ctx->be->stream_sync(e->ctx->be, &e->ctx->compute, &e->ctx->err);
}

zt_status zt_engine_set_owned_params(zt_engine *e, int u, const void *vals) {
    if (u < 0 || u >= e->spec->nunits) return ZT_FAIL(&e->ctx->err, ZT_ERR_INVALID, "no unit %d", u);
    zt_ctx *ctx = e->ctx;
    size_t d = zt_dtype_size(e->cfg.dtype), olo = owned_lo(e, u);
    size_t pat = local_index(full_params(e, u), olo, shard_lo(e, u));
    if (params_in_file(e, u)) return zt_engine_nvme_put(e, u, ZT_NVME_PARAMS, 0, owned_numel(e, u), vals);
    ZT_TRY(ctx->be->memcpy_async(ctx->be, (char *)e->units[u].params.data + pat * d, vals, owned_numel(e, u) * d,
                                 params_copy_kind(e, u, ZT_COPY_H2D), &ctx->compute, &ctx->err));
    return ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err);
}

zt_engine_state_counters zt_engine_get_counters(const zt_engine *e) {
    zt_engine_state_counters p = {e->steps_taken, e->scaler, e->params_behind};
    return p;
}

void zt_engine_set_counters(zt_engine *e, const zt_engine_state_counters *p) {
    e->steps_taken = p->steps_taken;
    e->scaler = p->scaler;
    e->params_behind = p->params_behind && e->cfg.offload_delay;
}
