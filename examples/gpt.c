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
    if (!g->spec || !g->block_acts || !g->block_out) return ZT_FAIL(err, ZT_ERR_OOM, "gpt: cannot allocate tables");

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
    g->spec = NULL;
    g->block_acts = NULL;
    g->block_out = NULL;
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

zt_gpt_block_layout zt_gpt_block_layout_for(const zt_gpt_config *cfg, int B, int T) {
    size_t BT = (size_t)B * T, C = (size_t)cfg->d_model, NH = (size_t)cfg->heads;
    zt_gpt_block_layout l;
    size_t o = 0;
    l.ln1 = o; o += BT * C;
    l.ln1_mean = o; o += BT;
    l.ln1_rstd = o; o += BT;
    l.qkv = o; o += BT * 3 * C;
    l.att = o; o += (size_t)B * NH * T * (cfg->attention_fused ? 1 : (size_t)T);
    l.atty = o; o += BT * C;
    l.res2 = o; o += BT * C;
    l.ln2 = o; o += BT * C;
    l.ln2_mean = o; o += BT;
    l.ln2_rstd = o; o += BT;
    l.fch = o; o += BT * 4 * C;
    l.fch_gelu = o; o += BT * 4 * C;
    l.res3 = o; o += BT * C;
    l.total = o;
    return l;
}

static zt_status alloc_f32(zt_ctx *ctx, zt_tensor *t, size_t numel, zt_category cat, const char *label) {
    int64_t shape[1] = {(int64_t)numel};
    return zt_tensor_alloc(t, &ctx->device_mem, ctx->be->device, ZT_FP32, 1, shape, cat, label, &ctx->err);
}

/* Output [B,T,C] of block l: kept alone under recompute, else inside its activations. */
static const float *block_output(const zt_gpt *g, int l, const zt_gpt_block_layout *lay) {
    return g->cfg.recompute ? zt_f32(&g->block_out[l]) : zt_f32(&g->block_acts[l]) + lay->res3;
}

/* Input [B,T,C] of block l. */
static const float *block_input(const zt_gpt *g, int l, const zt_gpt_block_layout *lay) {
    return l > 0 ? block_output(g, l - 1, lay) : zt_f32(&g->encoded);
}

static const float *param_ptr(const zt_gpt *g, const float *unit_base, int unit, int param) {
    return unit_base + g->spec->units[unit].params[param].offset;
}
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
    zt_mem *mem = &eng->ctx->device_mem;
    zt_tensor_free(&g->tokens, mem);
    zt_tensor_free(&g->targets, mem);
    zt_tensor_free(&g->encoded, mem);
    for (int l = 0; g->block_acts && l < g->cfg.layers; l++) zt_tensor_free(&g->block_acts[l], mem);
    for (int l = 0; g->block_out && l < g->cfg.layers; l++) zt_tensor_free(&g->block_out[l], mem);
    zt_tensor_free(&g->head_acts, mem);
}

/* One block's forward from x[B,T,C] into its activation buffer (res3 is the output). */
static void block_forward(const zt_gpt *g, zt_stream *s, const zt_ops *ops, float *acts,
                          const zt_gpt_block_layout *lay, const float *x, const float *w, int u) {
    int B = g->B, T = g->T, C = g->cfg.d_model, NH = g->cfg.heads, N = B * T;
#define W(p) param_ptr(g, w, u, p)
    ops->layernorm_fwd(s, acts + lay->ln1, acts + lay->ln1_mean, acts + lay->ln1_rstd, x, W(GPT_LN1_W),
                       W(GPT_LN1_B), N, C);
    ops->matmul_fwd(s, acts + lay->qkv, acts + lay->ln1, W(GPT_QKV_W), W(GPT_QKV_B), N, C, 3 * C);
    if (g->cfg.attention_fused)
        ops->attention_fused_fwd(s, acts + lay->atty, acts + lay->att, acts + lay->qkv, B, T, C, NH);
    else
        ops->attention_fwd(s, acts + lay->atty, acts + lay->att, acts + lay->qkv, B, T, C, NH);
    ops->matmul_fwd(s, acts + lay->res2, acts + lay->atty, W(GPT_ATTPROJ_W), W(GPT_ATTPROJ_B), N, C, C);
    ops->residual_fwd(s, acts + lay->res2, acts + lay->res2, x, (size_t)N * C);
    ops->layernorm_fwd(s, acts + lay->ln2, acts + lay->ln2_mean, acts + lay->ln2_rstd, acts + lay->res2,
                       W(GPT_LN2_W), W(GPT_LN2_B), N, C);
    ops->matmul_fwd(s, acts + lay->fch, acts + lay->ln2, W(GPT_FC_W), W(GPT_FC_B), N, C, 4 * C);
    ops->gelu_fwd(s, acts + lay->fch_gelu, acts + lay->fch, (size_t)N * 4 * C);
    ops->matmul_fwd(s, acts + lay->res3, acts + lay->fch_gelu, W(GPT_FCPROJ_W), W(GPT_FCPROJ_B), N, 4 * C, C);
    ops->residual_fwd(s, acts + lay->res3, acts + lay->res3, acts + lay->res2, (size_t)N * C);
#undef W
}

