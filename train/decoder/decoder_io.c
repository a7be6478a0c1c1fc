/* The decoder's traffic with the host: the token ids' staging, the losses
 * queued back behind the compute stream, and activation offload of the
 * kept inputs (docs/memory.md, "Kept inputs in the host pool"). */
#include "decoder_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zt_time.h"
#include "zt_trace.h"

void decoder_staging_free(zt_host_staging *h) {
    if (h->buf) {
        if (h->alloc.free) h->alloc.free(h->alloc.ctx, h->buf);
        else free(h->buf);
    }
    memset(h, 0, sizeof *h);
}

/* bytes at the end of h (chunks of 4-byte words, so every chunk stays
 * word-aligned), growing it if needed; growing waits for the stream first,
 * since queued copies still use the old buffer. */
zt_status decoder_staging_take(zt_host_staging *h, zt_ctx *ctx, zt_stream *s, size_t bytes, void **out) {
    size_t at = h->used;
    if (at + bytes > h->cap) {
        ZT_TRY(ctx->be->stream_sync(ctx->be, s, &ctx->err));
        size_t cap = 2 * (at + bytes);
        zt_raw_allocator a = ctx->be->raw_host;
        char *p = a.alloc ? a.alloc(a.ctx, cap) : malloc(cap);
        if (!p) return ZT_FAIL(&ctx->err, ZT_ERR_OOM, "cannot allocate %zu bytes of host staging", cap);
        if (h->used) memcpy(p, h->buf, h->used);
        decoder_staging_free(h);
        h->buf = p;
        h->cap = cap;
        h->alloc = a;
    }
    h->used = at + bytes;
    *out = h->buf + at;
    return ZT_OK;
}

zt_status decoder_alloc_bytes(zt_ctx *ctx, zt_tensor *t, size_t bytes, zt_category cat, const char *label) {
    int64_t shape[1] = {(int64_t)((bytes + 3) / 4)};
    return zt_tensor_alloc(t, &ctx->device_mem, ctx->be->device, ZT_FP32, 1, shape, cat, label, &ctx->err);
}

/* The same in the host pool (page-locked where the backend pins it). */
static zt_status alloc_host_bytes(zt_ctx *ctx, zt_tensor *t, size_t bytes, zt_category cat, const char *label) {
    int64_t shape[1] = {(int64_t)((bytes + 3) / 4)};
    return zt_tensor_alloc(t, &ctx->host_mem, ZT_DEVICE_CPU, ZT_FP32, 1, shape, cat, label, &ctx->err);
}

/* Appends the copy of losses[N] (device) to the pending host buffer. */
zt_status decoder_queue_losses(zt_decoder *d, zt_ctx *ctx, zt_stream *s, const float *losses, size_t N) {
    if (d->loss_micros == d->loss_micros_cap) {
        int cap = d->loss_micros_cap ? 2 * d->loss_micros_cap : 8;
        size_t *n = realloc(d->loss_micro_n, (size_t)cap * sizeof *n);
        if (!n) return ZT_FAIL(&ctx->err, ZT_ERR_OOM, "forward: cannot track %d micro-batches", cap);
        d->loss_micro_n = n;
        d->loss_micros_cap = cap;
    }
    float *dst = NULL; /* set by decoder_staging_take (GCC -O3 cannot tell) */
    size_t used = d->losses_host.used;
    ZT_TRY(decoder_staging_take(&d->losses_host, ctx, s, N * sizeof(float), (void **)&dst));
    zt_status st = ctx->be->memcpy_async(ctx->be, dst, losses, N * sizeof(float), ZT_COPY_D2H, s, &ctx->err);
    if (st != ZT_OK) {
        d->losses_host.used = used; /* the chunk walk in take_losses must stay in step */
        return st;
    }
    d->loss_micro_n[d->loss_micros++] = N;
    return ZT_OK;
}

zt_status zt_decoder_take_losses(zt_decoder *d, zt_ctx *ctx, double *sum_of_means) {
    *sum_of_means = 0.0;
    ZT_TRY(ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err));
    const float *x = (const float *)d->losses_host.buf; /* the micro-batches' losses, back to back */
    for (int m = 0; m < d->loss_micros; m++) {
        size_t N = d->loss_micro_n[m];
        double sum = 0.0;
        for (size_t i = 0; i < N; i++) sum += x[i];
        *sum_of_means += (float)(sum / (double)N);
        x += N;
    }
    d->losses_host.used = 0; /* the sync above finished every copy from or to them */
    d->ids_host.used = 0;
    d->loss_micros = 0;
    return ZT_OK;
}

