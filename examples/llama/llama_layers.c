/* The Llama family's layers for the decoder scaffold (zt_decoder_ops): the
 * kernels of its blocks (forward, selective replay, backward), embedding
 * and head, over the activation layouts of llama.c. */
#include "llama.h"

#include <string.h>

/* The backward's workspace carved (zt_llama_ws_layout_for). */
typedef struct {
    void *dres, *drn, *datty; /* [N,C] act; dres carries the residual stream's gradient */
    void *dqkv_full;          /* [B*T_full,3C/P] act: attention's gradient on the head split */
    void *dqkvh;              /* [B*T_full,QKV/P] act (== dqkv_full without GQA) */
    void *dqkv;               /* [N,QKV] act: the sequence split (== dqkvh when P = 1) */
    void *dattyh;             /* [B*T_full,C/P] act (== datty when P = 1) */
    void *dsw, *dgu;          /* [N,F], [N,2F] act, adjacent */
    float *datt;              /* [B,NH/P,T_full] fp32 */
    size_t scratch_bytes;     /* dsw..dgu, lent to the attention's backward */
    size_t elem;
} llama_ws;

static llama_ws carve_ws(const zt_decoder *d, char *base) {
    const zt_model_settings *s = &d->cfg;
    size_t N = (size_t)d->B * d->T, F = (size_t)s->ffn_dim, e = zt_dtype_size(d->act);
    zt_llama_ws_layout w = zt_llama_ws_layout_for(s, zt_decoder_shape(d), d->act);
    llama_ws ws = {.elem = e};
    ws.dres = base + w.dres, ws.drn = base + w.drn, ws.datty = base + w.datty;
    ws.dqkv_full = base + w.dqkv_full, ws.dqkvh = base + w.dqkvh, ws.dqkv = base + w.dqkv;
    ws.dattyh = base + w.dattyh;
    ws.dsw = base + w.dsw;
    ws.dgu = (char *)ws.dsw + N * F * e;
    ws.scratch_bytes = 3 * N * F * e;
    ws.datt = (float *)(base + w.datt);
    return ws;
}

/* The projection's parts for the exchanges: q (NH heads), k and v (NKV each). */
static const size_t *qkv_parts(const zt_llama *m, size_t w[3]) {
    w[0] = (size_t)m->cfg.heads * m->head_dim;
    w[1] = w[2] = (size_t)m->cfg.kv_heads * m->head_dim;
    return w;
}

#define W(p) zt_decoder_param(d, w, u, p)
#define DW(p) zt_decoder_grad(d, dw, u, p)
#define A(f) (acts + lay.f)
#define F32(f) ((float *)(acts + lay.f))

/* Attention over the rotated projection (the head split's NH/P heads over
 * T_full), expanded to every query head first under GQA, then its output's
 * exchange back to the sequence split. */
static void attention_forward(zt_decoder *d, zt_stream *s, const zt_ops *ops, char *acts,
                              const zt_llama_block_layout lay) {
    const zt_llama *m = d->family;
    int P = d->sp ? d->sp->P : 1, B = d->B, Tf = d->T_full, C = m->cfg.d_model / P, NH = m->cfg.heads / P;
    if (zt_llama_gqa(&m->cfg))
        ops->gqa_expand(s, A(qkv_full), A(qkv), B * Tf, NH, m->cfg.kv_heads / P, m->head_dim);
    if (m->cfg.attention_fused) ops->attention_fused_fwd(s, A(attyh), F32(att), A(qkv_full), B, Tf, C, NH);
    else ops->attention_fwd(s, A(attyh), A(att), A(qkv_full), B, Tf, C, NH);
    size_t part = (size_t)m->cfg.d_model;
    if (d->sp) zt_decoder_heads_to_seq(d, s, A(atty), A(attyh), 1, &part);
}

