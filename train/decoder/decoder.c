/* The decoder scaffold's walk: forward over embedding, blocks and head,
 * backward in reverse, with the recompute policies' keep and replay. The
 * family's kernels run through d->ops (zt_decoder.h). */
#include "decoder_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zt_time.h"

zt_status zt_decoder_init(zt_decoder *d, const zt_decoder_ops *ops, void *family, const zt_model_settings *cfg,
                          zt_error *err) {
    memset(d, 0, sizeof *d);
    d->ops = ops;
    d->family = family;
    d->cfg = *cfg;
    int L = cfg->layers;
    if (L + 2 > ZT_MAX_UNITS) return ZT_FAIL(err, ZT_ERR_INVALID, "too many layers (%d)", L);
    size_t n = (size_t)(L > 0 ? L : 1);
    d->spec = calloc(1, sizeof *d->spec);
    d->block_acts = calloc(n, sizeof *d->block_acts);
    d->block_out = calloc(n, sizeof *d->block_out);
    d->input_host = calloc(n, sizeof *d->input_host);
    d->input_copy = calloc(n, sizeof *d->input_copy);
    if (!d->spec || !d->block_acts || !d->block_out || !d->input_host || !d->input_copy)
        return ZT_FAIL(err, ZT_ERR_OOM, "decoder: cannot allocate tables");
    if (cfg->offload_activations && cfg->recompute.kind != ZT_RECOMPUTE_FULL)
        return ZT_FAIL(err, ZT_ERR_INVALID, "activation offload needs full recomputation: only full keeps one input "
                       "per block, the tensor it moves to the host");
    return ZT_OK;
}

void zt_decoder_destroy(zt_decoder *d) {
    decoder_staging_free(&d->losses_host);
    decoder_staging_free(&d->ids_host);
    free(d->loss_micro_n);
    free(d->spec);
    free(d->block_acts);
    free(d->block_out);
    free(d->input_host);
    free(d->input_copy);
    d->loss_micro_n = NULL;
    d->spec = NULL;
    d->block_acts = d->block_out = d->input_host = NULL;
    d->input_copy = NULL;
}

zt_status zt_decoder_add_unit(zt_decoder *d, const char *name, int *unit, zt_error *err) {
    return zt_spec_add_unit(d->spec, name, unit, err);
}

zt_status zt_decoder_add_param(zt_decoder *d, int unit, const char *name, int ndim, int64_t d0, int64_t d1,
                               int decay, int *param, zt_error *err) {
    int64_t shape[2] = {d0, d1};
    return zt_spec_add_param(d->spec, unit, name, ndim, shape, decay, param, err);
}

zt_status zt_decoder_set_hidden(zt_decoder *d, int unit, int param, int nparts, const int64_t *rows, zt_error *err) {
    return zt_spec_set_hidden(d->spec, unit, param, nparts, rows, err);
}

size_t zt_decoder_place(size_t *o, size_t n, size_t size) {
    size_t at = (*o + 3) & ~(size_t)3;
    *o = at + n * size;
    return at;
}

size_t zt_decoder_input_bytes(int d_model, int B, int T, zt_dtype act) {
    return ((size_t)B * T * d_model * zt_dtype_size(act) + 3) / 4 * 4;
}

const void *zt_decoder_param(const zt_decoder *d, const void *unit_base, int unit, int param) {
    return (const char *)unit_base + d->spec->units[unit].params[param].offset * zt_dtype_size(d->act);
}

float *zt_decoder_grad(const zt_decoder *d, float *unit_base, int unit, int param) {
    return unit_base + d->spec->units[unit].params[param].offset;
}

void zt_decoder_zero(zt_stream *s, void *p, size_t n, size_t size) {
    zt_error ignore = {0}; /* a memset on a valid buffer; the next sync reports device errors */
    s->be->memset_async(s->be, p, 0, n * size, s, &ignore);
}

zt_model_stats zt_decoder_stats(const zt_decoder *d) {
    zt_model_stats st = {d->recompute_time_s, d->moved};
    return st;
}

/* Byte offset `off` into tensor t. */
static char *at(const zt_tensor *t, size_t off) { return (char *)t->data + off; }

static zt_keep block_keep(const zt_decoder *d, int l) { return zt_recompute_keep(&d->cfg.recompute, l); }

