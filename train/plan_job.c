/* zt-plan's job (plan_job.h): the model's units and the engine's levers
 * from the training options, and one rank's memory plan. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_job.h"
#include "trainer.h"
#include "zt_checkpoint.h"
#include "zt_optim.h"
#include "zt_train.h"

/* A GPT-shaped model from its totals: embedding V x C + T x C, head 2C (+ V x C
 * untied), and the rest split evenly into L blocks (or blocks of
 * --largest-unit-params when given). */
/* A block of n parameters as a GPT block's four weight matrices of width
 * C (hidden, qkv as q, k, v: what Muon transforms) and the rest as one
 * vector; the MLP's width F is 4C, or less where n is smaller than 12 C^2
 * (the seed's 100B of 80 blocks at C = 10240: F = 40105); one vector where
 * not even the attention's fit. */
static zt_status synth_block(zt_model_spec *spec, int u, int64_t n, int64_t C, zt_error *err) {
    int idx;
    int64_t F = C >= 2 && n > 4 * C * C ? (n - 4 * C * C) / (2 * C) : 0;
    if (F > 4 * C) F = 4 * C;
    if (F < 2) return zt_spec_add_param(spec, u, "block", 1, &n, 1, &idx, err);
    const int64_t shapes[4][2] = {{3 * C, C}, {C, C}, {F, C}, {C, F}}, qkv[3] = {C, C, C};
    const char *names[4] = {"qkv_w", "attproj_w", "fc_w", "fcproj_w"};
    for (int k = 0; k < 4; k++) {
        ZT_TRY(zt_spec_add_param(spec, u, names[k], 2, shapes[k], 1, &idx, err));
        ZT_TRY(zt_spec_set_hidden(spec, u, idx, k == 0 ? 3 : 1, k == 0 ? qkv : NULL, err));
    }
    int64_t rest = n - 4 * C * C - 2 * F * C;
    return rest > 0 ? zt_spec_add_param(spec, u, "rest", 1, &rest, 0, &idx, err) : ZT_OK;
}

static zt_status synth_spec(zt_model_spec *spec, const zt_train_config *c, const zt_plan_synth *pf, int *ue, int *ub,
                            int *uh, zt_error *err) {
    memset(spec, 0, sizeof *spec);
    double C = c->d_model, V = c->vocab, T = c->seq_len, L = c->layers;
    double emb = V * C + T * C, head = 2 * C + (c->tied ? 0 : V * C);
    double per_block = L > 0 ? (pf->params - emb - head) / L : 0;
    if (pf->largest_unit_params > 0 && L > 0) per_block = pf->largest_unit_params;
    if (L > 0 && per_block < 1)
        return ZT_FAIL(err, ZT_ERR_INVALID,
                       "--params %.3g is too small for embedding + head of this shape (%.3g); check --vocab/--d-model",
                       pf->params, emb + head);
    int idx;
    int64_t shape[1];
    ZT_TRY(zt_spec_add_unit(spec, "embedding", ue, err));
    shape[0] = (int64_t)emb;
    ZT_TRY(zt_spec_add_param(spec, *ue, "embedding", 1, shape, 1, &idx, err));
    for (int l = 0; l < c->layers; l++) {
        char name[32];
        snprintf(name, sizeof name, "block%d", l);
        int u;
        ZT_TRY(zt_spec_add_unit(spec, name, &u, err));
        if (l == 0) *ub = u;
        ZT_TRY(synth_block(spec, u, (int64_t)per_block, (int64_t)C, err));
    }
    ZT_TRY(zt_spec_add_unit(spec, "head", uh, err));
    shape[0] = (int64_t)head;
    return zt_spec_add_param(spec, *uh, "head", 1, shape, 1, &idx, err);
}


/* The rank with the most optimizer state: Adafactor's and 8-bit Adam's
 * depend on which parameters a rank's slices touch (every rank of a large
 * world is not tried: 1024 spread over it, and the last). */
static int fullest_rank(const zt_plan_job *j) {
    if (zt_optim_elementwise(zt_optim_or_default(j->in.optimizer))) return 0; /* every rank keeps as much */
    zt_engine_config c = {.stage = j->in.stage, .dtype = j->in.dtype, .offload = j->in.offload,
                          .offload_params = j->in.offload_params,
                          .persist_threshold = j->in.persist_threshold, .optimizer = j->in.optimizer,
                          .adafactor_beta1 = j->in.adafactor_beta1};
    int W = j->in.world, step = W > 1024 ? W / 1024 : 1, best = 0;
    size_t most = 0;
    for (int r = 0; r < W; r = r + step < W || r == W - 1 ? r + step : W - 1) {
        zt_state_bytes b = zt_engine_state_bytes(j->spec, &c, r);
        if (b.optimizer + b.host_optimizer > most) most = b.optimizer + b.host_optimizer, best = r;
        if (r == W - 1) break;
    }
    return best;
}