/* A block's forward from x [N,C] into its activations (res3 is the output). */
static void block_forward(zt_decoder *d, zt_stream *s, const zt_ops *ops, char *acts, const void *x, const void *w,
                          int u) {
    const zt_llama *m = d->family;
    zt_llama_block_layout lay = zt_llama_block_layout_for(&m->cfg, zt_decoder_shape(d), d->act);
    int C = m->cfg.d_model, F = m->cfg.ffn_dim, N = d->B * d->T, P = d->sp ? d->sp->P : 1;
    float eps = (float)m->cfg.norm_eps;
    size_t parts[3];
    ops->rmsnorm_fwd(s, A(rn1), F32(rstd1), x, W(LLAMA_ATTN_NORM_W), N, C, eps);
    ops->matmul_fwd(s, A(qkv_seq), A(rn1), W(LLAMA_QKV_W), NULL, N, C, m->qkv_dim);
    if (d->sp) zt_decoder_seq_to_heads(d, s, A(qkv), A(qkv_seq), 3, qkv_parts(m, parts));
    /* rotated on the head split: its positions are the whole sequence's, 0..T_full-1 */
    ops->rope_fwd(s, A(qkv), d->B, d->T_full, m->cfg.heads / P, m->cfg.kv_heads / P, m->head_dim,
                  (float)m->cfg.rope_theta);
    attention_forward(d, s, ops, acts, lay);
    ops->matmul_fwd(s, A(res2), A(atty), W(LLAMA_ATTPROJ_W), NULL, N, C, C);
    ops->residual_fwd(s, A(res2), A(res2), x, (size_t)N * C);
    ops->rmsnorm_fwd(s, A(rn2), F32(rstd2), A(res2), W(LLAMA_MLP_NORM_W), N, C, eps);
    ops->matmul_fwd(s, A(gu), A(rn2), W(LLAMA_GATE_UP_W), NULL, N, C, 2 * F);
    ops->swiglu_fwd(s, A(sw), A(gu), N, F);
    ops->matmul_fwd(s, A(res3), A(sw), W(LLAMA_DOWN_W), NULL, N, F, C);
    ops->residual_fwd(s, A(res3), A(res3), A(res2), (size_t)N * C);
}

/* Selective recomputation keeps the GEMM outputs (qkv rotated, res2, gu,
 * res3): offsets in the activations and in the kept buffer, bytes. */
static int kept_pieces(const zt_decoder *d, size_t *from, size_t *to, size_t *n, size_t *total) {
    const zt_llama *m = d->family;
    zt_llama_block_layout lay = zt_llama_block_layout_for(&m->cfg, zt_decoder_shape(d), d->act);
    size_t f[4] = {lay.qkv, lay.res2, lay.gu, lay.res3}, o = 0;
    zt_llama_kept_sizes(&m->cfg, zt_decoder_shape(d), d->act, n);
    for (int i = 0; i < 4; i++) from[i] = f[i], to[i] = zt_decoder_place(&o, n[i], 1);
    *total = (o + 3) & ~(size_t)3;
    return 4;
}

/* The rest of a block's activations from its kept GEMM outputs. */
static void block_replay(zt_decoder *d, zt_stream *s, const zt_ops *ops, char *acts, const void *x, const void *w,
                         int u) {
    const zt_llama *m = d->family;
    zt_llama_block_layout lay = zt_llama_block_layout_for(&m->cfg, zt_decoder_shape(d), d->act);
    int C = m->cfg.d_model, N = d->B * d->T;
    float eps = (float)m->cfg.norm_eps;
    ops->rmsnorm_fwd(s, A(rn1), F32(rstd1), x, W(LLAMA_ATTN_NORM_W), N, C, eps);
    attention_forward(d, s, ops, acts, lay);
    ops->rmsnorm_fwd(s, A(rn2), F32(rstd2), A(res2), W(LLAMA_MLP_NORM_W), N, C, eps);
    ops->swiglu_fwd(s, A(sw), A(gu), N, m->cfg.ffn_dim);
}

