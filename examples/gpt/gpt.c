#include "zt_time.h"
#include "gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "zt_rng.h"

static zt_status add_param(zt_gpt *g, int unit, const char *name, int ndim, int64_t d0, int64_t d1,
                           int decay, int *idx, zt_error *err) {
    int64_t shape[2] = {d0, d1};
    return zt_spec_add_param(g->spec, unit, name, ndim, shape, decay, idx, err);
}

zt_status zt_gpt_create(zt_gpt *g, const zt_gpt_config *cfg, zt_error *err) {
    memset(g, 0, sizeof *g);
    g->cfg = *cfg;
    int C = cfg->d_model, V = cfg->vocab, L = cfg->layers;
    if (cfg->heads <= 0 || C % cfg->heads != 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "d_model (%d) must be divisible by heads (%d)", C, cfg->heads);
    if (L + 2 > ZT_MAX_UNITS) return ZT_FAIL(err, ZT_ERR_INVALID, "too many layers (%d)", L);
    g->spec = calloc(1, sizeof *g->spec);
    g->block_acts = calloc((size_t)(L > 0 ? L : 1), sizeof *g->block_acts);
    g->block_out = calloc((size_t)(L > 0 ? L : 1), sizeof *g->block_out);
    g->input_host = calloc((size_t)(L > 0 ? L : 1), sizeof *g->input_host);
    g->input_copy = calloc((size_t)(L > 0 ? L : 1), sizeof *g->input_copy);
    if (!g->spec || !g->block_acts || !g->block_out || !g->input_host || !g->input_copy)
        return ZT_FAIL(err, ZT_ERR_OOM, "gpt: cannot allocate tables");
    if (cfg->offload_activations && cfg->recompute.kind != ZT_RECOMPUTE_FULL)
        return ZT_FAIL(err, ZT_ERR_INVALID, "activation offload needs full recomputation: only full keeps one input "
                       "per block, the tensor it moves to the host");

    ZT_TRY(zt_spec_add_unit(g->spec, "embedding", &g->unit_embed, err));
    ZT_TRY(add_param(g, g->unit_embed, "wte", 2, V, C, 1, &g->p_wte, err));
    ZT_TRY(add_param(g, g->unit_embed, "wpe", 2, cfg->seq_len, C, 1, &g->p_wpe, err));
    for (int l = 0; l < L; l++) {
        char name[32];
        int u, idx;
        snprintf(name, sizeof name, "block%d", l);
        ZT_TRY(zt_spec_add_unit(g->spec, name, &u, err));
        if (l == 0) g->first_block = u;
        /* Declared in the order of the GPT_* enum. */
        ZT_TRY(add_param(g, u, "ln1_w", 1, C, 0, 0, &idx, err));
        ZT_TRY(add_param(g, u, "ln1_b", 1, C, 0, 0, &idx, err));
        ZT_TRY(add_param(g, u, "qkv_w", 2, 3 * C, C, 1, &idx, err));
        ZT_TRY(add_param(g, u, "qkv_b", 1, 3 * C, 0, 0, &idx, err));
        ZT_TRY(add_param(g, u, "attproj_w", 2, C, C, 1, &idx, err));
        ZT_TRY(add_param(g, u, "attproj_b", 1, C, 0, 0, &idx, err));
        ZT_TRY(add_param(g, u, "ln2_w", 1, C, 0, 0, &idx, err));
        ZT_TRY(add_param(g, u, "ln2_b", 1, C, 0, 0, &idx, err));
        ZT_TRY(add_param(g, u, "fc_w", 2, 4 * C, C, 1, &idx, err));
        ZT_TRY(add_param(g, u, "fc_b", 1, 4 * C, 0, 0, &idx, err));
        ZT_TRY(add_param(g, u, "fcproj_w", 2, C, 4 * C, 1, &idx, err));
        ZT_TRY(add_param(g, u, "fcproj_b", 1, C, 0, 0, &idx, err));
    }
    ZT_TRY(zt_spec_add_unit(g->spec, "head", &g->unit_head, err));
    ZT_TRY(add_param(g, g->unit_head, "lnf_w", 1, C, 0, 0, &g->p_lnf_w, err));
    ZT_TRY(add_param(g, g->unit_head, "lnf_b", 1, C, 0, 0, &g->p_lnf_b, err));
    g->p_lm_head = -1;
    if (!cfg->tied) ZT_TRY(add_param(g, g->unit_head, "lm_head", 2, V, C, 1, &g->p_lm_head, err));
    return ZT_OK;
}

static void staging_free(zt_host_staging *h) {
    if (h->buf) {
        if (h->alloc.free) h->alloc.free(h->alloc.ctx, h->buf);
        else free(h->buf);
    }
    memset(h, 0, sizeof *h);
}

/* bytes at the end of h (chunks of 4-byte words, so every chunk stays
 * word-aligned), growing it if needed; growing waits for the stream first,
 * since queued copies still use the old buffer. */
static zt_status staging_take(zt_host_staging *h, zt_ctx *ctx, zt_stream *s, size_t bytes, void **out) {
    size_t at = h->used;
    if (at + bytes > h->cap) {
        ZT_TRY(ctx->be->stream_sync(ctx->be, s, &ctx->err));
        size_t cap = 2 * (at + bytes);
        zt_raw_allocator a = ctx->be->raw_host;
        char *p = a.alloc ? a.alloc(a.ctx, cap) : malloc(cap);
        if (!p) return ZT_FAIL(&ctx->err, ZT_ERR_OOM, "cannot allocate %zu bytes of host staging", cap);
        if (h->used) memcpy(p, h->buf, h->used);
        staging_free(h);
        h->buf = p;
        h->cap = cap;
        h->alloc = a;
    }
    h->used = at + bytes;
    *out = h->buf + at;
    return ZT_OK;
}

