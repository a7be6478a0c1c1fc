/* The optimizer interface's matrix hook (optim/zt_optim.h), through a
 * test-only optimizer: its update is the gradient, its hook scales each
 * whole matrix's update to RMS 1 (a whole-matrix statistic: no rank can
 * compute it from its slice alone), its apply is p -= lr x update. Under
 * mpirun with 1, 2 or 4 ranks (equal gradients on every rank, multiples of
 * 2^-10, average exactly), at stages 0-3, two steps must give bitwise the
 * values of the same arithmetic on whole units in one process.
 *
 * Negative twins: the same computation without the hook differs (the hook
 * ran), and, where a matrix is split across ranks, so does the one that
 * scales each rank's slice by its own RMS (the engine gathered the whole
 * matrix to its owner). */
#include "optim_kit.h"

#include "engine_internal.h" /* an optimizer reads the engine's owned range, as optim/ files do */

#define LR 1e-2f

/* The update: the unscaled, clipped gradient (fp32, so the grads themselves). */
static zt_status rms_update(zt_engine *e, int u, const zt_optim_step *s, float *upd) {
    size_t lo = owned_lo(e, u);
    float *g;
    size_t at, gn;
    for (zt_grad_pieces it = zt_engine_grad_pieces(e, u, lo, owned_numel(e, u), s->ws);
         zt_engine_next_grad_piece(&it, &g, &at, &gn);)
        for (size_t i = 0; i < gn; i++) upd[at - lo + i] = s->mult == 1.0f ? g[i] : s->mult * g[i];
    return ZT_OK;
}

/* x[n] scaled to RMS 1 (the statistic summed in double, in element order). */
static void scale_to_unit_rms(float *x, size_t n) {
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) sum += (double)x[i] * (double)x[i];
    float scale = (float)(1.0 / (sqrt(sum / (double)n) + 1e-6));
    for (size_t i = 0; i < n; i++) x[i] *= scale;
}

static zt_status rms_transform(const zt_engine_config *cfg, const zt_ops *ops, zt_stream *s, const zt_matrix *m,
                               float *whole, float *scratch, zt_error *err) {
    (void)cfg, (void)ops, (void)s, (void)scratch, (void)err; /* the CPU backend: whole is host memory */
    scale_to_unit_rms(whole, m->rows * m->cols);
    return ZT_OK;
}

static zt_status rms_apply(zt_engine *e, int u, const zt_optim_step *s, const float *upd) {
    size_t lo = owned_lo(e, u), n = owned_numel(e, u);
    for (size_t i = 0; i < n; i++) s->p[lo + i - s->p_at] -= s->lr * upd[i];
    return ZT_OK;
}

static zt_status rms_check(const zt_engine_config *cfg, zt_error *err) {
    if (cfg->offload || cfg->dtype != ZT_FP32)
        return ZT_FAIL(err, ZT_ERR_INVALID, "matrix_rms: device steps in fp32 only (a test optimizer)");
    return ZT_OK;
}

static const zt_optim_matrix_hook rms_hook = {.update = rms_update, .transform = rms_transform, .apply = rms_apply};

static const zt_optim matrix_rms = {
    .name = "matrix_rms",
    .description = "test only: the gradient scaled per whole matrix to RMS 1",
    .nslots = 0,
    .check = rms_check,
    .chunk_align = 1,
    .ckpt_blocks = {"-", "-"},
    .matrix_hook = &rms_hook,
};

/* What the engine must compute, on whole units in one process. how: 0 the
 * hook on whole matrices, 1 no hook, 2 the hook per slice of world N. */