/* Activation offload. Under full recomputation block l's kept input (the
 * embedding's output for block 0, block l-1's output after it) goes to the
 * host pool on the d2h stream as soon as it exists; its device copy is
 * freed once block l's forward is queued and the copy out is done.
 * Backward brings it back on the h2d stream one block ahead (block l-1's
 * while block l's backward runs), and compute waits on the copy's event
 * before the replay reads it. So the device holds at most two kept inputs
 * (one in use, one coming back) instead of all of them; the last block's
 * output stays on the device, since the head reads it at once. */

/* Where block l's kept input lives on the device while it is there. */
static zt_tensor *input_slot(zt_decoder *d, int l) { return l > 0 ? &d->block_out[l - 1] : &d->encoded; }

/* Records the copy just queued on s as block l's event; without an event
 * to wait on later, waits now (the buffers must not go before the copy). */
static zt_status record_copy(zt_decoder *d, zt_ctx *ctx, zt_stream *s, int l) {
    zt_status st = zt_event_record(ctx->be, s, &d->input_copy[l], &ctx->err);
    if (st != ZT_OK) {
        zt_error ignore = {0};
        (void)ctx->be->stream_sync(ctx->be, s, &ignore);
    }
    return st;
}

/* Waits on the host for block l's copy in flight and forgets its event. */
static zt_status await_copy(zt_decoder *d, zt_ctx *ctx, int l) {
    zt_status st = zt_event_sync(ctx->be, d->input_copy[l], &ctx->err);
    zt_event_destroy(ctx->be, d->input_copy[l]);
    d->input_copy[l] = NULL;
    return st;
}

/* Block l's kept input across the link on its copy stream: out to a new
 * host-pool buffer (d2h) just after compute produced it, or back to a new
 * device buffer (h2d) ahead of its backward. Either copy follows what is
 * queued on compute: the kernels that wrote the input, or those that last
 * read the block the new device buffer reuses. */
zt_status decoder_copy_input(zt_decoder *d, zt_ctx *ctx, int l, zt_copy_kind kind) {
    if (!d->cfg.offload_activations) return ZT_OK;
    int out = kind == ZT_COPY_D2H;
    double t0 = zt_now_s();
    size_t n = zt_decoder_input_bytes(d->cfg.d_model, d->B, d->T, d->act); /* [B,T,C] act */
    zt_stream *s = out ? &ctx->d2h : &ctx->h2d;
    zt_tensor *host = &d->input_host[l], *dev = input_slot(d, l);
    char label[32];
    if (out) snprintf(label, sizeof label, "block%d input", l);
    else if (l > 0) snprintf(label, sizeof label, "block%d out", l - 1);
    else snprintf(label, sizeof label, "embedding out");
    ZT_TRY(out ? alloc_host_bytes(ctx, host, n, ZT_CAT_ACTIVATIONS, label)
               : decoder_alloc_bytes(ctx, dev, n, ZT_CAT_ACTIVATIONS, label));
    ZT_TRY(zt_stream_after(ctx->be, s, &ctx->compute, &ctx->err));
    ZT_TRY(ctx->be->memcpy_async(ctx->be, out ? host->data : dev->data, out ? dev->data : host->data, n, kind, s,
                                 &ctx->err));
    ZT_TRY(record_copy(d, ctx, s, l));
    double *bytes = out ? &d->moved.d2h_bytes : &d->moved.h2d_bytes, *secs = out ? &d->moved.d2h_s : &d->moved.h2d_s;
    *bytes += (double)n;
    *secs += zt_now_s() - t0;
    snprintf(label, sizeof label, "%s block%d input", out ? "d2h" : "h2d", l);
    zt_trace_span(ctx->trace, label, "offload", 2, t0);
    return ZT_OK;
}

/* After block l's forward is queued (its last reader on compute): once the
 * copy out has read it, the device copy of its input goes. */
zt_status decoder_input_retire(zt_decoder *d, zt_ctx *ctx, int l) {
    if (!d->cfg.offload_activations) return ZT_OK;
    double t0 = zt_now_s();
    zt_status st = await_copy(d, ctx, l);
    d->moved.d2h_s += zt_now_s() - t0;
    ZT_TRY(st);
    zt_tensor_free(input_slot(d, l), &ctx->device_mem);
    return ZT_OK;
}

/* Before block l's replay reads its input: compute waits for the copy
 * back, and the host copy goes once the copy has read it. */
zt_status decoder_input_land(zt_decoder *d, zt_ctx *ctx, int l) {
    if (!d->cfg.offload_activations) return ZT_OK;
    double t0 = zt_now_s();
    zt_status st = zt_stream_wait_event(ctx->be, &ctx->compute, d->input_copy[l], &ctx->err);
    if (st == ZT_OK) st = await_copy(d, ctx, l);
    d->moved.h2d_s += zt_now_s() - t0;
    ZT_TRY(st);
    zt_tensor_free(&d->input_host[l], &ctx->host_mem);
    return ZT_OK;
}
