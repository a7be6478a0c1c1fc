/* The engine owns each unit's persistent state (params, grads, fp32 master,
 * Adam m and v) and implements the runtime API the model calls:
 *   gather(u)      -> an fp32 view of u's parameters, valid until release(u)
 *   grad_buffer(u) -> an fp32 buffer the backward pass accumulates into
 *   grads_ready(u) -> u's backward is complete for this micro-batch
 * and the optimizer step. Which of these allocate, reduce or communicate is
 * decided here by the stage, never by the model. */
#ifndef ZT_ENGINE_H
#define ZT_ENGINE_H

#include "zt_ctx.h"
#include "zt_tensor.h"
#include "zt_units.h"

typedef struct {
    int stage;      /* ZeRO stage 0..3 */
    zt_dtype dtype; /* storage dtype of params and grads; compute is fp32 */
    float beta1, beta2, eps, weight_decay;
    float grad_clip; /* global-norm clipping threshold; 0 disables */
} zt_engine_config;

typedef struct {
    zt_tensor params;  /* [padded_numel] dtype: the compute copy */
    zt_tensor grads;   /* [padded_numel] dtype */
    zt_tensor master;  /* [padded_numel] fp32, only when dtype is bf16 */
    zt_tensor adam_m;  /* [padded_numel] fp32 */
    zt_tensor adam_v;  /* [padded_numel] fp32 */
    zt_tensor view32;  /* [padded_numel] fp32 up-cast of params while gathered (bf16 only) */
    zt_tensor grad32;  /* [padded_numel] fp32 accumulation while backward runs (bf16 only) */
    int gather_count;
    int grad_open;
} zt_unit_state;

typedef struct {
    zt_ctx *ctx;
    const zt_model_spec *spec;
    zt_engine_config cfg;
    zt_unit_state *units; /* [spec->nunits] */
    int steps_taken;
    double last_grad_norm;
} zt_engine;

/* Fills dst[numel] with the initial values of parameter `param` of `unit`.
 * It must depend only on (unit, param) so every stage and world size starts
 * from the same model. */
typedef void (*zt_param_init_fn)(void *arg, int unit, int param, float *dst);

zt_status zt_engine_init(zt_engine *eng, zt_ctx *ctx, const zt_model_spec *spec,
                         const zt_engine_config *cfg, zt_param_init_fn init, void *init_arg);
void zt_engine_destroy(zt_engine *eng);

zt_status zt_engine_gather(zt_engine *eng, int unit, const float **params32);
void zt_engine_release(zt_engine *eng, int unit);
zt_status zt_engine_grad_buffer(zt_engine *eng, int unit, float **grads32);
zt_status zt_engine_grads_ready(zt_engine *eng, int unit);
zt_status zt_engine_zero_grads(zt_engine *eng);
/* Clips by the global gradient norm and applies AdamW with learning rate lr. */
zt_status zt_engine_step(zt_engine *eng, float lr);
/* Hex XXH3-128 digest of the full parameters (fp32 master where it exists),
 * units in order, padding excluded. */
zt_status zt_engine_digest(zt_engine *eng, char hex[33]);

#endif
