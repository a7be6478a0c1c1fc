/* Adafactor (Shazeer and Stern, 2018; with the schedule's learning rate) on
 * the part of one unit this rank owns. Per parameter: beta2t = 1 -
 * t^decay; a matrix keeps row and column statistics vr, vc of g^2 + eps
 * (means over its columns and rows), a vector its v; the update g /
 * sqrt(v-hat) is scaled down to RMS clip where larger, times lr; an
 * optional first moment smooths it; weight decay is decoupled.
 *
 * A matrix's slices may lie on several ranks, and its statistics and the
 * update's RMS are sums over all of it. Each is summed per slice (within a
 * slice in element order), the slices' sums gathered and added in rank
 * order, so every stage rounds alike: stage 0 owns all slices and sums
 * them itself. Three passes over the owned part: the statistics, the
 * update's RMS, the update (the update is recomputed rather than kept, so
 * the temporaries are one chunk, the unit's statistics and one double per
 * piece). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"
#include "zt_optim_engine.h"

/* Where one unit's step reads and writes: the device state with the
 * backend's kernels, or (offload) the host state with the CPU's. */
typedef struct {
    const zt_engine *e;
    int u;
    const zt_ops *ops;
    zt_stream *s;
    int host;          /* every buffer below is host memory */
    float *p;          /* the fp32 values stepped; p[0] is unit element p_at */
    size_t p_at;
    float *m, *v;      /* m [owned] (NULL: no first moment); v compact (zt_adafactor_v_offset) */
    const float *g32;  /* fp32 gradients, unscaled and clipped; g32[0] is unit element g_at */
    size_t g_at;       /* (g32 NULL: 16-bit gradients, widened and scaled by mult piece by piece) */
    float mult;
    float *wg, *wu;    /* [chunk]: widened gradients (16-bit); the update */
    size_t chunk;
    double *slots;     /* scratch: a sum of squares per update piece */
    float *stats;      /* scratch: [owned slices][K] statistics */
    float *factors;    /* scratch: [K] rsqrt(vr / mean vr), rsqrt(vc) per factored parameter */
    size_t lo, hi;     /* the owned range */
    float beta2t, lr;
} af_step;

/* Gradients of unit elements [at, at + n), n <= chunk, as fp32. */
static const float *grads_at(af_step *t, size_t at, size_t n) {
    if (t->g32) return t->g32 + (at - t->g_at);
    const zt_engine *e = t->e;
    size_t i = local_index(full_grads(e), at, shard_lo(e, t->u));
    t->ops->cast(t->s, t->wg, ZT_FP32, (const uint16_t *)e->units[t->u].grads.data + i, e->cfg.dtype, n);
    if (t->mult != 1.0f) t->ops->scale(t->s, t->wg, t->mult, n);
    return t->wg;
}

static zt_status copy(af_step *t, void *dst, const void *src, size_t bytes, zt_copy_kind kind) {
    if (bytes == 0) return ZT_OK;
    if (t->host) {
        memcpy(dst, src, bytes);
        return ZT_OK;
    }
    zt_ctx *ctx = t->e->ctx;
    ZT_TRY(ctx->be->memcpy_async(ctx->be, dst, src, bytes, kind, t->s, &ctx->err));
    return ctx->be->stream_sync(ctx->be, t->s, &ctx->err);
}

/* all[N][count] words: this rank's slices in place (stage >= 1: its own
 * row; stage 0: every row), the other ranks' gathered. */
static zt_status gather_rows(af_step *t, void *all, size_t row_bytes) {
    if (full_optim(t->e)) return ZT_OK;
    return zt_comm_all_gather_host(t->e->comm, all, row_bytes, &t->e->ctx->err);
}

static size_t stats_len(const zt_unit_spec *us) { return zt_factored_stats_offset(us, us->nparams); }

/* Parameter ps's compact v at unit element x (an unfactored parameter). */
static float *v_at(const af_step *t, int i, size_t x) {
    const zt_unit_spec *us = &t->e->spec->units[t->u];
    size_t first = us->params[i].offset > t->lo ? us->params[i].offset : t->lo;
    return t->v + zt_adafactor_v_offset(us, t->lo, t->hi, i) + (x - first);
}

