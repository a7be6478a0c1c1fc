/* The toy GPT's layers over the decoder scaffold (train/zt_decoder.h):
 * its units and parameters, their initial values, its activation layouts
 * and the kernels of its embedding, blocks and head. */
#include "gpt.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zt_rng.h"

static const zt_decoder_ops gpt_decoder_ops;

static zt_status add_param(zt_gpt *g, int unit, const char *name, int ndim, int64_t d0, int64_t d1, int decay,
                           int *idx, zt_error *err) {
    return zt_decoder_add_param(&g->dec, unit, name, ndim, d0, d1, decay, idx, err);
}

/* Block l's unit, its parameters declared in the order of the GPT_* enum. */
static zt_status add_block(zt_gpt *g, int l, zt_error *err) {
    int C = g->cfg.d_model, u, idx;
    char name[32];
    snprintf(name, sizeof name, "block%d", l);
    ZT_TRY(zt_decoder_add_unit(&g->dec, name, &u, err));
    if (l == 0) g->dec.first_block = u;
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
    return add_param(g, u, "fcproj_b", 1, C, 0, 0, &idx, err);
}

zt_status zt_gpt_create(zt_gpt *g, const zt_gpt_config *cfg, zt_error *err) {
    memset(g, 0, sizeof *g);
    g->cfg = *cfg;
    int C = cfg->d_model, V = cfg->vocab, L = cfg->layers;
    if (cfg->heads <= 0 || C % cfg->heads != 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "d_model (%d) must be divisible by heads (%d)", C, cfg->heads);
    zt_model_settings s = {.layers = L, .d_model = C, .heads = cfg->heads, .seq_len = cfg->seq_len, .vocab = V,
                           .micro_batch = cfg->micro_batch, .tied = cfg->tied, .seed = cfg->seed,
                           .recompute = cfg->recompute, .attention_fused = cfg->attention_fused,
                           .offload_activations = cfg->offload_activations};
    ZT_TRY(zt_decoder_init(&g->dec, &gpt_decoder_ops, g, &s, err));
    ZT_TRY(zt_decoder_add_unit(&g->dec, "embedding", &g->dec.unit_embed, err));
    ZT_TRY(add_param(g, g->dec.unit_embed, "wte", 2, V, C, 1, &g->p_wte, err));
    ZT_TRY(add_param(g, g->dec.unit_embed, "wpe", 2, cfg->seq_len, C, 1, &g->p_wpe, err));
    for (int l = 0; l < L; l++) ZT_TRY(add_block(g, l, err));
    ZT_TRY(zt_decoder_add_unit(&g->dec, "head", &g->dec.unit_head, err));
    ZT_TRY(add_param(g, g->dec.unit_head, "lnf_w", 1, C, 0, 0, &g->p_lnf_w, err));
    ZT_TRY(add_param(g, g->dec.unit_head, "lnf_b", 1, C, 0, 0, &g->p_lnf_b, err));
    g->p_lm_head = -1;
    if (!cfg->tied) ZT_TRY(add_param(g, g->dec.unit_head, "lm_head", 2, V, C, 1, &g->p_lm_head, err));
    return ZT_OK;
}

void zt_gpt_destroy(zt_gpt *g) { zt_decoder_destroy(&g->dec); }

void zt_gpt_init_param(void *arg, int unit, int param, float *dst) {
    const zt_gpt *g = arg;
    const zt_param_spec *ps = &g->dec.spec->units[unit].params[param];
    int is_block = unit >= g->dec.first_block && unit < g->dec.first_block + g->cfg.layers;
    float fill = 0.0f, stddev = 0.0f;
    if (is_block) {
        switch (param) {
        case GPT_LN1_W: case GPT_LN2_W: fill = 1.0f; break;
        case GPT_QKV_W: case GPT_FC_W: stddev = 0.02f; break;
        /* Projections into the residual stream shrink with depth (GPT-2). */
        case GPT_ATTPROJ_W: case GPT_FCPROJ_W: stddev = 0.02f / sqrtf(2.0f * (float)g->cfg.layers); break;
        default: break;
        }
    } else if (unit == g->dec.unit_head && param == g->p_lnf_w) {
        fill = 1.0f;
    } else if (unit == g->dec.unit_embed || param == g->p_lm_head) {
        stddev = 0.02f;
    }
    zt_rng r = zt_rng_keyed(g->cfg.seed, 0x1417u, (uint64_t)unit, (uint64_t)param);
    for (size_t i = 0; i < ps->numel; i++) dst[i] = stddev > 0.0f ? stddev * zt_rng_normal(&r) : fill;
}

