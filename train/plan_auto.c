/* The search of --auto (plan_auto.h): every configuration of the space is
 * planned (memory, closed form) and timed (plan_time.h); the fastest that
 * fits is confirmed by the allocator's replay where the model has layers
 * to replay. The space is small enough to search whole: about two
 * thousand configurations at most, each a walk over the model's units. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "plan_auto.h"
#include "plan_fit.h"
#include "zt_time.h"

/* The axes, each a list of values as zt-train's options spell them. */
enum { AX_STAGE, AX_OFFLOAD, AX_PARAMS, AX_RECOMPUTE, AX_ATTENTION, AX_ACTS, AX_MICRO, AX_PREFETCH, AX_BUCKET,
       AX_REDUCE, AX_HPZ, AX_QUANT, AX_SP, AX_LIVE, NAX };
static const char *const axis_name[NAX] = {"stage", "offload", "offload-params", "recompute", "attention",
                                           "offload-activations", "micro-batch", "prefetch", "bucket-size",
                                           "reduce-dtype", "reshard-after-forward", "quantize-grads",
                                           "seq-parallel", "max-live-params"};
const char zt_auto_axis_names[] = "stage,offload,offload-params,recompute,attention,offload-activations,"
                                  "micro-batch,prefetch,bucket-size,reduce-dtype,reshard-after-forward,"
                                  "quantize-grads,seq-parallel,max-live-params";

static int axis_index(const char *name, size_t len) {
    for (int a = 0; a < NAX; a++)
        if (strlen(axis_name[a]) == len && strncmp(axis_name[a], name, len) == 0) return a;
    return -1;
}

zt_status zt_auto_axes_check(const char *axes, zt_error *err) {
    for (const char *p = axes; p && *p;) {
        size_t len = strcspn(p, ",");
        if (axis_index(p, len) < 0)
            return ZT_FAIL(err, ZT_ERR_INVALID, "--auto-axes: '%.*s' is not an axis (%s)", (int)len, p,
                           zt_auto_axis_names);
        p += len + (p[len] == ',');
    }
    return ZT_OK;
}

/* 1 where the axis is searched. */
static void searched_axes(const char *axes, int *on) {
    for (int a = 0; a < NAX; a++) on[a] = !axes || !axes[0];
    for (const char *p = axes; p && *p;) {
        size_t len = strcspn(p, ",");
        int a = axis_index(p, len);
        if (a >= 0) on[a] = 1;
        p += len + (p[len] == ',');
    }
}

#define MAXV 16
typedef struct {
    int n[NAX];
    char v[NAX][MAXV][24];
} space;

/* A configuration planned: its axes, whether zt-train takes it, whether
 * it fits (the replay's answer once replayed), its step and bytes. */
typedef struct {
    unsigned char ax[NAX];
    int valid, fits, replayed;
    double step_s;
    size_t reserved, budget, peak;
} visited;

static void add(space *sp, int a, long long x) {
    if (sp->n[a] < MAXV) snprintf(sp->v[a][sp->n[a]++], sizeof sp->v[a][0], "%lld", x);
}
static void add_s(space *sp, int a, const char *v) {
    if (sp->n[a] < MAXV) snprintf(sp->v[a][sp->n[a]++], sizeof sp->v[a][0], "%s", v);
}

static int divides(int d, int n) { return d > 0 && n % d == 0; }

/* The base's own value on each axis: an axis not searched keeps it. */
static void base_values(const zt_train_config *b, space *sp) {
    add(sp, AX_STAGE, b->stage);
    add_s(sp, AX_OFFLOAD, b->offload), add_s(sp, AX_PARAMS, b->offload_params);
    add_s(sp, AX_RECOMPUTE, b->recompute), add_s(sp, AX_ATTENTION, b->attention);
    add_s(sp, AX_ACTS, b->offload_activations), add(sp, AX_MICRO, b->micro_batch);
    add(sp, AX_PREFETCH, b->prefetch), add(sp, AX_BUCKET, (long long)b->bucket_size);
    add_s(sp, AX_REDUCE, b->reduce_dtype), add_s(sp, AX_HPZ, b->reshard_after_forward);
    add_s(sp, AX_QUANT, b->quantize_grads), add(sp, AX_SP, b->seq_parallel > 0 ? b->seq_parallel : 1);
    add(sp, AX_LIVE, (long long)b->max_live_params);
}