void zt_gpt_destroy(zt_gpt *g) {
    staging_free(&g->losses_host);
    staging_free(&g->ids_host);
    free(g->loss_micro_n);
    g->loss_micro_n = NULL;
    free(g->spec);
    free(g->block_acts);
    free(g->block_out);
    free(g->input_host);
    free(g->input_copy);
    g->spec = NULL;
    g->block_acts = NULL;
    g->block_out = NULL;
    g->input_host = NULL;
    g->input_copy = NULL;
}

void zt_gpt_init_param(void *arg, int unit, int param, float *dst) {
    const zt_gpt *g = arg;
    const zt_param_spec *ps = &g->spec->units[unit].params[param];
    int is_block = unit >= g->first_block && unit < g->first_block + g->cfg.layers;
    float fill = 0.0f, stddev = 0.0f;
    if (is_block) {
        switch (param) {
        case GPT_LN1_W: case GPT_LN2_W: fill = 1.0f; break;
        case GPT_QKV_W: case GPT_FC_W: stddev = 0.02f; break;
        /* Projections into the residual stream shrink with depth (GPT-2). */
        case GPT_ATTPROJ_W: case GPT_FCPROJ_W: stddev = 0.02f / sqrtf(2.0f * (float)g->cfg.layers); break;
        default: break;
        }
    } else if (unit == g->unit_head && param == g->p_lnf_w) {
        fill = 1.0f;
    } else if (unit == g->unit_embed || param == g->p_lm_head) {
        stddev = 0.02f;
    }
    zt_rng r = zt_rng_keyed(g->cfg.seed, 0x1417u, (uint64_t)unit, (uint64_t)param);
    for (size_t i = 0; i < ps->numel; i++) dst[i] = stddev > 0.0f ? stddev * zt_rng_normal(&r) : fill;
}

/* Places an array of n elements of `size` bytes at *o, on a 4-byte
 * boundary (fp32 statistics after an odd number of 16-bit values; in fp32
 * nothing moves). */
static size_t place(size_t *o, size_t n, size_t size) {
    size_t at = (*o + 3) & ~(size_t)3;
    *o = at + n * size;
    return at;
}

zt_gpt_block_layout zt_gpt_block_layout_for(const zt_gpt_config *cfg, int B, int T, zt_dtype act) {
    size_t BT = (size_t)B * T, C = (size_t)cfg->d_model, NH = (size_t)cfg->heads, d = zt_dtype_size(act);
    zt_gpt_block_layout l;
    size_t o = 0;
    l.ln1 = place(&o, BT * C, d);
    l.ln1_mean = place(&o, BT, 4);
    l.ln1_rstd = place(&o, BT, 4);
    l.qkv = place(&o, BT * 3 * C, d);
    if (cfg->attention_fused) l.att = place(&o, (size_t)B * NH * T, 4); /* lse, fp32 */
    else l.att = place(&o, (size_t)B * NH * T * T, d);
    l.atty = place(&o, BT * C, d);
    l.res2 = place(&o, BT * C, d);
    l.ln2 = place(&o, BT * C, d);
    l.ln2_mean = place(&o, BT, 4);
    l.ln2_rstd = place(&o, BT, 4);
    l.fch = place(&o, BT * 4 * C, d);
    l.fch_gelu = place(&o, BT * 4 * C, d);
    l.res3 = place(&o, BT * C, d);
    l.total = (o + 3) & ~(size_t)3;
    return l;
}

zt_gpt_head_layout zt_gpt_head_layout_for(const zt_gpt_config *cfg, int B, int T, zt_dtype act) {
    size_t N = (size_t)B * T, d = zt_dtype_size(act), o = 0;
    zt_gpt_head_layout h;
    h.lnf = place(&o, N * (size_t)cfg->d_model, d);
    h.lnf_mean = place(&o, N, 4);
    h.lnf_rstd = place(&o, N, 4);
    h.probs = place(&o, N * (size_t)cfg->vocab, d);
    h.losses = place(&o, N, 4);
    h.total = (o + 3) & ~(size_t)3;
    return h;
}

size_t zt_gpt_backward_workspace_bytes(const zt_gpt_config *cfg, int B, int T, zt_dtype act) {
    size_t NC = (size_t)B * T * cfg->d_model, o = 0;
    place(&o, NC * 14, zt_dtype_size(act));
    place(&o, (size_t)B * cfg->heads * T, 4);
    return (o + 3) & ~(size_t)3;
}

zt_gpt_kept_layout zt_gpt_kept_layout_for(const zt_gpt_config *cfg, int B, int T, zt_dtype act) {
    size_t BT = (size_t)B * T, C = (size_t)cfg->d_model, d = zt_dtype_size(act), o = 0;
    zt_gpt_kept_layout k;
    k.qkv = place(&o, BT * 3 * C, d);
    k.res2 = place(&o, BT * C, d);
    k.fch = place(&o, BT * 4 * C, d);
    k.res3 = place(&o, BT * C, d);
    k.total = (o + 3) & ~(size_t)3;
    return k;
}

size_t zt_gpt_block_kept_bytes(const zt_gpt_config *cfg, int B, int T, zt_dtype act, zt_keep keep) {
    if (keep == ZT_KEEP_INPUT) return ((size_t)B * T * cfg->d_model * zt_dtype_size(act) + 3) / 4 * 4;
    if (keep == ZT_KEEP_GEMM_OUTPUTS) return zt_gpt_kept_layout_for(cfg, B, T, act).total;
    return zt_gpt_block_layout_for(cfg, B, T, act).total;
}

size_t zt_gpt_input_bytes(const zt_gpt_config *cfg, int B, int T, zt_dtype act) {
    return zt_gpt_block_kept_bytes(cfg, B, T, act, ZT_KEEP_INPUT);
}

/* An activation buffer of `bytes` (element type: the layout's business). */
static zt_status alloc_bytes(zt_ctx *ctx, zt_tensor *t, size_t bytes, zt_category cat, const char *label) {
    int64_t shape[1] = {(int64_t)((bytes + 3) / 4)};
    return zt_tensor_alloc(t, &ctx->device_mem, ctx->be->device, ZT_FP32, 1, shape, cat, label, &ctx->err);
}

