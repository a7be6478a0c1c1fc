/* The GPT's layers for the decoder scaffold (zt_decoder_ops): the kernels
 * of its blocks (forward, selective replay, backward), embedding and head,
 * over the activation layouts of gpt.c. */
#include "gpt.h"

#include <string.h>

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
    float *datt; /* [B,NH/P,T_full] fp32 attention scratch */
    /* Sequence parallelism: the head split's gradients (== dqkv, datty when P = 1) */
    void *dqkvh;  /* [B,T_full,3C/P] */
    void *dattyh; /* [B,T_full,C/P] */
    size_t elem; /* bytes per element of the compute dtype */
} backward_ws;

static backward_ws carve_ws(const zt_decoder *d, char *base) {
    zt_act_shape sh = zt_decoder_shape(d);
    size_t NC = (size_t)d->B * d->T * d->cfg.d_model, e = zt_dtype_size(d->act), o = 0;
    size_t NCf = (size_t)sh.B * sh.T_full * (size_t)(d->cfg.d_model / sh.P);
    backward_ws ws = {.elem = e}; /* [14 NC] act, [B,NH/P,T_full] fp32, then the head split's [4 NCf] act */
    ws.dres = base;
    ws.dln = base + NC * e;
    ws.datty = base + 2 * NC * e;
    ws.dqkv = base + 3 * NC * e;
    ws.dfch = base + 6 * NC * e;
    ws.dfchg = base + 10 * NC * e;
    zt_decoder_place(&o, 14 * NC, e);
    ws.datt = (float *)(base + zt_decoder_place(&o, (size_t)sh.B * (size_t)(d->cfg.heads / sh.P) * sh.T_full, 4));
    ws.dqkvh = ws.dqkv, ws.dattyh = ws.datty;
    if (sh.P > 1) {
        ws.dqkvh = base + zt_decoder_place(&o, NCf * 3, e);
        ws.dattyh = base + zt_decoder_place(&o, NCf, e);
    }
    return ws;
}

/* Attention's exchanges: the QKV GEMM's output is q, k, v of C each; the
 * attention output one part of C. */
static const size_t *qkv_parts(const zt_gpt *g, size_t w[3]) {
    w[0] = w[1] = w[2] = (size_t)g->cfg.d_model;
    return w;
}

/* Inside a block's kernels: parameter p of the gathered unit w, its
 * gradient in dw, and activation field f of the block's buffer (F: the
 * fp32 statistics). */
#define W(p) zt_decoder_param(d, w, u, p)
#define DW(p) zt_decoder_grad(d, dw, u, p)
#define A(f) (acts + lay.f)
#define F(f) ((float *)(acts + lay.f))

/* Attention over the head split (the whole of it when P = 1): qkv to
 * attyh, then attyh's exchange back to atty [B,T,C]. */
static void attention(zt_decoder *d, zt_stream *s, const zt_ops *ops, char *acts, zt_gpt_block_layout lay) {
    const zt_gpt *g = d->family;
    int P = d->sp ? d->sp->P : 1, Tf = d->T_full, C = g->cfg.d_model / P, NH = g->cfg.heads / P;
    if (g->cfg.attention_fused) ops->attention_fused_fwd(s, A(attyh), F(att), A(qkv), d->B, Tf, C, NH);
    else ops->attention_fwd(s, A(attyh), A(att), A(qkv), d->B, Tf, C, NH);
    size_t part = (size_t)g->cfg.d_model;
    if (d->sp) zt_decoder_heads_to_seq(d, s, A(atty), A(attyh), 1, &part);
}