static void all_values(const zt_train_config *b, const zt_auto_setup *s, int seqs, size_t largest, space *sp) {
    int nvme = s->nvme_path && s->nvme_path[0];
    for (int st = 0; st < 4; st++) add(sp, AX_STAGE, st);
    add_s(sp, AX_OFFLOAD, "none"), add_s(sp, AX_OFFLOAD, "cpu");
    if (nvme) add_s(sp, AX_OFFLOAD, "nvme");
    add_s(sp, AX_PARAMS, "none"), add_s(sp, AX_PARAMS, "cpu");
    if (nvme) add_s(sp, AX_PARAMS, "nvme");
    add_s(sp, AX_RECOMPUTE, "none"), add_s(sp, AX_RECOMPUTE, "selective"), add_s(sp, AX_RECOMPUTE, "full");
    add_s(sp, AX_ATTENTION, "materialized"), add_s(sp, AX_ATTENTION, "fused");
    add_s(sp, AX_ACTS, "none"), add_s(sp, AX_ACTS, "cpu");
    /* Sequence parallelism: group sizes dividing the world, the heads and the kv heads. */
    for (int P = 1; P <= s->world && P <= 64; P *= 2)
        if (divides(P, s->world) && divides(P, b->heads) && (!b->kv_heads || divides(P, b->kv_heads)) &&
            P <= b->seq_len)
            add(sp, AX_SP, P);
    /* Micro-batches dividing the step's sequences (a rank's share is checked per candidate). */
    for (int m = 1; m <= seqs && m <= 65536; m++)
        if (seqs % m == 0) add(sp, AX_MICRO, m);
    add(sp, AX_PREFETCH, 0), add(sp, AX_PREFETCH, 1), add(sp, AX_PREFETCH, 2);
    add(sp, AX_BUCKET, (long long)b->bucket_size);
    if (b->bucket_size >= (1u << 20)) add(sp, AX_BUCKET, (long long)(b->bucket_size / 8));
    add_s(sp, AX_REDUCE, "fp32");
    if (strcmp(b->dtype, "fp32") != 0) add_s(sp, AX_REDUCE, b->dtype);
    add_s(sp, AX_HPZ, "none");
    if (s->nodes > 1) add_s(sp, AX_HPZ, "node");
    add_s(sp, AX_QUANT, "none");
    if (s->nodes > 1) add_s(sp, AX_QUANT, "int8");
    /* Stage 3's cap on live gathered parameters: none, or two of the largest units. */
    add(sp, AX_LIVE, 0), add(sp, AX_LIVE, (long long)(2 * largest));
}

static void build_space(const zt_train_config *b, const zt_auto_setup *s, int seqs, size_t largest, space *sp) {
    space all, own;
    memset(&all, 0, sizeof all), memset(&own, 0, sizeof own), memset(sp, 0, sizeof *sp);
    all_values(b, s, seqs, largest, &all);
    base_values(b, &own);
    int on[NAX];
    searched_axes(s->axes, on);
    for (int a = 0; a < NAX; a++) {
        const space *from = on[a] ? &all : &own;
        sp->n[a] = from->n[a];
        memcpy(sp->v[a], from->v[a], sizeof sp->v[a]);
    }
}

/* Combinations zt-train refuses or that repeat another: skipped before planning. */
static int sensible(const space *sp, const unsigned char *ax) {
    int stage = atoi(sp->v[AX_STAGE][ax[AX_STAGE]]);
    const char *off = sp->v[AX_OFFLOAD][ax[AX_OFFLOAD]], *par = sp->v[AX_PARAMS][ax[AX_PARAMS]];
    int full = strcmp(sp->v[AX_RECOMPUTE][ax[AX_RECOMPUTE]], "full") == 0;
    if (strcmp(par, "none") != 0 && (stage != 3 || strcmp(off, "none") == 0)) return 0;
    if (strcmp(par, "nvme") == 0 && strcmp(off, "nvme") != 0) return 0;
    if (strcmp(sp->v[AX_ACTS][ax[AX_ACTS]], "none") != 0 && !full) return 0;
    /* below stage 3 there are no gathers to prefetch, keep or cap */
    if (stage != 3 && (ax[AX_PREFETCH] || ax[AX_HPZ] || ax[AX_LIVE])) return 0;
    if (stage < 2 && ax[AX_QUANT]) return 0;
    return 1;
}

