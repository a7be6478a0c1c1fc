/* The model interface's hooks that every decoder family shares
 * (zt_train_model.h): a family's instance begins with its zt_decoder, so
 * `self` is one. */
#include "zt_decoder.h"

#include "zt_rng.h"

zt_model_spec *zt_decoder_model_spec(void *self) { return ((zt_decoder *)self)->spec; }

zt_status zt_decoder_model_freeze(void *self, const char *list, zt_error *err) {
    return zt_decoder_freeze(self, list, err);
}

zt_status zt_decoder_model_forward(void *self, zt_engine *eng, const int32_t *tokens, const int32_t *targets, int B,
                                   int T) {
    return zt_decoder_forward(self, eng, tokens, targets, B, T, NULL);
}

zt_status zt_decoder_model_backward(void *self, zt_engine *eng, float dloss) {
    return zt_decoder_backward(self, eng, dloss);
}

zt_status zt_decoder_model_take_losses(void *self, zt_ctx *ctx, double *sum_of_means) {
    return zt_decoder_take_losses(self, ctx, sum_of_means);
}

void zt_decoder_model_free_activations(void *self, zt_engine *eng) { zt_decoder_free_activations(self, eng); }

zt_model_stats zt_decoder_model_stats(const void *self) { return zt_decoder_stats(self); }

int zt_decoder_model_tensors(void *self, zt_model_tensor *out, int cap) {
    return zt_train_model_spec_tensors(((zt_decoder *)self)->spec, "row-major [out, in]", out, cap);
}

void zt_decoder_model_plan_units(void *self, zt_model_plan *out) {
    const zt_decoder *d = self;
    out->unit_embed = d->unit_embed;
    out->first_block = d->first_block;
    out->unit_head = d->unit_head;
}

void zt_decoder_init_values(uint64_t seed, uint32_t family_key, int unit, int param, float stddev, float fill,
                            size_t first, size_t count, float *dst) {
    zt_rng r = zt_rng_keyed(seed, family_key, (uint64_t)unit, (uint64_t)param);
    zt_rng_skip(&r, 2 * (uint64_t)first); /* two draws per normal value */
    for (size_t i = 0; i < count; i++) dst[i] = stddev > 0.0f ? stddev * zt_rng_normal(&r) : fill;
}