/* A block's backward: ws.dres from its output's gradient to its input's. */
static void block_backward(zt_decoder *d, zt_stream *s, const zt_ops *ops, const char *acts, const void *x,
                           const void *w, float *dw, int u, char *ws_base) {
    const zt_llama *m = d->family;
    zt_llama_block_layout lay = zt_llama_block_layout_for(&m->cfg, zt_decoder_shape(d), d->act);
    llama_ws ws = carve_ws(d, ws_base);
    int B = d->B, C = m->cfg.d_model, F = m->cfg.ffn_dim, N = B * d->T;
    /* attention on the head split: NH/P query and NKV/P kv heads over T_full */
    int P = d->sp ? d->sp->P : 1, Tf = d->T_full, NH = m->cfg.heads / P, NKV = m->cfg.kv_heads / P;
    size_t Nf = (size_t)B * Tf, part = (size_t)C, parts[3];
    /* res3 = res2 + down(swiglu(gate_up(rms(res2)))): dres passes through unchanged. */
    ops->matmul_bwd(s, ws.dsw, DW(LLAMA_DOWN_W), NULL, ws.dres, A(sw), W(LLAMA_DOWN_W), N, F, C);
    ops->swiglu_bwd(s, ws.dgu, A(gu), ws.dsw, N, F);
    ops->matmul_bwd(s, ws.drn, DW(LLAMA_GATE_UP_W), NULL, ws.dgu, A(rn2), W(LLAMA_GATE_UP_W), N, C, 2 * F);
    ops->rmsnorm_bwd(s, ws.dres, DW(LLAMA_MLP_NORM_W), ws.drn, A(res2), W(LLAMA_MLP_NORM_W), F32(rstd2), N, C);
    /* res2 = x + attproj(attn(rope(qkv(rms(x))))) */
    ops->matmul_bwd(s, ws.datty, DW(LLAMA_ATTPROJ_W), NULL, ws.dres, A(atty), W(LLAMA_ATTPROJ_W), N, C, C);
    if (d->sp) zt_decoder_seq_to_heads(d, s, ws.dattyh, ws.datty, 1, &part);
    zt_decoder_zero(s, ws.dqkv_full, Nf * 3 * (size_t)(C / P), ws.elem);
    /* dsw and dgu are dead once the MLP's backward is done: lent as scratch. */
    if (m->cfg.attention_fused)
        ops->attention_fused_bwd(s, ws.dqkv_full, ws.datt, ws.dattyh, A(qkv_full), A(attyh), F32(att), B, Tf, C / P,
                                 NH, ws.dsw, ws.scratch_bytes);
    else
        ops->attention_bwd(s, ws.dqkv_full, ws.datt, ws.dattyh, A(qkv_full), A(att), B, Tf, C / P, NH, ws.dsw,
                           ws.scratch_bytes);
    if (zt_llama_gqa(&m->cfg)) {
        zt_decoder_zero(s, ws.dqkvh, Nf * (size_t)(m->qkv_dim / P), ws.elem);
        ops->gqa_reduce(s, ws.dqkvh, ws.dqkv_full, (int)Nf, NH, NKV, m->head_dim);
    }
    ops->rope_bwd(s, ws.dqkvh, B, Tf, NH, NKV, m->head_dim, (float)m->cfg.rope_theta);
    if (d->sp) zt_decoder_heads_to_seq(d, s, ws.dqkv, ws.dqkvh, 3, qkv_parts(m, parts));
    ops->matmul_bwd(s, ws.drn, DW(LLAMA_QKV_W), NULL, ws.dqkv, A(rn1), W(LLAMA_QKV_W), N, C, m->qkv_dim);
    ops->rmsnorm_bwd(s, ws.dres, DW(LLAMA_ATTN_NORM_W), ws.drn, x, W(LLAMA_ATTN_NORM_W), F32(rstd1), N, C);
}

#undef W
#undef DW
#undef A
#undef F32

static void embed_forward(zt_decoder *d, zt_stream *s, const zt_ops *ops, void *out, const int32_t *tokens,
                          const void *w) {
    const zt_llama *m = d->family;
    ops->embedding_fwd(s, out, tokens, zt_decoder_param(d, w, d->unit_embed, m->p_wte), NULL, d->B, d->T,
                       m->cfg.d_model);
}

static void embed_backward(zt_decoder *d, zt_stream *s, const zt_ops *ops, float *dw, const int32_t *tokens,
                           char *ws_base) {
    const zt_llama *m = d->family;
    llama_ws ws = carve_ws(d, ws_base);
    ops->embedding_bwd(s, zt_decoder_grad(d, dw, d->unit_embed, m->p_wte), NULL, ws.dres, tokens, d->B, d->T,
                       m->cfg.d_model);
}

