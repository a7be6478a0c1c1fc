/* The engine's side of an optimizer's matrix hook (optim/zt_optim.h): the
 * matrices and their owners, and per matrix the gather of its slices to
 * the owner, the owner's transform and the scatter of the result back.
 *
 * Owners balance the transforms' work: largest first, each to the rank of
 * the shard group with the least so far (ties: the lowest rank), so no
 * rank does more than total / N + the largest matrix's. One matrix is one
 * gather and one scatter over the group, of its own bytes: no rank ever
 * holds more than the matrices it owns, one at a time. At stage 0 every
 * rank owns the whole unit and transforms every matrix in place. */
#include <stdlib.h>

#include "cpu_ops.h"
#include "zt_optim_engine.h"

struct zt_matrix_plan {
    int n;
    zt_matrix *m; /* [n] in unit order */
};

const zt_matrix *zt_engine_matrices(const zt_engine *e, int *n) {
    *n = e->matrices ? e->matrices->n : 0;
    return e->matrices ? e->matrices->m : NULL;
}

/* The trained units' hidden matrices, part by part, in unit order. */
static int list_matrices(const zt_optim_matrix_hook *hook, const zt_model_spec *spec, zt_matrix *out) {
    int n = 0;
    for (int u = 0; u < spec->nunits; u++) {
        const zt_unit_spec *us = &spec->units[u];
        for (int i = 0; !us->frozen && i < us->nparams; i++) {
            const zt_param_spec *ps = &us->params[i];
            for (int k = 0; ps->hidden && k < ps->nparts; k++, n++) {
                if (!out) continue;
                zt_matrix *m = &out[n];
                m->unit = u, m->param = i, m->part = k;
                zt_param_part(ps, k, &m->offset, &m->rows);
                m->cols = (size_t)ps->shape[1];
                m->flops = hook->flops ? hook->flops(m->rows, m->cols) : (double)(m->rows * m->cols);
            }
        }
    }
    return n;
}

/* Largest work first; equal work in unit order. */
static int heavier_first(const void *a, const void *b) {
    const zt_matrix *x = *(const zt_matrix *const *)a, *y = *(const zt_matrix *const *)b;
    if (x->flops != y->flops) return x->flops > y->flops ? -1 : 1;
    return x < y ? -1 : x > y;
}

int zt_optim_matrices(const zt_optim *opt, const zt_model_spec *spec, int world, zt_matrix *out) {
    if (!opt->matrix_hook) return 0;
    int n = list_matrices(opt->matrix_hook, spec, out);
    if (!out || n == 0) return n;
    /* Only the first min(world, n) ranks can receive one: the i-th largest
     * of the first `world` goes to rank i, every other rank still having
     * none (a transform's work is never 0), so a planner's world of a
     * million costs no more than the matrices. */
    int used = world < n ? world : n;
    zt_matrix **order = calloc((size_t)n, sizeof *order);
    double *load = calloc((size_t)used, sizeof *load);
    for (int i = 0; order && load && i < n; i++) order[i] = &out[i];
    if (order && load) qsort(order, (size_t)n, sizeof *order, heavier_first);
    for (int i = 0; order && load && i < n; i++) {
        int least = i < used ? i : 0;
        for (int r = 1; i >= used && r < used; r++)
            if (load[r] < load[least]) least = r;
        order[i]->owner = least;
        load[least] += order[i]->flops;
    }
    int ok = order && load;
    free(order);
    free(load);
    return ok ? n : -1;
}

/* Refusals before step 1. On the CPU backend the device is the host, and
 * --muon-ns-device's two values are one. On a GPU, device (no offload)
 * keeps the state on the device and transforms there, the slices staged
 * through the host for the gather and scatter; host keeps the state in the
 * host pool (offload) and transforms on the CPU BLAS; the other two pairs
 * are refused. And the matrix a rank gathers, with its scratch and the
 * unit's update, must fit under the device cap (--mem-limit), which no
 * step could change. */