zt_gpt_block_layout zt_gpt_block_layout_for(const zt_gpt_config *cfg, int B, int T, zt_dtype act) {
    size_t BT = (size_t)B * T, C = (size_t)cfg->d_model, NH = (size_t)cfg->heads, d = zt_dtype_size(act);
    zt_gpt_block_layout l;
    size_t o = 0;
    l.ln1 = zt_decoder_place(&o, BT * C, d);
    l.ln1_mean = zt_decoder_place(&o, BT, 4);
    l.ln1_rstd = zt_decoder_place(&o, BT, 4);
    l.qkv = zt_decoder_place(&o, BT * 3 * C, d);
    if (cfg->attention_fused) l.att = zt_decoder_place(&o, (size_t)B * NH * T, 4); /* lse, fp32 */
    else l.att = zt_decoder_place(&o, (size_t)B * NH * T * T, d);
    l.atty = zt_decoder_place(&o, BT * C, d);
    l.res2 = zt_decoder_place(&o, BT * C, d);
    l.ln2 = zt_decoder_place(&o, BT * C, d);
    l.ln2_mean = zt_decoder_place(&o, BT, 4);
    l.ln2_rstd = zt_decoder_place(&o, BT, 4);
    l.fch = zt_decoder_place(&o, BT * 4 * C, d);
    l.fch_gelu = zt_decoder_place(&o, BT * 4 * C, d);
    l.res3 = zt_decoder_place(&o, BT * C, d);
    l.total = (o + 3) & ~(size_t)3;
    return l;
}

zt_gpt_head_layout zt_gpt_head_layout_for(const zt_gpt_config *cfg, int B, int T, zt_dtype act) {
    size_t N = (size_t)B * T, d = zt_dtype_size(act), o = 0;
    zt_gpt_head_layout h;
    h.lnf = zt_decoder_place(&o, N * (size_t)cfg->d_model, d);
    h.lnf_mean = zt_decoder_place(&o, N, 4);
    h.lnf_rstd = zt_decoder_place(&o, N, 4);
    h.probs = zt_decoder_place(&o, N * (size_t)cfg->vocab, d);
    h.losses = zt_decoder_place(&o, N, 4);
    h.total = (o + 3) & ~(size_t)3;
    return h;
}

size_t zt_gpt_backward_workspace_bytes(const zt_gpt_config *cfg, int B, int T, zt_dtype act) {
    size_t NC = (size_t)B * T * cfg->d_model, o = 0;
    zt_decoder_place(&o, NC * 14, zt_dtype_size(act));
    zt_decoder_place(&o, (size_t)B * cfg->heads * T, 4);
    return (o + 3) & ~(size_t)3;
}

