/* The Llama family's own hooks of the model interface (zt_train_model.h)
 * and its sizes for the decoder scaffold's planner walk; the rest are the
 * scaffold's shared hooks. main.c registers them. */
#include "llama_model.h"

#include <stdlib.h>

#include "zt_decoder_plan.h"

zt_status zt_llama_model_create(void **self, const zt_model_settings *s, zt_error *err) {
    zt_llama *m = calloc(1, sizeof *m);
    if (!m) return ZT_FAIL(err, ZT_ERR_OOM, "llama: cannot allocate the model");
    zt_status st = zt_llama_create(m, s, err);
    if (st != ZT_OK) {
        zt_llama_destroy(m);
        free(m);
        return st;
    }
    *self = m;
    return ZT_OK;
}

void zt_llama_model_destroy(void *self) {
    zt_llama_destroy(self);
    free(self);
}

json_t *zt_llama_model_describe(const zt_model_settings *s) {
    return json_pack("{s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:b,s:f,s:f}", "family", "llama", "layers", s->layers,
                     "d_model", s->d_model, "heads", s->heads, "kv_heads", s->kv_heads, "ffn_dim", s->ffn_dim,
                     "seq_len", s->seq_len, "vocab", s->vocab, "tied", s->tied, "norm_eps", s->norm_eps,
                     "rope_theta", s->rope_theta);
}

/* Bytes of a block's kept part under its policy. */
static size_t kept_bytes(const zt_model_settings *s, zt_act_shape sh, zt_dtype act, zt_keep keep) {
    if (keep == ZT_KEEP_INPUT) return zt_decoder_input_bytes(s->d_model, sh.B, sh.T, act);
    if (keep == ZT_KEEP_GEMM_OUTPUTS) return zt_llama_kept_bytes(s, sh, act);
    return zt_llama_block_layout_for(s, sh, act).total;
}

void zt_llama_model_plan_walk(void *arg, zt_plan_sim *S) {
    const zt_model_plan *m = arg;
    const zt_model_settings *s = &m->s;
    zt_dtype act = zt_plan_compute_dtype(S);
    zt_act_shape sh = zt_model_plan_shape(m);
    int B = sh.B, T = sh.T;
    size_t QKV = (size_t)(s->heads + 2 * s->kv_heads) * (size_t)(s->d_model / s->heads);
    zt_decoder_plan_bytes b = {0};
    b.enc = zt_decoder_input_bytes(s->d_model, B, T, act);
    b.in = b.enc;
    b.offload = s->offload_activations;
    b.blk_full = zt_llama_block_layout_for(s, sh, act).total;
    b.head = zt_llama_head_layout_for(s, B, T, act).total;
    b.tokens = 2 * (size_t)B * T * 4;
    b.ws_bwd = zt_llama_backward_workspace_bytes(s, sh, act);
    b.exchange = zt_decoder_exchange_bytes(sh, QKV, act); /* the projection (and its gradient) */
    for (int k = 0; k < s->layers; k++)
        b.kept_before[k + 1] = b.kept_before[k] + kept_bytes(s, sh, act, zt_recompute_keep(&s->recompute, k));
    zt_decoder_plan_walk(m, &b, S);
}

size_t zt_llama_model_plan_offloaded_bytes(const zt_model_plan *m, zt_dtype act) {
    const zt_model_settings *s = &m->s;
    zt_act_shape sh = zt_model_plan_shape(m);
    return s->offload_activations ? (size_t)s->layers * zt_decoder_input_bytes(s->d_model, sh.B, sh.T, act) : 0;
}
