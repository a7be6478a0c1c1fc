/* The GPT family as zt-train, zt-plan and the tests see it: a GPT-2-style
 * decoder (learned positions, LayerNorm, GELU MLP, tied or untied head).
 * zt-train --model gpt (the default) trains it. */
#include "gpt_model.h"

const zt_train_model zt_model_gpt = {
    .family = "gpt",
    .description = "GPT-2-style decoder: learned positions, LayerNorm, GELU MLP",
    .resolve = zt_gpt_model_resolve,
    .create = zt_gpt_model_create,
    .destroy = zt_gpt_model_destroy,
    .spec = zt_decoder_model_spec,
    .init_param = zt_gpt_init_param,
    .freeze = zt_decoder_model_freeze,
    .forward = zt_decoder_model_forward,
    .backward = zt_decoder_model_backward,
    .take_losses = zt_decoder_model_take_losses,
    .free_activations = zt_decoder_model_free_activations,
    .stats = zt_decoder_model_stats,
    .describe = zt_gpt_model_describe,
    .tensors = zt_decoder_model_tensors,
    .plan_walk = zt_gpt_model_plan_walk,
    .plan_units = zt_decoder_model_plan_units,
    .plan_offloaded_bytes = zt_gpt_model_plan_offloaded_bytes,
};
