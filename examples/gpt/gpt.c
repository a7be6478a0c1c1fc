/* The toy GPT's layers over the decoder scaffold (train/zt_decoder.h):
 * its units and parameters, their initial values, its activation layouts
 * and the kernels of its embedding, blocks and head. */
#include "gpt.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>



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
    const int64_t qkv_rows[3] = {C, C, C}; /* q, k, v */
    ZT_TRY(add_param(g, u, "qkv_w", 2, 3 * C, C, 1, &idx, err));
    ZT_TRY(zt_decoder_set_hidden(&g->dec, u, idx, 3, qkv_rows, err));
    ZT_TRY(add_param(g, u, "qkv_b", 1, 3 * C, 0, 0, &idx, err));
    ZT_TRY(add_param(g, u, "attproj_w", 2, C, C, 1, &idx, err));
    ZT_TRY(zt_decoder_set_hidden(&g->dec, u, idx, 1, NULL, err));
    ZT_TRY(add_param(g, u, "attproj_b", 1, C, 0, 0, &idx, err));
    ZT_TRY(add_param(g, u, "ln2_w", 1, C, 0, 0, &idx, err));
    ZT_TRY(add_param(g, u, "ln2_b", 1, C, 0, 0, &idx, err));
    ZT_TRY(add_param(g, u, "fc_w", 2, 4 * C, C, 1, &idx, err));
    ZT_TRY(zt_decoder_set_hidden(&g->dec, u, idx, 1, NULL, err));
    ZT_TRY(add_param(g, u, "fc_b", 1, 4 * C, 0, 0, &idx, err));
    ZT_TRY(add_param(g, u, "fcproj_w", 2, C, 4 * C, 1, &idx, err));
    ZT_TRY(zt_decoder_set_hidden(&g->dec, u, idx, 1, NULL, err));
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

void zt_gpt_init_param(void *arg, int unit, int param, size_t first, size_t count, float *dst) {
    const zt_gpt *g = arg;
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
    zt_decoder_init_values(g->cfg.seed, 0x1417u, unit, param, stddev, fill, first, count, dst);
}

zt_gpt_block_layout zt_gpt_block_layout_for(const zt_gpt_config *cfg, zt_act_shape sh, zt_dtype act) {
    size_t BT = (size_t)sh.B * sh.T, C = (size_t)cfg->d_model, d = zt_dtype_size(act);
    size_t P = (size_t)sh.P, BTf = (size_t)sh.B * sh.T_full, Tf = (size_t)sh.T_full, NHp = (size_t)cfg->heads / P;
    zt_gpt_block_layout l;
    size_t o = 0;
    l.ln1 = zt_decoder_place(&o, BT * C, d);
    l.ln1_mean = zt_decoder_place(&o, BT, 4);
    l.ln1_rstd = zt_decoder_place(&o, BT, 4);
    l.qkv = zt_decoder_place(&o, BTf * 3 * (C / P), d); /* head split: NH/P heads over all T_full positions */
    if (cfg->attention_fused) l.att = zt_decoder_place(&o, (size_t)sh.B * NHp * Tf, 4); /* lse, fp32 */
    else l.att = zt_decoder_place(&o, (size_t)sh.B * NHp * Tf * Tf, d);
    l.atty = zt_decoder_place(&o, BT * C, d);
    /* The head split's output: fused attention's backward reads it; else
     * it only passes through, in fch_gelu's space (free until the MLP). */
    l.attyh = P > 1 && cfg->attention_fused ? zt_decoder_place(&o, BTf * (C / P), d) : l.atty;
    l.res2 = zt_decoder_place(&o, BT * C, d);
    l.ln2 = zt_decoder_place(&o, BT * C, d);
    l.ln2_mean = zt_decoder_place(&o, BT, 4);
    l.ln2_rstd = zt_decoder_place(&o, BT, 4);
    l.fch = zt_decoder_place(&o, BT * 4 * C, d);
    l.fch_gelu = zt_decoder_place(&o, BT * 4 * C, d);
    l.res3 = zt_decoder_place(&o, BT * C, d);
    l.total = (o + 3) & ~(size_t)3;
    if (P > 1 && !cfg->attention_fused) l.attyh = l.fch_gelu; /* T_full C / P <= 4 T C */
    l.qkv_seq = P > 1 ? l.fch : l.qkv; /* the QKV GEMM's sequence-split output, before its exchange */
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

size_t zt_gpt_backward_workspace_bytes(const zt_gpt_config *cfg, zt_act_shape sh, zt_dtype act) {
    size_t NC = (size_t)sh.B * sh.T * cfg->d_model, P = (size_t)sh.P, o = 0, e = zt_dtype_size(act);
    size_t NCf = (size_t)sh.B * sh.T_full * (cfg->d_model / P);
    zt_decoder_place(&o, NC * 14, e);
    zt_decoder_place(&o, (size_t)sh.B * (cfg->heads / P) * sh.T_full, 4); /* datt */
    if (P > 1) zt_decoder_place(&o, NCf * 4, e);                          /* dqkvh, dattyh */
    return (o + 3) & ~(size_t)3;
}

zt_gpt_kept_layout zt_gpt_kept_layout_for(const zt_gpt_config *cfg, zt_act_shape sh, zt_dtype act) {
    size_t BT = (size_t)sh.B * sh.T, C = (size_t)cfg->d_model, d = zt_dtype_size(act), o = 0;
    zt_gpt_kept_layout k;
    k.qkv = zt_decoder_place(&o, (size_t)sh.B * sh.T_full * 3 * (C / (size_t)sh.P), d); /* head split */
    k.res2 = zt_decoder_place(&o, BT * C, d);
    k.fch = zt_decoder_place(&o, BT * 4 * C, d);
    k.res3 = zt_decoder_place(&o, BT * C, d);
    k.total = (o + 3) & ~(size_t)3;
    return k;
}

size_t zt_gpt_block_kept_bytes(const zt_gpt_config *cfg, zt_act_shape sh, zt_dtype act, zt_keep keep) {
    if (keep == ZT_KEEP_INPUT) return ((size_t)sh.B * sh.T * cfg->d_model * zt_dtype_size(act) + 3) / 4 * 4;
    if (keep == ZT_KEEP_GEMM_OUTPUTS) return zt_gpt_kept_layout_for(cfg, sh, act).total;
    return zt_gpt_block_layout_for(cfg, sh, act).total;
}

size_t zt_gpt_input_bytes(const zt_gpt_config *cfg, int B, int T, zt_dtype act) {
    return zt_gpt_block_kept_bytes(cfg, zt_act_shape_plain(B, T), act, ZT_KEEP_INPUT);
}


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
