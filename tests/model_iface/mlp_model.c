/* A third model family, defined inside a test: a two-unit MLP language
 * model written straight against the model interface
 * (train/zt_train_model.h), without the decoder scaffold, so that the
 * interface is shown to stand alone on public headers. zt-train-mlp
 * (tests/model_iface/model_iface_tests.cmake) trains it through
 * libzt_train; zt_model_iface_test.py checks that stages 0 and 3 agree to
 * the bit at np 2.
 *
 * With H = d_model, F = ffn_dim (default 2H, so that a swapped H and F is
 * a shape error rather than a silent one), V = vocab and N = B*T:
 *
 *   unit "in":  wte [V,H]
 *   unit "out": fc_w [F,H], fc_b [F], head_w [V,F], head_b [V]
 *
 *   x[N,H] = wte[tokens]       h[N,F] = x fc_w^T + fc_b     a[N,F] = gelu(h)
 *   logits[N,V] = a head_w^T + head_b      loss[n] = -log softmax(logits[n])[targets[n]]
 *
 * Losses: forward copies the per-position losses to the host and waits for
 * them, so each micro-batch's mean is known when forward returns and
 * take_losses only adds the pending means. That wait stalls the host once
 * per micro-batch, which a test model can afford; it also means the
 * caller's token arrays have been read before forward returns. (The decoder
 * queues the copy behind the compute stream instead: decoder_io.c.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zt_rng.h"
#include "zt_train_model.h"

enum { P_WTE = 0 };                                    /* unit "in"'s parameters */
enum { P_FC_W = 0, P_FC_B, P_HEAD_W, P_HEAD_B };       /* unit "out"'s parameters */

/* One micro-batch's device buffers, from its forward to the end of its
 * backward (or free_activations after an error). */
typedef struct {
    zt_tensor tokens;  /* [N] int32, held as 4-byte words */
    zt_tensor targets; /* [N] int32, held as 4-byte words */
    zt_tensor x;       /* [N,H] act: the embedded tokens */
    zt_tensor h;       /* [N,F] act: the hidden layer before GELU */
    zt_tensor a;       /* [N,F] act: after GELU */
    zt_tensor probs;   /* [N,V] act: the logits, then their softmax in place, then dlogits in backward */
    zt_tensor losses;  /* [N] fp32: per position */
    zt_tensor da;      /* [N,F] act: backward's gradient of a */
    zt_tensor dh;      /* [N,F] act: backward's gradient of h */
    zt_tensor dx;      /* [N,H] act: backward's gradient of x */
} mlp_acts;

typedef struct {
    zt_model_settings s;
    zt_model_spec *spec; /* heap: a zt_model_spec is megabytes (ZT_MAX_UNITS units) */
    int unit_in, unit_out;
    int B, T;            /* of the forward in flight */
    zt_dtype act;        /* the engine's compute dtype, of activations and gathered params */
    mlp_acts acts;
    float *host_losses;  /* [host_cap] fp32: the last forward's per-position losses */
    size_t host_cap;
    double pending;      /* the sum of the means of micro-batches not yet taken */
} mlp;

/* ---- settings, instance, spec ---- */

/* The settings an MLP has: d_model, ffn_dim, vocab, seq_len. Refused where
 * a setting asks for something it cannot do. layers and heads are not read:
 * the options give them a value whether or not the user did, so the model
 * cannot tell a request from a default. */
static zt_status mlp_resolve(zt_model_settings *s, zt_error *err) {
    if (s->d_model < 1 || s->vocab < 1 || s->seq_len < 1)
        return ZT_FAIL(err, ZT_ERR_INVALID, "mlp: d_model %d, vocab %d and seq_len %d must be positive", s->d_model,
                       s->vocab, s->seq_len);
    if (s->tied) return ZT_FAIL(err, ZT_ERR_INVALID, "mlp: tied: the head reads the GELU layer ([V,F]), not wte");
    if (s->kv_heads != 0) return ZT_FAIL(err, ZT_ERR_INVALID, "mlp: kv_heads %d: the MLP has no attention", s->kv_heads);
    if (s->attention_fused) return ZT_FAIL(err, ZT_ERR_INVALID, "mlp: attention_fused: the MLP has no attention");
    if (s->recompute.kind != ZT_RECOMPUTE_NONE || s->offload_activations)
        return ZT_FAIL(err, ZT_ERR_INVALID, "mlp: recompute / offload_activations: the MLP has no blocks; it keeps "
                       "every activation");
    if (s->ffn_dim == 0) s->ffn_dim = 2 * s->d_model;
    return ZT_OK;
}