/* The same in the host pool (page-locked where the backend pins it). */
static zt_status alloc_host_bytes(zt_ctx *ctx, zt_tensor *t, size_t bytes, zt_category cat, const char *label) {
    int64_t shape[1] = {(int64_t)((bytes + 3) / 4)};
    return zt_tensor_alloc(t, &ctx->host_mem, ZT_DEVICE_CPU, ZT_FP32, 1, shape, cat, label, &ctx->err);
}

/* Byte offset `off` into tensor t. */
static char *at(const zt_tensor *t, size_t off) { return (char *)t->data + off; }

static zt_keep block_keep(const zt_gpt *g, int l) { return zt_recompute_keep(&g->cfg.recompute, l); }

/* Output [B,T,C] act of block l: in what it keeps (zt_keep), or in its
 * activations while they exist. */
static const void *block_output(const zt_gpt *g, int l, const zt_gpt_block_layout *lay) {
    if (g->block_acts[l].data) return at(&g->block_acts[l], lay->res3);
    if (block_keep(g, l) == ZT_KEEP_INPUT) return g->block_out[l].data;
    zt_gpt_kept_layout k = zt_gpt_kept_layout_for(&g->cfg, g->B, g->T, g->act);
    return at(&g->block_out[l], k.res3);
}

/* Input [B,T,C] act of block l. */
static const void *block_input(const zt_gpt *g, int l, const zt_gpt_block_layout *lay) {
    return l > 0 ? block_output(g, l - 1, lay) : g->encoded.data;
}

/* Activation offload (--offload-activations cpu; docs/memory.md, "Kept
 * inputs in the host pool"). Under full recomputation block l's kept input
 * (the embedding's output for block 0, block l-1's output after it) goes
 * to the host pool on the d2h stream as soon as it exists; its device copy
 * is freed once block l's forward is queued and the copy out is done.
 * Backward brings it back on the h2d stream one block ahead (block l-1's
 * while block l's backward runs), and compute waits on the copy's event
 * before the replay reads it. So the device holds at most two kept inputs
 * (one in use, one coming back) instead of all of them; the last block's
 * output stays on the device, since the head reads it at once. */

/* Where block l's kept input lives on the device while it is there. */
static zt_tensor *input_slot(zt_gpt *g, int l) { return l > 0 ? &g->block_out[l - 1] : &g->encoded; }

static int offloads_inputs(const zt_gpt *g) { return g->cfg.offload_activations; }

/* Records the copy just queued on s as block l's event; without an event
 * to wait on later, waits now (the buffers must not go before the copy). */
static zt_status record_copy(zt_gpt *g, zt_ctx *ctx, zt_stream *s, int l) {
    zt_status st = zt_event_record(ctx->be, s, &g->input_copy[l], &ctx->err);
    if (st != ZT_OK) {
        zt_error ignore = {0};
        (void)ctx->be->stream_sync(ctx->be, s, &ignore);
    }
    return st;
}

/* Waits on the host for block l's copy in flight and forgets its event. */
static zt_status await_copy(zt_gpt *g, zt_ctx *ctx, int l) {
    zt_status st = zt_event_sync(ctx->be, g->input_copy[l], &ctx->err);
    zt_event_destroy(ctx->be, g->input_copy[l]);
    g->input_copy[l] = NULL;
    return st;
}

/* Block l's kept input across the link on its copy stream: out to a new
 * host-pool buffer (d2h) just after compute produced it, or back to a new
 * device buffer (h2d) ahead of its backward. Either copy follows what is
 * queued on compute: the kernels that wrote the input, or those that last
 * read the block the new device buffer reuses. */
static zt_status copy_input(zt_gpt *g, zt_ctx *ctx, int l, zt_copy_kind kind) {
    if (!offloads_inputs(g)) return ZT_OK;
    int out = kind == ZT_COPY_D2H;
    double t0 = zt_now_s();
    size_t n = zt_gpt_input_bytes(&g->cfg, g->B, g->T, g->act); /* [B,T,C] act */
    zt_stream *s = out ? &ctx->d2h : &ctx->h2d;
    zt_tensor *host = &g->input_host[l], *dev = input_slot(g, l);
    char label[32];
    if (out) snprintf(label, sizeof label, "block%d input", l);
    else if (l > 0) snprintf(label, sizeof label, "block%d out", l - 1);
    else snprintf(label, sizeof label, "embedding out");
    ZT_TRY(out ? alloc_host_bytes(ctx, host, n, ZT_CAT_ACTIVATIONS, label)
               : alloc_bytes(ctx, dev, n, ZT_CAT_ACTIVATIONS, label));
    ZT_TRY(zt_stream_after(ctx->be, s, &ctx->compute, &ctx->err));
    ZT_TRY(ctx->be->memcpy_async(ctx->be, out ? host->data : dev->data, out ? dev->data : host->data, n, kind, s,
                                 &ctx->err));
    ZT_TRY(record_copy(g, ctx, s, l));
    double *bytes = out ? &g->moved.d2h_bytes : &g->moved.h2d_bytes, *secs = out ? &g->moved.d2h_s : &g->moved.h2d_s;
    *bytes += (double)n;
    *secs += zt_now_s() - t0;
    snprintf(label, sizeof label, "%s block%d input", out ? "d2h" : "h2d", l);
    zt_trace_span(ctx->trace, label, "offload", 2, t0);
    return ZT_OK;
}

/* After block l's forward is queued (its last reader on compute): once the
 * copy out has read it, the device copy of its input goes. */
static zt_status input_retire(zt_gpt *g, zt_ctx *ctx, int l) {
    if (!offloads_inputs(g)) return ZT_OK;
    double t0 = zt_now_s();
    zt_status st = await_copy(g, ctx, l);
    g->moved.d2h_s += zt_now_s() - t0;
    ZT_TRY(st);
    zt_tensor_free(input_slot(g, l), &ctx->device_mem);
    return ZT_OK;
}