/* The host pool with the kept inputs of --offload-activations cpu (all L
 * blocks' at the end of forward): alone without --offload; with it, beside
 * the engine's persistent host state (master, Adam, shards) in forward,
 * against the engine's own peak at the step, when every input is back. The
 * engine's gradients reach the host during backward as their buckets
 * complete, when inputs may still be there: zt-plan takes them to arrive
 * after the blocks' backward (one bucket, as on small models) and, under
 * the delayed update, whose previous step's gradients live through the
 * whole step, adds the two. */
static void add_offloaded_inputs(const zt_plan_job *j, zt_plan *p) {
    size_t act = j->family->plan_offloaded_bytes(&j->model, j->in.compute_dtype);
    if (!act) return;
    if (!j->in.offload) {
        p->host_bytes += act; /* beside a GPU's matrix staging, if any */
        return;
    }
    if (j->in.offload_delay) {
        p->host_bytes += act;
        return;
    }
    zt_engine_config ec = {.stage = j->in.stage, .dtype = j->in.dtype, .offload = j->in.offload,
                           .offload_params = j->in.offload_params, .persist_threshold = j->in.persist_threshold,
                           .optimizer = j->in.optimizer, .adafactor_beta1 = j->in.adafactor_beta1,
                           .nvme_optimizer = j->in.nvme_optimizer, .nvme_params = j->in.nvme_params,
                           .nvme = {.block_bytes = j->in.nvme_block_bytes, .buffers = j->in.nvme_buffers}};
    zt_state_bytes sb = zt_engine_state_bytes(j->spec, &ec, j->in.rank);
    size_t stage, nvme = zt_nvme_buffer_bytes(j->spec, &ec, &stage); /* the NVMe tier's buffers, from init on */
    size_t forward = sb.host_master_params + sb.host_optimizer + sb.host_params + nvme + stage + act;
    if (forward > p->host_bytes) p->host_bytes = forward;
}

/* The plan of rank j->rank (-1: the rank with the most state). */
void zt_plan_job_plan(zt_plan_job *j, int world, int stage, zt_plan *out) {
    /* Hybrid sharding: every rank holds what a rank of a G-rank world does
     * (the replicas' sum reuses the bucket's buffers: shard/reduce.c). */
    if (j->shard_group > 0 && j->shard_group < world && world % j->shard_group == 0) world = j->shard_group;
    j->in.secondary = j->secondary > 1 && world % j->secondary == 0 ? j->secondary : 0;
    int coded = j->in.quant_weights_bits || j->in.quant_grads_bits;
    zt_spec_layout_aligned(j->spec, world, coded ? j->in.quant_block : world > 1 ? 16 : 1);
    j->in.world = world;
    j->in.stage = stage;
    j->in.rank = j->rank >= 0 && j->rank < world ? j->rank : fullest_rank(j);
    /* the span of the rank asked for (a world rank), else the longest, the first of a group's */
    j->model.seq_index = j->model.seq_parallel > 1 && j->rank >= 0 ? j->rank % j->model.seq_parallel : 0;
    zt_plan_compute(&j->in, j->family->plan_walk, &j->model, out);
    add_offloaded_inputs(j, out);
    /* It outlives steps while its writer runs: beside any peak of the pool. */
    out->checkpoint_staging_bytes = j->async_save ? zt_ckpt_rank_file_bytes_for(j->spec, j->in.dtype) : 0;
    out->host_bytes += out->checkpoint_staging_bytes;
}

/* The units: the family's model, or one shaped like it (embedding, blocks,
 * head) from its totals. */
zt_status zt_plan_job_units(zt_plan_job *j, zt_train_config *c, const zt_plan_synth *pf, zt_error *err) {
    if (c->heads <= 0 || c->d_model % c->heads) c->heads = c->d_model >= 64 ? c->d_model / 64 : 1;
    zt_model_settings *s = &j->model.s;
    ZT_TRY(zt_train_config_model(c, zt_train_data_vocab(c), s, err));
    j->model.seq_parallel = c->seq_parallel;
    ZT_TRY(j->family->resolve(s, err));
    j->spec = calloc(1, sizeof *j->spec);
    if (!j->spec) return ZT_FAIL(err, ZT_ERR_OOM, "no memory");
    if (pf->params > 0)
        return synth_spec(j->spec, c, pf, &j->model.unit_embed, &j->model.first_block, &j->model.unit_head, err);
    void *model = NULL;
    zt_status st = j->family->create(&model, s, err);
    if (st == ZT_OK) st = j->family->freeze(model, c->freeze, err);
    if (st == ZT_OK) {
        memcpy(j->spec, j->family->spec(model), sizeof *j->spec);
        j->family->plan_units(model, &j->model);
    }
    if (model) j->family->destroy(model);
    return st;
}