static void expected(const zt_model_spec *spec, int N, int how, float *out[2]) {
    static zt_model_spec one; /* large: off the stack */
    kit_spec(&one, N); /* the slices of world N, for how == 2 */
    for (int u = 0; u < spec->nunits; u++) {
        const zt_unit_spec *us = &spec->units[u];
        float *p = out[u], *upd = malloc(us->numel * sizeof(float));
        for (int k = 0; k < us->nparams; k++) kit_init((void *)spec, u, k, 0, us->params[k].numel, p + us->params[k].offset);
        for (int s = 0; s < 2; s++) {
            for (size_t i = 0; i < us->numel; i++) upd[i] = kit_grad(s, u, i);
            for (int k = 0; how != 1 && k < us->nparams; k++) {
                const zt_param_spec *ps = &us->params[k];
                if (ps->ndim != 2) continue;
                size_t S = one.units[u].shard_numel;
                for (size_t a = ps->offset; a < ps->offset + ps->numel;) { /* whole, or slice by slice */
                    size_t end = how == 2 ? (a / S + 1) * S : ps->offset + ps->numel;
                    if (end > ps->offset + ps->numel) end = ps->offset + ps->numel;
                    scale_to_unit_rms(upd + a, end - a);
                    a = end;
                }
            }
            for (size_t i = 0; i < us->numel; i++) p[i] -= LR * upd[i];
        }
        free(upd);
    }
}

static void check_stage(zt_comm *comm, int stage) {
    static zt_model_spec spec; /* large: off the stack */
    kit_spec(&spec, comm->world_size);
    zt_engine_config c = {.stage = stage, .optimizer = &matrix_rms, .dtype = ZT_FP32, .reduce_dtype = ZT_FP32,
                          .bucket_bytes = 1 << 20, .overlap_comm = 1, .host_threads = 1};
    zt_ctx ctx;
    zt_engine e;
    MUST(zt_ctx_init(&ctx, ZT_DEVICE_CPU, 1, 0, comm->rank, comm->world_size, 1), &ctx);
    MUST(zt_engine_init(&e, &ctx, comm, &spec, &c, kit_init, &spec), &ctx);
    for (int s = 0; s < 2; s++) MUST(kit_step(&e, s, LR), &ctx);
    kit_state got = {0};
    MUST(kit_gather(&e, comm, &got), &ctx);
    float *want[3][2];
    for (int how = 0; how < 3; how++)
        for (int u = 0; u < 2; u++) want[how][u] = calloc(spec.units[u].numel + 1, sizeof(float));
    for (int how = 0; how < 3; how++) expected(&spec, comm->world_size, how, want[how]);
    for (int u = 0; u < spec.nunits; u++) {
        size_t n = spec.units[u].numel, d = kit_diff(got.v[0][u], want[0][u], n);
        CHECK(d == 0, "stage %d, %d ranks: unit %d differs from one process's in %zu values", stage,
              comm->world_size, u, d);
    }
    size_t off = kit_diff(got.v[0][0], want[1][0], spec.units[0].numel);
    CHECK(off != 0, "stage %d: the hook made no difference (did it run?)", stage);
    /* w0 and w2 span two slices from 2 ranks on (at stage 0 one rank owns
     * them all, and the engine still transforms whole matrices) */
    size_t sliced = kit_diff(got.v[0][0], want[2][0], spec.units[0].numel) +
                    kit_diff(got.v[0][1], want[2][1], spec.units[1].numel);
    CHECK(comm->world_size == 1 || sliced != 0, "stage %d: whole-matrix and per-slice scaling agree", stage);
    for (int how = 0; how < 3; how++)
        for (int u = 0; u < 2; u++) free(want[how][u]);
    kit_free(&got);
    zt_engine_destroy(&e);
    zt_ctx_destroy(&ctx);
}

int main(void) {
    zt_comm *comm = test_comm();
    for (int stage = 0; stage <= 3; stage++) check_stage(comm, stage);
    if (comm->rank == 0) printf("ok matrix hook at %d rank(s), stages 0-3\n", comm->world_size);
    printf("rank %d: %ld checks, %d failures\n", comm->rank, g_checks, g_failures);
    return g_failures ? 1 : 0;
}