/* Before block l's replay reads its input: compute waits for the copy
 * back, and the host copy goes once the copy has read it. */
static zt_status input_land(zt_gpt *g, zt_ctx *ctx, int l) {
    if (!offloads_inputs(g)) return ZT_OK;
    double t0 = zt_now_s();
    zt_status st = zt_stream_wait_event(ctx->be, &ctx->compute, g->input_copy[l], &ctx->err);
    if (st == ZT_OK) st = await_copy(g, ctx, l);
    g->moved.h2d_s += zt_now_s() - t0;
    ZT_TRY(st);
    zt_tensor_free(&g->input_host[l], &ctx->host_mem);
    return ZT_OK;
}

/* Parameter `param` of `unit` in a gathered unit (compute dtype). */
static const void *param_ptr(const zt_gpt *g, const void *unit_base, int unit, int param) {
    return (const char *)unit_base + g->spec->units[unit].params[param].offset * zt_dtype_size(g->act);
}
/* Its gradient in the unit's fp32 gradient buffer. */
static float *grad_ptr(const zt_gpt *g, float *unit_base, int unit, int param) {
    return unit_base + g->spec->units[unit].params[param].offset;
}

/* Appends the copy of losses[N] (device) to the pending host buffer. */
static zt_status queue_losses(zt_gpt *g, zt_ctx *ctx, zt_stream *s, const float *losses, size_t N) {
    if (g->loss_micros == g->loss_micros_cap) {
        int cap = g->loss_micros_cap ? 2 * g->loss_micros_cap : 8;
        size_t *n = realloc(g->loss_micro_n, (size_t)cap * sizeof *n);
        if (!n) return ZT_FAIL(&ctx->err, ZT_ERR_OOM, "forward: cannot track %d micro-batches", cap);
        g->loss_micro_n = n;
        g->loss_micros_cap = cap;
    }
    float *dst = NULL; /* set by staging_take (GCC -O3 cannot tell) */
    size_t used = g->losses_host.used;
    ZT_TRY(staging_take(&g->losses_host, ctx, s, N * sizeof(float), (void **)&dst));
    zt_status st = ctx->be->memcpy_async(ctx->be, dst, losses, N * sizeof(float), ZT_COPY_D2H, s, &ctx->err);
    if (st != ZT_OK) {
        g->losses_host.used = used; /* the chunk walk in take_losses must stay in step */
        return st;
    }
    g->loss_micro_n[g->loss_micros++] = N;
    return ZT_OK;
}

zt_status zt_gpt_take_losses(zt_gpt *g, zt_ctx *ctx, double *sum_of_means) {
    *sum_of_means = 0.0;
    ZT_TRY(ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err));
    const float *x = (const float *)g->losses_host.buf; /* the micro-batches' losses, back to back */
    for (int m = 0; m < g->loss_micros; m++) {
        size_t N = g->loss_micro_n[m];
        double sum = 0.0;
        for (size_t i = 0; i < N; i++) sum += x[i];
        *sum_of_means += (float)(sum / (double)N);
        x += N;
    }
    g->losses_host.used = 0; /* the sync above finished every copy from or to them */
    g->ids_host.used = 0;
    g->loss_micros = 0;
    return ZT_OK;
}

void zt_gpt_free_activations(zt_gpt *g, zt_engine *eng) {
    zt_ctx *ctx = zt_engine_context(eng);
    zt_mem *mem = &ctx->device_mem;
    /* After an error a kept input's copy may still be in flight: its buffers
     * go only once it is done. */
    for (int l = 0; g->input_copy && l < g->cfg.layers; l++) {
        zt_error ignore = {0};
        (void)zt_event_sync(ctx->be, g->input_copy[l], &ignore);
        zt_event_destroy(ctx->be, g->input_copy[l]);
        g->input_copy[l] = NULL;
    }
    for (int l = 0; g->input_host && l < g->cfg.layers; l++) zt_tensor_free(&g->input_host[l], &ctx->host_mem);
    zt_tensor_free(&g->tokens, mem);
    zt_tensor_free(&g->targets, mem);
    zt_tensor_free(&g->encoded, mem);
    for (int l = 0; g->block_acts && l < g->cfg.layers; l++) zt_tensor_free(&g->block_acts[l], mem);
    for (int l = 0; g->block_out && l < g->cfg.layers; l++) zt_tensor_free(&g->block_out[l], mem);
    zt_tensor_free(&g->head_acts, mem);
}

/* One block's forward from x[B,T,C] into its activation buffer (res3 is the output). */
static void block_forward(const zt_gpt *g, zt_stream *s, const zt_ops *ops, char *acts,
                          const zt_gpt_block_layout *lay, const void *x, const void *w, int u) {
    int B = g->B, T = g->T, C = g->cfg.d_model, NH = g->cfg.heads, N = B * T;
#define W(p) param_ptr(g, w, u, p)
#define A(f) (acts + lay->f)
#define F(f) ((float *)(acts + lay->f))
    ops->layernorm_fwd(s, A(ln1), F(ln1_mean), F(ln1_rstd), x, W(GPT_LN1_W), W(GPT_LN1_B), N, C);
    ops->matmul_fwd(s, A(qkv), A(ln1), W(GPT_QKV_W), W(GPT_QKV_B), N, C, 3 * C);
    if (g->cfg.attention_fused) ops->attention_fused_fwd(s, A(atty), F(att), A(qkv), B, T, C, NH);
    else ops->attention_fwd(s, A(atty), A(att), A(qkv), B, T, C, NH);
    ops->matmul_fwd(s, A(res2), A(atty), W(GPT_ATTPROJ_W), W(GPT_ATTPROJ_B), N, C, C);
    ops->residual_fwd(s, A(res2), A(res2), x, (size_t)N * C);
    ops->layernorm_fwd(s, A(ln2), F(ln2_mean), F(ln2_rstd), A(res2), W(GPT_LN2_W), W(GPT_LN2_B), N, C);
    ops->matmul_fwd(s, A(fch), A(ln2), W(GPT_FC_W), W(GPT_FC_B), N, C, 4 * C);
    ops->gelu_fwd(s, A(fch_gelu), A(fch), (size_t)N * 4 * C);
    ops->matmul_fwd(s, A(res3), A(fch_gelu), W(GPT_FCPROJ_W), W(GPT_FCPROJ_B), N, 4 * C, C);
    ops->residual_fwd(s, A(res3), A(res3), A(res2), (size_t)N * C);
#undef W
#undef A
#undef F
}