static zt_status check_matrices(const zt_engine *e) {
    const zt_optim *opt = optim_of(e);
    zt_ctx *ctx = e->ctx;
    if (ctx->be->device != ZT_DEVICE_CPU && !e->cfg.muon_ns_host && e->cfg.offload)
        return ZT_FAIL(&ctx->err, ZT_ERR_INVALID, "optimizer %s on a GPU with --offload cpu steps on the host, "
                       "Newton-Schulz included: give --muon-ns-device host (device: no offload)", opt->name);
    if (ctx->be->device != ZT_DEVICE_CPU && e->cfg.muon_ns_host && !e->cfg.offload)
        return ZT_FAIL(&ctx->err, ZT_ERR_INVALID, "optimizer %s on a GPU with --muon-ns-device host needs --offload "
                       "cpu: the momentum lives in pinned host memory and Newton-Schulz runs on the CPU BLAS",
                       opt->name);
    size_t cap = ctx->device_mem.limit_bytes;
    int alone = full_optim(e) || e->comm->world_size == 1;
    for (int i = 0; cap && !e->cfg.offload && i < e->matrices->n; i++) {
        const zt_matrix *m = &e->matrices->m[i];
        if (!alone && m->owner != e->comm->rank) continue;
        size_t need = 4 * (owned_numel(e, m->unit) + zt_matrix_scratch(opt, m) + (alone ? 0 : m->rows * m->cols));
        if (need > cap)
            return ZT_FAIL(&ctx->err, ZT_ERR_INVALID, "optimizer %s: matrix %s.%s part %d [%zu, %zu] needs %zu bytes on "
                           "rank %d (its unit's update, the gathered matrix and Newton-Schulz scratch), more than "
                           "--mem-limit's %zu", opt->name, e->spec->units[m->unit].name,
                           e->spec->units[m->unit].params[m->param].name, m->part, m->rows, m->cols, need,
                           e->comm->rank, cap);
    }
    return ZT_OK;
}

zt_status zt_engine_plan_matrices(zt_engine *e) {
    const zt_optim *opt = optim_of(e);
    if (!opt->matrix_hook) return ZT_OK;
    int n = zt_optim_matrices(opt, e->spec, e->comm->world_size, NULL);
    struct zt_matrix_plan *plan = calloc(1, sizeof *plan);
    if (plan) plan->m = calloc((size_t)n + 1, sizeof *plan->m);
    if (plan && plan->m) plan->n = zt_optim_matrices(opt, e->spec, e->comm->world_size, plan->m);
    if (!plan || !plan->m || plan->n < 0) {
        if (plan) free(plan->m);
        free(plan);
        return ZT_FAIL(&e->ctx->err, ZT_ERR_OOM, "optimizer: cannot allocate the table of %d matrices", n);
    }
    e->matrices = plan;
    return zt_comm_agree(e->comm, check_matrices(e), &e->ctx->err);
}

void zt_engine_free_matrices(zt_engine *e) {
    if (!e->matrices) return;
    free(e->matrices->m);
    free(e->matrices);
    e->matrices = NULL;
}

size_t zt_matrix_scratch(const zt_optim *opt, const zt_matrix *m) {
    const zt_optim_matrix_hook *hook = opt->matrix_hook;
    return hook && hook->scratch_numel ? hook->scratch_numel(m->rows, m->cols) : 0;
}

void zt_matrix_slice(const zt_matrix *m, size_t shard_numel, int r, size_t *a, size_t *b) {
    size_t lo = (size_t)r * shard_numel, end = m->offset + m->rows * m->cols;
    *a = m->offset > lo ? m->offset : lo;
    *b = end < lo + shard_numel ? end : lo + shard_numel;
    if (*b < *a) *b = *a;
}

/* Where one unit's exchange runs: the buffers (the host pool under
 * offload, else the device), whether device buffers go through host-pool
 * copies for the host collectives (a GPU's), and the kernels that
 * transform (the device's, or the CPU's for the host pool). */
