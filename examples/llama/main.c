/* The Llama family as zt-train, zt-plan and the tests see it: RMSNorm,
 * rotary positions, SwiGLU, grouped-query attention, untied head by
 * default. zt-train --model llama trains it. */
#include "llama_model.h"

const zt_train_model zt_model_llama = {
    .family = "llama",
    .description = "Llama-style decoder: RMSNorm, rotary positions, SwiGLU MLP, grouped-query attention",
    .resolve = zt_llama_resolve,
    .create = zt_llama_model_create,
    .destroy = zt_llama_model_destroy,
    .init_param = zt_llama_init_param,
    ZT_DECODER_MODEL_HOOKS,
    .describe = zt_llama_model_describe,
    .plan_walk = zt_llama_model_plan_walk,
    .plan_offloaded_bytes = zt_llama_model_plan_offloaded_bytes,
};