/* One block's forward from x[B,T,C] into its activation buffer (res3 is the output). */
static void block_forward(zt_decoder *d, zt_stream *s, const zt_ops *ops, char *acts, const void *x, const void *w,
                          int u) {
    const zt_gpt *g = d->family;
    zt_gpt_block_layout lay = zt_gpt_block_layout_for(&g->cfg, zt_decoder_shape(d), d->act);
    int C = g->cfg.d_model, N = d->B * d->T;
    ops->layernorm_fwd(s, A(ln1), F(ln1_mean), F(ln1_rstd), x, W(GPT_LN1_W), W(GPT_LN1_B), N, C);
    ops->matmul_fwd(s, A(qkv_seq), A(ln1), W(GPT_QKV_W), W(GPT_QKV_B), N, C, 3 * C);
    size_t parts[3];
    if (d->sp) zt_decoder_seq_to_heads(d, s, A(qkv), A(qkv_seq), 3, qkv_parts(g, parts));
    attention(d, s, ops, acts, lay);
    ops->matmul_fwd(s, A(res2), A(atty), W(GPT_ATTPROJ_W), W(GPT_ATTPROJ_B), N, C, C);
    ops->residual_fwd(s, A(res2), A(res2), x, (size_t)N * C);
    ops->layernorm_fwd(s, A(ln2), F(ln2_mean), F(ln2_rstd), A(res2), W(GPT_LN2_W), W(GPT_LN2_B), N, C);
    ops->matmul_fwd(s, A(fch), A(ln2), W(GPT_FC_W), W(GPT_FC_B), N, C, 4 * C);
    ops->gelu_fwd(s, A(fch_gelu), A(fch), (size_t)N * 4 * C);
    ops->matmul_fwd(s, A(res3), A(fch_gelu), W(GPT_FCPROJ_W), W(GPT_FCPROJ_B), N, 4 * C, C);
    ops->residual_fwd(s, A(res3), A(res3), A(res2), (size_t)N * C);
}

/* Selective recomputation keeps the GEMM outputs: (offset in the block's
 * activations, offset in the kept buffer, bytes). */
static int kept_pieces(const zt_decoder *d, size_t *from, size_t *to, size_t *n, size_t *total) {
    const zt_gpt *g = d->family;
    zt_gpt_block_layout lay = zt_gpt_block_layout_for(&g->cfg, zt_decoder_shape(d), d->act);
    zt_gpt_kept_layout k = zt_gpt_kept_layout_for(&g->cfg, zt_decoder_shape(d), d->act);
    size_t f[4] = {lay.qkv, lay.res2, lay.fch, lay.res3}, t[4] = {k.qkv, k.res2, k.fch, k.res3};
    /* each piece's bytes: up to the next one's place in the kept buffer
     * (the head split's q, k, v is [B,T_full,3C/P], not [B,T,3C], when P
     * does not divide T) */
    size_t m[4] = {k.res2 - k.qkv, k.fch - k.res2, k.res3 - k.fch,
                   (size_t)d->B * d->T * g->cfg.d_model * zt_dtype_size(d->act)};
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
    zt_gpt_block_layout lay = zt_gpt_block_layout_for(&g->cfg, zt_decoder_shape(d), d->act);
    int C = g->cfg.d_model, N = d->B * d->T;
    ops->layernorm_fwd(s, A(ln1), F(ln1_mean), F(ln1_rstd), x, W(GPT_LN1_W), W(GPT_LN1_B), N, C);
    attention(d, s, ops, acts, lay);
    ops->layernorm_fwd(s, A(ln2), F(ln2_mean), F(ln2_rstd), A(res2), W(GPT_LN2_W), W(GPT_LN2_B), N, C);
    ops->gelu_fwd(s, A(fch_gelu), A(fch), (size_t)N * 4 * C);
}

