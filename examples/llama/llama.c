/* The Llama-style decoder's layers over the decoder scaffold
 * (train/zt_decoder.h): units, initial values, activation layouts, and the
 * kernels of its embedding, blocks and head. */
#include "llama.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>


zt_status zt_llama_resolve(zt_model_settings *s, zt_error *err) {
    if (s->heads < 1 || s->d_model % s->heads != 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "llama: `d_model` %d is not divisible by `heads` %d", s->d_model, s->heads);
    if ((s->d_model / s->heads) % 2 != 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "llama: the head dimension `d_model` / `heads` = %d must be even (rotary "
                       "embedding rotates pairs)", s->d_model / s->heads);
    if (s->kv_heads == 0) s->kv_heads = s->heads;
    if (s->kv_heads < 1 || s->heads % s->kv_heads != 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "llama: `kv_heads` %d does not divide `heads` %d", s->kv_heads, s->heads);
    if (s->ffn_dim == 0) { /* the multiple of 64 nearest 8/3 d_model (at least 64) */
        long f = ((long)8 * s->d_model + 3 * 32) / (3 * 64) * 64;
        s->ffn_dim = (int)(f > 0 ? f : 64);
    }
    if (s->norm_eps <= 0) return ZT_FAIL(err, ZT_ERR_INVALID, "llama: `norm_eps` %g must be > 0", s->norm_eps);
    if (s->rope_theta <= 0) return ZT_FAIL(err, ZT_ERR_INVALID, "llama: `rope_theta` %g must be > 0", s->rope_theta);
    return ZT_OK;
}

static zt_status add_param(zt_llama *m, int unit, const char *name, int ndim, int64_t d0, int64_t d1, int decay,
                           int *idx, zt_error *err) {
    return zt_decoder_add_param(&m->dec, unit, name, ndim, d0, d1, decay, idx, err);
}

/* Block l's unit, its parameters in the order of the LLAMA_* enum. */
static zt_status add_block(zt_llama *m, int l, zt_error *err) {
    int C = m->cfg.d_model, F = m->cfg.ffn_dim, u, idx;
    char name[32];
    snprintf(name, sizeof name, "block%d", l);
    ZT_TRY(zt_decoder_add_unit(&m->dec, name, &u, err));
    if (l == 0) m->dec.first_block = u;
    ZT_TRY(add_param(m, u, "attn_norm_w", 1, C, 0, 0, &idx, err));
    int64_t kv = (int64_t)m->cfg.kv_heads * m->head_dim;
    const int64_t qkv_rows[3] = {C, kv, kv}, gate_up_rows[2] = {F, F};
    ZT_TRY(add_param(m, u, "qkv_w", 2, m->qkv_dim, C, 1, &idx, err));
    ZT_TRY(zt_decoder_set_hidden(&m->dec, u, idx, 3, qkv_rows, err));
    ZT_TRY(add_param(m, u, "attproj_w", 2, C, C, 1, &idx, err));
    ZT_TRY(zt_decoder_set_hidden(&m->dec, u, idx, 1, NULL, err));
    ZT_TRY(add_param(m, u, "mlp_norm_w", 1, C, 0, 0, &idx, err));
    ZT_TRY(add_param(m, u, "gate_up_w", 2, 2 * F, C, 1, &idx, err));
    ZT_TRY(zt_decoder_set_hidden(&m->dec, u, idx, 2, gate_up_rows, err));
    ZT_TRY(add_param(m, u, "down_w", 2, C, F, 1, &idx, err));
    return zt_decoder_set_hidden(&m->dec, u, idx, 1, NULL, err);
}