/* The nearest sensible configuration to ax: the axes a value makes
 * meaningless (prefetch and hpZ below stage 3, and so on) at their first value. */
static void normalize(const space *sp, unsigned char *ax) {
    int stage = atoi(sp->v[AX_STAGE][ax[AX_STAGE]]);
    if (stage != 3) ax[AX_PREFETCH] = ax[AX_HPZ] = ax[AX_PARAMS] = ax[AX_LIVE] = 0;
    if (stage < 2) ax[AX_QUANT] = 0;
    if (strcmp(sp->v[AX_OFFLOAD][ax[AX_OFFLOAD]], "none") == 0) ax[AX_PARAMS] = 0;
    if (strcmp(sp->v[AX_RECOMPUTE][ax[AX_RECOMPUTE]], "full") != 0) ax[AX_ACTS] = 0;
}

static void set_str(char *dst, size_t cap, const char *v) { snprintf(dst, cap, "%s", v); }

/* The base config with the axes' values; micro-batch and accumulation
 * filling `seqs` sequences per step over the world. 0: not a whole split. */
static int candidate_cfg(const zt_train_config *b, const space *sp, const unsigned char *ax, int seqs, int world,
                         zt_train_config *c) {
    *c = *b;
    int P = atoi(sp->v[AX_SP][ax[AX_SP]]), mb = atoi(sp->v[AX_MICRO][ax[AX_MICRO]]), groups = world / P;
    if (seqs % groups || (seqs / groups) % mb) return 0;
    c->stage = atoi(sp->v[AX_STAGE][ax[AX_STAGE]]);
    set_str(c->offload, sizeof c->offload, sp->v[AX_OFFLOAD][ax[AX_OFFLOAD]]);
    set_str(c->offload_params, sizeof c->offload_params, sp->v[AX_PARAMS][ax[AX_PARAMS]]);
    set_str(c->recompute, sizeof c->recompute, sp->v[AX_RECOMPUTE][ax[AX_RECOMPUTE]]);
    set_str(c->attention, sizeof c->attention, sp->v[AX_ATTENTION][ax[AX_ATTENTION]]);
    set_str(c->offload_activations, sizeof c->offload_activations, sp->v[AX_ACTS][ax[AX_ACTS]]);
    c->micro_batch = mb;
    c->grad_accum = seqs / groups / mb;
    c->prefetch = atoi(sp->v[AX_PREFETCH][ax[AX_PREFETCH]]);
    c->prefetch_bucket_size = 0;
    c->bucket_size = (size_t)atoll(sp->v[AX_BUCKET][ax[AX_BUCKET]]);
    set_str(c->reduce_dtype, sizeof c->reduce_dtype, sp->v[AX_REDUCE][ax[AX_REDUCE]]);
    set_str(c->reshard_after_forward, sizeof c->reshard_after_forward, sp->v[AX_HPZ][ax[AX_HPZ]]);
    set_str(c->quantize_grads, sizeof c->quantize_grads, sp->v[AX_QUANT][ax[AX_QUANT]]);
    c->seq_parallel = P;
    c->max_live_params = atoll(sp->v[AX_LIVE][ax[AX_LIVE]]);
    c->offload_delay = 0;
    c->auto_config = 0;
    return 1;
}

static void flags_of(const zt_train_config *c, char *out, size_t cap) {
    snprintf(out, cap,
             "--stage %d --offload %s --offload-params %s --recompute %s --attention %s --offload-activations %s "
             "--micro-batch %d --grad-accum %d --prefetch %d --bucket-size %zu --reduce-dtype %s "
             "--reshard-after-forward %s --quantize-grads %s --seq-parallel %d --max-live-params %lld",
             c->stage, c->offload, c->offload_params, c->recompute, c->attention, c->offload_activations,
             c->micro_batch, c->grad_accum, c->prefetch, c->bucket_size, c->reduce_dtype, c->reshard_after_forward,
             c->quantize_grads, c->seq_parallel, (long long)c->max_live_params);
}