zt_gpt_kept_layout zt_gpt_kept_layout_for(const zt_gpt_config *cfg, int B, int T, zt_dtype act) {
    size_t BT = (size_t)B * T, C = (size_t)cfg->d_model, d = zt_dtype_size(act), o = 0;
    zt_gpt_kept_layout k;
    k.qkv = zt_decoder_place(&o, BT * 3 * C, d);
    k.res2 = zt_decoder_place(&o, BT * C, d);
    k.fch = zt_decoder_place(&o, BT * 4 * C, d);
    k.res3 = zt_decoder_place(&o, BT * C, d);
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

/* Gradients of activations, in the compute dtype, and the attention
 * scratch, carved from the backward's workspace
 * (zt_gpt_backward_workspace_bytes). */
typedef struct {
    void *dres;  /* [N,C] gradient of the residual stream, carried through the blocks */
    void *dln;   /* [N,C] */
    void *datty; /* [N,C] */
    void *dqkv;  /* [N,3C] */
    void *dfch;  /* [N,4C] */
    void *dfchg; /* [N,4C], adjacent to dfch: block_backward lends both as one scratch */
    float *datt; /* [B,NH,T] fp32 attention scratch */
    size_t elem; /* bytes per element of the compute dtype */
} backward_ws;

static backward_ws carve_ws(const zt_decoder *d, char *base) {
    size_t NC = (size_t)d->B * d->T * d->cfg.d_model, e = zt_dtype_size(d->act);
    backward_ws ws = {.elem = e}; /* [14 NC] act, then [B,NH,T] fp32 */
    ws.dres = base;
    ws.dln = base + NC * e;
    ws.datty = base + 2 * NC * e;
    ws.dqkv = base + 3 * NC * e;
    ws.dfch = base + 6 * NC * e;
    ws.dfchg = base + 10 * NC * e;
    ws.datt = (float *)(base + ((14 * NC * e + 3) & ~(size_t)3));
    return ws;
}

/* One block's forward from x[B,T,C] into its activation buffer (res3 is the output). */
static void block_forward(zt_decoder *d, zt_stream *s, const zt_ops *ops, char *acts, const void *x, const void *w,
                          int u) {
    const zt_gpt *g = d->family;
    zt_gpt_block_layout layout = zt_gpt_block_layout_for(&g->cfg, d->B, d->T, d->act), *lay = &layout;
    int B = d->B, T = d->T, C = g->cfg.d_model, NH = g->cfg.heads, N = B * T;
#define W(p) zt_decoder_param(d, w, u, p)
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

/* Selective recomputation keeps the GEMM outputs: (offset in the block's
 * activations, offset in the kept buffer, bytes). */
static int kept_pieces(const zt_decoder *d, size_t *from, size_t *to, size_t *n, size_t *total) {
    const zt_gpt *g = d->family;
    size_t NC = (size_t)d->B * d->T * g->cfg.d_model, e = zt_dtype_size(d->act);
    zt_gpt_block_layout lay = zt_gpt_block_layout_for(&g->cfg, d->B, d->T, d->act);
    zt_gpt_kept_layout k = zt_gpt_kept_layout_for(&g->cfg, d->B, d->T, d->act);
    size_t f[4] = {lay.qkv, lay.res2, lay.fch, lay.res3}, t[4] = {k.qkv, k.res2, k.fch, k.res3};
    size_t m[4] = {3 * NC * e, NC * e, 4 * NC * e, NC * e};
    memcpy(from, f, sizeof f);
    memcpy(to, t, sizeof t);
    memcpy(n, m, sizeof m);
    *total = k.total;
    return 4;
}

/* The rest of a block's activations from its kept GEMM outputs: the
 * layernorms, the attention and GELU. */
static void block_replay(zt_decoder *d, zt_stream *s, const zt_ops *ops, char *acts, const void *x, const void *w,
                         int u) {
    const zt_gpt *g = d->family;
    zt_gpt_block_layout lay = zt_gpt_block_layout_for(&g->cfg, d->B, d->T, d->act);
    int B = d->B, T = d->T, C = g->cfg.d_model, NH = g->cfg.heads, N = B * T;
#define W(p) zt_decoder_param(d, w, u, p)
#define A(f) (acts + lay.f)
#define F(f) ((float *)(acts + lay.f))
    ops->layernorm_fwd(s, A(ln1), F(ln1_mean), F(ln1_rstd), x, W(GPT_LN1_W), W(GPT_LN1_B), N, C);
    if (g->cfg.attention_fused) ops->attention_fused_fwd(s, A(atty), F(att), A(qkv), B, T, C, NH);
    else ops->attention_fwd(s, A(atty), A(att), A(qkv), B, T, C, NH);
    ops->layernorm_fwd(s, A(ln2), F(ln2_mean), F(ln2_rstd), A(res2), W(GPT_LN2_W), W(GPT_LN2_B), N, C);
    ops->gelu_fwd(s, A(fch_gelu), A(fch), (size_t)N * 4 * C);
#undef W
#undef A
#undef F
}

static void embed_forward(zt_decoder *d, zt_stream *s, const zt_ops *ops, void *out, const int32_t *tokens,
                          const void *w) {
    const zt_gpt *g = d->family;
    ops->embedding_fwd(s, out, tokens, zt_decoder_param(d, w, d->unit_embed, g->p_wte),
                       zt_decoder_param(d, w, d->unit_embed, g->p_wpe), d->B, d->T, g->cfg.d_model);
}

/* Final layernorm, LM head (the tied embedding's wte when tied), softmax
 * cross-entropy: the logits become the probabilities in place. */
static void head_forward(zt_decoder *d, zt_stream *s, const zt_ops *ops, char *acts, const void *x, const void *w,
                         const void *wemb, const int32_t *targets) {
    const zt_gpt *g = d->family;
    int C = g->cfg.d_model, V = g->cfg.vocab, N = d->B * d->T;
    zt_gpt_head_layout hl = zt_gpt_head_layout_for(&g->cfg, d->B, d->T, d->act);
    float *lnf_mean = (float *)(acts + hl.lnf_mean), *lnf_rstd = (float *)(acts + hl.lnf_rstd); /* [N] fp32 */
    const void *lm_w = g->cfg.tied ? zt_decoder_param(d, wemb, d->unit_embed, g->p_wte)
                                   : zt_decoder_param(d, w, d->unit_head, g->p_lm_head); /* [V,C] */
    ops->layernorm_fwd(s, acts + hl.lnf, lnf_mean, lnf_rstd, x, zt_decoder_param(d, w, d->unit_head, g->p_lnf_w),
                       zt_decoder_param(d, w, d->unit_head, g->p_lnf_b), N, C);
    ops->matmul_fwd(s, acts + hl.probs, acts + hl.lnf, lm_w, NULL, N, C, V);
    ops->softmax_xent_fwd(s, (float *)(acts + hl.losses), acts + hl.probs, acts + hl.probs, targets, N, V);
}

/* The head's backward (cross-entropy, LM head, final layernorm) from the
 * last block's output xL [N,C]: its gradient into ws's dres. */
static void head_backward(zt_decoder *d, zt_stream *s, const zt_ops *ops, char *acts, const void *xL, const void *w,
                          float *dw, const void *wemb, float *dwemb, const int32_t *targets, float dloss,
                          char *ws_base) {
    const zt_gpt *g = d->family;
    int C = g->cfg.d_model, V = g->cfg.vocab, N = d->B * d->T;
    backward_ws ws = carve_ws(d, ws_base);
    zt_gpt_head_layout hl = zt_gpt_head_layout_for(&g->cfg, d->B, d->T, d->act);
    void *lnf = acts + hl.lnf, *probs = acts + hl.probs; /* [N,C], [N,V] act */
    const float *lnf_mean = (const float *)(acts + hl.lnf_mean), *lnf_rstd = (const float *)(acts + hl.lnf_rstd);
    const void *lm_w = g->cfg.tied ? zt_decoder_param(d, wemb, d->unit_embed, g->p_wte)
                                   : zt_decoder_param(d, w, d->unit_head, g->p_lm_head); /* [V,C] */
    float *dlm_w = g->cfg.tied ? zt_decoder_grad(d, dwemb, d->unit_embed, g->p_wte)
                               : zt_decoder_grad(d, dw, d->unit_head, g->p_lm_head); /* [V,C] fp32 */
    ops->softmax_xent_bwd(s, probs, probs, targets, N, V, dloss); /* dlogits in place */
    ops->matmul_bwd(s, ws.dln, dlm_w, NULL, probs, lnf, lm_w, N, C, V);
    zt_decoder_zero(s, ws.dres, (size_t)N * C, ws.elem);
    ops->layernorm_bwd(s, ws.dres, zt_decoder_grad(d, dw, d->unit_head, g->p_lnf_w),
                       zt_decoder_grad(d, dw, d->unit_head, g->p_lnf_b), ws.dln, xL,
                       zt_decoder_param(d, w, d->unit_head, g->p_lnf_w), lnf_mean, lnf_rstd, N, C);
}

static void block_backward(zt_decoder *d, zt_stream *s, const zt_ops *ops, const char *acts, const void *x,
                           const void *w, float *dw, int u, char *ws_base) {
    const zt_gpt *g = d->family;
    zt_gpt_block_layout layout = zt_gpt_block_layout_for(&g->cfg, d->B, d->T, d->act), *lay = &layout;
    backward_ws wsv = carve_ws(d, ws_base), *ws = &wsv;
    int B = d->B, T = d->T, C = g->cfg.d_model, NH = g->cfg.heads, N = B * T;
    size_t NC = (size_t)N * C, e = ws->elem;
#define W(p) zt_decoder_param(d, w, u, p)
#define DW(p) zt_decoder_grad(d, dw, u, p)
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
    zt_decoder_zero(s, ws->dqkv, NC * 3, e);
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

/* The embedding's gradients from ws's dres [N,C], the first block's input's. */
static void embed_backward(zt_decoder *d, zt_stream *s, const zt_ops *ops, float *dw, const int32_t *tokens,
                           char *ws_base) {
    const zt_gpt *g = d->family;
    backward_ws ws = carve_ws(d, ws_base);
    ops->embedding_bwd(s, zt_decoder_grad(d, dw, d->unit_embed, g->p_wte),
                       zt_decoder_grad(d, dw, d->unit_embed, g->p_wpe), ws.dres, tokens, d->B, d->T,
                       g->cfg.d_model);
}

static size_t block_acts_bytes(const zt_decoder *d) {
    return zt_gpt_block_layout_for(&((const zt_gpt *)d->family)->cfg, d->B, d->T, d->act).total;
}
static size_t block_output_offset(const zt_decoder *d) {
    return zt_gpt_block_layout_for(&((const zt_gpt *)d->family)->cfg, d->B, d->T, d->act).res3;
}
static size_t head_acts_bytes(const zt_decoder *d) {
    return zt_gpt_head_layout_for(&((const zt_gpt *)d->family)->cfg, d->B, d->T, d->act).total;
}
static size_t head_losses_offset(const zt_decoder *d) {
    return zt_gpt_head_layout_for(&((const zt_gpt *)d->family)->cfg, d->B, d->T, d->act).losses;
}
static size_t backward_ws_bytes(const zt_decoder *d) {
    return zt_gpt_backward_workspace_bytes(&((const zt_gpt *)d->family)->cfg, d->B, d->T, d->act);
}

static const zt_decoder_ops gpt_decoder_ops = {
    block_acts_bytes, kept_pieces, block_output_offset, head_acts_bytes, head_losses_offset, backward_ws_bytes,
    embed_forward,    block_forward, block_replay,      head_forward,    head_backward,      block_backward,
    embed_backward,
};

zt_status zt_gpt_forward(zt_gpt *g, zt_engine *eng, const int32_t *tokens, const int32_t *targets, int B, int T,
                         float *mean_loss) {
    return zt_decoder_forward(&g->dec, eng, tokens, targets, B, T, mean_loss);
}

zt_status zt_gpt_backward(zt_gpt *g, zt_engine *eng, float dloss) { return zt_decoder_backward(&g->dec, eng, dloss); }

zt_status zt_gpt_take_losses(zt_gpt *g, zt_ctx *ctx, double *sum_of_means) {
    return zt_decoder_take_losses(&g->dec, ctx, sum_of_means);
}

void zt_gpt_free_activations(zt_gpt *g, zt_engine *eng) { zt_decoder_free_activations(&g->dec, eng); }

zt_status zt_gpt_freeze(zt_gpt *g, const char *list, zt_error *err) { return zt_decoder_freeze(&g->dec, list, err); }
_Static_assert(offsetof(zt_gpt, dec) == 0, "the decoder scaffold's shared hooks take a zt_gpt as its zt_decoder");