/* Pass 1: every factored parameter's row and column sums over the whole
 * matrix, tot[K] (host), from the owned slices' sums and the others'. */
static zt_status sum_statistics(af_step *t, float *tot) {
    const zt_engine *e = t->e;
    const zt_unit_spec *us = &e->spec->units[t->u];
    size_t K = stats_len(us), S = us->shard_numel, r0 = t->lo / S, rows, cols;
    int N = e->comm->world_size;
    zt_segment_iter it = zt_segments(us, t->lo, t->hi);
    zt_segment seg;
    while (zt_next_segment(&it, &seg)) {
        const zt_param_spec *ps = &us->params[seg.param];
        if (!zt_param_factored(ps, &rows, &cols)) continue;
        float *row = t->stats + (seg.slice - r0) * K + zt_factored_stats_offset(us, seg.param);
        for (size_t x = seg.a, n; x < seg.b; x += n) {
            n = seg.b - x < t->chunk ? seg.b - x : t->chunk;
            t->ops->factor_stats(t->s, row, row + rows, grads_at(t, x, n), n, x - ps->offset, cols,
                                 e->cfg.adafactor_eps);
        }
    }
    float *all = calloc((size_t)N * K, sizeof *all); /* [N][K] */
    if (!all) return ZT_FAIL(&e->ctx->err, ZT_ERR_OOM, "adafactor: cannot allocate %d x %zu statistics", N, K);
    zt_status st = copy(t, all + r0 * K, t->stats, (t->hi - t->lo) / S * K * sizeof(float), ZT_COPY_D2H);
    if (st == ZT_OK) st = gather_rows(t, all, K * sizeof(float));
    for (size_t k = 0; st == ZT_OK && k < K; k++) {
        tot[k] = 0.0f;
        for (int r = 0; r < N; r++) tot[k] += all[(size_t)r * K + k];
    }
    free(all);
    return st;
}

/* The moving averages of parameter i's statistics (vr, vc in v) from the
 * step's sums, and its factors rsqrt(vr / mean vr), rsqrt(vc). */
static zt_status update_factors(af_step *t, int i, const float *tot, size_t rows, size_t cols) {
    const zt_engine *e = t->e;
    const zt_unit_spec *us = &e->spec->units[t->u];
    size_t off = zt_factored_stats_offset(us, i), n = rows + cols;
    float *vrc = malloc(2 * n * sizeof *vrc), *fac = vrc + n; /* [rows + cols] each */
    if (!vrc) return ZT_FAIL(&e->ctx->err, ZT_ERR_OOM, "adafactor: cannot allocate %zu statistics", n);
    float *dev = t->v + zt_adafactor_v_offset(us, t->lo, t->hi, i);
    zt_status st = copy(t, vrc, dev, n * sizeof(float), ZT_COPY_D2H);
    float b = t->beta2t;
    double sum = 0.0;
    for (size_t r = 0; r < rows; r++) {
        vrc[r] = b * vrc[r] + (1.0f - b) * (tot[off + r] / (float)cols);
        sum += vrc[r];
    }
    for (size_t c = 0; c < cols; c++) vrc[rows + c] = b * vrc[rows + c] + (1.0f - b) * (tot[off + rows + c] / (float)rows);
    float mean = (float)(sum / (double)rows);
    for (size_t r = 0; r < rows; r++) fac[r] = 1.0f / sqrtf(vrc[r] / mean);
    for (size_t c = 0; c < cols; c++) fac[rows + c] = 1.0f / sqrtf(vrc[rows + c]);
    if (st == ZT_OK) st = copy(t, dev, vrc, n * sizeof(float), ZT_COPY_H2D);
    if (st == ZT_OK) st = copy(t, t->factors + off, fac, n * sizeof(float), ZT_COPY_H2D);
    free(vrc);
    return st;
}