/* The pieces selective recomputation keeps: (offset in the block's
 * activations, offset in the kept buffer, bytes). */
static int kept_pieces(const zt_gpt *g, const zt_gpt_block_layout *lay, size_t from[4], size_t to[4], size_t n[4]) {
    size_t NC = (size_t)g->B * g->T * g->cfg.d_model, d = zt_dtype_size(g->act);
    zt_gpt_kept_layout k = zt_gpt_kept_layout_for(&g->cfg, g->B, g->T, g->act);
    size_t f[4] = {lay->qkv, lay->res2, lay->fch, lay->res3}, t[4] = {k.qkv, k.res2, k.fch, k.res3};
    size_t m[4] = {3 * NC * d, NC * d, 4 * NC * d, NC * d};
    memcpy(from, f, sizeof f);
    memcpy(to, t, sizeof t);
    memcpy(n, m, sizeof m);
    return 4;
}

/* After block l's forward: under recomputation its activations give way to
 * what it keeps (its output, or its GEMM outputs). */
static zt_status keep_block(zt_gpt *g, zt_ctx *ctx, int l, const zt_gpt_block_layout *lay) {
    zt_keep keep = block_keep(g, l);
    if (keep == ZT_KEEP_ALL) return ZT_OK;
    char label[32];
    snprintf(label, sizeof label, keep == ZT_KEEP_INPUT ? "block%d out" : "block%d kept", l);
    ZT_TRY(alloc_bytes(ctx, &g->block_out[l], zt_gpt_block_kept_bytes(&g->cfg, g->B, g->T, g->act, keep),
                       ZT_CAT_ACTIVATIONS, label));
    size_t from[4] = {lay->res3}, to[4] = {0}, n[4] = {(size_t)g->B * g->T * g->cfg.d_model * zt_dtype_size(g->act)};
    int pieces = keep == ZT_KEEP_INPUT ? 1 : kept_pieces(g, lay, from, to, n);
    for (int i = 0; i < pieces; i++)
        ZT_TRY(ctx->be->memcpy_async(ctx->be, at(&g->block_out[l], to[i]), at(&g->block_acts[l], from[i]), n[i],
                                     ZT_COPY_D2D, &ctx->compute, &ctx->err));
    zt_tensor_free(&g->block_acts[l], &ctx->device_mem);
    return ZT_OK;
}

/* Before block l's backward: its activations again, replayed from its input
 * x (the whole forward), or from the GEMM outputs it kept (the layernorms,
 * the attention and GELU only). Same kernels, same inputs: the same bits.
 * What the block kept goes as soon as it is no longer read: its output
 * (the next block's input, whose backward is done) before the replay, its
 * GEMM outputs once copied into place. */
static zt_status replay_block(zt_gpt *g, zt_ctx *ctx, const zt_ops *ops, int l, const zt_gpt_block_layout *lay,
                              const void *x, const void *w, int u) {
    zt_stream *s = &ctx->compute;
    if (block_keep(g, l) == ZT_KEEP_INPUT) zt_tensor_free(&g->block_out[l], &ctx->device_mem);
    char label[32];
    snprintf(label, sizeof label, "block%d acts", l);
    ZT_TRY(alloc_bytes(ctx, &g->block_acts[l], lay->total, ZT_CAT_ACTIVATIONS, label));
    char *acts = g->block_acts[l].data;
    if (block_keep(g, l) == ZT_KEEP_INPUT) {
        block_forward(g, s, ops, acts, lay, x, w, u);
        return ZT_OK;
    }
    size_t from[4], to[4], n[4];
    int pieces = kept_pieces(g, lay, from, to, n);
    for (int i = 0; i < pieces; i++)
        ZT_TRY(ctx->be->memcpy_async(ctx->be, acts + from[i], at(&g->block_out[l], to[i]), n[i], ZT_COPY_D2D, s,
                                     &ctx->err));
    zt_tensor_free(&g->block_out[l], &ctx->device_mem);
    int B = g->B, T = g->T, C = g->cfg.d_model, NH = g->cfg.heads, N = B * T;
#define W(p) param_ptr(g, w, u, p)
#define A(f) (acts + lay->f)
#define F(f) ((float *)(acts + lay->f))
    ops->layernorm_fwd(s, A(ln1), F(ln1_mean), F(ln1_rstd), x, W(GPT_LN1_W), W(GPT_LN1_B), N, C);
    if (g->cfg.attention_fused) ops->attention_fused_fwd(s, A(atty), F(att), A(qkv), B, T, C, NH);
    else ops->attention_fwd(s, A(atty), A(att), A(qkv), B, T, C, NH);
    ops->layernorm_fwd(s, A(ln2), F(ln2_mean), F(ln2_rstd), A(res2), W(GPT_LN2_W), W(GPT_LN2_B), N, C);
    ops->gelu_fwd(s, A(fch_gelu), A(fch), (size_t)N * 4 * C);
#undef W
#undef A
#undef F
    return ZT_OK;
}

