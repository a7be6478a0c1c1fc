/* zt-plan's replay (plan_replay.h): the trainer's model and engine built as
 * zt-train builds them, over a dry context, then two training steps. */
#include "plan_replay.h"

#include <stdlib.h>
#include <string.h>

#include "trainer.h"
#include "zt_step.h"
#include "zt_time.h"

/* One rank's replay: what it holds, freed in reverse by replay_free. */
typedef struct {
    const zt_train_config *c;      /* the run replayed (the NVMe tier as the host tier) */
    const zt_train_config *asked;  /* the options as given */
    const zt_train_model *family;
    zt_ctx ctx;
    zt_comm world, shard, replicas, secondary, hop_node, hop_cross, seq;
    zt_seq_parallel sp; /* --seq-parallel: this rank's group (sp.P = 1: none) */
    void *model;
    zt_engine eng;
    int engine_made;
    int32_t *tokens, *targets; /* host [B,T] zeros: the data does not move memory */
} replay;

static void replay_free(replay *r) {
    if (r->engine_made) r->family->free_activations(r->model, &r->eng);
    zt_engine_destroy(&r->eng); /* a failed init leaves what it made; nothing when it never ran */
    if (r->model) r->family->destroy(r->model);
    zt_comm *comms[] = {&r->seq, &r->hop_cross, &r->hop_node, &r->secondary, &r->replicas, &r->shard, &r->world};
    for (int i = 0; i < 7; i++)
        if (comms[i]->ops) zt_comm_destroy(comms[i]);
    free(r->tokens);
    free(r->targets);
    zt_ctx_destroy(&r->ctx);
}

/* The communicators the trainer splits off the world, made directly (a dry
 * world has nobody to agree with): group g holds ranks [gG, (g+1)G),
 * replica group k the k-th rank of each; hpZ's group G' consecutive ranks
 * or a node's. Returns the one the state is sharded over. */
static zt_status make_groups(replay *r, const zt_replay_setup *w, int rank, zt_comm **shard, zt_error *err) {
    int G;
    ZT_TRY(zt_train_group_size("--shard-group", r->c->shard_group, w->world, w->ranks_per_node, &G, err));
    *shard = &r->world;
    if (G < w->world) {
        ZT_TRY(zt_comm_create_dry(&r->shard, rank % G, G, w->ranks_per_node, err));
        ZT_TRY(zt_comm_create_dry(&r->replicas, rank / G, w->world / G, w->ranks_per_node, err));
        *shard = &r->shard;
    }
    return ZT_OK;
}

static zt_status make_secondary(replay *r, const zt_replay_setup *w, int rank, zt_error *err) {
    const char *v = r->c->reshard_after_forward;
    if (strcmp(v, "none") == 0) return ZT_OK;
    int G;
    ZT_TRY(zt_train_group_size("--reshard-after-forward", v, w->world, w->ranks_per_node, &G, err));
    ZT_TRY(zt_comm_create_dry(&r->secondary, rank % G, G, w->ranks_per_node, err));
    return zt_engine_set_secondary(&r->eng, &r->secondary);
}

/* The initial values move no memory, and no host code reads them in a
 * replay (ctx->dry): none are drawn (the model's draws were most of a
 * large model's replay time). */
static void no_values(void *arg, int unit, int param, size_t first, size_t count, float *dst) {
    (void)arg, (void)unit, (void)param, (void)first, (void)count, (void)dst;
}

/* Quantized gradients over several nodes: the hops' groups, as the
 * trainer makes them (a node's ranks; one local rank's across nodes). */
static zt_status make_grad_hops(replay *r, const zt_replay_setup *w, int rank, zt_error *err) {
    int L = w->ranks_per_node, K = w->world / L;
    if (strcmp(r->c->quantize_grads, "none") == 0 || K <= 1 || w->world % L) return ZT_OK;
    ZT_TRY(zt_comm_create_dry(&r->hop_node, rank % L, L, L, err));
    ZT_TRY(zt_comm_create_dry(&r->hop_cross, rank / L, K, 1, err));
    return zt_engine_set_grad_hops(&r->eng, &r->hop_node, &r->hop_cross);
}