/* Every factored parameter the owned range touches: its factors. */
static zt_status factor_all(af_step *t) {
    const zt_unit_spec *us = &t->e->spec->units[t->u];
    size_t K = stats_len(us), rows, cols;
    if (K == 0) return ZT_OK;
    float *tot = malloc(K * sizeof *tot); /* [K] */
    if (!tot) return ZT_FAIL(&t->e->ctx->err, ZT_ERR_OOM, "adafactor: cannot allocate %zu sums", K);
    zt_status st = sum_statistics(t, tot);
    for (int i = 0; st == ZT_OK && i < us->nparams; i++) {
        const zt_param_spec *ps = &us->params[i];
        if (ps->offset < t->hi && ps->offset + ps->numel > t->lo && zt_param_factored(ps, &rows, &cols))
            st = update_factors(t, i, tot, rows, cols);
    }
    free(tot);
    return st;
}

/* The update of unit elements [x, x + n) of segment seg's parameter into
 * wu; v is stored only in the pass that applies it. */
static void precondition(af_step *t, const zt_segment *seg, size_t x, size_t n, int store_v) {
    const zt_unit_spec *us = &t->e->spec->units[t->u];
    const zt_param_spec *ps = &us->params[seg->param];
    size_t rows, cols = 1;
    int factored = zt_param_factored(ps, &rows, &cols);
    const float *rf = factored ? t->factors + zt_factored_stats_offset(us, seg->param) : NULL;
    t->ops->adafactor_precondition(t->s, t->wu, grads_at(t, x, n), factored ? NULL : v_at(t, seg->param, x), rf,
                                   factored ? rf + rows : NULL, n, x - ps->offset, cols, t->beta2t,
                                   t->e->cfg.adafactor_eps, store_v);
}

/* Pass 2: tot[nparams] (host) = each parameter's sum of squared updates
 * over all of it. */
static zt_status sum_update_squares(af_step *t, double *tot, size_t npieces) {
    const zt_engine *e = t->e;
    const zt_unit_spec *us = &e->spec->units[t->u];
    int N = e->comm->world_size, np = us->nparams;
    size_t k = 0;
    zt_segment_iter it = zt_segments(us, t->lo, t->hi);
    zt_segment seg;
    while (zt_next_segment(&it, &seg))
        for (size_t x = seg.a, n; x < seg.b; x += n) {
            n = seg.b - x < t->chunk ? seg.b - x : t->chunk;
            precondition(t, &seg, x, n, 0);
            t->ops->sum_squares(t->s, t->slots + k++, t->wu, n);
        }
    double *pieces = malloc((npieces + 1) * sizeof *pieces), *all = calloc((size_t)N * np, sizeof *all);
    zt_status st = pieces && all ? copy(t, pieces, t->slots, npieces * sizeof(double), ZT_COPY_D2H)
                                 : ZT_FAIL(&e->ctx->err, ZT_ERR_OOM, "adafactor: cannot allocate %zu sums", npieces);
    k = 0;
    it = zt_segments(us, t->lo, t->hi);
    while (st == ZT_OK && zt_next_segment(&it, &seg))
        for (size_t x = seg.a; x < seg.b; x += t->chunk) all[(size_t)seg.slice * np + seg.param] += pieces[k++];
    if (st == ZT_OK) st = gather_rows(t, all, np * sizeof(double));
    for (int i = 0; st == ZT_OK && i < np; i++) {
        tot[i] = 0.0;
        for (int r = 0; r < N; r++) tot[i] += all[(size_t)r * np + i];
    }
    free(pieces);
    free(all);
    return st;
}

/* Pass 3: the update, scaled per parameter to RMS clip where larger. */
static void apply_updates(af_step *t, const double *sumsq) {
    const zt_engine *e = t->e;
    const zt_unit_spec *us = &e->spec->units[t->u];
    zt_segment_iter it = zt_segments(us, t->lo, t->hi);
    zt_segment seg;
    while (zt_next_segment(&it, &seg)) {
        const zt_param_spec *ps = &us->params[seg.param];
        float over = (float)sqrt(sumsq[seg.param] / (double)ps->numel) / e->cfg.adafactor_clip;
        float step = t->lr / (over > 1.0f ? over : 1.0f);
        float decay = t->lr * (ps->decay ? e->cfg.weight_decay : 0.0f);
        for (size_t x = seg.a, n; x < seg.b; x += n) {
            n = seg.b - x < t->chunk ? seg.b - x : t->chunk;
            precondition(t, &seg, x, n, 1);
            t->ops->adafactor_apply(t->s, t->p + (x - t->p_at), t->wu, t->m ? t->m + (x - t->lo) : NULL, n, step,
                                    e->cfg.adafactor_beta1, decay);
        }
    }
}