typedef struct {
    const zt_engine *e;
    int host, staged;
    const zt_ops *ops;
    zt_stream *s;
} where;

static zt_status buf_alloc(const zt_engine *e, int host, zt_tensor *t, size_t numel, zt_category cat,
                           const char *what, int u) {
    if (numel == 0) return ZT_OK; /* a rank with no part of the matrix */
    return host ? zt_engine_alloc_host(e, t, ZT_FP32, numel, cat, what, u)
                : zt_engine_alloc(e, t, ZT_FP32, numel, cat, what, u);
}

static void buf_free(const zt_engine *e, int host, zt_tensor *t) {
    zt_tensor_free(t, host ? &e->ctx->host_mem : &e->ctx->device_mem);
}

/* n floats between device and host-pool memory, waited for (the host
 * buffer is a collective's next, or freed). */
static zt_status copy_wait(const zt_engine *e, void *dst, const void *src, size_t n, zt_copy_kind kind) {
    zt_ctx *ctx = e->ctx;
    if (n == 0 || ctx->dry) return ZT_OK;
    ZT_TRY(ctx->be->memcpy_async(ctx->be, dst, src, n * sizeof(float), kind, &ctx->compute, &ctx->err));
    return ctx->be->stream_sync(ctx->be, &ctx->compute, &ctx->err);
}

/* The owner's transform of `whole` (device or host memory as w says),
 * from and back to the host-pool copy hw when staged. */
static zt_status transform_owned(where w, const zt_matrix *m, zt_tensor *whole, zt_tensor *hw, float *scratch,
                                 zt_status *failed) {
    const zt_engine *e = w.e;
    zt_ctx *ctx = e->ctx;
    size_t numel = m->rows * m->cols;
    if (ctx->dry || *failed != ZT_OK) return ZT_OK;
    if (w.staged) ZT_TRY(copy_wait(e, whole->data, hw->data, numel, ZT_COPY_H2D));
    *failed = optim_of(e)->matrix_hook->transform(&e->cfg, w.ops, w.s, m, zt_f32(whole), scratch, &ctx->err);
    /* staged: back to the host for the scatter; else the result is read by
     * kernels on the same stream (a GPU's) or is there already (the CPU's) */
    return w.staged ? copy_wait(e, hw->data, whole->data, numel, ZT_COPY_D2H) : ZT_OK;
}

/* Matrix m of a unit whose owned update upd starts at unit element lo:
 * transformed where this rank owns it (whole: the update itself at stage
 * 0, else gathered from every slice), and this rank's slice sent back. A
 * transform's failure is kept in *failed, so that the collectives go on.
 * Staged (a GPU): the slice and, on the owner, the whole matrix have
 * host-pool copies (hp, hw) for the host collectives. */