zt_status zt_gpt_forward(zt_gpt *g, zt_engine *eng, const int32_t *tokens, const int32_t *targets,
                         int B, int T, float *mean_loss) {
    zt_ctx *ctx = zt_engine_context(eng);
    const zt_ops *ops = zt_engine_kernels(eng);
    zt_stream *s = &ctx->compute;
    int C = g->cfg.d_model, V = g->cfg.vocab, L = g->cfg.layers;
    if (B <= 0 || T <= 0 || T > g->cfg.seq_len)
        return ZT_FAIL(&ctx->err, ZT_ERR_INVALID, "forward: bad batch shape B=%d T=%d (seq_len %d)", B, T,
                       g->cfg.seq_len);
    zt_gpt_free_activations(g, eng);
    g->B = B;
    g->T = T;
    g->act = zt_engine_compute_dtype(eng);
    size_t N = (size_t)B * T, d = zt_dtype_size(g->act);

    /* Token ids live on the device. */
    ZT_TRY(alloc_bytes(ctx, &g->tokens, N * sizeof(int32_t), ZT_CAT_OTHER, "input tokens"));
    ZT_TRY(alloc_bytes(ctx, &g->targets, N * sizeof(int32_t), ZT_CAT_OTHER, "target tokens"));
    /* Through pinned staging: from the caller's pageable arrays a copy would
     * first wait for everything queued on the stream. */
    int32_t *ids = NULL; /* set by staging_take */
    ZT_TRY(staging_take(&g->ids_host, ctx, s, 2 * N * sizeof(int32_t), (void **)&ids));
    memcpy(ids, tokens, N * sizeof(int32_t));
    memcpy(ids + N, targets, N * sizeof(int32_t));
    ZT_TRY(ctx->be->memcpy_async(ctx->be, g->tokens.data, ids, N * 4, ZT_COPY_H2D, s, &ctx->err));
    ZT_TRY(ctx->be->memcpy_async(ctx->be, g->targets.data, ids + N, N * 4, ZT_COPY_H2D, s, &ctx->err));
    const int32_t *dtok = g->tokens.data, *dtgt = g->targets.data;

    const void *w;
    ZT_TRY(zt_engine_begin_pass(eng, ZT_PASS_FORWARD));
    ZT_TRY(alloc_bytes(ctx, &g->encoded, N * C * d, ZT_CAT_ACTIVATIONS, "embedding out"));
    ZT_TRY(zt_engine_gather(eng, g->unit_embed, &w));
    ops->embedding_fwd(s, g->encoded.data, dtok, param_ptr(g, w, g->unit_embed, g->p_wte),
                       param_ptr(g, w, g->unit_embed, g->p_wpe), B, T, C);
    ZT_TRY(zt_engine_release(eng, g->unit_embed));
    if (L > 0) ZT_TRY(copy_input(g, ctx, 0, ZT_COPY_D2H));

    zt_gpt_block_layout lay = zt_gpt_block_layout_for(&g->cfg, B, T, g->act);
    for (int l = 0; l < L; l++) {
        int u = g->first_block + l;
        char label[32];
        snprintf(label, sizeof label, "block%d acts", l);
        ZT_TRY(alloc_bytes(ctx, &g->block_acts[l], lay.total, ZT_CAT_ACTIVATIONS, label));
        ZT_TRY(zt_engine_gather(eng, u, &w));
        block_forward(g, s, ops, g->block_acts[l].data, &lay, block_input(g, l, &lay), w, u);
        ZT_TRY(zt_engine_release(eng, u));
        ZT_TRY(input_retire(g, ctx, l));
        ZT_TRY(keep_block(g, ctx, l, &lay));
        if (l + 1 < L) ZT_TRY(copy_input(g, ctx, l + 1, ZT_COPY_D2H));
    }
    const void *x = L > 0 ? block_output(g, L - 1, &lay) : g->encoded.data;

    zt_gpt_head_layout hl = zt_gpt_head_layout_for(&g->cfg, B, T, g->act);
    ZT_TRY(alloc_bytes(ctx, &g->head_acts, hl.total, ZT_CAT_ACTIVATIONS, "head acts"));
    void *lnf = at(&g->head_acts, hl.lnf), *probs = at(&g->head_acts, hl.probs);
    float *lnf_mean = (float *)at(&g->head_acts, hl.lnf_mean), *lnf_rstd = (float *)at(&g->head_acts, hl.lnf_rstd);
    float *losses = (float *)at(&g->head_acts, hl.losses);
    ZT_TRY(zt_engine_gather(eng, g->unit_head, &w));
    const void *wemb = NULL;
    if (g->cfg.tied) ZT_TRY(zt_engine_gather(eng, g->unit_embed, &wemb));
    const void *lm_w = g->cfg.tied ? param_ptr(g, wemb, g->unit_embed, g->p_wte)
                                   : param_ptr(g, w, g->unit_head, g->p_lm_head);
    ops->layernorm_fwd(s, lnf, lnf_mean, lnf_rstd, x, param_ptr(g, w, g->unit_head, g->p_lnf_w),
                       param_ptr(g, w, g->unit_head, g->p_lnf_b), (int)N, C);
    ops->matmul_fwd(s, probs, lnf, lm_w, NULL, (int)N, C, V); /* logits, then probs in place */
    ops->softmax_xent_fwd(s, losses, probs, probs, dtgt, (int)N, V);
    if (g->cfg.tied) ZT_TRY(zt_engine_release(eng, g->unit_embed));
    ZT_TRY(zt_engine_release(eng, g->unit_head));

    /* The per-position losses come to the host and are added in position
     * order, so the mean is reproducible. */
    if (mean_loss && g->loss_micros > 0)
        return ZT_FAIL(&ctx->err, ZT_ERR_INVALID,
                       "forward: %d micro-batch loss(es) still pending; read them with zt_gpt_take_losses first",
                       g->loss_micros);
    ZT_TRY(queue_losses(g, ctx, s, losses, N));
    if (!mean_loss) return ZT_OK;
    double sum = 0.0;
    ZT_TRY(zt_gpt_take_losses(g, ctx, &sum));
    *mean_loss = (float)sum;
    return ZT_OK;
}

/* Gradients of activations, in the compute dtype, and the attention scratch. */
typedef struct {
    zt_tensor buf;
    void *dres;  /* [N,C] gradient of the residual stream, carried through the blocks */
    void *dln;   /* [N,C] */
    void *datty; /* [N,C] */
    void *dqkv;  /* [N,3C] */
    void *dfch;  /* [N,4C] */
    void *dfchg; /* [N,4C] */
    float *datt; /* [B,NH,T] fp32 attention scratch */
    size_t elem; /* bytes per element of the compute dtype */
} backward_ws;

