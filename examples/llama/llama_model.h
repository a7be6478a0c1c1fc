/* The Llama family's own hooks of the model interface (zt_train_model.h);
 * main.c registers them with the decoder scaffold's shared ones as "llama". */
#ifndef ZT_LLAMA_MODEL_H
#define ZT_LLAMA_MODEL_H

#include "llama.h"
#include "zt_train_model.h"

zt_status zt_llama_model_create(void **self, const zt_model_settings *resolved, zt_error *err);
void zt_llama_model_destroy(void *self);
json_t *zt_llama_model_describe(const zt_model_settings *s);
void zt_llama_model_plan_walk(void *arg, zt_plan_sim *S);
size_t zt_llama_model_plan_offloaded_bytes(const zt_model_plan *m, zt_dtype act);

#endif