zt_status zt_auto_profile(const zt_train_config *c, zt_time_profile *p, zt_error *err) {
    if (c->profile[0]) return zt_time_profile_load(c->profile, p, err);
    return zt_time_profile_builtin(strcmp(c->device, "cuda") == 0 ? "cuda" : "cpu", p, err);
}

void zt_auto_time_input(const zt_plan_job *j, const zt_train_config *c, int world, int nodes, zt_time_input *t) {
    memset(t, 0, sizeof *t);
    t->model = &j->model.s;
    t->gated_mlp = strcmp(j->family->family, "llama") == 0;
    t->seq_parallel = c->seq_parallel;
    t->world = world, t->nodes = nodes, t->stage = c->stage, t->grad_accum = c->grad_accum;
    t->shard_group = j->shard_group, t->secondary = j->secondary;
    t->dtype = j->in.dtype, t->reduce_dtype = j->in.reduce_dtype;
    t->offload = j->in.nvme_optimizer ? 2 : j->in.offload;
    t->offload_params = j->in.nvme_params ? 2 : j->in.offload_params;
    t->offload_delay = c->offload_delay, t->prefetch = c->prefetch, t->overlap_comm = c->overlap_comm;
    t->quant_weights_bits = j->in.quant_weights_bits, t->quant_grads_bits = j->in.quant_grads_bits;
    t->quant_block = j->in.quant_block;
    zt_error err = {0};
    if (zt_train_config_link(c, t->link_gbs, &err) != ZT_OK) t->link_gbs[0] = t->link_gbs[1] = 0;
    t->gpu = strcmp(c->device, "cuda") == 0;
    t->bucket_bytes = c->bucket_size;
    t->act_offload_bytes = (double)j->family->plan_offloaded_bytes(&j->model, j->in.compute_dtype);
}

static zt_device device_of(const zt_train_config *c) {
    return strcmp(c->device, "cuda") == 0 ? ZT_DEVICE_CUDA : ZT_DEVICE_CPU;
}

static zt_alloc_mode allocator_of(const zt_train_config *c) {
    zt_alloc_mode mode = ZT_ALLOC_SIMPLE;
    (void)zt_alloc_mode_parse(c->allocator, &mode);
    return mode;
}

/* Plans and times the job's current levers for c. */
static void evaluate(zt_plan_job *j, zt_train_config *c, const zt_auto_setup *s, const zt_time_profile *prof,
                     zt_auto_candidate *out) {
    zt_plan p;
    zt_plan_job_plan(j, s->world, c->stage, &p);
    zt_time_input t;
    zt_auto_time_input(j, c, s->world, s->nodes, &t);
    zt_time_predict(&t, &p, j->spec, prof, &out->time);
    out->cfg = *c;
    out->peak_bytes = p.peak_bytes;
    out->host_bytes = p.host_bytes;
    out->reserved_bytes = zt_plan_expected_reserved(p.peak_bytes + ZT_PLAN_BLOCKS_MARGIN(j->spec->nunits),
                                                    allocator_of(c));
    int unmeasured = 0;
    out->budget = zt_plan_device_budget(s->mem_limit, s->device_mem, device_of(c), p.host_bytes, &unmeasured);
    int per_node = s->nodes > 1 && s->world % s->nodes == 0 ? s->world / s->nodes : s->world;
    out->fits = out->reserved_bytes <= out->budget && (!s->host_mem || p.host_bytes * (size_t)per_node <= s->host_mem);
    out->replayed = 0;
    flags_of(c, out->flags, sizeof out->flags);
}

typedef struct {
    visited *v;
    int n, cap;
} visit_log;

static void log_visit(visit_log *L, const unsigned char *ax, const zt_auto_candidate *c, int valid) {
    if (L->n == L->cap) {
        int cap = L->cap ? 2 * L->cap : 1024;
        visited *nv = realloc(L->v, (size_t)cap * sizeof *nv);
        if (!nv) return;
        L->v = nv, L->cap = cap;
    }
    visited *e = &L->v[L->n++];
    memset(e, 0, sizeof *e);
    memcpy(e->ax, ax, NAX);
    e->valid = valid;
    if (!valid) return;
    e->fits = c->fits, e->step_s = c->time.step_s, e->reserved = c->reserved_bytes, e->budget = c->budget;
    e->peak = c->peak_bytes;
}

