/* AdamW (Loshchilov and Hutter; PyTorch's torch.optim.AdamW): exp_avg and
 * exp_avg_sq per element, bias-corrected, weight decay decoupled and only
 * where the model asked for it. On the device the backend's adamw kernel;
 * on the host the fused SIMD CPU Adam (offload/), which rounds each element
 * as the CPU backend's kernel does, so offload gives the same bits. */
#include "zt_optim_engine.h"
#include "zt_cpu_adam.h"

enum { EXP_AVG = 0, EXP_AVG_SQ };

/* Per parameter over each piece of gradients: its own weight decay. */
static zt_status adamw_device_step(zt_engine *e, int u, const zt_optim_step *s) {
    const zt_ops *ops = e->ctx->be->ops;
    zt_stream *cs = &e->ctx->compute;
    size_t lo = owned_lo(e, u);
    float *m = zt_f32(&e->units[u].opt_state[EXP_AVG]), *v = zt_f32(&e->units[u].opt_state[EXP_AVG_SQ]); /* [owned] */
    float *g;
    size_t at, gn, a, b;
    float wd;
    for (zt_grad_pieces it = zt_engine_grad_pieces(e, u, lo, owned_numel(e, u), s->ws);
         zt_engine_next_grad_piece(&it, &g, &at, &gn);) {
        if (s->mult != 1.0f) ops->scale(cs, g, s->mult, gn);
        for (int i = 0; i < e->spec->units[u].nparams; i++)
            if (param_in_range(e, u, i, at, at + gn, &a, &b, &wd))
                ops->adamw(cs, s->p + (a - s->p_at), g + (a - at), m + (a - lo), v + (a - lo), b - a, s->lr,
                           e->cfg.beta1, e->cfg.beta2, e->cfg.eps, wd, s->t);
    }
    return ZT_OK;
}

/* The fused CPU Adam per parameter; it also writes the params dtype's
 * copy when out is given. */
static int adamw_host_range(const zt_engine *e, int u, size_t lo, size_t hi, float *p, float *g, float *const *slot,
                            void *out, float clip, float lr, int t) {
    size_t d = zt_dtype_size(e->cfg.dtype), a, b;
    float wd;
    zt_adam_isa isa = zt_cpu_adam_best_isa();
    for (int i = 0; i < e->spec->units[u].nparams; i++) {
        if (!param_in_range(e, u, i, lo, hi, &a, &b, &wd)) continue;
        size_t j = a - lo;
        zt_cpu_adam_fused(isa, e->cfg.host_threads, p + j, g + j, slot[EXP_AVG] + j, slot[EXP_AVG_SQ] + j,
                          out ? (char *)out + j * d : NULL, e->cfg.dtype, b - a, clip, lr, e->cfg.beta1, e->cfg.beta2,
                          e->cfg.eps, wd, t);
    }
    return out != NULL;
}

const zt_optim zt_optim_adamw = {
    .name = "adamw",
    .description = "AdamW: exp_avg, exp_avg_sq per element (8 bytes of state per parameter)",
    .nslots = 2,
    .slots = {{"exp_avg", ZT_SLOT_PER_ELEMENT, 32, -1}, {"exp_avg_sq", ZT_SLOT_PER_ELEMENT, 32, -1}},
    .slot_words = zt_optim_words_per_element,
    .chunk_align = 1,
    .device_step = adamw_device_step,
    .host_step = zt_optim_host_step_elementwise,
    .host_range = adamw_host_range,
    .ckpt_blocks = {"exp_avg", "exp_avg_sq"},
};
