/* The GPT's own hooks of the model interface (zt_train_model.h); the rest
 * are the decoder scaffold's (zt_decoder_model_*). main.c registers them. */
#include "gpt_model.h"

#include <stdlib.h>

#include "gpt_plan.h"

static zt_gpt_config gpt_config_of(const zt_model_settings *s) {
    return (zt_gpt_config){.layers = s->layers, .d_model = s->d_model, .heads = s->heads, .seq_len = s->seq_len,
                           .vocab = s->vocab, .micro_batch = s->micro_batch, .tied = s->tied, .seed = s->seed,
                           .recompute = s->recompute, .attention_fused = s->attention_fused,
                           .offload_activations = s->offload_activations};
}

zt_status zt_gpt_model_resolve(zt_model_settings *s, zt_error *err) {
    if (s->heads < 1 || s->d_model % s->heads != 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "gpt: `d_model` %d is not divisible by `heads` %d", s->d_model, s->heads);
    if (s->kv_heads != 0 && s->kv_heads != s->heads)
        return ZT_FAIL(err, ZT_ERR_INVALID, "gpt: `kv_heads` %d: the GPT has one key/value head per query head",
                       s->kv_heads);
    if (s->ffn_dim != 0 && s->ffn_dim != 4 * s->d_model)
        return ZT_FAIL(err, ZT_ERR_INVALID, "gpt: `ffn_dim` %d: the GPT's MLP is 4 x `d_model` = %d wide", s->ffn_dim,
                       4 * s->d_model);
    s->kv_heads = s->heads;
    s->ffn_dim = 4 * s->d_model;
    return ZT_OK;
}

zt_status zt_gpt_model_create(void **self, const zt_model_settings *s, zt_error *err) {
    zt_gpt *g = calloc(1, sizeof *g);
    if (!g) return ZT_FAIL(err, ZT_ERR_OOM, "gpt: cannot allocate the model");
    zt_gpt_config cfg = gpt_config_of(s);
    zt_status st = zt_gpt_create(g, &cfg, err);
    if (st != ZT_OK) {
        zt_gpt_destroy(g);
        free(g);
        return st;
    }
    *self = g;
    return ZT_OK;
}

void zt_gpt_model_destroy(void *self) {
    zt_gpt_destroy(self);
    free(self);
}

/* ffn_dim and norm_eps are fixed in this family (4 x d_model; the LayerNorm
 * kernels' 1e-5, runtime/cpu/ops_layernorm.inc) but recorded all the same,
 * so that an export (zt-export --format hf) reads every hyperparameter from
 * the checkpoint. Checkpoints written before they were recorded still load
 * (checkpointing/load.c fills them in). */
json_t *zt_gpt_model_describe(const zt_model_settings *s) {
    return json_pack("{s:s,s:i,s:i,s:i,s:i,s:i,s:b,s:i,s:f}", "family", "gpt", "layers", s->layers, "d_model",
                     s->d_model, "heads", s->heads, "seq_len", s->seq_len, "vocab", s->vocab, "tied", s->tied,
                     "ffn_dim", 4 * s->d_model, "norm_eps", 1e-5);
}

void zt_gpt_model_plan_walk(void *arg, zt_plan_sim *S) {
    const zt_model_plan *m = arg;
    zt_gpt_plan_model g = {gpt_config_of(&m->s), zt_model_plan_shape(m), m->unit_embed, m->first_block, m->unit_head};
    zt_gpt_plan_walk(&g, S);
}

size_t zt_gpt_model_plan_offloaded_bytes(const zt_model_plan *m, zt_dtype act) {
    zt_gpt_plan_model g = {gpt_config_of(&m->s), zt_model_plan_shape(m), m->unit_embed, m->first_block, m->unit_head};
    return zt_gpt_plan_offloaded_bytes(&g, act);
}