static const visited *find_visit(const visit_log *L, const unsigned char *ax) {
    for (int i = 0; i < L->n; i++)
        if (memcmp(L->v[i].ax, ax, NAX) == 0) return &L->v[i];
    return NULL;
}

static void mib(char *b, size_t cap, double bytes) {
    if (bytes >= 1e9) snprintf(b, cap, "%.1f GiB", bytes / (1u << 30));
    else snprintf(b, cap, "%.1f MiB", bytes / (1 << 20));
}

/* One line per axis: the value taken, and what each other value would do
 * with everything else as chosen: a faster one did not fit, a slower one
 * is slower by the factor. */
static void reasons_for(const space *sp, const unsigned char *chosen, double step, const visit_log *L,
                        zt_auto_result *r) {
    for (int a = 0; a < NAX && r->nreasons < ZT_AUTO_REASONS; a++) {
        if (sp->n[a] < 2) continue;
        char *line = r->reasons[r->nreasons];
        size_t cap = sizeof r->reasons[0], at = 0;
        at += (size_t)snprintf(line, cap, "%s %s:", axis_name[a], sp->v[a][chosen[a]]);
        int said = 0;
        for (int k = 0; k < sp->n[a] && at < cap; k++) {
            unsigned char alt[NAX];
            memcpy(alt, chosen, NAX);
            alt[a] = (unsigned char)k;
            normalize(sp, alt);
            const visited *v = k == chosen[a] || !memcmp(alt, chosen, NAX) ? NULL : find_visit(L, alt);
            if (!v || !v->valid) continue;
            /* Not fitting is said where it is certain: allocated bytes above the
             * budget, or a replay the cap refused; else the time alone. */
            int over = v->peak > v->budget, refused = v->replayed && !v->fits;
            char need[32], have[32];
            mib(need, sizeof need, (double)(over ? v->peak : v->reserved));
            mib(have, sizeof have, (double)v->budget);
            if (over)
                at += (size_t)snprintf(line + at, cap - at, "%s %s needs %s > %s", said ? ";" : "", sp->v[a][k],
                                       need, have);
            else if (refused)
                at += (size_t)snprintf(line + at, cap - at, "%s %s refused by the allocator's replay under %s",
                                       said ? ";" : "", sp->v[a][k], have);
            else
                at += (size_t)snprintf(line + at, cap - at, "%s %s %.2fx %s", said ? ";" : "", sp->v[a][k],
                                       v->step_s >= step ? v->step_s / step : step / v->step_s,
                                       v->step_s >= step ? "slower" : "faster, not fitting");
            said = 1;
        }
        if (said) r->nreasons++;
    }
}

static int advance(unsigned char *ax, const space *sp) {
    for (int a = NAX - 1; a >= 0; a--) {
        if (++ax[a] < sp->n[a]) return 1;
        ax[a] = 0;
    }
    return 0;
}

/* Fastest first; ties to the lower reserved bytes. */
static int by_step(const void *x, const void *y) {
    const visited *a = x, *b = y;
    if (a->valid != b->valid) return b->valid - a->valid;
    if (a->step_s != b->step_s) return a->step_s < b->step_s ? -1 : 1;
    return a->reserved < b->reserved ? -1 : a->reserved > b->reserved;
}

/* At most this many replays: past them the closed form decides. */
#define ZT_AUTO_MAX_REPLAYS 256

typedef struct {
    const zt_train_config *base;
    const zt_train_model *family;
    const zt_auto_setup *s;
    const zt_time_profile *prof;
    const space *sp;
    int seqs;
    zt_plan_job *j;
} search_ctx;

/* Does candidate v fit? The allocator's replay says exactly (a family's
 * model); else the closed form. A replayed candidate's figures are its. */