static zt_status add_param(zt_model_spec *spec, int unit, const char *name, int64_t d0, int64_t d1, int decay,
                           zt_error *err) {
    int64_t shape[2] = {d0, d1};
    int param;
    return zt_spec_add_param(spec, unit, name, d1 ? 2 : 1, shape, decay, &param, err);
}

/* Units and parameters in the order of the enums above. */
static zt_status declare_units(mlp *m, zt_error *err) {
    int64_t H = m->s.d_model, F = m->s.ffn_dim, V = m->s.vocab;
    ZT_TRY(zt_spec_add_unit(m->spec, "in", &m->unit_in, err));
    ZT_TRY(add_param(m->spec, m->unit_in, "wte", V, H, 1, err));
    ZT_TRY(zt_spec_add_unit(m->spec, "out", &m->unit_out, err));
    ZT_TRY(add_param(m->spec, m->unit_out, "fc_w", F, H, 1, err));
    ZT_TRY(add_param(m->spec, m->unit_out, "fc_b", F, 0, 0, err));
    ZT_TRY(add_param(m->spec, m->unit_out, "head_w", V, F, 1, err));
    return add_param(m->spec, m->unit_out, "head_b", V, 0, 0, err);
}

static void mlp_destroy(void *self) {
    mlp *m = self;
    if (!m) return;
    free(m->spec);
    free(m->host_losses);
    free(m);
}

static zt_status mlp_create(void **self, const zt_model_settings *s, zt_error *err) {
    mlp *m = calloc(1, sizeof *m);
    if (m) m->spec = calloc(1, sizeof *m->spec);
    if (!m || !m->spec) {
        mlp_destroy(m);
        return ZT_FAIL(err, ZT_ERR_OOM, "mlp: cannot allocate the model");
    }
    m->s = *s;
    zt_status st = declare_units(m, err);
    if (st != ZT_OK) {
        mlp_destroy(m);
        return st;
    }
    *self = m;
    return ZT_OK;
}

static zt_model_spec *mlp_spec(void *self) { return ((mlp *)self)->spec; }

/* Matrices N(0, 1/sqrt(fan_in)) so the logits start near unit scale,
 * biases 0; keyed by (seed, unit, param) only, as the engine requires. */
static void mlp_init_param(void *self, int unit, int param, size_t first, size_t count, float *dst) {
    const mlp *m = self;
    const zt_param_spec *ps = &m->spec->units[unit].params[param];
    float stddev = ps->ndim == 2 ? 1.0f / sqrtf((float)ps->shape[1]) : 0.0f;
    zt_rng r = zt_rng_keyed(m->s.seed, 0x3a1fu, (uint64_t)unit, (uint64_t)param);
    zt_rng_skip(&r, 2 * (uint64_t)first); /* two draws per normal value */
    for (size_t i = 0; i < count; i++) dst[i] = stddev > 0.0f ? stddev * zt_rng_normal(&r) : 0.0f;
}

