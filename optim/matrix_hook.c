/* The engine's side of an optimizer's matrix hook (optim/zt_optim.h): the
 * state update writes the unit's owned update direction, the slices of
 * each matrix parameter are gathered on the host, the matrix's owner
 * (parameter index mod world size) transforms the whole matrix, the
 * result goes back to every rank holding a slice of it, and the apply
 * steps the params with it.
 *
 * The exchange is host-staged: the owned slices are all-gathered into a
 * [padded] host copy of the update, and each transformed matrix is
 * broadcast from its owner. That costs the bytes of the whole unit per
 * rank, which is fine for a hook no production optimizer uses yet; a
 * device-side gather to the owner and scatter back is the step up when
 * one does (Muon). At stage 0 every rank owns the whole unit and
 * transforms every matrix itself, exchanging nothing. */
#include <stdlib.h>

#include "zt_optim_engine.h"

/* whole[P] fp32 (host): this rank's owned update at its place, then
 * every rank's slice (stages >= 1). */
static zt_status gather_update(zt_engine *e, int u, const float *upd, float *whole) {
    zt_ctx *ctx = e->ctx;
    size_t lo = owned_lo(e, u), n = owned_numel(e, u);
    ZT_TRY(ctx->be->memcpy_async(ctx->be, whole + lo, upd, n * sizeof(float), ZT_COPY_D2H, &ctx->compute, &ctx->err));
    ZT_TRY(ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err));
    if (full_optim(e)) return ZT_OK;
    return zt_comm_all_gather_host(e->comm, whole, e->spec->units[u].shard_numel * sizeof(float), &ctx->err);
}

/* Every matrix parameter of unit u transformed by its owner and sent to
 * every rank. A transform's failure is reported after the broadcasts, so
 * that the other ranks are not left waiting in one. */
static zt_status transform_matrices(zt_engine *e, int u, float *whole) {
    const zt_optim_matrix_hook *hook = optim_of(e)->matrix_hook;
    const zt_unit_spec *us = &e->spec->units[u];
    zt_ctx *ctx = e->ctx;
    int N = e->comm->world_size, alone = full_optim(e) || N == 1;
    zt_status failed = ZT_OK;
    for (int i = 0; i < us->nparams; i++) {
        const zt_param_spec *ps = &us->params[i];
        size_t rows, cols;
        if (!zt_param_factored(ps, &rows, &cols)) continue; /* vectors keep their update */
        int owner = i % N;
        if (alone || e->comm->rank == owner) {
            zt_status st = hook->transform(&e->cfg, u, i, rows, cols, whole + ps->offset, &ctx->err);
            if (failed == ZT_OK) failed = st;
        }
        if (!alone) ZT_TRY(zt_comm_broadcast(e->comm, whole + ps->offset, ps->numel * sizeof(float), owner, &ctx->err));
    }
    return alone ? failed : zt_comm_agree(e->comm, failed, &ctx->err);
}

zt_status zt_engine_matrix_step(zt_engine *e, int u, const zt_optim_step *s) {
    const zt_optim_matrix_hook *hook = optim_of(e)->matrix_hook;
    zt_ctx *ctx = e->ctx;
    size_t lo = owned_lo(e, u), n = owned_numel(e, u);
    zt_tensor upd = {0}; /* [owned] fp32 device: the update direction */
    ZT_TRY(zt_engine_alloc(e, &upd, ZT_FP32, n, ZT_CAT_WORKSPACE, "matrix update", u));
    float *whole = malloc(e->spec->units[u].padded_numel * sizeof(float) + 4); /* [padded] fp32 host */
    zt_status st = whole ? ZT_OK : ZT_FAIL(&ctx->err, ZT_ERR_OOM, "optimizer: cannot allocate a unit's update");
    if (st == ZT_OK) st = hook->update(e, u, s, zt_f32(&upd));
    /* a replay (ctx->dry) keeps the buffers and skips the host's work on the values */
    if (st == ZT_OK && !ctx->dry) st = gather_update(e, u, zt_f32(&upd), whole);
    if (st == ZT_OK && !ctx->dry) st = transform_matrices(e, u, whole);
    if (st == ZT_OK)
        st = ctx->be->memcpy_async(ctx->be, zt_f32(&upd), whole + lo, n * sizeof(float), ZT_COPY_H2D, &ctx->compute,
                                   &ctx->err);
    if (st == ZT_OK) st = hook->apply(e, u, s, zt_f32(&upd));
    if (st == ZT_OK) st = ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err); /* before whole is freed */
    free(whole);
    zt_tensor_free(&upd, &ctx->device_mem);
    return st;
}
