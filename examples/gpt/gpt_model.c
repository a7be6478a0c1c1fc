/* The GPT behind libzt_train's model interface (zt_train_model.h): the
 * hooks main.c registers, each a thin call into gpt.c, gpt_freeze.c or
 * gpt_plan.c. */
#include "gpt_model.h"

#include <stdlib.h>
#include <string.h>

#include "gpt_plan.h"

static zt_gpt_config gpt_config_of(const zt_model_settings *s) {
    return (zt_gpt_config){.layers = s->layers, .d_model = s->d_model, .heads = s->heads, .seq_len = s->seq_len,
                           .vocab = s->vocab, .micro_batch = s->micro_batch, .tied = s->tied, .seed = s->seed,
                           .recompute = s->recompute, .attention_fused = s->attention_fused,
                           .offload_activations = s->offload_activations};
}

zt_status zt_gpt_model_resolve(zt_model_settings *s, zt_error *err) {
    if (s->heads < 1 || s->d_model % s->heads != 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "gpt: d_model %d is not divisible by heads %d", s->d_model, s->heads);
    if (s->kv_heads != 0 && s->kv_heads != s->heads)
        return ZT_FAIL(err, ZT_ERR_INVALID, "gpt: kv_heads %d: the GPT has one key/value head per query head",
                       s->kv_heads);
    if (s->ffn_dim != 0 && s->ffn_dim != 4 * s->d_model)
        return ZT_FAIL(err, ZT_ERR_INVALID, "gpt: ffn_dim %d: the GPT's MLP is 4 x d_model = %d wide", s->ffn_dim,
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

zt_model_spec *zt_gpt_model_spec(void *self) { return ((zt_gpt *)self)->dec.spec; }

zt_status zt_gpt_model_freeze(void *self, const char *list, zt_error *err) { return zt_gpt_freeze(self, list, err); }

zt_status zt_gpt_model_forward(void *self, zt_engine *eng, const int32_t *tokens, const int32_t *targets, int B,
                               int T) {
    return zt_gpt_forward(self, eng, tokens, targets, B, T, NULL);
}

zt_status zt_gpt_model_backward(void *self, zt_engine *eng, float dloss) { return zt_gpt_backward(self, eng, dloss); }

zt_status zt_gpt_model_take_losses(void *self, zt_ctx *ctx, double *sum_of_means) {
    return zt_gpt_take_losses(self, ctx, sum_of_means);
}

void zt_gpt_model_free_activations(void *self, zt_engine *eng) { zt_gpt_free_activations(self, eng); }

zt_model_stats zt_gpt_model_stats(const void *self) {
    return zt_decoder_stats(&((const zt_gpt *)self)->dec);
}

json_t *zt_gpt_model_describe(const zt_model_settings *s) {
    return json_pack("{s:s,s:i,s:i,s:i,s:i,s:i,s:b}", "family", "gpt", "layers", s->layers, "d_model", s->d_model,
                     "heads", s->heads, "seq_len", s->seq_len, "vocab", s->vocab, "tied", s->tied);
}

int zt_gpt_model_tensors(void *self, zt_model_tensor *out, int cap) {
    return zt_train_model_spec_tensors(((zt_gpt *)self)->dec.spec, "row-major [out, in]", out, cap);
}

void zt_gpt_model_plan_walk(void *arg, zt_plan_sim *S) {
    const zt_model_plan *m = arg;
    zt_gpt_plan_model g = {gpt_config_of(&m->s), m->unit_embed, m->first_block, m->unit_head};
    zt_gpt_plan_walk(&g, S);
}

void zt_gpt_model_plan_units(void *self, zt_model_plan *out) {
    const zt_decoder *d = &((const zt_gpt *)self)->dec;
    out->unit_embed = d->unit_embed;
    out->first_block = d->first_block;
    out->unit_head = d->unit_head;
}

size_t zt_gpt_model_plan_offloaded_bytes(const zt_model_plan *m, zt_dtype act) {
    zt_gpt_plan_model g = {gpt_config_of(&m->s), m->unit_embed, m->first_block, m->unit_head};
    return zt_gpt_plan_offloaded_bytes(&g, act);
}