/* "in", "out", or both, comma-separated; "none" or "": nothing. */
static zt_status mlp_freeze(void *self, const char *list, zt_error *err) {
    mlp *m = self;
    if (!list || !list[0] || strcmp(list, "none") == 0) return ZT_OK;
    char buf[64];
    if (snprintf(buf, sizeof buf, "%s", list) >= (int)sizeof buf)
        return ZT_FAIL(err, ZT_ERR_INVALID, "mlp: freeze '%s': not a list of in, out", list);
    for (char *save = NULL, *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        if (strcmp(item, "in") == 0) m->spec->units[m->unit_in].frozen = 1;
        else if (strcmp(item, "out") == 0) m->spec->units[m->unit_out].frozen = 1;
        else return ZT_FAIL(err, ZT_ERR_INVALID, "mlp: freeze: '%s' is not a unit (in, out)", item);
    }
    if (m->spec->units[m->unit_in].frozen && m->spec->units[m->unit_out].frozen)
        return ZT_FAIL(err, ZT_ERR_INVALID, "mlp: freeze %s leaves nothing to train", list);
    return ZT_OK;
}

/* ---- device buffers ---- */

/* A row-major [d0,d1] buffer (d1 = 1: a vector) on the compute device. */
static zt_status alloc_act(zt_ctx *ctx, zt_tensor *t, zt_dtype dtype, size_t d0, size_t d1, zt_category cat,
                           const char *label) {
    int64_t shape[2] = {(int64_t)d0, (int64_t)d1};
    return zt_tensor_alloc(t, &ctx->device_mem, ctx->be->device, dtype, 2, shape, cat, label, &ctx->err);
}

static void mlp_free_activations(void *self, zt_engine *eng) {
    mlp *m = self;
    zt_mem *mem = &zt_engine_context(eng)->device_mem;
    zt_tensor *all[] = {&m->acts.tokens, &m->acts.targets, &m->acts.x, &m->acts.h, &m->acts.a, &m->acts.probs,
                        &m->acts.losses, &m->acts.da, &m->acts.dh, &m->acts.dx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) zt_tensor_free(all[i], mem);
}

/* Parameter p of a gathered unit: [padded] in the compute dtype. */
static const void *param_at(const mlp *m, const void *base, int unit, int p) {
    return (const char *)base + m->spec->units[unit].params[p].offset * zt_dtype_size(m->act);
}

/* Its gradient in the unit's fp32 gradient buffer. */
static float *grad_at(const mlp *m, float *base, int unit, int p) {
    return base + m->spec->units[unit].params[p].offset;
}

/* ---- forward ---- */

/* The forward's buffers, and the token ids on the device. */
static zt_status forward_buffers(mlp *m, zt_ctx *ctx, const int32_t *tokens, const int32_t *targets) {
    size_t N = (size_t)m->B * m->T, H = (size_t)m->s.d_model, F = (size_t)m->s.ffn_dim, V = (size_t)m->s.vocab;
    mlp_acts *A = &m->acts;
    ZT_TRY(alloc_act(ctx, &A->tokens, ZT_FP32, N, 1, ZT_CAT_OTHER, "mlp tokens"));
    ZT_TRY(alloc_act(ctx, &A->targets, ZT_FP32, N, 1, ZT_CAT_OTHER, "mlp targets"));
    ZT_TRY(alloc_act(ctx, &A->x, m->act, N, H, ZT_CAT_ACTIVATIONS, "mlp x"));
    ZT_TRY(alloc_act(ctx, &A->h, m->act, N, F, ZT_CAT_ACTIVATIONS, "mlp h"));
    ZT_TRY(alloc_act(ctx, &A->a, m->act, N, F, ZT_CAT_ACTIVATIONS, "mlp a"));
    ZT_TRY(alloc_act(ctx, &A->probs, m->act, N, V, ZT_CAT_ACTIVATIONS, "mlp probs"));
    ZT_TRY(alloc_act(ctx, &A->losses, ZT_FP32, N, 1, ZT_CAT_ACTIVATIONS, "mlp losses"));
    zt_stream *s = &ctx->compute;
    ZT_TRY(ctx->be->memcpy_async(ctx->be, A->tokens.data, tokens, N * 4, ZT_COPY_H2D, s, &ctx->err));
    return ctx->be->memcpy_async(ctx->be, A->targets.data, targets, N * 4, ZT_COPY_H2D, s, &ctx->err);
}

/* The per-position losses to the host; their mean, summed in position
 * order so that it is the same at every stage, joins the pending sum. */