/* The engine's levers from the options. Activations in the compute dtype,
 * as both backends and DeepSpeed's and FSDP's mixed precision keep them. */
void zt_plan_job_levers(zt_plan_input *in, const zt_train_config *c, const zt_model_spec *spec) {
    memset(in, 0, sizeof *in);
    in->offload = strcmp(c->offload, "none") != 0;
    in->offload_params = strcmp(c->offload_params, "none") != 0;
    in->nvme_optimizer = strcmp(c->offload, "nvme") == 0;
    in->nvme_params = strcmp(c->offload_params, "nvme") == 0;
    in->nvme_block_bytes = c->nvme_block_size;
    in->nvme_buffers = c->nvme_buffers;
    in->offload_delay = c->offload_delay;
    in->optimizer = zt_optim_find(c->optimizer); /* the options table allows no other */
    in->adafactor_beta1 = (float)c->adafactor_beta1;
    in->master_none = strcmp(c->master_dtype, "none") == 0;
    in->state_bf16 = strcmp(c->optim_state_dtype, "bf16") == 0;
    in->gpu = strcmp(c->device, "cuda") == 0;
    in->prefetch = c->prefetch;
    in->prefetch_params = (long long)c->prefetch_bucket_size;
    in->overlap_comm = c->overlap_comm;
    (void)zt_dtype_parse(c->dtype, &in->dtype);
    (void)zt_dtype_parse(c->reduce_dtype, &in->reduce_dtype);
    in->compute_dtype = in->dtype;
    in->bucket_bytes = c->bucket_size;
    in->persist_threshold = (size_t)c->persist_threshold;
    in->max_live_params = (size_t)c->max_live_params;
    in->max_reuse_distance = (size_t)c->max_reuse_distance;
    in->sub_group_size = (size_t)c->sub_group_size;
    in->quant_weights_bits = zt_train_code_bits(c->quantize_weights);
    in->quant_grads_bits = zt_train_code_bits(c->quantize_grads);
    in->quant_block = (unsigned)c->quant_block;
    in->quant_feedback = c->quantize_grads_feedback;
    (void)zt_dtype_parse(c->quantize_grads_feedback_dtype, &in->feedback_dtype);
    in->spec = spec;
}


zt_status zt_plan_job_init(zt_plan_job *j, zt_train_config *c, const zt_train_model *family,
                           const zt_plan_synth *synth, int world, int nodes, int rank, zt_error *err) {
    memset(j, 0, sizeof *j);
    j->family = family;
    ZT_TRY(zt_plan_job_units(j, c, synth, err));
    zt_plan_job_levers(&j->in, c, j->spec);
    j->rank = rank;
    if (strcmp(c->shard_group, "node") == 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--shard-group node: give the ranks per node as a number here");
    j->shard_group = strcmp(c->shard_group, "world") == 0 ? 0 : atoi(c->shard_group);
    /* hpZ's group: a number, or a node's ranks given the nodes */
    if (strcmp(c->reshard_after_forward, "node") == 0) {
        if (nodes < 1 || world % nodes)
            return ZT_FAIL(err, ZT_ERR_INVALID, "--reshard-after-forward node needs --nodes M dividing --world");
        j->secondary = world / nodes;
    } else if (strcmp(c->reshard_after_forward, "none") != 0) {
        j->secondary = atoi(c->reshard_after_forward);
    }
    j->async_save = c->async_save;
    /* quantized gradients reduce by hops over the nodes, as zt-train does on equal nodes */
    if (j->in.quant_grads_bits && nodes > 1 && world % nodes == 0) j->in.grad_nodes = nodes;
    return ZT_OK;
}

void zt_plan_job_free(zt_plan_job *j) {
    free(j->spec);
    j->spec = NULL;
}

zt_status zt_plan_job_retarget(zt_plan_job *j, zt_train_config *c, int world, int nodes, zt_error *err) {
    zt_model_settings s;
    ZT_TRY(zt_train_config_model(c, zt_train_data_vocab(c), &s, err));
    ZT_TRY(j->family->resolve(&s, err));
    j->model.s = s;
    j->model.seq_parallel = c->seq_parallel;
    zt_plan_job_levers(&j->in, c, j->spec);
    j->secondary = strcmp(c->reshard_after_forward, "node") == 0 ? (nodes > 0 ? world / nodes : world)
                   : strcmp(c->reshard_after_forward, "none") == 0 ? 0
                                                                   : atoi(c->reshard_after_forward);
    j->in.grad_nodes = j->in.quant_grads_bits && nodes > 1 && world % nodes == 0 ? nodes : 0;
    return ZT_OK;
}
