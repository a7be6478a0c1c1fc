/* The step-time model (plan_time.h): one rank's work per step priced at a
 * profile's rates, then laid on the schedule's critical path. */
#include <math.h>
#include <string.h>

#include "plan_time.h"

static int dtype_row(zt_dtype d) { return d == ZT_BF16 ? 1 : d == ZT_FP16 ? 2 : 0; }

/* One GEMM call of n x k times k x m, priced by its shape class. */
static double gemm_s(const zt_time_profile *p, zt_dtype d, double n, double k, double m) {
    double f = 2 * n * k * m;
    int c = f < ZT_GEMM_SMALL_BELOW ? ZT_GEMM_SMALL : f < ZT_GEMM_LARGE_FROM ? ZT_GEMM_MEDIUM : ZT_GEMM_LARGE;
    return p->kernel_overhead_s + f / p->gemm_flops[dtype_row(d)][c];
}

/* A block's linear maps as (in, out) pairs: GPT's qkv, projection and two
 * MLP matrices; llama's q|k|v (grouped), o and the gated MLP's three. */
typedef struct {
    int n;
    double in[6], out[6];
} block_gemms;

static block_gemms gemms_of(const zt_time_input *t) {
    const zt_model_settings *s = t->model;
    double C = s->d_model, F = s->ffn_dim > 0 ? s->ffn_dim : 4.0 * C, hs = C / s->heads;
    double kv = s->kv_heads > 0 ? s->kv_heads : s->heads;
    block_gemms g = {0, {0}, {0}};
    double qkv = t->gated_mlp ? (s->heads + 2 * kv) * hs : 3 * C;
    const double in[] = {C, C, C, F, C}, out[] = {qkv, C, F, C, F};
    g.n = t->gated_mlp ? 5 : 4;
    for (int i = 0; i < g.n; i++) g.in[i] = in[i], g.out[i] = out[i];
    return g;
}

/* Forward of one block for N tokens of this rank: its GEMMs, attention
 * (NH / P heads over the whole sequence under sequence parallelism) and
 * pointwise kernels (norms, activation, residuals: about 12 C + 3 F
 * elements moved per token). part: 1 GEMMs, 2 attention, 4 pointwise. */
static double block_fwd_s(const zt_time_input *t, const zt_time_profile *p, double N, int part) {
    const zt_model_settings *s = t->model;
    double C = s->d_model, F = s->ffn_dim > 0 ? s->ffn_dim : 4.0 * C, T = s->seq_len, B = s->micro_batch;
    double P = t->seq_parallel > 1 ? t->seq_parallel : 1, act = zt_dtype_size(t->dtype), sec = 0;
    if (part & 1) {
        block_gemms g = gemms_of(t);
        for (int i = 0; i < g.n; i++) sec += gemm_s(p, t->dtype, N, g.in[i], g.out[i]);
    }
    if (part & 2) sec += 3 * p->kernel_overhead_s + 4 * B * T * T * C / P / p->attn_flops[s->attention_fused][0];
    if (part & 4) sec += 6 * p->kernel_overhead_s + N * (12 * C + 3 * F) * act / (p->pointwise_gbs * 1e9);
    return sec;
}

static double block_bwd_s(const zt_time_input *t, const zt_time_profile *p, double N) {
    const zt_model_settings *s = t->model;
    double C = s->d_model, F = s->ffn_dim > 0 ? s->ffn_dim : 4.0 * C, T = s->seq_len, B = s->micro_batch;
    double P = t->seq_parallel > 1 ? t->seq_parallel : 1, act = zt_dtype_size(t->dtype), sec = 0;
    block_gemms g = gemms_of(t);
    for (int i = 0; i < g.n; i++) sec += 2 * gemm_s(p, t->dtype, N, g.in[i], g.out[i]); /* dinput, dweight */
    sec += 4 * p->kernel_overhead_s + 8 * B * T * T * C / P / p->attn_flops[s->attention_fused][1];
    sec += 10 * p->kernel_overhead_s + 2 * N * (12 * C + 3 * F) * act / (p->pointwise_gbs * 1e9);
    return sec;
}

/* What a block replays before its backward under the policy. */
static double replay_s(const zt_time_input *t, const zt_time_profile *p, double N, int block) {
    const zt_recompute_policy *r = &t->model->recompute;
    switch (r->kind) {
    case ZT_RECOMPUTE_FULL: return block_fwd_s(t, p, N, 7);
    case ZT_RECOMPUTE_SELECTIVE: return block_fwd_s(t, p, N, 6); /* norms, attention, activation: not the GEMMs */
    case ZT_RECOMPUTE_EVERY: return block % (r->every > 0 ? r->every : 1) == 0 ? block_fwd_s(t, p, N, 7) : 0;
    default: return 0;
    }
}