static zt_status collect_losses(mlp *m, zt_ctx *ctx) {
    size_t N = (size_t)m->B * m->T;
    if (N > m->host_cap) {
        float *p = realloc(m->host_losses, N * sizeof *p);
        if (!p) return ZT_FAIL(&ctx->err, ZT_ERR_OOM, "mlp: cannot allocate %zu host losses", N);
        m->host_losses = p;
        m->host_cap = N;
    }
    ZT_TRY(ctx->be->memcpy_async(ctx->be, m->host_losses, m->acts.losses.data, N * sizeof(float), ZT_COPY_D2H,
                                 &ctx->compute, &ctx->err));
    ZT_TRY(ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err));
    double sum = 0.0;
    for (size_t i = 0; i < N; i++) sum += m->host_losses[i];
    m->pending += sum / (double)N;
    return ZT_OK;
}

static zt_status mlp_forward(void *self, zt_engine *eng, const int32_t *tokens, const int32_t *targets, int B,
                             int T) {
    mlp *m = self;
    zt_ctx *ctx = zt_engine_context(eng);
    const zt_ops *ops = zt_engine_kernels(eng);
    if (B <= 0 || T <= 0 || T > m->s.seq_len)
        return ZT_FAIL(&ctx->err, ZT_ERR_INVALID, "mlp: forward: bad batch shape B=%d T=%d (seq_len %d)", B, T,
                       m->s.seq_len);
    mlp_free_activations(m, eng);
    m->B = B, m->T = T, m->act = zt_engine_compute_dtype(eng);
    int N = B * T, H = m->s.d_model, F = m->s.ffn_dim, V = m->s.vocab;
    ZT_TRY(forward_buffers(m, ctx, tokens, targets));
    mlp_acts *A = &m->acts;
    zt_stream *s = &ctx->compute;
    const void *w;
    ZT_TRY(zt_engine_begin_pass(eng, ZT_PASS_FORWARD));
    ZT_TRY(zt_engine_gather(eng, m->unit_in, &w));
    ops->embedding_fwd(s, A->x.data, A->tokens.data, param_at(m, w, m->unit_in, P_WTE), NULL, B, T, H);
    ZT_TRY(zt_engine_release(eng, m->unit_in));
    ZT_TRY(zt_engine_gather(eng, m->unit_out, &w));
    int u = m->unit_out;
    ops->matmul_fwd(s, A->h.data, A->x.data, param_at(m, w, u, P_FC_W), param_at(m, w, u, P_FC_B), N, H, F);
    ops->gelu_fwd(s, A->a.data, A->h.data, (size_t)N * F);
    ops->matmul_fwd(s, A->probs.data, A->a.data, param_at(m, w, u, P_HEAD_W), param_at(m, w, u, P_HEAD_B), N, F, V);
    ops->softmax_xent_fwd(s, A->losses.data, A->probs.data, A->probs.data, A->targets.data, N, V);
    ZT_TRY(zt_engine_release(eng, m->unit_out));
    return collect_losses(m, ctx);
}

/* ---- backward ---- */