static void block_backward(zt_decoder *d, zt_stream *s, const zt_ops *ops, const char *acts, const void *x,
                           const void *w, float *dw, int u, char *ws_base) {
    const zt_gpt *g = d->family;
    zt_gpt_block_layout lay = zt_gpt_block_layout_for(&g->cfg, zt_decoder_shape(d), d->act);
    backward_ws wsv = carve_ws(d, ws_base), *ws = &wsv;
    int B = d->B, T = d->T, C = g->cfg.d_model, NH = g->cfg.heads, N = B * T;
    size_t NC = (size_t)N * C, e = ws->elem;
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
    /* Sequence parallelism: attention's backward on the head split, between the exchanges. */
    int P = d->sp ? d->sp->P : 1, Tf = d->T_full, Cp = C / P, NHp = NH / P;
    size_t part = (size_t)C, parts[3];
    if (d->sp) zt_decoder_seq_to_heads(d, s, ws->dattyh, ws->datty, 1, &part);
    zt_decoder_zero(s, ws->dqkvh, (size_t)B * Tf * 3 * Cp, e);
    /* dfch and dfchg (8 x NC, adjacent) are dead once the MLP's backward is
     * done: lent as scratch, they let a GPU run this backward as GEMMs and
     * a 16-bit CPU run sum its gradients in fp32. */
    if (g->cfg.attention_fused)
        ops->attention_fused_bwd(s, ws->dqkvh, ws->datt, ws->dattyh, A(qkv), A(attyh), F(att), B, Tf, Cp, NHp,
                                 ws->dfch, NC * 8 * e);
    else
        ops->attention_bwd(s, ws->dqkvh, ws->datt, ws->dattyh, A(qkv), A(att), B, Tf, Cp, NHp, ws->dfch, NC * 8 * e);
    if (d->sp) zt_decoder_heads_to_seq(d, s, ws->dqkv, ws->dqkvh, 3, qkv_parts(g, parts));
    ops->matmul_bwd(s, ws->dln, DW(GPT_QKV_W), DW(GPT_QKV_B), ws->dqkv, A(ln1), W(GPT_QKV_W), N, C, 3 * C);
    ops->layernorm_bwd(s, ws->dres, DW(GPT_LN1_W), DW(GPT_LN1_B), ws->dln, x, W(GPT_LN1_W), F(ln1_mean),
                       F(ln1_rstd), N, C);
}

#undef W
#undef DW
#undef A
#undef F

static void embed_forward(zt_decoder *d, zt_stream *s, const zt_ops *ops, void *out, const int32_t *tokens,
                          const void *w) {
    const zt_gpt *g = d->family;
    /* this rank's positions start at t0 (sequence parallelism): wpe's rows from there */
    const char *wpe = (const char *)zt_decoder_param(d, w, d->unit_embed, g->p_wpe) +
                      (size_t)d->t0 * g->cfg.d_model * zt_dtype_size(d->act);
    ops->embedding_fwd(s, out, tokens, zt_decoder_param(d, w, d->unit_embed, g->p_wte), wpe, d->B, d->T,
                       g->cfg.d_model);
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

/* The embedding's gradients from ws's dres [N,C], the first block's input's. */
static void embed_backward(zt_decoder *d, zt_stream *s, const zt_ops *ops, float *dw, const int32_t *tokens,
                           char *ws_base) {
    const zt_gpt *g = d->family;
    backward_ws ws = carve_ws(d, ws_base);
    ops->embedding_bwd(s, zt_decoder_grad(d, dw, d->unit_embed, g->p_wte),
                       zt_decoder_grad(d, dw, d->unit_embed, g->p_wpe) + (size_t)d->t0 * g->cfg.d_model, ws.dres,
                       tokens, d->B, d->T, g->cfg.d_model);
}

static size_t block_acts_bytes(const zt_decoder *d) {
    return zt_gpt_block_layout_for(&((const zt_gpt *)d->family)->cfg, zt_decoder_shape(d), d->act).total;
}
static size_t block_output_offset(const zt_decoder *d) {
    return zt_gpt_block_layout_for(&((const zt_gpt *)d->family)->cfg, zt_decoder_shape(d), d->act).res3;
}
static size_t head_acts_bytes(const zt_decoder *d) {
    return zt_gpt_head_layout_for(&((const zt_gpt *)d->family)->cfg, d->B, d->T, d->act).total;
}
static size_t head_losses_offset(const zt_decoder *d) {
    return zt_gpt_head_layout_for(&((const zt_gpt *)d->family)->cfg, d->B, d->T, d->act).losses;
}
static size_t backward_ws_bytes(const zt_decoder *d) {
    return zt_gpt_backward_workspace_bytes(&((const zt_gpt *)d->family)->cfg, zt_decoder_shape(d), d->act);
}

const zt_decoder_ops gpt_decoder_ops = {
    block_acts_bytes, kept_pieces, block_output_offset, head_acts_bytes, head_losses_offset, backward_ws_bytes,
    embed_forward,    block_forward, block_replay,      head_forward,    head_backward,      block_backward,
    embed_backward,
};