/* Embedding, final norm, LM head and cross-entropy over the vocabulary. */
static double head_s(const zt_time_input *t, const zt_time_profile *p, double N) {
    double C = t->model->d_model, V = t->model->vocab;
    double gemm = gemm_s(p, t->dtype, N, C, V);
    double pw = N * (4 * C + 5 * V * 4) / (p->pointwise_gbs * 1e9) + 8 * p->kernel_overhead_s;
    return 3 * gemm + pw;
}

/* Ring collectives over g ranks on link class l: all-gather of a shard of
 * `shard` bytes, reduce-scatter and all-reduce of `total` bytes. */
static double allgather_s(const zt_time_profile *p, int l, double g, double shard, double calls) {
    return g > 1 ? calls * p->coll_latency_s[l] + (g - 1) * shard / (p->coll_gbs[l] * 1e9) : 0;
}
static double reduce_scatter_s(const zt_time_profile *p, int l, double g, double total, double calls) {
    return g > 1 ? calls * p->coll_latency_s[l] + (g - 1) / g * total / (p->coll_gbs[l] * 1e9) : 0;
}

typedef struct {
    double hidden, exposed; /* per micro-batch: behind compute where the schedule allows, on the path */
    double step;            /* once per step, on the path */
} comm_parts;

/* The group the parameters are sharded over, and its link class. */
static int group_of(const zt_time_input *t, int *link) {
    int G = t->shard_group > 0 && t->shard_group < t->world && t->world % t->shard_group == 0 ? t->shard_group
                                                                                              : t->world;
    int per_node = t->nodes > 1 && t->world % t->nodes == 0 ? t->world / t->nodes : t->world;
    *link = G > per_node ? 1 : 0;
    return G;
}

static comm_parts comm_of(const zt_time_input *t, const zt_plan *p, const zt_model_spec *spec,
                          const zt_time_profile *prof) {
    comm_parts c = {0, 0, 0};
    int link, G = group_of(t, &link);
    double trained = 0, units = 0;
    for (int u = 0; u < spec->nunits; u++)
        if (!spec->units[u].frozen) trained += (double)spec->units[u].padded_numel, units++;
    double per = t->quant_grads_bits ? t->quant_grads_bits / 8.0 + 4.0 / (t->quant_block ? t->quant_block : 256)
                                     : zt_dtype_size(t->reduce_dtype);
    double bucket = t->bucket_bytes ? (double)t->bucket_bytes : 25e6;
    double calls = ceil(trained * per / bucket), grads = trained * per, d = zt_dtype_size(t->dtype);
    double rs = reduce_scatter_s(prof, link, G, grads, calls);
    if (t->stage == 3) {
        double gathers = 2 * units; /* each unit in forward and again in backward */
        double ag = allgather_s(prof, link, G, (double)p->gathered_shard_bytes_per_micro, gathers);
        /* the first unit's gather is not prefetched; the rest hide with prefetch */
        if (t->prefetch > 0) c.hidden += ag * (1 - 1.0 / gathers), c.exposed += ag / gathers;
        else c.exposed += ag;
    }
    if (t->stage >= 2) { /* reduce-scatter per micro-batch; the last bucket waits at the end */
        double last = rs / calls;
        if (t->overlap_comm) c.hidden += rs - last, c.exposed += last;
        else c.exposed += rs;
    } else { /* per step: reduce-scatter (+ all-gather of the sums at stage 0), then stage 1's parameters */
        c.step += rs + (t->stage == 0 ? allgather_s(prof, link, G, grads / G, calls) : 0);
    }
    if (t->stage == 1 || t->stage == 2) c.step += allgather_s(prof, link, G, trained * d / G, calls);
    if (G < t->world) /* hybrid sharding: the replicas' sum of each shard, per step */
        c.step += 2 * reduce_scatter_s(prof, 1, t->world / G, trained / G * 4, calls);
    c.step += 2 * prof->coll_latency_s[t->nodes > 1]; /* the loss's and the norm's sums */
    return c;
}

/* Sequence parallelism's all-to-alls: two per block each way, of the
 * block's qkv and output; their share that leaves the rank. */
static double exchange_s(const zt_time_input *t, const zt_time_profile *p, double N, double passes) {
    double P = t->seq_parallel;
    if (P <= 1) return 0;
    double C = t->model->d_model, bytes = N * 4 * C * zt_dtype_size(t->dtype) * (P - 1) / P;
    return passes * t->model->layers * (2 * p->coll_latency_s[0] + bytes / (p->coll_gbs[0] * 1e9));
}

/* Bytes over the host-device link at its rate (the modelled or given one;
 * on a CPU without one, a copy in memory). */