static zt_status one_matrix(where w, const zt_matrix *m, float *upd, size_t lo, zt_status *failed) {
    const zt_engine *e = w.e;
    zt_ctx *ctx = e->ctx;
    zt_comm *comm = e->comm;
    int alone = full_optim(e) || comm->world_size == 1, owner = alone || comm->rank == m->owner;
    size_t numel = m->rows * m->cols, a, b;
    zt_tensor scratch = {0}, whole = {0}, hp = {0}, hw = {0}; /* workspace; comm_buffers x 3 */
    if (owner)
        ZT_TRY(buf_alloc(e, w.host, &scratch, zt_matrix_scratch(optim_of(e), m), ZT_CAT_WORKSPACE, "matrix scratch",
                         m->unit));
    if (alone) {
        zt_tensor in_place = {.data = upd ? upd + (m->offset - lo) : NULL};
        zt_status st = transform_owned((where){e, w.host, 0, w.ops, w.s}, m, &in_place, NULL, zt_f32(&scratch),
                                       failed);
        buf_free(e, w.host, &scratch);
        return st;
    }
    size_t *counts = malloc((size_t)comm->world_size * sizeof *counts);
    zt_status st = counts ? ZT_OK : ZT_FAIL(&ctx->err, ZT_ERR_OOM, "optimizer: cannot allocate %d counts",
                                           comm->world_size);
    for (int r = 0; st == ZT_OK && r < comm->world_size; r++) {
        zt_matrix_slice(m, e->spec->units[m->unit].shard_numel, r, &a, &b);
        counts[r] = (b - a) * sizeof(float);
    }
    zt_matrix_slice(m, e->spec->units[m->unit].shard_numel, comm->rank, &a, &b);
    float *piece = upd ? upd + (a - lo) : NULL; /* this rank's part: [b - a] (NULL in a replay's host step) */
    if (st == ZT_OK && owner)
        st = buf_alloc(e, w.host, &whole, numel, ZT_CAT_COMM_BUFFERS, "matrix gathered", m->unit);
    if (st == ZT_OK && w.staged) st = buf_alloc(e, 1, &hp, b - a, ZT_CAT_COMM_BUFFERS, "matrix slice staging", m->unit);
    if (st == ZT_OK && w.staged && owner)
        st = buf_alloc(e, 1, &hw, numel, ZT_CAT_COMM_BUFFERS, "matrix gathered staging", m->unit);
    if (st == ZT_OK && w.staged) st = copy_wait(e, hp.data, piece, b - a, ZT_COPY_D2H);
    void *send = w.staged ? hp.data : piece, *gathered = w.staged ? hw.data : whole.data;
    if (st == ZT_OK) st = zt_comm_gather_host(comm, send, gathered, counts, m->owner, &ctx->err);
    if (st == ZT_OK && owner) st = transform_owned(w, m, &whole, &hw, zt_f32(&scratch), failed);
    if (st == ZT_OK) st = zt_comm_scatter_host(comm, gathered, send, counts, m->owner, &ctx->err);
    if (st == ZT_OK && w.staged) st = copy_wait(e, piece, hp.data, b - a, ZT_COPY_H2D);
    free(counts);
    buf_free(e, 1, &hw);
    buf_free(e, 1, &hp);
    buf_free(e, w.host, &whole);
    buf_free(e, w.host, &scratch);
    return st;
}

zt_status zt_engine_transform_matrices(const zt_engine *e, int u, float *upd, int host) {
    zt_stream cpu = {.nthreads = e->cfg.host_threads > 0 ? e->cfg.host_threads : 1};
    where w = {e, host, !host && e->ctx->be->device != ZT_DEVICE_CPU, host ? &zt_cpu_ops_fp32 : e->ctx->be->ops,
               host ? &cpu : &e->ctx->compute};
    zt_status failed = ZT_OK;
    int n;
    const zt_matrix *ms = zt_engine_matrices(e, &n);
    for (int i = 0; i < n; i++)
        if (ms[i].unit == u) ZT_TRY(one_matrix(w, &ms[i], upd, owned_lo(e, u), &failed));
    if (full_optim(e) || e->comm->world_size == 1) return failed;
    return zt_comm_agree(e->comm, failed, &e->ctx->err);
}

zt_status zt_engine_matrix_step(zt_engine *e, int u, const zt_optim_step *s) {
    const zt_optim_matrix_hook *hook = optim_of(e)->matrix_hook;
    zt_ctx *ctx = e->ctx;
    zt_tensor upd = {0}; /* [owned] fp32: the update direction */
    ZT_TRY(zt_engine_alloc(e, &upd, ZT_FP32, owned_numel(e, u), ZT_CAT_WORKSPACE, "matrix update", u));
    zt_status st = ctx->dry ? ZT_OK : hook->update(e, u, s, zt_f32(&upd));
    if (st == ZT_OK) st = zt_engine_transform_matrices(e, u, zt_f32(&upd), 0);
    if (st == ZT_OK && !ctx->dry) st = hook->apply(e, u, s, zt_f32(&upd));
    zt_tensor_free(&upd, &ctx->device_mem);
    return st;
}