static zt_status decide(const search_ctx *x, visited *v, zt_auto_candidate *c, zt_auto_result *r, zt_error *err) {
    zt_train_config cfg;
    zt_error verr = {0};
    candidate_cfg(x->base, x->sp, v->ax, x->seqs, x->s->world, &cfg);
    if (zt_plan_job_retarget(x->j, &cfg, x->s->world, x->s->nodes, &verr) != ZT_OK) return v->fits = 0, ZT_OK;
    evaluate(x->j, &cfg, x->s, x->prof, c);
    memcpy(c->axes, v->ax, NAX);
    if (!x->s->replay || x->s->synth.params > 0 || r->replays >= ZT_AUTO_MAX_REPLAYS) return ZT_OK;
    if (c->peak_bytes > c->budget) return v->fits = c->fits = 0, ZT_OK; /* reserved >= allocated */
    int per_node = x->s->nodes > 1 && x->s->world % x->s->nodes == 0 ? x->s->world / x->s->nodes : x->s->world;
    zt_replay_setup w = {x->s->world, per_node, c->budget, device_of(&cfg)};
    zt_replay_result res;
    r->replays++;
    ZT_TRY(zt_plan_replay(&cfg, x->family, &w, &res, err));
    v->replayed = c->replayed = 1;
    int host_ok = !x->s->host_mem || c->host_bytes * (size_t)per_node <= x->s->host_mem;
    v->fits = c->fits = !res.oom && host_ok;
    v->reserved = c->reserved_bytes = res.oom ? c->reserved_bytes : res.reserved_peak;
    return ZT_OK;
}

/* The candidates in order of predicted step until `top` fit. */
static zt_status choose(const search_ctx *x, visit_log *L, zt_auto_result *r, zt_error *err) {
    visited *order = malloc((size_t)(L->n ? L->n : 1) * sizeof *order);
    if (!order) return ZT_FAIL(err, ZT_ERR_OOM, "no memory for the search");
    memcpy(order, L->v, (size_t)L->n * sizeof *order);
    qsort(order, (size_t)L->n, sizeof *order, by_step);
    zt_status st = ZT_OK;
    int want = x->s->top > 0 ? x->s->top : 1;
    for (int i = 0; i < L->n && order[i].valid && r->nbest < want && st == ZT_OK; i++) {
        if (order[i].peak > order[i].budget) continue;
        zt_auto_candidate c;
        st = decide(x, &order[i], &c, r, err);
        visited *orig = (visited *)find_visit(L, order[i].ax);
        if (orig) *orig = order[i];
        if (st == ZT_OK && c.fits) r->best[r->nbest++] = c;
    }
    free(order);
    return st;
}

static void none_fits(const visit_log *L, const search_ctx *x, zt_auto_result *r) {
    const visited *small = NULL;
    for (int i = 0; i < L->n; i++)
        if (L->v[i].valid && (!small || L->v[i].reserved < small->reserved)) small = &L->v[i];
    if (!small) {
        snprintf(r->none_fits, sizeof r->none_fits, "nothing fits: no configuration of the space is valid here");
        return;
    }
    zt_train_config cfg;
    char flags[ZT_AUTO_FLAGS_LEN], need[32], have[32];
    candidate_cfg(x->base, x->sp, small->ax, x->seqs, x->s->world, &cfg);
    flags_of(&cfg, flags, sizeof flags);
    mib(need, sizeof need, (double)small->reserved);
    mib(have, sizeof have, (double)small->budget);
    snprintf(r->none_fits, sizeof r->none_fits, "nothing fits: the smallest configuration (%s) needs %s of device "
             "memory per rank, above the %s budget", flags, need, have);
}

/* The model's half of the planner: a family without it is neither planned nor timed. */
static zt_status plannable(const zt_train_model *family, zt_error *err) {
    if (family->plan_walk && family->plan_units && family->plan_offloaded_bytes) return ZT_OK;
    return ZT_FAIL(err, ZT_ERR_UNSUPPORTED, "--model %s has no planner hooks: its memory and step time cannot be "
                   "predicted", family->family);
}