/* The three passes over a prepared step. */
static zt_status run_passes(af_step *t, size_t npieces) {
    const zt_unit_spec *us = &t->e->spec->units[t->u];
    double *sumsq = malloc((size_t)us->nparams * sizeof *sumsq + 8); /* [nparams] */
    if (!sumsq) return ZT_FAIL(&t->e->ctx->err, ZT_ERR_OOM, "adafactor: cannot allocate");
    zt_status st = factor_all(t);
    if (st == ZT_OK) st = sum_update_squares(t, sumsq, npieces);
    if (st == ZT_OK) apply_updates(t, sumsq);
    free(sumsq);
    return st;
}

/* Lays the scratch tensor out: slots (8-byte aligned) first. */
static void place_scratch(af_step *t, float *scratch, size_t npieces) {
    const zt_unit_spec *us = &t->e->spec->units[t->u];
    t->slots = (double *)(void *)scratch;
    t->stats = scratch + 2 * npieces;
    t->factors = t->stats + (t->hi - t->lo) / us->shard_numel * stats_len(us);
}

static af_step step_of(const zt_engine *e, int u, float lr, int t_step) {
    af_step t;
    memset(&t, 0, sizeof t);
    t.e = e;
    t.u = u;
    t.lo = owned_lo(e, u);
    t.hi = t.lo + owned_numel(e, u);
    t.lr = lr;
    t.beta2t = 1.0f - powf((float)t_step, e->cfg.adafactor_decay);
    return t;
}

enum { EXP_AVG = 0, EXP_AVG_SQ_FACTORS };

/* The first moment's slot (NULL: none kept, beta1 0). */
static float *first_moment(zt_tensor *t) { return t->data ? zt_f32(t) : NULL; }

static zt_status af_device_step(zt_engine *e, int u, const zt_optim_step *s) {
    zt_ctx *ctx = e->ctx;
    zt_unit_state *ust = &e->units[u];
    af_step t = step_of(e, u, s->lr, s->t);
    t.ops = ctx->be->ops;
    t.s = &ctx->compute;
    t.p = s->p;
    t.p_at = s->p_at;
    t.m = first_moment(&ust->opt_state[EXP_AVG]);
    t.v = zt_f32(&ust->opt_state[EXP_AVG_SQ_FACTORS]);
    t.mult = s->mult;
    t.chunk = zt_engine_optimizer_chunk(e);
    t.wg = s->ws->data ? zt_f32(s->ws) : NULL;
    t.wu = zt_f32(s->wu);
    if (e->cfg.dtype == ZT_FP32) { /* unscale and clip once, in place: three passes read them */
        float *g = zt_f32(&ust->grads) + local_index(full_grads(e), t.lo, shard_lo(e, u));
        if (s->mult != 1.0f) t.ops->scale(t.s, g, s->mult, t.hi - t.lo);
        t.g32 = g;
        t.g_at = t.lo;
    }
    const zt_unit_spec *us = &e->spec->units[u];
    size_t npieces = zt_adafactor_pieces(us, t.lo, t.hi, t.chunk);
    zt_tensor scratch = {0}; /* [zt_adafactor_scratch_numel] fp32 */
    zt_status st = zt_engine_alloc(e, &scratch, ZT_FP32, zt_adafactor_scratch_numel(us, t.lo, t.hi, t.chunk),
                                   ZT_CAT_WORKSPACE, "adafactor", u);
    if (st == ZT_OK) {
        place_scratch(&t, zt_f32(&scratch), npieces);
        st = run_passes(&t, npieces);
    }
    zt_tensor_free(&scratch, &ctx->device_mem); /* also when its zeroing failed */
    return st;
}

