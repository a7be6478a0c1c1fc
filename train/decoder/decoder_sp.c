/* Ulysses' two exchanges around attention (zt_decoder.h): the sequence
 * split of a [B, T, W] activation traded for a head split [B, T_full, W/P]
 * and back, through one all-to-all in the sequence-parallel group. Packing
 * and unpacking are strided copies on the compute stream; the all-to-all
 * waits for them and the compute stream waits for it. */
#include "decoder_internal.h"

#include <stdio.h>
#include <string.h>

#include "zt_comm.h"

zt_act_shape zt_decoder_shape(const zt_decoder *d) {
    return (zt_act_shape){d->B, d->T, d->T_full, d->sp ? d->sp->P : 1};
}

zt_status zt_decoder_model_set_seq_parallel(void *self, zt_seq_parallel *sp, zt_error *err) {
    zt_decoder *d = self;
    if (sp && sp->P > 1 && d->cfg.heads % sp->P != 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--seq-parallel %d: heads (%d) must divide by it (each rank runs heads / "
                       "P of them)", sp->P, d->cfg.heads);
    int kv = d->cfg.kv_heads ? d->cfg.kv_heads : d->cfg.heads;
    if (sp && sp->P > 1 && kv % sp->P != 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--seq-parallel %d: kv_heads (%d) must divide by it (the key/value heads "
                       "are split, not replicated)", sp->P, kv);
    d->sp = sp && sp->P > 1 ? sp : NULL;
    return ZT_OK;
}

/* What one exchange moves: per peer j its byte count and offset on each side. */
typedef struct {
    size_t send_n[ZT_MAX_SP], send_off[ZT_MAX_SP], recv_n[ZT_MAX_SP], recv_off[ZT_MAX_SP];
    size_t send_total, recv_total;
} exchange;

/* The exchange of parts of widths w[nparts] (their sum W per position):
 * to the head split (to_heads) this rank sends every group j its T
 * positions, [B, T, W/P], and receives its own group of every rank's span,
 * [B, len_j, W/P]; back, the reverse. Returns W. */
static size_t lay_out(const zt_decoder *d, int nparts, const size_t *w, int to_heads, exchange *x) {
    int P = d->sp->P;
    size_t e = zt_dtype_size(d->act), W = 0;
    for (int k = 0; k < nparts; k++) W += w[k];
    x->send_total = x->recv_total = 0;
    for (int j = 0; j < P; j++) {
        int t0, len;
        zt_seq_span(d->T_full, P, j, &t0, &len);
        size_t mine = (size_t)d->B * d->T * (W / P) * e, theirs = (size_t)d->B * len * (W / P) * e;
        x->send_n[j] = to_heads ? mine : theirs, x->send_off[j] = x->send_total, x->send_total += x->send_n[j];
        x->recv_n[j] = to_heads ? theirs : mine, x->recv_off[j] = x->recv_total, x->recv_total += x->recv_n[j];
    }
    return W;
}

/* Sends, waits for, and leaves in recv what send holds, laid out as x. */
static zt_status all_to_all(zt_decoder *d, zt_ctx *ctx, zt_stream *s, const zt_tensor *send, zt_tensor *recv,
                            const exchange *x) {
    zt_comm *g = d->sp->group;
    zt_comm_handle h;
    memset(&h, 0, sizeof h);
    ZT_TRY(zt_comm_all_to_all_start(g, send->data, x->send_n, x->send_off, recv->data, x->recv_n, x->recv_off,
                                    s->handle, &h, &ctx->err));
    snprintf(h.what, sizeof h.what, "sequence-parallel exchange"); /* the start clears the handle */
    return zt_comm_wait_stream(g, &h, s->handle, &ctx->err);
}

static zt_status alloc_pair(zt_ctx *ctx, zt_tensor *send, zt_tensor *recv, const exchange *x) {
    ZT_TRY(decoder_alloc_bytes(ctx, send, x->send_total, ZT_CAT_COMM_BUFFERS, "seq-parallel send"));
    return decoder_alloc_bytes(ctx, recv, x->recv_total, ZT_CAT_COMM_BUFFERS, "seq-parallel recv");
}

static zt_status seq_to_heads(zt_decoder *d, zt_ctx *ctx, zt_stream *s, char *dst, const char *src, int nparts,
                              const size_t *w) {
    int P = d->sp->P, B = d->B, T = d->T, Tf = d->T_full;
    size_t e = zt_dtype_size(d->act);
    exchange x;
    size_t W = lay_out(d, nparts, w, 1, &x), Wp = W / (size_t)P;
    zt_tensor send = {0}, recv = {0};
    zt_status st = alloc_pair(ctx, &send, &recv, &x);
    for (int j = 0; st == ZT_OK && j < P; j++)
        for (size_t k = 0, from = 0, to = 0; st == ZT_OK && (int)k < nparts; from += w[k], to += w[k] / P, k++)
            st = zt_memcpy2d_async(ctx->be, (char *)send.data + x.send_off[j] + to * e, Wp * e,
                                   src + (from + (size_t)j * (w[k] / P)) * e, W * e, w[k] / P * e, (size_t)B * T,
                                   ZT_COPY_D2D, s, &ctx->err);
    if (st == ZT_OK) st = all_to_all(d, ctx, s, &send, &recv, &x);
    for (int i = 0; st == ZT_OK && i < P; i++) {
        int t0, len;
        zt_seq_span(Tf, P, i, &t0, &len);
        st = zt_memcpy2d_async(ctx->be, dst + (size_t)t0 * Wp * e, (size_t)Tf * Wp * e,
                               (char *)recv.data + x.recv_off[i], (size_t)len * Wp * e, (size_t)len * Wp * e,
                               (size_t)B, ZT_COPY_D2D, s, &ctx->err);
    }
    zt_tensor_free(&send, &ctx->device_mem);
    zt_tensor_free(&recv, &ctx->device_mem);
    return st;
}

static zt_status heads_to_seq(zt_decoder *d, zt_ctx *ctx, zt_stream *s, char *dst, const char *src, int nparts,
                              const size_t *w) {
    int P = d->sp->P, B = d->B, T = d->T, Tf = d->T_full;
    size_t e = zt_dtype_size(d->act);
    exchange x;
    size_t W = lay_out(d, nparts, w, 0, &x), Wp = W / (size_t)P;
    zt_tensor send = {0}, recv = {0};
    zt_status st = alloc_pair(ctx, &send, &recv, &x);
    for (int i = 0; st == ZT_OK && i < P; i++) {
        int t0, len;
        zt_seq_span(Tf, P, i, &t0, &len);
        st = zt_memcpy2d_async(ctx->be, (char *)send.data + x.send_off[i], (size_t)len * Wp * e,
                               src + (size_t)t0 * Wp * e, (size_t)Tf * Wp * e, (size_t)len * Wp * e, (size_t)B,
                               ZT_COPY_D2D, s, &ctx->err);
    }
    if (st == ZT_OK) st = all_to_all(d, ctx, s, &send, &recv, &x);
    for (int j = 0; st == ZT_OK && j < P; j++)
        for (size_t k = 0, from = 0, to = 0; st == ZT_OK && (int)k < nparts; from += w[k], to += w[k] / P, k++)
            st = zt_memcpy2d_async(ctx->be, dst + (from + (size_t)j * (w[k] / P)) * e, W * e,
                                   (char *)recv.data + x.recv_off[j] + to * e, Wp * e, w[k] / P * e, (size_t)B * T,
                                   ZT_COPY_D2D, s, &ctx->err);
    zt_tensor_free(&send, &ctx->device_mem);
    zt_tensor_free(&recv, &ctx->device_mem);
    return st;
}

/* Without a group the two splits are the same tensor: a copy. */
static void plain_copy(zt_decoder *d, zt_ctx *ctx, zt_stream *s, void *dst, const void *src, int nparts,
                       const size_t *w) {
    size_t W = 0;
    for (int k = 0; k < nparts; k++) W += w[k];
    zt_status st = ctx->be->memcpy_async(ctx->be, dst, src, (size_t)d->B * d->T * W * zt_dtype_size(d->act),
                                         ZT_COPY_D2D, s, &ctx->err);
    if (st != ZT_OK && d->sp_status == ZT_OK) d->sp_status = st;
}

void zt_decoder_seq_to_heads(zt_decoder *d, zt_stream *s, void *dst, const void *src, int nparts,
                             const size_t *widths) {
    zt_ctx *ctx = d->ctx;
    if (d->sp_status != ZT_OK) return;
    if (!d->sp) return plain_copy(d, ctx, s, dst, src, nparts, widths);
    d->sp_status = seq_to_heads(d, ctx, s, dst, src, nparts, widths);
}

void zt_decoder_heads_to_seq(zt_decoder *d, zt_stream *s, void *dst, const void *src, int nparts,
                             const size_t *widths) {
    zt_ctx *ctx = d->ctx;
    if (d->sp_status != ZT_OK) return;
    if (!d->sp) return plain_copy(d, ctx, s, dst, src, nparts, widths);
    d->sp_status = heads_to_seq(d, ctx, s, dst, src, nparts, widths);
}