zt_status zt_auto_search(const zt_train_config *base, const zt_train_model *family, const zt_auto_setup *s,
                         const zt_time_profile *prof, zt_auto_result *r, zt_error *err) {
    memset(r, 0, sizeof *r);
    ZT_TRY(plannable(family, err));
    if (!s->device_mem && !s->mem_limit)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--auto needs a device budget: --device-mem (zt-plan) or --mem-limit");
    int P0 = base->seq_parallel > 0 ? base->seq_parallel : 1;
    int seqs = s->global_batch > 0 ? s->global_batch : s->world / P0 * base->micro_batch * base->grad_accum;
    double t0 = zt_now_s();
    zt_train_config b = *base;
    zt_plan_job j;
    ZT_TRY(zt_plan_job_init(&j, &b, family, &s->synth, s->world, s->nodes, -1, err));
    space sp;
    build_space(base, s, seqs, j.spec->largest_unit_numel, &sp);
    r->best = calloc((size_t)(s->top > 0 ? s->top : 1), sizeof *r->best);
    visit_log L = {0};
    unsigned char ax[NAX] = {0};
    zt_status st = r->best ? ZT_OK : ZT_FAIL(err, ZT_ERR_OOM, "no memory for the search");
    do {
        zt_train_config cfg;
        zt_auto_candidate c;
        if (st != ZT_OK || !sensible(&sp, ax) || !candidate_cfg(&b, &sp, ax, seqs, s->world, &cfg)) continue;
        zt_error verr = {0};
        int valid = zt_train_config_validate(&cfg, &verr) == ZT_OK &&
                    zt_plan_job_retarget(&j, &cfg, s->world, s->nodes, &verr) == ZT_OK;
        if (valid) evaluate(&j, &cfg, s, prof, &c), r->evaluated++, r->fitting += c.fits;
        log_visit(&L, ax, &c, valid);
    } while (advance(ax, &sp));
    search_ctx x = {&b, family, s, prof, &sp, seqs, &j};
    if (st == ZT_OK) st = choose(&x, &L, r, err);
    if (st == ZT_OK && r->nbest) reasons_for(&sp, r->best[0].axes, r->best[0].time.step_s, &L, r);
    else if (st == ZT_OK) none_fits(&L, &x, r);
    r->seconds = zt_now_s() - t0;
    free(L.v);
    zt_plan_job_free(&j);
    return st;
}

void zt_auto_result_free(zt_auto_result *r) {
    free(r->best);
    r->best = NULL;
}

void zt_auto_apply(const zt_auto_candidate *c, zt_train_config *cfg) {
    const zt_train_config *k = &c->cfg;
    cfg->stage = k->stage, cfg->micro_batch = k->micro_batch, cfg->grad_accum = k->grad_accum;
    cfg->prefetch = k->prefetch, cfg->prefetch_bucket_size = 0, cfg->bucket_size = k->bucket_size;
    cfg->seq_parallel = k->seq_parallel, cfg->offload_delay = 0, cfg->max_live_params = k->max_live_params;
    memcpy(cfg->offload, k->offload, sizeof cfg->offload);
    memcpy(cfg->offload_params, k->offload_params, sizeof cfg->offload_params);
    memcpy(cfg->recompute, k->recompute, sizeof cfg->recompute);
    memcpy(cfg->attention, k->attention, sizeof cfg->attention);
    memcpy(cfg->offload_activations, k->offload_activations, sizeof cfg->offload_activations);
    memcpy(cfg->reduce_dtype, k->reduce_dtype, sizeof cfg->reduce_dtype);
    memcpy(cfg->reshard_after_forward, k->reshard_after_forward, sizeof cfg->reshard_after_forward);
    memcpy(cfg->quantize_grads, k->quantize_grads, sizeof cfg->quantize_grads);
}

zt_status zt_auto_predict(zt_train_config *c, const zt_train_model *family, int world, int nodes,
                          const zt_time_profile *prof, zt_plan *plan, zt_time_pred *out, zt_error *err) {
    ZT_TRY(plannable(family, err));
    zt_plan_job j;
    zt_plan_synth none = {0, 0};
    ZT_TRY(zt_plan_job_init(&j, c, family, &none, world, nodes, -1, err));
    zt_plan_job_plan(&j, world, c->stage, plan);
    zt_time_input t;
    zt_auto_time_input(&j, c, world, nodes, &t);
    zt_time_predict(&t, plan, j.spec, prof, out);
    zt_plan_job_free(&j);
    return ZT_OK;
}
