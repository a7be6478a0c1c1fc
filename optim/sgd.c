/* SGD with momentum (PyTorch's torch.optim.SGD without dampening, Nesterov
 * optional): one momentum_buf per element, weight decay added to the
 * gradient where the model asked for it. Host and device run the same CPU
 * backend kernel on the CPU, so offload gives the same bits. */
#include "cpu_ops.h"
#include "zt_optim_engine.h"

enum { MOMENTUM_BUF = 0 };

static zt_status sgd_device_step(zt_engine *e, int u, const zt_optim_step *s) {
    const zt_ops *ops = e->ctx->be->ops;
    zt_stream *cs = &e->ctx->compute;
    size_t lo = owned_lo(e, u);
    float *buf = zt_f32(&e->units[u].opt_state[MOMENTUM_BUF]); /* [owned] */
    float *g;
    size_t at, gn, a, b;
    float wd;
    for (zt_grad_pieces it = zt_engine_grad_pieces(e, u, lo, owned_numel(e, u), s->ws);
         zt_engine_next_grad_piece(&it, &g, &at, &gn);) {
        if (s->mult != 1.0f) ops->scale(cs, g, s->mult, gn);
        for (int i = 0; i < e->spec->units[u].nparams; i++)
            if (param_in_range(e, u, i, at, at + gn, &a, &b, &wd))
                ops->sgd(cs, s->p + (a - s->p_at), g + (a - at), buf + (a - lo), b - a, s->lr, e->cfg.momentum,
                         e->cfg.nesterov, wd);
    }
    return ZT_OK;
}

/* The CPU backend's kernel on the host buffers with the host threads; g is
 * scaled by clip first (in place), as the device path scales the gradients
 * before its update. Never writes out. */
static int sgd_host_range(const zt_engine *e, int u, size_t lo, size_t hi, float *p, float *g, float *const *slot,
                          void *out, float clip, float lr, int t) {
    (void)out, (void)t;
    zt_stream host = {.nthreads = e->cfg.host_threads > 0 ? e->cfg.host_threads : 1};
    size_t a, b;
    float wd;
    for (int i = 0; i < e->spec->units[u].nparams; i++) {
        if (!param_in_range(e, u, i, lo, hi, &a, &b, &wd)) continue;
        size_t j = a - lo;
        scale_host_grads(g + j, b - a, clip);
        zt_cpu_sgd(&host, p + j, g + j, slot[MOMENTUM_BUF] + j, b - a, lr, e->cfg.momentum, e->cfg.nesterov, wd);
    }
    return 0;
}

const zt_optim zt_optim_sgd = {
    .name = "sgd",
    .description = "SGD with momentum: momentum_buf per element (4 bytes of state per parameter)",
    .nslots = 1,
    .slots = {{"momentum_buf", ZT_SLOT_PER_ELEMENT, 32, -1}},
    .slot_words = zt_optim_words_per_element,
    .chunk_align = 1,
    .device_step = sgd_device_step,
    .host_step = zt_optim_host_step_elementwise,
    .host_range = sgd_host_range,
    .ckpt_blocks = {"momentum_buf", "-"},
};