/* Bytes block l keeps from its forward to its backward under its policy. */
static size_t kept_bytes(const zt_decoder *d, zt_keep keep) {
    if (keep == ZT_KEEP_INPUT) return zt_decoder_input_bytes(d->cfg.d_model, d->B, d->T, d->act);
    size_t from[ZT_DECODER_MAX_PIECES], to[ZT_DECODER_MAX_PIECES], n[ZT_DECODER_MAX_PIECES], total = 0;
    if (keep == ZT_KEEP_GEMM_OUTPUTS) d->ops->kept_pieces(d, from, to, n, &total);
    else total = d->ops->block_acts_bytes(d);
    return total;
}

/* Output [B,T,C] act of block l: in what it keeps, or in its activations
 * while they exist. Under selective recomputation the output is one of the
 * kept pieces: the one taken from the activations' output offset. */
static const void *block_output(const zt_decoder *d, int l) {
    size_t out = d->ops->block_output_offset(d);
    if (d->block_acts[l].data) return at(&d->block_acts[l], out);
    if (block_keep(d, l) == ZT_KEEP_INPUT) return d->block_out[l].data;
    size_t from[ZT_DECODER_MAX_PIECES], to[ZT_DECODER_MAX_PIECES], n[ZT_DECODER_MAX_PIECES], total;
    int pieces = d->ops->kept_pieces(d, from, to, n, &total);
    for (int i = 0; i < pieces; i++)
        if (from[i] == out) return at(&d->block_out[l], to[i]);
    return NULL; /* a family whose kept pieces miss its output: zt_decoder_forward refuses it */
}

/* Input [B,T,C] act of block l. */
static const void *block_input(const zt_decoder *d, int l) {
    return l > 0 ? block_output(d, l - 1) : d->encoded.data;
}

void zt_decoder_free_activations(zt_decoder *d, zt_engine *eng) {
    zt_ctx *ctx = zt_engine_context(eng);
    zt_mem *mem = &ctx->device_mem;
    /* After an error a kept input's copy may still be in flight: its buffers
     * go only once it is done. */
    for (int l = 0; d->input_copy && l < d->cfg.layers; l++) {
        zt_error ignore = {0};
        (void)zt_event_sync(ctx->be, d->input_copy[l], &ignore);
        zt_event_destroy(ctx->be, d->input_copy[l]);
        d->input_copy[l] = NULL;
    }
    for (int l = 0; d->input_host && l < d->cfg.layers; l++) zt_tensor_free(&d->input_host[l], &ctx->host_mem);
    zt_tensor_free(&d->tokens, mem);
    zt_tensor_free(&d->targets, mem);
    zt_tensor_free(&d->encoded, mem);
    for (int l = 0; d->block_acts && l < d->cfg.layers; l++) zt_tensor_free(&d->block_acts[l], mem);
    for (int l = 0; d->block_out && l < d->cfg.layers; l++) zt_tensor_free(&d->block_out[l], mem);
    zt_tensor_free(&d->head_acts, mem);
}

/* After block l's forward: under recomputation its activations give way to
 * what it keeps (its output, or its kept pieces). */
static zt_status keep_block(zt_decoder *d, zt_ctx *ctx, int l) {
    zt_keep keep = block_keep(d, l);
    if (keep == ZT_KEEP_ALL) return ZT_OK;
    char label[32];
    snprintf(label, sizeof label, keep == ZT_KEEP_INPUT ? "block%d out" : "block%d kept", l);
    ZT_TRY(decoder_alloc_bytes(ctx, &d->block_out[l], kept_bytes(d, keep), ZT_CAT_ACTIVATIONS, label));
    size_t from[ZT_DECODER_MAX_PIECES] = {d->ops->block_output_offset(d)}, to[ZT_DECODER_MAX_PIECES] = {0};
    size_t n[ZT_DECODER_MAX_PIECES] = {(size_t)d->B * d->T * d->cfg.d_model * zt_dtype_size(d->act)}, total;
    int pieces = keep == ZT_KEEP_INPUT ? 1 : d->ops->kept_pieces(d, from, to, n, &total);
    for (int i = 0; i < pieces; i++)
        ZT_TRY(ctx->be->memcpy_async(ctx->be, at(&d->block_out[l], to[i]), at(&d->block_acts[l], from[i]), n[i],
                                     ZT_COPY_D2D, &ctx->compute, &ctx->err));
    zt_tensor_free(&d->block_acts[l], &ctx->device_mem);
    return ZT_OK;
}

/* A failure inside the family's kernels (an exchange of sequence
 * parallelism), taken once. */