/* Collective (the statistics' sums): never on the delayed update's thread. */
static zt_status af_host_step(const zt_engine *e, int u, float *g, void *out, const zt_optim_step *s, int *written) {
    (void)out;
    zt_unit_state *ust = &e->units[u];
    zt_stream host = {.nthreads = e->cfg.host_threads > 0 ? e->cfg.host_threads : 1};
    af_step t = step_of(e, u, s->lr, s->t);
    t.ops = &zt_cpu_ops_fp32;
    t.s = &host;
    t.host = 1;
    t.p = zt_f32(&ust->host_master);
    t.p_at = t.lo;
    t.m = first_moment(&ust->host_opt_state[EXP_AVG]);
    t.v = zt_f32(&ust->host_opt_state[EXP_AVG_SQ_FACTORS]);
    t.g32 = g;
    t.g_at = t.lo;
    size_t owned = t.hi - t.lo;
    t.chunk = e->cfg.sub_group_size ? e->cfg.sub_group_size : ZT_OPTIMIZER_CHUNK;
    if (t.chunk > owned) t.chunk = owned > 0 ? owned : 1; /* as zt_engine_optimizer_chunk caps the device's */
    scale_host_grads(g, owned, s->mult);
    const zt_unit_spec *us = &e->spec->units[u];
    size_t npieces = zt_adafactor_pieces(us, t.lo, t.hi, t.chunk);
    float *scratch = calloc(zt_adafactor_scratch_numel(us, t.lo, t.hi, t.chunk) + 1, sizeof(float));
    t.wu = malloc(t.chunk * sizeof(float)); /* [chunk] */
    zt_status st = scratch && t.wu ? ZT_OK : ZT_FAIL(&e->ctx->err, ZT_ERR_OOM, "adafactor: cannot allocate scratch");
    if (st == ZT_OK) {
        place_scratch(&t, scratch, npieces);
        st = run_passes(&t, npieces);
    }
    free(scratch);
    free(t.wu);
    *written = 0;
    return st;
}

static size_t af_slot_words(const zt_engine_config *cfg, int slot, const zt_unit_spec *us, size_t lo, size_t hi) {
    if (slot == EXP_AVG) return cfg->adafactor_beta1 > 0.0f ? hi - lo : 0; /* only with a first moment */
    return zt_adafactor_v_offset(us, lo, hi, us->nparams);
}

static zt_status af_check(const zt_engine_config *cfg, zt_error *err) {
    if (!(cfg->adafactor_clip > 0.0f))
        return ZT_FAIL(err, ZT_ERR_INVALID, "adafactor's clip threshold must be > 0 (got %g)",
                       (double)cfg->adafactor_clip);
    /* eps keeps an all-zero row's statistic, and so its factor, finite */
    if (!(cfg->adafactor_eps > 0.0f))
        return ZT_FAIL(err, ZT_ERR_INVALID, "adafactor's eps must be > 0 (got %g): a row of zero gradients "
                       "would divide by 0", (double)cfg->adafactor_eps);
    if (!(cfg->adafactor_decay >= -1.0f && cfg->adafactor_decay < 0.0f))
        return ZT_FAIL(err, ZT_ERR_INVALID, "adafactor's decay must be in [-1, 0) (got %g)",
                       (double)cfg->adafactor_decay);
    return ZT_OK;
}

/* Checkpoint block 1 over this rank's slice: a vector's exp_avg_sq per
 * element, a matrix's row factors in its first rows elements and its
 * column factors in the next cols (zeros after). Every rank whose slice
 * touches a matrix keeps both, so each element of a slice is known to the
 * rank that writes it. Block 0 (exp_avg) is per element. */