/* --seq-parallel P: the group of P consecutive ranks (seq_group.c). */
static zt_status make_seq_group(replay *r, const zt_replay_setup *w, int rank, zt_error *err) {
    int P = r->c->seq_parallel;
    r->sp = (zt_seq_parallel){NULL, 1, 0, r->c->seq_len};
    if (P <= 1) return ZT_OK;
    if (w->world % P != 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--seq-parallel %d must divide the world size %d", P, w->world);
    if (!r->family->set_seq_parallel)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--seq-parallel %d: the %s family does not split its sequences", P,
                       r->family->family);
    ZT_TRY(zt_comm_create_dry(&r->seq, rank % P, P, P < w->ranks_per_node ? P : w->ranks_per_node, err));
    r->sp = (zt_seq_parallel){&r->seq, P, rank % P, r->c->seq_len};
    return r->family->set_seq_parallel(r->model, &r->sp, err);
}

/* The model and the engine, as the trainer's create_model makes them. */
static zt_status build(replay *r, const zt_replay_setup *w, int rank) {
    const zt_train_config *c = r->c;
    zt_error *err = &r->ctx.err;
    zt_model_settings settings;
    /* A byte-level file has 256 symbols, as the data source gives the trainer. */
    ZT_TRY(zt_train_config_model(c, zt_train_data_vocab(c), &settings, err));
    ZT_TRY(r->family->resolve(&settings, err));
    ZT_TRY(r->family->create(&r->model, &settings, err));
    ZT_TRY(r->family->freeze(r->model, c->freeze, err));
    ZT_TRY(zt_comm_create_dry(&r->world, rank, w->world, w->ranks_per_node, err));
    zt_comm *shard = &r->world;
    ZT_TRY(make_groups(r, w, rank, &shard, err));
    ZT_TRY(make_seq_group(r, w, rank, err));
    zt_model_spec *spec = r->family->spec(r->model);
    zt_train_layout(c, spec, shard->world_size);
    zt_engine_config ec;
    zt_train_hooks none;
    memset(&none, 0, sizeof none);
    none.nvme_fail_rank = -1;
    zt_engine_config given; /* the NVMe tier is refused as zt-train refuses it, before it is replaced */
    ZT_TRY(zt_train_engine_config(r->asked, &none, 1, rank, spec, &given, err));
    ZT_TRY(zt_engine_check_nvme(&given, err));
    ZT_TRY(zt_train_engine_config(c, &none, 1, rank, spec, &ec, err));
    zt_mem_set_phase(&r->ctx.device_mem, ZT_PHASE_INIT);
    ZT_TRY(zt_engine_init_hybrid(&r->eng, &r->ctx, shard, shard != &r->world ? &r->replicas : NULL, &r->world, spec,
                                 &ec, no_values, r->model));
    r->engine_made = 1;
    ZT_TRY(make_secondary(r, w, rank, err));
    return make_grad_hops(r, w, rank, err);
}

/* The model's half of a step (zt_step_model) on zero tokens. */
static zt_status forward(void *arg, int step, int micro) {
    (void)step, (void)micro;
    replay *r = arg;
    int t0, T; /* this rank's span of the sequence */
    zt_seq_span(r->c->seq_len, r->sp.P, r->sp.index, &t0, &T);
    return r->family->forward(r->model, &r->eng, r->tokens, r->targets, r->c->micro_batch, T);
}

static zt_status backward(void *arg, int step, int micro, float loss_scale) {
    (void)step, (void)micro;
    replay *r = arg;
    const zt_train_config *c = r->c;
    return r->family->backward(r->model, &r->eng,
                               loss_scale / ((float)c->micro_batch * (float)c->seq_len * (float)c->grad_accum));
}

static zt_status take_losses(void *arg, double *sum) {
    replay *r = arg;
    return r->family->take_losses(r->model, &r->ctx, sum);
}