/* The LM head's weight [V,C]: the embedding's when tied. */
static const void *lm_weight(const zt_decoder *d, const void *w, const void *wemb) {
    const zt_llama *m = d->family;
    return m->cfg.tied ? zt_decoder_param(d, wemb, d->unit_embed, m->p_wte)
                       : zt_decoder_param(d, w, d->unit_head, m->p_lm_head);
}

/* Final RMSNorm, LM head, softmax cross-entropy (logits become the
 * probabilities in place). */
static void head_forward(zt_decoder *d, zt_stream *s, const zt_ops *ops, char *acts, const void *x, const void *w,
                         const void *wemb, const int32_t *targets) {
    const zt_llama *m = d->family;
    int C = m->cfg.d_model, V = m->cfg.vocab, N = d->B * d->T;
    zt_llama_head_layout hl = zt_llama_head_layout_for(&m->cfg, d->B, d->T, d->act);
    ops->rmsnorm_fwd(s, acts + hl.rnf, (float *)(acts + hl.rstdf), x,
                     zt_decoder_param(d, w, d->unit_head, m->p_norm_w), N, C, (float)m->cfg.norm_eps);
    ops->matmul_fwd(s, acts + hl.probs, acts + hl.rnf, lm_weight(d, w, wemb), NULL, N, C, V);
    ops->softmax_xent_fwd(s, (float *)(acts + hl.losses), acts + hl.probs, acts + hl.probs, targets, N, V);
}

static void head_backward(zt_decoder *d, zt_stream *s, const zt_ops *ops, char *acts, const void *xL, const void *w,
                          float *dw, const void *wemb, float *dwemb, const int32_t *targets, float dloss,
                          char *ws_base) {
    const zt_llama *m = d->family;
    int C = m->cfg.d_model, V = m->cfg.vocab, N = d->B * d->T;
    llama_ws ws = carve_ws(d, ws_base);
    zt_llama_head_layout hl = zt_llama_head_layout_for(&m->cfg, d->B, d->T, d->act);
    void *probs = acts + hl.probs; /* [N,V] act */
    float *dlm_w = m->cfg.tied ? zt_decoder_grad(d, dwemb, d->unit_embed, m->p_wte)
                               : zt_decoder_grad(d, dw, d->unit_head, m->p_lm_head); /* [V,C] fp32 */
    ops->softmax_xent_bwd(s, probs, probs, targets, N, V, dloss); /* dlogits in place */
    ops->matmul_bwd(s, ws.drn, dlm_w, NULL, probs, acts + hl.rnf, lm_weight(d, w, wemb), N, C, V);
    zt_decoder_zero(s, ws.dres, (size_t)N * C, ws.elem);
    ops->rmsnorm_bwd(s, ws.dres, zt_decoder_grad(d, dw, d->unit_head, m->p_norm_w), ws.drn, xL,
                     zt_decoder_param(d, w, d->unit_head, m->p_norm_w), (const float *)(acts + hl.rstdf), N, C);
}

static size_t block_acts_bytes(const zt_decoder *d) {
    return zt_llama_block_layout_for(&d->cfg, zt_decoder_shape(d), d->act).total;
}
static size_t block_output_offset(const zt_decoder *d) {
    return zt_llama_block_layout_for(&d->cfg, zt_decoder_shape(d), d->act).res3;
}
static size_t head_acts_bytes(const zt_decoder *d) {
    return zt_llama_head_layout_for(&d->cfg, d->B, d->T, d->act).total;
}
static size_t head_losses_offset(const zt_decoder *d) {
    return zt_llama_head_layout_for(&d->cfg, d->B, d->T, d->act).losses;
}
static size_t backward_ws_bytes(const zt_decoder *d) {
    return zt_llama_backward_workspace_bytes(&d->cfg, zt_decoder_shape(d), d->act);
}

const zt_decoder_ops llama_decoder_ops = {
    block_acts_bytes, kept_pieces, block_output_offset, head_acts_bytes, head_losses_offset, backward_ws_bytes,
    embed_forward,    block_forward, block_replay,      head_forward,    head_backward,      block_backward,
    embed_backward,
};