/* Zeroes n elements of `size` bytes of device memory on the compute stream. */
static void zero(zt_stream *s, void *p, size_t n, size_t size) {
    zt_error ignore = {0}; /* a memset on a valid buffer; the next sync reports device errors */
    s->be->memset_async(s->be, p, 0, n * size, s, &ignore);
}

static void block_backward(const zt_gpt *g, zt_stream *s, const zt_ops *ops, const char *acts,
                           const zt_gpt_block_layout *lay, const void *x, const void *w, float *dw,
                           int u, backward_ws *ws) {
    int B = g->B, T = g->T, C = g->cfg.d_model, NH = g->cfg.heads, N = B * T;
    size_t NC = (size_t)N * C, e = ws->elem;
#define W(p) param_ptr(g, w, u, p)
#define DW(p) grad_ptr(g, dw, u, p)
#define A(f) (acts + lay->f)
#define F(f) ((const float *)(acts + lay->f))
    /* res3 = res2 + fcproj(gelu(fc(ln2(res2)))): dres passes through unchanged. */
    ops->matmul_bwd(s, ws->dfchg, DW(GPT_FCPROJ_W), DW(GPT_FCPROJ_B), ws->dres, A(fch_gelu), W(GPT_FCPROJ_W), N,
                    4 * C, C);
    ops->gelu_bwd(s, ws->dfch, A(fch), ws->dfchg, NC * 4);
    ops->matmul_bwd(s, ws->dln, DW(GPT_FC_W), DW(GPT_FC_B), ws->dfch, A(ln2), W(GPT_FC_W), N, C, 4 * C);
    ops->layernorm_bwd(s, ws->dres, DW(GPT_LN2_W), DW(GPT_LN2_B), ws->dln, A(res2), W(GPT_LN2_W), F(ln2_mean),
                       F(ln2_rstd), N, C);
    /* res2 = x + attproj(attn(qkv(ln1(x)))) */
    ops->matmul_bwd(s, ws->datty, DW(GPT_ATTPROJ_W), DW(GPT_ATTPROJ_B), ws->dres, A(atty), W(GPT_ATTPROJ_W), N, C,
                    C);
    zero(s, ws->dqkv, NC * 3, e);
    /* dfch and dfchg (8 x NC, adjacent) are dead once the MLP's backward is
     * done: lent as scratch, they let a GPU run this backward as GEMMs and
     * a 16-bit CPU run sum its gradients in fp32. */
    if (g->cfg.attention_fused)
        ops->attention_fused_bwd(s, ws->dqkv, ws->datt, ws->datty, A(qkv), A(atty), F(att), B, T, C, NH, ws->dfch,
                                 NC * 8 * e);
    else
        ops->attention_bwd(s, ws->dqkv, ws->datt, ws->datty, A(qkv), A(att), B, T, C, NH, ws->dfch, NC * 8 * e);
    ops->matmul_bwd(s, ws->dln, DW(GPT_QKV_W), DW(GPT_QKV_B), ws->dqkv, A(ln1), W(GPT_QKV_W), N, C, 3 * C);
    ops->layernorm_bwd(s, ws->dres, DW(GPT_LN1_W), DW(GPT_LN1_B), ws->dln, x, W(GPT_LN1_W), F(ln1_mean),
                       F(ln1_rstd), N, C);
#undef W
#undef DW
#undef A
#undef F
}

/* Carves the backward workspace (zt_gpt_backward_workspace_bytes) into the
 * activation gradients and the attention scratch. */
static zt_status backward_ws_alloc(const zt_gpt *g, zt_ctx *ctx, backward_ws *ws) {
    size_t NC = (size_t)g->B * g->T * g->cfg.d_model, e = zt_dtype_size(g->act);
    memset(ws, 0, sizeof *ws);
    ZT_TRY(alloc_bytes(ctx, &ws->buf, zt_gpt_backward_workspace_bytes(&g->cfg, g->B, g->T, g->act),
                       ZT_CAT_WORKSPACE, "backward grads"));
    char *base = ws->buf.data; /* [14 NC] act, then [B,NH,T] fp32 */
    ws->elem = e;
    ws->dres = base;
    ws->dln = base + NC * e;
    ws->datty = base + 2 * NC * e;
    ws->dqkv = base + 3 * NC * e;
    ws->dfch = base + 6 * NC * e;
    ws->dfchg = base + 10 * NC * e; /* adjacent to dfch: block_backward lends both as one scratch */
    ws->datt = (float *)(base + ((14 * NC * e + 3) & ~(size_t)3));
    return ZT_OK;
}

/* The head's backward (cross-entropy, LM head, final layernorm), from the
 * last block's output xL [N,C]: leaves its gradient in ws->dres and frees
 * the head's activations. */