static zt_status af_get_block(zt_engine *e, int u, int b, float *dst) {
    if (b == 0) return zt_engine_get_elementwise_block(e, u, EXP_AVG, dst);
    const zt_unit_spec *us = &e->spec->units[u];
    size_t lo = owned_lo(e, u), hi = lo + owned_numel(e, u), slo = shard_lo(e, u), S = us->shard_numel;
    zt_tensor *vt = opt_slot(e, u, EXP_AVG_SQ_FACTORS);
    float *v = malloc(zt_tensor_bytes(vt) + 4); /* the compact slot */
    if (!v) return ZT_FAIL(&e->ctx->err, ZT_ERR_OOM, "adafactor: cannot allocate a staging buffer");
    zt_status r = zt_engine_fetch_state(e, vt, v);
    memset(dst, 0, S * sizeof(float));
    for (int i = 0; r == ZT_OK && i < us->nparams; i++) {
        const zt_param_spec *ps = &us->params[i];
        size_t a = ps->offset > slo ? ps->offset : slo;
        size_t end = ps->offset + ps->numel < slo + S ? ps->offset + ps->numel : slo + S;
        size_t rows, cols, first = ps->offset > lo ? ps->offset : lo;
        const float *mine = v + zt_adafactor_v_offset(us, lo, hi, i);
        int factored = zt_param_factored(ps, &rows, &cols);
        for (size_t x = a; x < end; x++) /* x - first: the element's place in a vector's v */
            dst[x - slo] = !factored ? mine[x - first] : x - ps->offset < rows + cols ? mine[x - ps->offset] : 0.0f;
    }
    free(v);
    return r;
}

/* Block 1 from vals over af_block_span, into the compact slot. */
static zt_status af_set_block(zt_engine *e, int u, int b, const float *vals) {
    if (b == 0) return zt_engine_set_elementwise_block(e, u, EXP_AVG, vals);
    const zt_unit_spec *us = &e->spec->units[u];
    size_t lo = owned_lo(e, u), hi = lo + owned_numel(e, u), span_lo, span_hi;
    zt_adafactor_span(us, lo, hi, &span_lo, &span_hi);
    zt_tensor *vt = opt_slot(e, u, EXP_AVG_SQ_FACTORS);
    float *mine = malloc(zt_tensor_bytes(vt) + 4); /* the compact slot */
    if (!mine) return ZT_FAIL(&e->ctx->err, ZT_ERR_OOM, "adafactor: cannot allocate a staging buffer");
    for (int i = 0; i < us->nparams; i++) {
        const zt_param_spec *ps = &us->params[i];
        if (ps->offset >= hi || ps->offset + ps->numel <= lo) continue;
        size_t rows, cols, at = zt_adafactor_v_offset(us, lo, hi, i);
        if (zt_param_factored(ps, &rows, &cols)) {
            memcpy(mine + at, vals + (ps->offset - span_lo), (rows + cols) * sizeof(float));
            continue;
        }
        size_t a = ps->offset > lo ? ps->offset : lo, end = ps->offset + ps->numel < hi ? ps->offset + ps->numel : hi;
        memcpy(mine + at, vals + (a - span_lo), (end - a) * sizeof(float));
    }
    zt_status r = zt_engine_store_state(e, vt, mine);
    free(mine);
    return r;
}

/* Block 1 spans the whole of every matrix the owned range touches (its
 * factors lie at the matrix's start). */
static void af_block_span(const zt_unit_spec *us, int b, size_t lo, size_t hi, size_t *span_lo, size_t *span_hi) {
    if (b == 1) zt_adafactor_span(us, lo, hi, span_lo, span_hi);
    else *span_lo = lo, *span_hi = hi;
}

const zt_optim zt_optim_adafactor = {
    .name = "adafactor",
    .description = "Adafactor: factored second moments (rows + cols per matrix), exp_avg only with beta1 > 0",
    .nslots = 2,
    .slots = {{"exp_avg", ZT_SLOT_PER_ELEMENT, 32, -1}, {"exp_avg_sq_factors", ZT_SLOT_FACTORED, 32, -1}},
    .slot_words = af_slot_words,
    .check = af_check,
    .chunk_align = 1,
    .update_workspace = 1,
    .scratch_numel = zt_adafactor_scratch_numel,
    .collective = 1,
    .device_step = af_device_step,
    .host_step = af_host_step,
    .ckpt_blocks = {"exp_avg", "exp_avg_sq_factors"},
    .get_block = af_get_block,
    .set_block = af_set_block,
    .block_span = af_block_span,
    .reshard_note = "Adafactor's statistics carry over exactly; its sums over a matrix's slices now round as this "
                    "world's slices do",
};
