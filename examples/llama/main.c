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
    .spec = zt_decoder_model_spec,
    .init_param = zt_llama_init_param,
    .freeze = zt_decoder_model_freeze,
    .forward = zt_decoder_model_forward,
    .backward = zt_decoder_model_backward,
    .take_losses = zt_decoder_model_take_losses,
    .free_activations = zt_decoder_model_free_activations,
    .stats = zt_decoder_model_stats,
    .describe = zt_llama_model_describe,
    .tensors = zt_decoder_model_tensors,
    .plan_walk = zt_llama_model_plan_walk,
    .plan_units = zt_decoder_model_plan_units,
    .plan_offloaded_bytes = zt_llama_model_plan_offloaded_bytes,
};