static zt_status head_backward(zt_gpt *g, zt_engine *eng, const void *xL, float dloss, backward_ws *ws) {
    zt_ctx *ctx = zt_engine_context(eng);
    const zt_ops *ops = zt_engine_kernels(eng);
    zt_stream *s = &ctx->compute;
    int C = g->cfg.d_model, V = g->cfg.vocab;
    size_t N = (size_t)g->B * g->T, NC = N * C, e = ws->elem;
    const int32_t *dtgt = g->targets.data; /* [N] */
    zt_gpt_head_layout hl = zt_gpt_head_layout_for(&g->cfg, g->B, g->T, g->act);
    void *lnf = at(&g->head_acts, hl.lnf);     /* [N,C] act */
    void *probs = at(&g->head_acts, hl.probs); /* [N,V] act */
    float *lnf_mean = (float *)at(&g->head_acts, hl.lnf_mean); /* [N] fp32 */
    float *lnf_rstd = (float *)at(&g->head_acts, hl.lnf_rstd); /* [N] fp32 */
    const void *w, *wemb = NULL;
    float *dw, *dwemb = NULL;
    ZT_TRY(zt_engine_gather(eng, g->unit_head, &w));
    ZT_TRY(zt_engine_grad_buffer(eng, g->unit_head, &dw));
    if (g->cfg.tied) {
        ZT_TRY(zt_engine_gather(eng, g->unit_embed, &wemb));
        ZT_TRY(zt_engine_grad_buffer(eng, g->unit_embed, &dwemb));
    }
    const void *lm_w = g->cfg.tied ? param_ptr(g, wemb, g->unit_embed, g->p_wte)
                                   : param_ptr(g, w, g->unit_head, g->p_lm_head); /* [V,C] */
    float *dlm_w = g->cfg.tied ? grad_ptr(g, dwemb, g->unit_embed, g->p_wte)
                               : grad_ptr(g, dw, g->unit_head, g->p_lm_head); /* [V,C] fp32 */
    ops->softmax_xent_bwd(s, probs, probs, dtgt, (int)N, V, dloss); /* dlogits in place */
    ops->matmul_bwd(s, ws->dln, dlm_w, NULL, probs, lnf, lm_w, (int)N, C, V);
    zero(s, ws->dres, NC, e);
    ops->layernorm_bwd(s, ws->dres, grad_ptr(g, dw, g->unit_head, g->p_lnf_w),
                       grad_ptr(g, dw, g->unit_head, g->p_lnf_b), ws->dln, xL,
                       param_ptr(g, w, g->unit_head, g->p_lnf_w), lnf_mean, lnf_rstd, (int)N, C);
    if (g->cfg.tied) ZT_TRY(zt_engine_release(eng, g->unit_embed));
    ZT_TRY(zt_engine_release(eng, g->unit_head));
    ZT_TRY(zt_engine_grads_ready(eng, g->unit_head));
    zt_tensor_free(&g->head_acts, &ctx->device_mem);
    return ZT_OK;
}

/* Block l's unit through backward: gathered, its activations replayed if it
 * did not keep them all, its gradients handed to the engine; ws->dres [N,C]
 * goes from its output's gradient to its input's. */
static zt_status block_unit_backward(zt_gpt *g, zt_engine *eng, int l, const zt_gpt_block_layout *lay,
                                     backward_ws *ws) {
    zt_ctx *ctx = zt_engine_context(eng);
    const zt_ops *ops = zt_engine_kernels(eng);
    int u = g->first_block + l;
    if (l > 0) ZT_TRY(copy_input(g, ctx, l - 1, ZT_COPY_H2D)); /* comes back while this block's backward runs */
    ZT_TRY(input_land(g, ctx, l));
    const void *x = block_input(g, l, lay); /* [N,C] act */
    const void *w;
    float *dw;
    ZT_TRY(zt_engine_gather(eng, u, &w));
    if (block_keep(g, l) != ZT_KEEP_ALL) {
        /* Replay with the parameters just gathered for backward (one
         * gather at stage 3, not two). Host time: the replay itself on
         * the CPU; on a GPU the time to enqueue it (a wait here would
         * stall the stream pipeline). */
        double t0 = zt_now_s();
        ZT_TRY(replay_block(g, ctx, ops, l, lay, x, w, u));
        g->recompute_time_s += zt_now_s() - t0;
    }
    ZT_TRY(zt_engine_grad_buffer(eng, u, &dw));
    block_backward(g, &ctx->compute, ops, g->block_acts[l].data, lay, x, w, dw, u, ws);
    ZT_TRY(zt_engine_release(eng, u));
    ZT_TRY(zt_engine_grads_ready(eng, u));
    zt_tensor_free(&g->block_acts[l], &ctx->device_mem);
    zt_tensor_free(&g->block_out[l], &ctx->device_mem);
    return ZT_OK;
}

/* The embedding's gradients from ws->dres [N,C], the first block's input's. */
static zt_status embedding_backward(zt_gpt *g, zt_engine *eng, const backward_ws *ws) {
    const int32_t *dtok = g->tokens.data; /* [N] */
    float *dw;
    ZT_TRY(zt_engine_grad_buffer(eng, g->unit_embed, &dw));
    zt_engine_kernels(eng)->embedding_bwd(&zt_engine_context(eng)->compute, grad_ptr(g, dw, g->unit_embed, g->p_wte),
                                grad_ptr(g, dw, g->unit_embed, g->p_wpe), ws->dres, dtok, g->B, g->T,
                                g->cfg.d_model);
    return zt_engine_grads_ready(eng, g->unit_embed);
}

zt_status zt_gpt_backward(zt_gpt *g, zt_engine *eng, float dloss) {
    zt_ctx *ctx = zt_engine_context(eng);
    int L = g->cfg.layers;
    if (!g->head_acts.data) return ZT_FAIL(&ctx->err, ZT_ERR_INVALID, "backward without forward");

    backward_ws ws;
    ZT_TRY(backward_ws_alloc(g, ctx, &ws));
    zt_gpt_block_layout lay = zt_gpt_block_layout_for(&g->cfg, g->B, g->T, g->act);
    const void *xL = L > 0 ? block_output(g, L - 1, &lay) : g->encoded.data; /* [N,C] act */

    ZT_TRY(zt_engine_begin_pass(eng, ZT_PASS_BACKWARD));
    if (L > 0) ZT_TRY(copy_input(g, ctx, L - 1, ZT_COPY_H2D)); /* comes back while the head's backward runs */
    ZT_TRY(head_backward(g, eng, xL, dloss, &ws));
    /* Blocks, last to first. */
    for (int l = L - 1; l >= 0; l--) ZT_TRY(block_unit_backward(g, eng, l, &lay, &ws));
    ZT_TRY(embedding_backward(g, eng, &ws));
    zt_tensor_free(&ws.buf, &ctx->device_mem);
    zt_gpt_free_activations(g, eng);
    return ZT_OK;
}