/* Init and two steps; a refusal under the cap ends it with ZT_ERR_OOM. */
static zt_status run(replay *r, const zt_replay_setup *w, int rank) {
    const zt_train_config *c = r->c;
    zt_error *err = &r->ctx.err;
    ZT_TRY(zt_ctx_init_dry(&r->ctx, w->like, w->cap, rank, w->world));
    zt_alloc_mode mode = ZT_ALLOC_SIMPLE;
    (void)zt_alloc_mode_parse(c->allocator, &mode); /* the options table allows no other */
    ZT_TRY(zt_mem_set_mode(&r->ctx.device_mem, mode, c->max_split_size, err));
    size_t BT = (size_t)c->micro_batch * c->seq_len;
    r->tokens = calloc(BT, sizeof *r->tokens);
    r->targets = calloc(BT, sizeof *r->targets);
    if (!r->tokens || !r->targets) return ZT_FAIL(err, ZT_ERR_OOM, "replay: cannot allocate %zu tokens", BT);
    ZT_TRY(build(r, w, rank));
    zt_step_model model = {r, forward, backward, take_losses};
    zt_step_options opt = {c->grad_accum, (float)c->lr, c->max_skipped_steps, NULL, NULL, NULL};
    for (int step = 0; step < 2 && step < c->steps; step++) {
        zt_step_result res;
        ZT_TRY(zt_train_step(&r->eng, &model, &opt, step, &res));
    }
    return ZT_OK;
}

/* The NVMe tier keeps in its swap file what the host tier keeps in the
 * host pool, and moves it through the same device buffers: the replay runs
 * the host tier in its place rather than write swap files. */
static void without_nvme(zt_train_config *c) {
    if (strcmp(c->offload, "nvme") == 0) snprintf(c->offload, sizeof c->offload, "cpu");
    if (strcmp(c->offload_params, "nvme") == 0) snprintf(c->offload_params, sizeof c->offload_params, "cpu");
}

zt_status zt_plan_replay_rank(const zt_train_config *c, const zt_train_model *family, const zt_replay_setup *w,
                              int rank, zt_replay_result *out, zt_error *err) {
    memset(out, 0, sizeof *out);
    replay r;
    memset(&r, 0, sizeof r);
    zt_train_config host_tier = *c;
    without_nvme(&host_tier);
    r.c = &host_tier;
    r.asked = c;
    r.family = family;
    double t0 = zt_now_s();
    zt_status st = run(&r, w, rank);
    const zt_mem *dev = &r.ctx.device_mem;
    out->rank = rank;
    out->reserved_peak = dev->reserved.peak;
    out->allocated_peak = dev->allocated.peak;
    out->host_reserved_peak = r.ctx.host_mem.reserved.peak;
    out->host_replayed = strcmp(c->offload, host_tier.offload) == 0 && strcmp(c->offload_params, host_tier.offload_params) == 0;
    out->system_allocs = dev->system_allocs;
    out->ranks_replayed = 1;
    if (st == ZT_ERR_OOM && dev->limit_bytes && dev->refusals) { /* the device's cap, not the host */
        out->oom = 1;
        snprintf(out->oom_msg, sizeof out->oom_msg, "%s", r.ctx.err.msg);
        st = ZT_OK;
    } else if (st != ZT_OK) {
        *err = r.ctx.err;
    }
    replay_free(&r);
    out->seconds = zt_now_s() - t0;
    return st;
}

zt_status zt_plan_replay(const zt_train_config *c, const zt_train_model *family, const zt_replay_setup *w,
                         zt_replay_result *out, zt_error *err) {
    memset(out, 0, sizeof *out);
    int N = w->world, n = N < ZT_REPLAY_MAX_RANKS ? N : ZT_REPLAY_MAX_RANKS;
    double seconds = 0;
    int replayed = 0;
    for (int i = 0; i < n; i++) {
        int rank = n == N ? i : (int)((long long)i * (N - 1) / (n - 1)); /* 0 .. N-1 evenly */
        zt_replay_result one;
        ZT_TRY(zt_plan_replay_rank(c, family, w, rank, &one, err));
        seconds += one.seconds;
        replayed++;
        if (i == 0 || one.oom || one.reserved_peak > out->reserved_peak) *out = one;
        if (one.oom) break;
    }
    out->ranks_replayed = replayed;
    out->seconds = seconds;
    return ZT_OK;
}