zt_status zt_gpt_forward(zt_gpt *g, zt_engine *eng, const int32_t *tokens, const int32_t *targets,
                         int B, int T, float *mean_loss) {
    zt_ctx *ctx = eng->ctx;
    const zt_ops *ops = ctx->be->ops;
    zt_stream *s = &ctx->compute;
    int C = g->cfg.d_model, V = g->cfg.vocab, L = g->cfg.layers;
    if (B <= 0 || T <= 0 || T > g->cfg.seq_len)
        return ZT_FAIL(&ctx->err, ZT_ERR_INVALID, "forward: bad batch shape B=%d T=%d (seq_len %d)", B, T,
                       g->cfg.seq_len);
    zt_gpt_free_activations(g, eng);
    g->B = B;
    g->T = T;
    size_t N = (size_t)B * T;

    /* Token ids live on the device; int32 has the size of a float. */
    ZT_TRY(alloc_f32(ctx, &g->tokens, N, ZT_CAT_OTHER, "input tokens"));
    ZT_TRY(alloc_f32(ctx, &g->targets, N, ZT_CAT_OTHER, "target tokens"));
    /* Through pinned staging: from the caller's pageable arrays a copy would
     * first wait for everything queued on the stream. */
    int32_t *ids = NULL; /* set by staging_take */
    ZT_TRY(staging_take(&g->ids_host, ctx, s, 2 * N * sizeof(int32_t), (void **)&ids));
    memcpy(ids, tokens, N * sizeof(int32_t));
    memcpy(ids + N, targets, N * sizeof(int32_t));
    ZT_TRY(ctx->be->memcpy_async(ctx->be, g->tokens.data, ids, N * 4, ZT_COPY_H2D, s, &ctx->err));
    ZT_TRY(ctx->be->memcpy_async(ctx->be, g->targets.data, ids + N, N * 4, ZT_COPY_H2D, s, &ctx->err));
    const int32_t *dtok = g->tokens.data, *dtgt = g->targets.data;

    const float *w;
    ZT_TRY(alloc_f32(ctx, &g->encoded, N * C, ZT_CAT_ACTIVATIONS, "embedding out"));
    ZT_TRY(zt_engine_gather(eng, g->unit_embed, &w));
    ops->embedding_fwd(s, zt_f32(&g->encoded), dtok, param_ptr(g, w, g->unit_embed, g->p_wte),
                       param_ptr(g, w, g->unit_embed, g->p_wpe), B, T, C);
    zt_engine_release(eng, g->unit_embed);

    zt_gpt_block_layout lay = zt_gpt_block_layout_for(&g->cfg, B, T);
    for (int l = 0; l < L; l++) {
        int u = g->first_block + l;
        char label[32];
        snprintf(label, sizeof label, "block%d acts", l);
        ZT_TRY(alloc_f32(ctx, &g->block_acts[l], lay.total, ZT_CAT_ACTIVATIONS, label));
        ZT_TRY(zt_engine_gather(eng, u, &w));
        block_forward(g, s, ops, zt_f32(&g->block_acts[l]), &lay, block_input(g, l, &lay), w, u);
        zt_engine_release(eng, u);
        if (g->cfg.recompute) {
            /* Keep only the output (the next block's input); the rest is replayed. */
            snprintf(label, sizeof label, "block%d out", l);
            ZT_TRY(alloc_f32(ctx, &g->block_out[l], N * C, ZT_CAT_ACTIVATIONS, label));
            ZT_TRY(ctx->be->memcpy_async(ctx->be, g->block_out[l].data, zt_f32(&g->block_acts[l]) + lay.res3,
                                         N * C * sizeof(float), ZT_COPY_D2D, s, &ctx->err));
            zt_tensor_free(&g->block_acts[l], &ctx->device_mem);
        }
    }
    const float *x = L > 0 ? block_output(g, L - 1, &lay) : zt_f32(&g->encoded);

    /* Head: lnf [N,C] | lnf_mean [N] | lnf_rstd [N] | probs [N,V] | losses [N] */
    ZT_TRY(alloc_f32(ctx, &g->head_acts, N * C + 2 * N + N * V + N, ZT_CAT_ACTIVATIONS, "head acts"));
    float *lnf = zt_f32(&g->head_acts), *lnf_mean = lnf + N * C, *lnf_rstd = lnf_mean + N;
    float *probs = lnf_rstd + N, *losses = probs + N * V;
    ZT_TRY(zt_engine_gather(eng, g->unit_head, &w));
    const float *wemb = NULL;
    if (g->cfg.tied) ZT_TRY(zt_engine_gather(eng, g->unit_embed, &wemb));
    const float *lm_w = g->cfg.tied ? param_ptr(g, wemb, g->unit_embed, g->p_wte)
                                    : param_ptr(g, w, g->unit_head, g->p_lm_head);
    ops->layernorm_fwd(s, lnf, lnf_mean, lnf_rstd, x, param_ptr(g, w, g->unit_head, g->p_lnf_w),
                       param_ptr(g, w, g->unit_head, g->p_lnf_b), (int)N, C);
    ops->matmul_fwd(s, probs, lnf, lm_w, NULL, (int)N, C, V); /* logits, then probs in place */
    ops->softmax_xent_fwd(s, losses, probs, probs, dtgt, (int)N, V);
    if (g->cfg.tied) zt_engine_release(eng, g->unit_embed);
    zt_engine_release(eng, g->unit_head);

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

typedef struct {
    zt_tensor buf;
    float *dres;  /* [N,C] gradient of the residual stream, carried through the blocks */
    float *dln;   /* [N,C] */
    float *datty; /* [N,C] */
    float *dqkv;  /* [N,3C] */
    float *dfch;  /* [N,4C] */
    float *dfchg; /* [N,4C] */
    float *datt;  /* [B,NH,T] attention scratch */
} backward_ws;

/* Zeroes n floats of device memory on the compute stream. */
static void zero(zt_stream *s, float *p, size_t n) {
    zt_error ignore = {0}; /* a memset on a valid buffer; the next sync reports device errors */
    s->be->memset_async(s->be, p, 0, n * sizeof(float), s, &ignore);
}

static void block_backward(const zt_gpt *g, zt_stream *s, const zt_ops *ops, const float *acts,
                           const zt_gpt_block_layout *lay, const float *x, const float *w, float *dw,
                           int u, backward_ws *ws) {
    int B = g->B, T = g->T, C = g->cfg.d_model, NH = g->cfg.heads, N = B * T;
    size_t NC = (size_t)N * C;
#define W(p) param_ptr(g, w, u, p)
#define DW(p) grad_ptr(g, dw, u, p)
    /* res3 = res2 + fcproj(gelu(fc(ln2(res2)))): dres passes through unchanged. */
    zero(s, ws->dfchg, NC * 4);
    ops->matmul_bwd(s, ws->dfchg, DW(GPT_FCPROJ_W), DW(GPT_FCPROJ_B), ws->dres, acts + lay->fch_gelu,
                    W(GPT_FCPROJ_W), N, 4 * C, C);
    zero(s, ws->dfch, NC * 4);
    ops->gelu_bwd(s, ws->dfch, acts + lay->fch, ws->dfchg, NC * 4);
    zero(s, ws->dln, NC);
    ops->matmul_bwd(s, ws->dln, DW(GPT_FC_W), DW(GPT_FC_B), ws->dfch, acts + lay->ln2, W(GPT_FC_W), N, C, 4 * C);
    ops->layernorm_bwd(s, ws->dres, DW(GPT_LN2_W), DW(GPT_LN2_B), ws->dln, acts + lay->res2, W(GPT_LN2_W),
                       acts + lay->ln2_mean, acts + lay->ln2_rstd, N, C);
    /* res2 = x + attproj(attn(qkv(ln1(x)))) */
    zero(s, ws->datty, NC);
    ops->matmul_bwd(s, ws->datty, DW(GPT_ATTPROJ_W), DW(GPT_ATTPROJ_B), ws->dres, acts + lay->atty,
                    W(GPT_ATTPROJ_W), N, C, C);
    zero(s, ws->dqkv, NC * 3);
    if (g->cfg.attention_fused) {
        ops->attention_fused_bwd(s, ws->dqkv, ws->datt, ws->datty, acts + lay->qkv, acts + lay->atty,
                                 acts + lay->att, B, T, C, NH);
    } else {
        /* dfch and dfchg (8 x NC, adjacent) are dead once the MLP's backward
         * is done: lent as scratch, they let a GPU run this backward as GEMMs. */
        ops->attention_bwd(s, ws->dqkv, ws->datt, ws->datty, acts + lay->qkv, acts + lay->att, B, T, C, NH,
                           ws->dfch, NC * 8);
    }
    zero(s, ws->dln, NC);
    ops->matmul_bwd(s, ws->dln, DW(GPT_QKV_W), DW(GPT_QKV_B), ws->dqkv, acts + lay->ln1, W(GPT_QKV_W), N, C, 3 * C);
    ops->layernorm_bwd(s, ws->dres, DW(GPT_LN1_W), DW(GPT_LN1_B), ws->dln, x, W(GPT_LN1_W),
                       acts + lay->ln1_mean, acts + lay->ln1_rstd, N, C);
#undef W
#undef DW
}

zt_status zt_gpt_backward(zt_gpt *g, zt_engine *eng, float dloss) {
    zt_ctx *ctx = eng->ctx;
    const zt_ops *ops = ctx->be->ops;
    zt_stream *s = &ctx->compute;
    int B = g->B, T = g->T, C = g->cfg.d_model, V = g->cfg.vocab, L = g->cfg.layers, NH = g->cfg.heads;
    size_t N = (size_t)B * T, NC = N * C;
    if (!g->head_acts.data) return ZT_FAIL(&ctx->err, ZT_ERR_INVALID, "backward without forward");

    backward_ws ws;
    memset(&ws, 0, sizeof ws);
    ZT_TRY(alloc_f32(ctx, &ws.buf, NC * (1 + 1 + 1 + 3 + 4 + 4) + (size_t)B * NH * T, ZT_CAT_WORKSPACE,
                     "backward grads"));
    ws.dres = zt_f32(&ws.buf);
    ws.dln = ws.dres + NC;
    ws.datty = ws.dln + NC;
    ws.dqkv = ws.datty + NC;
    ws.dfch = ws.dqkv + 3 * NC;
    ws.dfchg = ws.dfch + 4 * NC; /* adjacent to dfch: block_backward lends both as one scratch */
    ws.datt = ws.dfchg + 4 * NC;

    const int32_t *dtok = g->tokens.data, *dtgt = g->targets.data;
    float *lnf = zt_f32(&g->head_acts), *lnf_mean = lnf + NC, *lnf_rstd = lnf_mean + N;
    float *probs = lnf_rstd + N;
    zt_gpt_block_layout lay = zt_gpt_block_layout_for(&g->cfg, B, T);
    const float *xL = L > 0 ? block_output(g, L - 1, &lay) : zt_f32(&g->encoded);

    /* Head. */
    const float *w, *wemb = NULL;
    float *dw, *dwemb = NULL;
    ZT_TRY(zt_engine_gather(eng, g->unit_head, &w));
    ZT_TRY(zt_engine_grad_buffer(eng, g->unit_head, &dw));
    if (g->cfg.tied) {
        ZT_TRY(zt_engine_gather(eng, g->unit_embed, &wemb));
        ZT_TRY(zt_engine_grad_buffer(eng, g->unit_embed, &dwemb));
    }
    const float *lm_w = g->cfg.tied ? param_ptr(g, wemb, g->unit_embed, g->p_wte)
                                    : param_ptr(g, w, g->unit_head, g->p_lm_head);
    float *dlm_w = g->cfg.tied ? grad_ptr(g, dwemb, g->unit_embed, g->p_wte)
                               : grad_ptr(g, dw, g->unit_head, g->p_lm_head);
    ops->softmax_xent_bwd(s, probs, probs, dtgt, (int)N, V, dloss); /* dlogits in place */
    zero(s, ws.dln, NC);
    ops->matmul_bwd(s, ws.dln, dlm_w, NULL, probs, lnf, lm_w, (int)N, C, V);
    zero(s, ws.dres, NC);
    ops->layernorm_bwd(s, ws.dres, grad_ptr(g, dw, g->unit_head, g->p_lnf_w),
                       grad_ptr(g, dw, g->unit_head, g->p_lnf_b), ws.dln, xL,
                       param_ptr(g, w, g->unit_head, g->p_lnf_w), lnf_mean, lnf_rstd, (int)N, C);
    if (g->cfg.tied) zt_engine_release(eng, g->unit_embed);
    zt_engine_release(eng, g->unit_head);
    ZT_TRY(zt_engine_grads_ready(eng, g->unit_head));
    zt_tensor_free(&g->head_acts, &ctx->device_mem);

    /* Blocks, last to first. */
    for (int l = L - 1; l >= 0; l--) {
        int u = g->first_block + l;
        const float *x = block_input(g, l, &lay);
        ZT_TRY(zt_engine_gather(eng, u, &w));
        if (g->cfg.recompute) {
            /* Replay the forward with the parameters just gathered for
             * backward (one gather at stage 3, not two). */
            char label[32];
            snprintf(label, sizeof label, "block%d acts", l);
            ZT_TRY(alloc_f32(ctx, &g->block_acts[l], lay.total, ZT_CAT_ACTIVATIONS, label));
            /* Host time: the replay itself on the CPU; on a GPU the time to
             * enqueue it (a wait here would stall the stream pipeline). */
            double t0 = zt_now_s();
            block_forward(g, s, ops, zt_f32(&g->block_acts[l]), &lay, x, w, u);
            g->recompute_time_s += zt_now_s() - t0;
        }
        ZT_TRY(zt_engine_grad_buffer(eng, u, &dw));
        block_backward(g, s, ops, zt_f32(&g->block_acts[l]), &lay, x, w, dw, u, &ws);
        zt_engine_release(eng, u);
        ZT_TRY(zt_engine_grads_ready(eng, u));
        zt_tensor_free(&g->block_acts[l], &ctx->device_mem);
        if (g->cfg.recompute) zt_tensor_free(&g->block_out[l], &ctx->device_mem);
    }

    /* Embedding. */
    ZT_TRY(zt_engine_grad_buffer(eng, g->unit_embed, &dw));
    ops->embedding_bwd(s, grad_ptr(g, dw, g->unit_embed, g->p_wte), grad_ptr(g, dw, g->unit_embed, g->p_wpe),
                       ws.dres, dtok, B, T, C);
    ZT_TRY(zt_engine_grads_ready(eng, g->unit_embed));
    zt_tensor_free(&ws.buf, &ctx->device_mem);
    zt_gpt_free_activations(g, eng);
    return ZT_OK;
}

void zt_gpt_activation_bytes(const zt_gpt *g, int B, int T, int recompute, size_t *per_unit,
                             size_t *transient_bytes) {
    size_t N = (size_t)B * T, C = (size_t)g->cfg.d_model, V = (size_t)g->cfg.vocab, NH = (size_t)g->cfg.heads;
    zt_gpt_block_layout lay = zt_gpt_block_layout_for(&g->cfg, B, T);
    for (int u = 0; u < g->spec->nunits; u++) per_unit[u] = 0;
    per_unit[g->unit_embed] = N * C * 4;
    for (int l = 0; l < g->cfg.layers; l++) per_unit[g->first_block + l] = (recompute ? N * C : lay.total) * 4;
    per_unit[g->unit_head] = (N * C + 2 * N + N * V + N) * 4;
    /* backward workspace (see zt_gpt_backward) plus, under recompute, one replayed block */
    size_t ws = (N * C * 14 + (size_t)B * NH * T) * 4;
    *transient_bytes = ws + (recompute && g->cfg.layers > 0 ? lay.total * 4 : 0);
}