/* Unit "out" from dloss to dx: its gradients handed to the engine. */
static zt_status out_backward(mlp *m, zt_engine *eng, float dloss) {
    zt_ctx *ctx = zt_engine_context(eng);
    const zt_ops *ops = zt_engine_kernels(eng);
    size_t N = (size_t)m->B * m->T, H = (size_t)m->s.d_model, F = (size_t)m->s.ffn_dim;
    int V = m->s.vocab, u = m->unit_out;
    mlp_acts *A = &m->acts;
    zt_stream *s = &ctx->compute;
    ZT_TRY(alloc_act(ctx, &A->da, m->act, N, F, ZT_CAT_WORKSPACE, "mlp da"));
    ZT_TRY(alloc_act(ctx, &A->dh, m->act, N, F, ZT_CAT_WORKSPACE, "mlp dh"));
    ZT_TRY(alloc_act(ctx, &A->dx, m->act, N, H, ZT_CAT_WORKSPACE, "mlp dx"));
    const void *w;
    float *dw;
    ZT_TRY(zt_engine_gather(eng, u, &w));
    ZT_TRY(zt_engine_grad_buffer(eng, u, &dw));
    /* dlogits [N,V] over the probabilities they no longer need */
    ops->softmax_xent_bwd(s, A->probs.data, A->probs.data, A->targets.data, (int)N, V, dloss);
    ops->matmul_bwd(s, A->da.data, grad_at(m, dw, u, P_HEAD_W), grad_at(m, dw, u, P_HEAD_B), A->probs.data,
                    A->a.data, param_at(m, w, u, P_HEAD_W), (int)N, (int)F, V);
    ops->gelu_bwd(s, A->dh.data, A->h.data, A->da.data, N * F);
    ops->matmul_bwd(s, A->dx.data, grad_at(m, dw, u, P_FC_W), grad_at(m, dw, u, P_FC_B), A->dh.data, A->x.data,
                    param_at(m, w, u, P_FC_W), (int)N, (int)H, (int)F);
    ZT_TRY(zt_engine_release(eng, u));
    return zt_engine_grads_ready(eng, u);
}

/* dloss is the gradient of the step's mean loss for each position (the
 * trainer's 1 / (B T micro-batches), times the loss scale). Unit "in" is
 * not gathered: the embedding's gradient needs only the token ids. */
static zt_status mlp_backward(void *self, zt_engine *eng, float dloss) {
    mlp *m = self;
    zt_ctx *ctx = zt_engine_context(eng);
    if (!m->acts.probs.data) return ZT_FAIL(&ctx->err, ZT_ERR_INVALID, "mlp: backward without forward");
    ZT_TRY(zt_engine_begin_pass(eng, ZT_PASS_BACKWARD));
    ZT_TRY(out_backward(m, eng, dloss));
    float *dw;
    ZT_TRY(zt_engine_grad_buffer(eng, m->unit_in, &dw));
    zt_engine_kernels(eng)->embedding_bwd(&ctx->compute, grad_at(m, dw, m->unit_in, P_WTE), NULL, m->acts.dx.data,
                                          m->acts.tokens.data, m->B, m->T, m->s.d_model);
    ZT_TRY(zt_engine_grads_ready(eng, m->unit_in));
    mlp_free_activations(m, eng);
    return ZT_OK;
}

/* ---- losses, reports, checkpoints ---- */

/* The means are already on the host (forward waited for them). */
static zt_status mlp_take_losses(void *self, zt_ctx *ctx, double *sum_of_means) {
    (void)ctx;
    mlp *m = self;
    *sum_of_means = m->pending;
    m->pending = 0.0;
    return ZT_OK;
}

/* No replays and no copies of kept inputs: nothing to report. */
static zt_model_stats mlp_stats(const void *self) {
    (void)self;
    return (zt_model_stats){0};
}

static json_t *mlp_describe(const zt_model_settings *s) {
    return json_pack("{s:s,s:i,s:i,s:i,s:i}", "family", "mlp", "d_model", s->d_model, "ffn_dim", s->ffn_dim, "vocab",
                     s->vocab, "seq_len", s->seq_len);
}

static int mlp_tensors(void *self, zt_model_tensor *out, int cap) {
    return zt_train_model_spec_tensors(((mlp *)self)->spec, "row-major [out, in]", out, cap);
}

/* The planner's hooks are NULL: zt-plan refuses the family by name. */
const zt_train_model zt_model_mlp = {
    .family = "mlp",
    .description = "a two-unit MLP (embedding; GELU layer and head), a test of the model interface",
    .resolve = mlp_resolve,
    .create = mlp_create,
    .destroy = mlp_destroy,
    .spec = mlp_spec,
    .init_param = mlp_init_param,
    .freeze = mlp_freeze,
    .forward = mlp_forward,
    .backward = mlp_backward,
    .take_losses = mlp_take_losses,
    .free_activations = mlp_free_activations,
    .stats = mlp_stats,
    .describe = mlp_describe,
    .tensors = mlp_tensors,
};