static zt_status kernels_status(zt_decoder *d) {
    zt_status st = d->sp_status;
    d->sp_status = ZT_OK;
    return st;
}

/* Before block l's backward: its activations again, replayed from its input
 * x (the whole forward), or from the pieces it kept (the rest only). Same
 * kernels, same inputs: the same bits. What the block kept goes as soon as
 * it is no longer read: its output (the next block's input, whose backward
 * is done) before the replay, its pieces once copied into place. */
static zt_status replay_block(zt_decoder *d, zt_ctx *ctx, const zt_ops *ops, int l, const void *x, const void *w,
                              int u) {
    zt_stream *s = &ctx->compute;
    if (block_keep(d, l) == ZT_KEEP_INPUT) zt_tensor_free(&d->block_out[l], &ctx->device_mem);
    char label[32];
    snprintf(label, sizeof label, "block%d acts", l);
    ZT_TRY(decoder_alloc_bytes(ctx, &d->block_acts[l], d->ops->block_acts_bytes(d), ZT_CAT_ACTIVATIONS, label));
    char *acts = d->block_acts[l].data;
    if (block_keep(d, l) == ZT_KEEP_INPUT) {
        d->ops->block_forward(d, s, ops, acts, x, w, u);
        return kernels_status(d);
    }
    size_t from[ZT_DECODER_MAX_PIECES], to[ZT_DECODER_MAX_PIECES], n[ZT_DECODER_MAX_PIECES], total;
    int pieces = d->ops->kept_pieces(d, from, to, n, &total);
    for (int i = 0; i < pieces; i++)
        ZT_TRY(ctx->be->memcpy_async(ctx->be, acts + from[i], at(&d->block_out[l], to[i]), n[i], ZT_COPY_D2D, s,
                                     &ctx->err));
    zt_tensor_free(&d->block_out[l], &ctx->device_mem);
    d->ops->block_replay(d, s, ops, acts, x, w, u);
    return kernels_status(d);
}

/* The token ids through pinned staging onto the device: from the caller's
 * pageable arrays a copy would first wait for everything queued. */
static zt_status ids_to_device(zt_decoder *d, zt_ctx *ctx, const int32_t *tokens, const int32_t *targets, size_t N) {
    zt_stream *s = &ctx->compute;
    ZT_TRY(decoder_alloc_bytes(ctx, &d->tokens, N * sizeof(int32_t), ZT_CAT_OTHER, "input tokens"));
    ZT_TRY(decoder_alloc_bytes(ctx, &d->targets, N * sizeof(int32_t), ZT_CAT_OTHER, "target tokens"));
    int32_t *ids = NULL; /* set by decoder_staging_take */
    ZT_TRY(decoder_staging_take(&d->ids_host, ctx, s, 2 * N * sizeof(int32_t), (void **)&ids));
    memcpy(ids, tokens, N * sizeof(int32_t));
    memcpy(ids + N, targets, N * sizeof(int32_t));
    ZT_TRY(ctx->be->memcpy_async(ctx->be, d->tokens.data, ids, N * 4, ZT_COPY_H2D, s, &ctx->err));
    return ctx->be->memcpy_async(ctx->be, d->targets.data, ids + N, N * 4, ZT_COPY_H2D, s, &ctx->err);
}

/* The blocks' forward, each gathered, run, released and reduced to what it keeps. */
static zt_status blocks_forward(zt_decoder *d, zt_engine *eng, zt_ctx *ctx, const zt_ops *ops) {
    int L = d->cfg.layers;
    size_t acts_bytes = d->ops->block_acts_bytes(d);
    for (int l = 0; l < L; l++) {
        int u = d->first_block + l;
        const void *w;
        char label[32];
        snprintf(label, sizeof label, "block%d acts", l);
        ZT_TRY(decoder_alloc_bytes(ctx, &d->block_acts[l], acts_bytes, ZT_CAT_ACTIVATIONS, label));
        ZT_TRY(zt_engine_gather(eng, u, &w));
        d->ops->block_forward(d, &ctx->compute, ops, d->block_acts[l].data, block_input(d, l), w, u);
        ZT_TRY(kernels_status(d));
        ZT_TRY(zt_engine_release(eng, u));
        ZT_TRY(decoder_input_retire(d, ctx, l));
        ZT_TRY(keep_block(d, ctx, l));
        if (l + 1 < L) ZT_TRY(decoder_copy_input(d, ctx, l + 1, ZT_COPY_D2H));
    }
    return ZT_OK;
}