static double link_s(const zt_time_input *t, const zt_time_profile *p, double bytes, int dir) {
    double gbs = t->link_gbs[dir] > 0 ? t->link_gbs[dir] : t->gpu ? 26 : p->copy_gbs;
    return bytes / (gbs * 1e9);
}

static double optimizer_s(const zt_time_input *t, const zt_model_spec *spec, const zt_time_profile *p) {
    double owned = 0;
    for (int u = 0; u < spec->nunits; u++)
        if (!spec->units[u].frozen)
            owned += t->stage == 0 ? (double)spec->units[u].numel : (double)spec->units[u].shard_numel;
    return owned / (t->offload ? p->adam_host_eps : p->adam_device_eps) + 4 * p->kernel_overhead_s * spec->nunits;
}

static void compute_of(const zt_time_input *t, const zt_time_profile *p, zt_time_pred *o) {
    const zt_model_settings *s = t->model;
    double P = t->seq_parallel > 1 ? t->seq_parallel : 1, N = s->micro_batch * ceil(s->seq_len / P);
    double fwd = head_s(t, p, N) / 3, bwd = head_s(t, p, N) * 2 / 3, replay = 0;
    for (int b = 0; b < s->layers; b++) {
        fwd += block_fwd_s(t, p, N, 7);
        bwd += block_bwd_s(t, p, N);
        replay += replay_s(t, p, N, b);
    }
    double passes = 2 + (s->recompute.kind != ZT_RECOMPUTE_NONE);
    double sp = exchange_s(t, p, N, passes);
    o->compute_s = (fwd + bwd + replay + sp) * t->grad_accum;
    o->recompute_s = replay * t->grad_accum;
    double C = s->d_model, V = s->vocab;
    block_gemms g = gemms_of(t);
    double per_block = 0;
    for (int i = 0; i < g.n; i++) per_block += 2 * N * g.in[i] * g.out[i];
    per_block += 4 * s->micro_batch * s->seq_len * s->seq_len * C / P;
    o->flops = t->grad_accum * (3 * (s->layers * per_block + 2 * N * C * V) +
                                (o->recompute_s > 0 ? s->layers * per_block : 0));
}

void zt_time_predict(const zt_time_input *t, const zt_plan *p, const zt_model_spec *spec,
                     const zt_time_profile *prof, zt_time_pred *o) {
    memset(o, 0, sizeof *o);
    compute_of(t, prof, o);
    double A = t->grad_accum, micro_compute = o->compute_s / A;
    comm_parts c = comm_of(t, p, spec, prof);
    /* Host-device traffic: activation copies and parameter shards move per
     * micro-batch behind compute; the offloaded optimizer's gradients out and
     * parameters back sit between backward and the next forward. */
    double micro_in = link_s(t, prof, t->act_offload_bytes + (double)p->shard_bytes_per_micro, 0) +
                      link_s(t, prof, t->act_offload_bytes, 1);
    double nvme_micro = (double)p->nvme_shard_read_bytes_per_micro / (prof->nvme_gbs[0] * 1e9);
    double step_io = link_s(t, prof, (double)p->transfer_bytes[0], 0) + link_s(t, prof, (double)p->transfer_bytes[1], 1) +
                     (double)p->nvme_read_bytes / (prof->nvme_gbs[0] * 1e9) +
                     (double)p->nvme_write_bytes / (prof->nvme_gbs[1] * 1e9);
    double hideable = c.hidden + micro_in + nvme_micro;
    double exposed_micro = c.exposed + fmax(0, hideable - prof->overlap * micro_compute);
    o->comm_s = A * (c.hidden + c.exposed) + c.step;
    o->transfer_s = A * (micro_in + nvme_micro) + step_io;
    o->optimizer_s = optimizer_s(t, spec, prof);
    double opt_path = o->optimizer_s + step_io;
    /* The delayed update runs the host's step beside the next step's compute. */
    if (t->offload_delay) opt_path = fmax(0, opt_path - o->compute_s);
    o->comm_exposed_s = A * (c.exposed + fmax(0, c.hidden - prof->overlap * micro_compute)) + c.step;
    o->transfer_exposed_s = A * fmax(0, micro_in + nvme_micro - fmax(0, prof->overlap * micro_compute - c.hidden)) +
                            (t->offload_delay ? 0 : step_io);
    double units = spec->nunits, passes = 2 + (t->model->recompute.kind != ZT_RECOMPUTE_NONE);
    o->step_s = o->compute_s + A * exposed_micro + c.step + opt_path + prof->step_overhead_s +
                A * passes * units * prof->unit_overhead_s;
    double P = t->seq_parallel > 1 ? t->seq_parallel : 1;
    double tokens = (double)t->world / P * t->model->micro_batch * t->model->seq_len * A;
    o->tokens_per_s = o->step_s > 0 ? tokens / o->step_s : 0;
}