zt_status zt_llama_create(zt_llama *m, const zt_model_settings *s, zt_error *err) {
    memset(m, 0, sizeof *m);
    m->cfg = *s;
    int C = s->d_model, V = s->vocab;
    m->head_dim = C / s->heads;
    m->qkv_dim = (s->heads + 2 * s->kv_heads) * m->head_dim;
    ZT_TRY(zt_decoder_init(&m->dec, &llama_decoder_ops, m, s, err));
    ZT_TRY(zt_decoder_add_unit(&m->dec, "embedding", &m->dec.unit_embed, err));
    ZT_TRY(add_param(m, m->dec.unit_embed, "wte", 2, V, C, 1, &m->p_wte, err));
    for (int l = 0; l < s->layers; l++) ZT_TRY(add_block(m, l, err));
    ZT_TRY(zt_decoder_add_unit(&m->dec, "head", &m->dec.unit_head, err));
    ZT_TRY(add_param(m, m->dec.unit_head, "norm_w", 1, C, 0, 0, &m->p_norm_w, err));
    m->p_lm_head = -1;
    if (!s->tied) ZT_TRY(add_param(m, m->dec.unit_head, "lm_head", 2, V, C, 1, &m->p_lm_head, err));
    return ZT_OK;
}

void zt_llama_destroy(zt_llama *m) { zt_decoder_destroy(&m->dec); }

void zt_llama_init_param(void *arg, int unit, int param, size_t first, size_t count, float *dst) {
    const zt_llama *m = arg;
    const zt_decoder *d = &m->dec;
    int is_block = unit >= d->first_block && unit < d->first_block + m->cfg.layers;
    float fill = 0.0f, stddev = 0.0f;
    if (is_block) {
        switch (param) {
        case LLAMA_ATTN_NORM_W: case LLAMA_MLP_NORM_W: fill = 1.0f; break;
        case LLAMA_QKV_W: case LLAMA_GATE_UP_W: stddev = 0.02f; break;
        /* Projections into the residual stream shrink with depth. */
        case LLAMA_ATTPROJ_W: case LLAMA_DOWN_W: stddev = 0.02f / sqrtf(2.0f * (float)m->cfg.layers); break;
        default: break;
        }
    } else if (unit == d->unit_head && param == m->p_norm_w) {
        fill = 1.0f;
    } else {
        stddev = 0.02f; /* the token embedding, an untied head */
    }
    zt_decoder_init_values(m->cfg.seed, 0x11a3u, unit, param, stddev, fill, first, count, dst);
}

zt_llama_block_layout zt_llama_block_layout_for(const zt_model_settings *s, zt_act_shape sh, zt_dtype act) {
    size_t N = (size_t)sh.B * sh.T, C = (size_t)s->d_model, NH = (size_t)s->heads, F = (size_t)s->ffn_dim;
    size_t P = (size_t)sh.P, Nf = (size_t)sh.B * sh.T_full, Tf = (size_t)sh.T_full;
    size_t QKV = (size_t)(s->heads + 2 * s->kv_heads) * (C / NH), d = zt_dtype_size(act), o = 0;
    zt_llama_block_layout l;
    l.rn1 = zt_decoder_place(&o, N * C, d);
    l.rstd1 = zt_decoder_place(&o, N, 4);
    l.qkv = zt_decoder_place(&o, Nf * (QKV / P), d); /* head split: NH/P and NKV/P heads over T_full */
    l.qkv_full = zt_llama_gqa(s) ? zt_decoder_place(&o, Nf * 3 * (C / P), d) : l.qkv;
    if (s->attention_fused) l.att = zt_decoder_place(&o, (size_t)sh.B * (NH / P) * Tf, 4); /* lse, fp32 */
    else l.att = zt_decoder_place(&o, (size_t)sh.B * (NH / P) * Tf * Tf, d);
    l.atty = zt_decoder_place(&o, N * C, d);
    /* The head split's output: fused attention's backward reads it, so it
     * stays; else it passes through sw's space (free until the MLP) when it fits. */
    int own_attyh = P > 1 && (s->attention_fused || Nf * (C / P) > N * F);
    l.attyh = own_attyh ? zt_decoder_place(&o, Nf * (C / P), d) : l.atty;
    l.qkv_seq = P > 1 && N * QKV > N * 2 * F ? zt_decoder_place(&o, N * QKV, d) : l.qkv; /* too big for gu */
    l.res2 = zt_decoder_place(&o, N * C, d);
    l.rn2 = zt_decoder_place(&o, N * C, d);
    l.rstd2 = zt_decoder_place(&o, N, 4);
    l.gu = zt_decoder_place(&o, N * 2 * F, d);
    l.sw = zt_decoder_place(&o, N * F, d);
    l.res3 = zt_decoder_place(&o, N * C, d);
    l.total = (o + 3) & ~(size_t)3;
    if (P > 1 && !own_attyh) l.attyh = l.sw;
    if (P > 1 && l.qkv_seq == l.qkv) l.qkv_seq = l.gu; /* the QKV GEMM's output before its exchange */
    return l;
}

