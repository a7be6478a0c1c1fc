/* A unit's step with low-memory state (--master-dtype none: no fp32
 * master, the bf16 params are stepped; --optim-state-dtype bf16: the
 * optimizer's slots in bf16). The step itself is the optimizer's own,
 * unchanged: the unit's owned params and slots are widened to fp32
 * workspace for its duration, stepped, and rounded back to bf16
 * stochastically, each element with bits keyed by its tensor and unit
 * index (zt_sround.h), never by the rank. The fp32 copies exist for one
 * unit at a time: the persistent state is what shrinks, by 4 bytes per
 * parameter for the master and 2 per slot value. */
#include "zt_optim_engine.h"

static zt_sr_key key_of(const zt_engine *e, int u, int kind, uint64_t first, int t) {
    zt_sr_key k = {e->cfg.sr_seed, (uint64_t)t, zt_sr_tensor(u, kind), first};
    return k;
}

/* Slot i of unit u, src [its values] fp32, rounded into dst [same] bf16,
 * each value keyed by the unit element it belongs to. */
static void narrow_slot(zt_engine *e, int u, int i, uint16_t *dst, const float *src, int t) {
    const zt_ops *ops = e->ctx->be->ops;
    zt_stream *cs = &e->ctx->compute;
    const zt_unit_spec *us = &e->spec->units[u];
    size_t lo = owned_lo(e, u), hi = lo + owned_numel(e, u), at = 0, a, b;
    float wd;
    if (optim_of(e)->slots[i].layout == ZT_SLOT_PER_ELEMENT) {
        ops->cast_sr(cs, dst, src, hi - lo, key_of(e, u, 1 + i, lo, t));
        return;
    }
    for (int k = 0; k < us->nparams; k++) { /* ZT_SLOT_NOT_HIDDEN: the others' elements, in order */
        if (us->params[k].hidden || !param_in_range(e, u, k, lo, hi, &a, &b, &wd)) continue;
        ops->cast_sr(cs, dst + at, src + at, b - a, key_of(e, u, 1 + i, a, t));
        at += b - a;
    }
}

/* fp32 copies of what is kept in bf16: p32 [owned] (master none), s32[i]
 * per slot (bf16 state), swapped in for the optimizer's slots. */
typedef struct {
    zt_tensor p32, s32[ZT_OPTIM_MAX_SLOTS], kept[ZT_OPTIM_MAX_SLOTS];
} widened;

static zt_status widen(zt_engine *e, int u, widened *w, uint16_t *params) {
    zt_ctx *ctx = e->ctx;
    const zt_ops *ops = ctx->be->ops;
    zt_unit_state *ust = &e->units[u];
    if (e->cfg.master_none) {
        ZT_TRY(zt_engine_alloc(e, &w->p32, ZT_FP32, owned_numel(e, u), ZT_CAT_WORKSPACE, "params fp32", u));
        ops->cast(&ctx->compute, w->p32.data, ZT_FP32, params, ZT_BF16, owned_numel(e, u));
    }
    for (int i = 0; e->cfg.state_bf16 && i < optim_of(e)->nslots; i++) {
        zt_tensor *t = &ust->opt_state[i];
        if (!t->data) continue; /* not kept here */
        ZT_TRY(zt_engine_alloc(e, &w->s32[i], ZT_FP32, t->numel, ZT_CAT_WORKSPACE, "state fp32", u));
        ops->cast(&ctx->compute, w->s32[i].data, ZT_FP32, t->data, ZT_BF16, t->numel);
        w->kept[i] = *t;
        *t = w->s32[i];
    }
    return ZT_OK;
}

/* The slots back in place, rounded from their fp32 copies; the copies freed. */
static void narrow(zt_engine *e, int u, widened *w, int t) {
    zt_unit_state *ust = &e->units[u];
    for (int i = optim_of(e)->nslots - 1; i >= 0; i--) {
        if (!w->kept[i].data) continue;
        ust->opt_state[i] = w->kept[i];
        narrow_slot(e, u, i, ust->opt_state[i].data, zt_f32(&w->s32[i]), t);
    }
}

static void free_widened(zt_engine *e, widened *w) {
    zt_mem *mem = &e->ctx->device_mem;
    for (int i = ZT_OPTIM_MAX_SLOTS - 1; i >= 0; i--) zt_tensor_free(&w->s32[i], mem);
    zt_tensor_free(&w->p32, mem);
}

zt_status zt_engine_lowmem_update(zt_engine *e, int u, const zt_optim_step *base) {
    zt_ctx *ctx = e->ctx;
    size_t lo = owned_lo(e, u), n = owned_numel(e, u);
    uint16_t *params = zt_engine_owned_params16(e, u); /* [owned] bf16 */
    widened w = {0};
    zt_optim_step s = *base;
    zt_status st = widen(e, u, &w, params);
    if (st == ZT_OK && e->cfg.master_none) s.p = zt_f32(&w.p32), s.p_at = lo;
    if (st == ZT_OK) st = zt_engine_unit_step(e, u, &s);
    narrow(e, u, &w, s.t); /* the slots go back even after a failure */
    if (st == ZT_OK && e->cfg.master_none)
        ctx->be->ops->cast_sr(&ctx->compute, params, zt_f32(&w.p32), n, key_of(e, u, 0, lo, s.t));
    else if (st == ZT_OK) /* an fp32 master: the params rounded to nearest, as without low-memory state */
        ctx->be->ops->cast(&ctx->compute, params, e->cfg.dtype, s.p + (lo - s.p_at), ZT_FP32, n);
    free_widened(e, &w);
    return st;
}