/* The head over the last block's output; its per-position losses queued. */
static zt_status head_forward(zt_decoder *d, zt_engine *eng, zt_ctx *ctx, const zt_ops *ops) {
    int L = d->cfg.layers;
    const void *x = L > 0 ? block_output(d, L - 1) : d->encoded.data; /* [B,T,C] act */
    const void *w, *wemb = NULL;
    ZT_TRY(decoder_alloc_bytes(ctx, &d->head_acts, d->ops->head_acts_bytes(d), ZT_CAT_ACTIVATIONS, "head acts"));
    ZT_TRY(zt_engine_gather(eng, d->unit_head, &w));
    if (d->cfg.tied) ZT_TRY(zt_engine_gather(eng, d->unit_embed, &wemb));
    d->ops->head_forward(d, &ctx->compute, ops, d->head_acts.data, x, w, wemb, d->targets.data);
    if (d->cfg.tied) ZT_TRY(zt_engine_release(eng, d->unit_embed));
    ZT_TRY(zt_engine_release(eng, d->unit_head));
    /* The per-position losses come to the host and are added in position
     * order, so the mean is reproducible. */
    const float *losses = (const float *)at(&d->head_acts, d->ops->head_losses_offset(d)); /* [B*T] fp32 */
    return decoder_queue_losses(d, ctx, &ctx->compute, losses, (size_t)d->B * d->T);
}

zt_status zt_decoder_forward(zt_decoder *d, zt_engine *eng, const int32_t *tokens, const int32_t *targets, int B,
                             int T, float *mean_loss) {
    zt_ctx *ctx = zt_engine_context(eng);
    const zt_ops *ops = zt_engine_kernels(eng);
    if (B <= 0 || T <= 0 || T > d->cfg.seq_len)
        return ZT_FAIL(&ctx->err, ZT_ERR_INVALID, "forward: bad batch shape B=%d T=%d (seq_len %d)", B, T,
                       d->cfg.seq_len);
    if (mean_loss && d->loss_micros > 0)
        return ZT_FAIL(&ctx->err, ZT_ERR_INVALID,
                       "forward: %d micro-batch loss(es) still pending; read them with take_losses first",
                       d->loss_micros);
    zt_decoder_free_activations(d, eng);
    d->ctx = ctx;
    d->B = B;
    d->T = T;
    d->T_full = T;
    d->t0 = 0;
    if (d->sp) {
        int len;
        d->T_full = d->sp->T;
        zt_seq_span(d->T_full, d->sp->P, d->sp->index, &d->t0, &len);
        if (len != T || d->T_full > d->cfg.seq_len)
            return ZT_FAIL(&ctx->err, ZT_ERR_INVALID, "forward: this rank's span of a %d-position sequence over %d "
                           "ranks is %d positions, not %d", d->T_full, d->sp->P, len, T);
    }
    d->act = zt_engine_compute_dtype(eng);
    size_t N = (size_t)B * T;
    ZT_TRY(ids_to_device(d, ctx, tokens, targets, N));
    const void *w;
    ZT_TRY(zt_engine_begin_pass(eng, ZT_PASS_FORWARD));
    ZT_TRY(decoder_alloc_bytes(ctx, &d->encoded, N * d->cfg.d_model * zt_dtype_size(d->act), ZT_CAT_ACTIVATIONS,
                               "embedding out"));
    ZT_TRY(zt_engine_gather(eng, d->unit_embed, &w));
    d->ops->embed_forward(d, &ctx->compute, ops, d->encoded.data, d->tokens.data, w);
    ZT_TRY(zt_engine_release(eng, d->unit_embed));
    if (d->cfg.layers > 0) ZT_TRY(decoder_copy_input(d, ctx, 0, ZT_COPY_D2H));
    ZT_TRY(blocks_forward(d, eng, ctx, ops));
    ZT_TRY(head_forward(d, eng, ctx, ops));
    if (!mean_loss) return ZT_OK;
    double sum = 0.0;
    ZT_TRY(zt_decoder_take_losses(d, ctx, &sum));
    *mean_loss = (float)sum;
    return ZT_OK;
}

/* The head's backward from the last block's output xL: leaves its
 * gradient in ws and frees the head's activations. */
