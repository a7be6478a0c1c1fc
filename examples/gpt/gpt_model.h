/* The GPT's hooks of the model interface (zt_train_model.h); main.c
 * registers them as the family "gpt". */
#ifndef ZT_GPT_MODEL_H
#define ZT_GPT_MODEL_H

#include "gpt.h"
#include "zt_train_model.h"

zt_status zt_gpt_model_resolve(zt_model_settings *s, zt_error *err);
zt_status zt_gpt_model_create(void **self, const zt_model_settings *s, zt_error *err);
void zt_gpt_model_destroy(void *self);
zt_model_spec *zt_gpt_model_spec(void *self);
zt_status zt_gpt_model_freeze(void *self, const char *list, zt_error *err);
zt_status zt_gpt_model_forward(void *self, zt_engine *eng, const int32_t *tokens, const int32_t *targets, int B,
                               int T);
zt_status zt_gpt_model_backward(void *self, zt_engine *eng, float dloss);
zt_status zt_gpt_model_take_losses(void *self, zt_ctx *ctx, double *sum_of_means);
void zt_gpt_model_free_activations(void *self, zt_engine *eng);
zt_model_stats zt_gpt_model_stats(const void *self);
json_t *zt_gpt_model_describe(const zt_model_settings *s);
int zt_gpt_model_tensors(void *self, zt_model_tensor *out, int cap);
void zt_gpt_model_plan_walk(void *arg, zt_plan_sim *S);
void zt_gpt_model_plan_units(void *self, zt_model_plan *out);
size_t zt_gpt_model_plan_offloaded_bytes(const zt_model_plan *m, zt_dtype act);

#endif
