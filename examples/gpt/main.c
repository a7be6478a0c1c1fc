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
    .init_param = zt_gpt_init_param,
    ZT_DECODER_MODEL_HOOKS,
    .describe = zt_gpt_model_describe,
    .plan_walk = zt_gpt_model_plan_walk,
    .plan_offloaded_bytes = zt_gpt_model_plan_offloaded_bytes,
};