zt_llama_head_layout zt_llama_head_layout_for(const zt_model_settings *s, int B, int T, zt_dtype act) {
    size_t N = (size_t)B * T, d = zt_dtype_size(act), o = 0;
    zt_llama_head_layout h;
    h.rnf = zt_decoder_place(&o, N * (size_t)s->d_model, d);
    h.rstdf = zt_decoder_place(&o, N, 4);
    h.probs = zt_decoder_place(&o, N * (size_t)s->vocab, d);
    h.losses = zt_decoder_place(&o, N, 4);
    h.total = (o + 3) & ~(size_t)3;
    return h;
}

/* The kept GEMM outputs: sizes in the order qkv, res2, gu, res3. */
void zt_llama_kept_sizes(const zt_model_settings *s, zt_act_shape sh, zt_dtype act, size_t n[4]) {
    size_t N = (size_t)sh.B * sh.T, C = (size_t)s->d_model, d = zt_dtype_size(act);
    size_t QKV = (size_t)(s->heads + 2 * s->kv_heads) * (C / (size_t)s->heads);
    n[0] = (size_t)sh.B * sh.T_full * (QKV / (size_t)sh.P) * d; /* the head split's */
    n[1] = N * C * d, n[2] = N * 2 * (size_t)s->ffn_dim * d, n[3] = N * C * d;
}

size_t zt_llama_kept_bytes(const zt_model_settings *s, zt_act_shape sh, zt_dtype act) {
    size_t n[4], o = 0;
    zt_llama_kept_sizes(s, sh, act, n);
    for (int i = 0; i < 4; i++) zt_decoder_place(&o, n[i], 1);
    return (o + 3) & ~(size_t)3;
}

zt_llama_ws_layout zt_llama_ws_layout_for(const zt_model_settings *s, zt_act_shape sh, zt_dtype act) {
    size_t N = (size_t)sh.B * sh.T, C = (size_t)s->d_model, F = (size_t)s->ffn_dim, d = zt_dtype_size(act), o = 0;
    size_t P = (size_t)sh.P, Nf = (size_t)sh.B * sh.T_full;
    size_t QKV = (size_t)(s->heads + 2 * s->kv_heads) * (C / (size_t)s->heads);
    zt_llama_ws_layout w;
    w.dres = zt_decoder_place(&o, N * C, d);
    w.drn = zt_decoder_place(&o, N * C, d);
    w.datty = zt_decoder_place(&o, N * C, d);
    w.dqkv_full = zt_decoder_place(&o, Nf * 3 * (C / P), d);                       /* head split */
    w.dqkvh = zt_llama_gqa(s) ? zt_decoder_place(&o, Nf * (QKV / P), d) : w.dqkv_full; /* reduced to kv heads */
    w.dqkv = P > 1 ? zt_decoder_place(&o, N * QKV, d) : w.dqkvh;                   /* sequence split */
    w.dattyh = P > 1 ? zt_decoder_place(&o, Nf * (C / P), d) : w.datty;
    w.dsw = zt_decoder_place(&o, N * 3 * F, d); /* dsw [N,F], dgu [N,2F], adjacent */
    w.datt = zt_decoder_place(&o, (size_t)sh.B * (size_t)(s->heads / sh.P) * sh.T_full, 4);
    w.total = (o + 3) & ~(size_t)3;
    return w;
}

size_t zt_llama_backward_workspace_bytes(const zt_model_settings *s, zt_act_shape sh, zt_dtype act) {
    return zt_llama_ws_layout_for(s, sh, act).total;
}

_Static_assert(offsetof(zt_llama, dec) == 0, "the decoder scaffold's shared hooks take a zt_llama as its zt_decoder");