static zt_status head_backward(zt_decoder *d, zt_engine *eng, const void *xL, float dloss, char *ws) {
    zt_ctx *ctx = zt_engine_context(eng);
    const void *w, *wemb = NULL;
    float *dw, *dwemb = NULL;
    ZT_TRY(zt_engine_gather(eng, d->unit_head, &w));
    ZT_TRY(zt_engine_grad_buffer(eng, d->unit_head, &dw));
    if (d->cfg.tied) {
        ZT_TRY(zt_engine_gather(eng, d->unit_embed, &wemb));
        ZT_TRY(zt_engine_grad_buffer(eng, d->unit_embed, &dwemb));
    }
    d->ops->head_backward(d, &ctx->compute, zt_engine_kernels(eng), d->head_acts.data, xL, w, dw, wemb, dwemb,
                          d->targets.data, dloss, ws);
    if (d->cfg.tied) ZT_TRY(zt_engine_release(eng, d->unit_embed));
    ZT_TRY(zt_engine_release(eng, d->unit_head));
    ZT_TRY(zt_engine_grads_ready(eng, d->unit_head));
    zt_tensor_free(&d->head_acts, &ctx->device_mem);
    return ZT_OK;
}

/* Block l's unit through backward: gathered, its activations replayed if it
 * did not keep them all, its gradients handed to the engine. */
static zt_status block_unit_backward(zt_decoder *d, zt_engine *eng, int l, char *ws) {
    zt_ctx *ctx = zt_engine_context(eng);
    const zt_ops *ops = zt_engine_kernels(eng);
    int u = d->first_block + l;
    if (l > 0) ZT_TRY(decoder_copy_input(d, ctx, l - 1, ZT_COPY_H2D)); /* comes back while this block's runs */
    ZT_TRY(decoder_input_land(d, ctx, l));
    const void *x = block_input(d, l); /* [N,C] act */
    const void *w;
    float *dw;
    ZT_TRY(zt_engine_gather(eng, u, &w));
    if (block_keep(d, l) != ZT_KEEP_ALL) {
        /* Replay with the parameters just gathered for backward (one
         * gather at stage 3, not two). Host time: the replay itself on
         * the CPU; on a GPU the time to enqueue it. */
        double t0 = zt_now_s();
        ZT_TRY(replay_block(d, ctx, ops, l, x, w, u));
        d->recompute_time_s += zt_now_s() - t0;
    }
    ZT_TRY(zt_engine_grad_buffer(eng, u, &dw));
    d->ops->block_backward(d, &ctx->compute, ops, d->block_acts[l].data, x, w, dw, u, ws);
    ZT_TRY(kernels_status(d));
    ZT_TRY(zt_engine_release(eng, u));
    ZT_TRY(zt_engine_grads_ready(eng, u));
    zt_tensor_free(&d->block_acts[l], &ctx->device_mem);
    zt_tensor_free(&d->block_out[l], &ctx->device_mem);
    return ZT_OK;
}

zt_status zt_decoder_backward(zt_decoder *d, zt_engine *eng, float dloss) {
    zt_ctx *ctx = zt_engine_context(eng);
    int L = d->cfg.layers;
    if (!d->head_acts.data) return ZT_FAIL(&ctx->err, ZT_ERR_INVALID, "backward without forward");
    zt_tensor ws = {0};
    ZT_TRY(decoder_alloc_bytes(ctx, &ws, d->ops->backward_ws_bytes(d), ZT_CAT_WORKSPACE, "backward grads"));
    const void *xL = L > 0 ? block_output(d, L - 1) : d->encoded.data; /* [N,C] act */
    zt_status st = zt_engine_begin_pass(eng, ZT_PASS_BACKWARD);
    /* the last block's input comes back while the head's backward runs */
    if (st == ZT_OK && L > 0) st = decoder_copy_input(d, ctx, L - 1, ZT_COPY_H2D);
    if (st == ZT_OK) st = head_backward(d, eng, xL, dloss, ws.data);
    for (int l = L - 1; st == ZT_OK && l >= 0; l--) st = block_unit_backward(d, eng, l, ws.data);
    float *dw = NULL;
    if (st == ZT_OK) st = zt_engine_grad_buffer(eng, d->unit_embed, &dw);
    if (st == ZT_OK) {
        d->ops->embed_backward(d, &ctx->compute, zt_engine_kernels(eng), dw, d->tokens.data, ws.data);
        st = zt_engine_grads_ready(eng, d->unit_embed);
    }
    if (st != ZT_OK) return st; /* the workspace stays counted: the OOM report shows it */
    zt_tensor_free(&ws, &ctx->device_mem);
    zt_decoder_free_activations(d, eng);
    return ZT_OK;
}
