/* The memory planner's engine half (zt_plan.h): the engine's buffers at
 * the moments the model's walk names, as shard/gather.c, shard/reduce.c,
 * optim/step.c and shard/offload_step.c allocate them. */
#include "zt_plan.h"

#include <stdlib.h>
#include <string.h>

#include "zt_optim_engine.h"
#include "zt_quant.h"
#include "zt_schedule.h"
#include "zt_wire.h"

static size_t padded(const zt_plan_sim *S, int u) { return S->in.spec->units[u].padded_numel; }

/* Quantized weights: one rank's part of unit u as codes (shard/gather.c). */
static size_t wire_part(const zt_plan_sim *S, int u) {
    zt_wire w = {S->in.dtype, S->in.quant_weights_bits, S->in.quant_block};
    return zt_wire_bytes(&w, S->in.spec->units[u].shard_numel);
}

/* The part of unit u whose optimizer state this rank keeps (none when frozen). */
static size_t owned(const zt_plan_sim *S, int u) {
    if (S->in.spec->units[u].frozen) return 0;
    return S->in.stage == 0 ? padded(S, u) : S->in.spec->units[u].shard_numel;
}

static size_t total(const zt_plan_moment *m) {
    size_t s = 0;
    for (int i = 0; i < ZT_NUM_CATEGORIES; i++) s += m->c[i];
    return s;
}

/* The schedule's knobs, as the engine's (shard/schedule.c decides for both). */
static zt_sched_knobs knobs(const zt_plan_sim *S) {
    zt_sched_knobs k = {S->in.stage, S->in.prefetch, S->in.persist_threshold, S->in.max_live_params,
                        S->in.max_reuse_distance};
    return k;
}

/* Is unit u all-gathered just in time (stage 3, not persistent)? */
static int on_demand(const zt_plan_sim *S, int u) {
    zt_sched_knobs k = knobs(S);
    return zt_sched_on_demand(&S->in.spec->units[u], &k);
}

/* Where the replayed pass stands, as the engine's look-ahead. */
static zt_sched_ahead ahead(const zt_plan_sim *S) {
    zt_sched_ahead a = {S->order, S->n, S->pos, S->next, S->next ? S->next_n : 0};
    return a;
}

/* The engine settings the closed form reads. */
static zt_engine_config state_settings(const zt_plan_input *in) {
    zt_engine_config c;
    memset(&c, 0, sizeof c);
    c.stage = in->stage;
    c.dtype = in->dtype;
    c.offload = in->offload;
    c.offload_params = in->offload_params;
    c.nvme_optimizer = in->nvme_optimizer;
    c.nvme_params = in->nvme_params;
    c.nvme.block_bytes = in->nvme_block_bytes;
    c.nvme.buffers = in->nvme_buffers;
    c.persist_threshold = in->persist_threshold;
    c.optimizer = in->optimizer;
    c.adafactor_beta1 = in->adafactor_beta1;
    c.master_none = in->master_none;
    c.state_bf16 = in->state_bf16;
    c.quant_grads_bits = in->quant_grads_bits;
    c.quant_feedback = in->quant_feedback;
    c.feedback_dtype = in->feedback_dtype;
    return c;
}

/* The persistent state's closed form, once per plan: every moment's base. */
static zt_state_bytes state_bytes(const zt_plan_sim *S) {
    if (S->state_ready) return S->state;
    zt_engine_config c = state_settings(&S->in);
    return zt_engine_state_bytes(S->in.spec, &c, S->in.rank);
}

zt_plan_moment zt_plan_base(const zt_plan_sim *S) {
    zt_state_bytes sb = state_bytes(S);
    zt_plan_moment m;
    memset(&m, 0, sizeof m);
    m.c[ZT_CAT_PARAMS] = sb.params;
    m.c[ZT_CAT_GRADS] = sb.grads;
    m.c[ZT_CAT_MASTER_PARAMS] = sb.master_params;
    m.c[ZT_CAT_OPTIMIZER] = sb.optimizer;
    return m;
}

/* Every moment also holds the error feedback and the gathered units' codes
 * (comm_buffers), which the walk does not name. */
void zt_plan_consider(zt_plan_sim *S, const zt_plan_moment *given) {
    zt_plan_moment with = *given, *m = &with;
    m->c[ZT_CAT_COMM_BUFFERS] += S->feedback + S->wire_live;
    size_t t = total(m);
    if (!S->best || t > S->best_total) {
        memcpy(S->best_c, m->c, sizeof S->best_c);
        S->best_total = t;
        S->best = m->name;
    }
    for (int c = 0; c < ZT_NUM_CATEGORIES; c++)
        if (m->c[c] > S->cat_peak[c]) S->cat_peak[c] = m->c[c];
}

void zt_plan_begin_pass(zt_plan_sim *S, const int *order, int n, const int *next, int next_n) {
    S->order = order;
    S->n = n;
    S->next = next;
    S->next_n = next ? next_n : 0;
    S->pos = 0;
}

static void gather(zt_plan_sim *S, int u) {
    S->phase[u] = ZT_UNIT_GATHERED;
    S->live += padded(S, u);
    if (S->in.quant_weights_bits) S->wire_live += wire_part(S, u) * (size_t)S->in.world;
    size_t shard = S->in.spec->units[u].shard_numel * zt_dtype_size(S->in.dtype);
    if (S->in.offload_params) S->shard_copies_in += shard;
    S->gathered_shards += S->in.quant_weights_bits ? wire_part(S, u) : shard;
    if (S->in.nvme_params) S->shard_reads += zt_nvme_round(shard);
}

/* The prefetches the engine starts after the use just replayed
 * (zt_sched_prefetch). */
static void prefetch_next(zt_plan_sim *S) {
    zt_sched_knobs k = knobs(S);
    zt_sched_ahead a = ahead(S);
    unsigned char sharded[ZT_MAX_UNITS]; /* [nunits] */
    int picks[ZT_MAX_UNITS];              /* [min(prefetch, nunits)] */
    for (int u = 0; u < S->in.spec->nunits; u++) sharded[u] = S->phase[u] == ZT_UNIT_SHARDED;
    int n = zt_sched_prefetch(S->in.spec, &k, &a, sharded, S->live, picks);
    for (int i = 0; i < n; i++) gather(S, picks[i]);
}

void zt_plan_use(zt_plan_sim *S, int u) {
    if (S->in.stage != 3) return;
    if (on_demand(S, u)) {
        if (S->phase[u] == ZT_UNIT_SHARDED) gather(S, u); /* on demand, even over the cap */
        S->phase[u] = ZT_UNIT_IN_USE;
    }
    S->pos++;
    prefetch_next(S);
}

/* hpZ (shard/gather.c): a unit's secondary part, 1/G' of it, lives from
 * its forward release to its backward release. */
static void track_secondary(zt_plan_sim *S, int u, int kept) {
    if (S->in.secondary <= 1) return;
    size_t bytes = S->in.quant_weights_bits ? wire_part(S, u) * (size_t)(S->in.world / S->in.secondary)
                                            : padded(S, u) / (size_t)S->in.secondary * zt_dtype_size(S->in.dtype);
    int forward = S->next != NULL, used_next = 0;
    for (int i = 0; forward && i < S->next_n; i++) used_next |= S->next[i] == u;
    if (forward && !kept && used_next && !S->has_secondary[u]) {
        S->has_secondary[u] = 1;
        S->secondary_live += bytes;
    } else if (!forward && S->has_secondary[u]) {
        S->has_secondary[u] = 0;
        S->secondary_live -= bytes;
    }
}

void zt_plan_release(zt_plan_sim *S, int u) {
    if (!on_demand(S, u)) return;
    zt_sched_knobs k = knobs(S);
    zt_sched_ahead a = ahead(S);
    int kept = zt_sched_keep(S->in.spec, &k, &a, u, S->seen);
    track_secondary(S, u, kept);
    if (kept) {
        S->phase[u] = ZT_UNIT_GATHERED; /* kept: it counts toward the cap */
        return;
    }
    S->phase[u] = ZT_UNIT_SHARDED;
    S->live -= padded(S, u);
    if (S->in.quant_weights_bits) S->wire_live -= wire_part(S, u) * (size_t)S->in.world;
}

size_t zt_plan_gathered(const zt_plan_sim *S) { return S->live * zt_dtype_size(S->in.dtype) + S->secondary_live; }

size_t zt_plan_view_bytes(const zt_plan_sim *S, int u) {
    return S->in.compute_dtype != S->in.dtype ? padded(S, u) * 4 : 0;
}

size_t zt_plan_grad32_bytes(const zt_plan_sim *S, int u) { return padded(S, u) * 4; }

void zt_plan_open_grads(const zt_plan_sim *S, zt_plan_moment *m, int u) {
    if (S->in.spec->units[u].frozen) m->c[ZT_CAT_WORKSPACE] += padded(S, u) * 4; /* shard/reduce.c: the scratch */
    else zt_plan_add_waiting(S, m, zt_plan_grad32_bytes(S, u));
}

void zt_plan_add_waiting(const zt_plan_sim *S, zt_plan_moment *m, size_t bytes) {
    if (S->waits) m->c[S->wait_cat] += bytes;
}

size_t zt_plan_waiting(const zt_plan_sim *S) { return S->waiting; }
size_t zt_plan_in_flight(const zt_plan_sim *S) { return S->in_flight; }
zt_dtype zt_plan_compute_dtype(const zt_plan_sim *S) { return S->in.compute_dtype; }
void zt_plan_set_kept(zt_plan_sim *S, size_t bytes) { S->activations_kept = bytes; }

/* Fp32 words holding `bytes` (shard/unit_mem.c's raw buffers). */
static size_t words(size_t bytes) { return (bytes + 3) / 4 * 4; }

/* A bucket of n values' buffers (shard/reduce.c): send and receive (the
 * reduce dtype, or N chunks of codes: by hops L chunks of K x n / N values
 * then the node's fp32 sums and K chunks of codes twice), the fp32 sums. */
static size_t bucket_buffers(const zt_plan_sim *S, size_t n) {
    size_t N = (size_t)S->in.world, count = n / N;
    zt_wire w = {S->in.reduce_dtype, S->in.quant_grads_bits, S->in.quant_block};
    if (!w.bits) return 2 * n * zt_dtype_size(w.dtype) + count * 4;
    size_t K = S->in.grad_nodes > 1 ? (size_t)S->in.grad_nodes : 1, L = N / K;
    if (K == 1) return 2 * words(zt_wire_bytes(&w, count) * N) + count * 4;
    return 2 * words(zt_wire_bytes(&w, K * count) * L) + K * count * 4 + 2 * words(zt_wire_bytes(&w, count) * K) +
           count * 4;
}

/* The bucket in flight is freed first, then the new one's buffers are
 * allocated while its units' full gradients are still there. */
void zt_plan_flush(zt_plan_sim *S, const zt_plan_moment *m, const char *name) {
    if (S->filling_units == 0) return;
    size_t bufs = bucket_buffers(S, S->filling_numel);
    zt_plan_moment F = *m;
    F.name = name;
    F.c[ZT_CAT_COMM_BUFFERS] += bufs;
    zt_plan_add_waiting(S, &F, S->waiting);
    zt_plan_consider(S, &F);
    S->in_flight = S->in.overlap_comm ? bufs : 0; /* without overlap it completed on the spot */
    S->filling_numel = 0;
    S->filling_units = 0;
    S->waiting = 0;
}

/* Whole units join the bucket, so it can exceed its size. */
void zt_plan_grads_ready(zt_plan_sim *S, int u, const zt_plan_moment *m, const char *name) {
    if (S->in.spec->units[u].frozen) return; /* its scratch is dropped, never reduced */
    S->filling_numel += padded(S, u);
    S->filling_units++;
    if (S->waits) S->waiting += padded(S, u) * 4;
    if (S->filling_numel * 4 >= S->bucket || S->filling_units == S->cap) zt_plan_flush(S, m, name);
}

/* Does this rank transform matrix m (its owner; every rank at stage 0 or
 * alone)? Then *ws: its scratch's bytes; *comm: the gathered copy's (none
 * in place). */
static int transforms(const zt_plan_sim *S, const zt_matrix *m, size_t *ws, size_t *comm) {
    int alone = S->in.stage == 0 || S->in.world == 1;
    if (!alone && m->owner != S->in.rank) return 0;
    *ws = 4 * zt_matrix_scratch(zt_optim_or_default(S->in.optimizer), m);
    *comm = alone ? 0 : 4 * m->rows * m->cols;
    return 1;
}

/* A matrix hook's step of each unit (optim/matrix_hook.c), on top of the
 * optimizer step's moment O: the unit's update [owned] (workspace), and
 * for each matrix this rank transforms its scratch (workspace) and, past
 * stage 0, the matrix gathered whole (comm_buffers), one at a time (only
 * unit `only` when >= 0). */
static void matrix_moments(zt_plan_sim *S, const zt_plan_moment *O, int only, const zt_matrix *ms, int n) {
    size_t ws, comm;
    for (int u = 0; u < S->in.spec->nunits; u++) {
        if (owned(S, u) == 0 || (only >= 0 && u != only)) continue;
        zt_plan_moment M = *O;
        M.name = "optimizer step (matrices)";
        M.c[ZT_CAT_WORKSPACE] += 4 * owned(S, u);
        zt_plan_consider(S, &M);
        for (int i = 0; i < n; i++) {
            if (ms[i].unit != u || !transforms(S, &ms[i], &ws, &comm)) continue;
            zt_plan_moment W = M;
            W.c[ZT_CAT_WORKSPACE] += ws;
            W.c[ZT_CAT_COMM_BUFFERS] += comm;
            zt_plan_consider(S, &W);
        }
    }
}

/* The matrices of the planned optimizer's hook and their owners into *ms
 * (malloc'd; NULL with *n = 0 when it has none or memory ran out). */
static zt_matrix *plan_matrices(const zt_plan_sim *S, int *n) {
    const zt_optim *opt = zt_optim_or_default(S->in.optimizer);
    *n = zt_optim_matrices(opt, S->in.spec, S->in.world, NULL);
    zt_matrix *ms = *n > 0 ? calloc((size_t)*n, sizeof *ms) : NULL;
    if (!ms || zt_optim_matrices(opt, S->in.spec, S->in.world, ms) < 0) {
        free(ms);
        *n = 0;
        return NULL;
    }
    return ms;
}

/* Bytes a matrix hook's host step (offload) adds while it runs on unit u
 * (ms[n]: the hook's matrices; none: 0): the update [owned] and, at most,
 * one matrix's scratch and gathered copy. */
static size_t matrix_host_step_bytes(const zt_plan_sim *S, int u, const zt_matrix *ms, int n) {
    size_t most = 0, ws, comm;
    if (!ms || owned(S, u) == 0) return 0;
    for (int i = 0; i < n; i++)
        if (ms[i].unit == u && transforms(S, &ms[i], &ws, &comm) && ws + comm > most) most = ws + comm;
    return 4 * owned(S, u) + most;
}

/* Low-memory state (optim/lowmem.c): during unit u's step its owned params
 * (no master) and its slots (bf16 state) have fp32 copies in workspace,
 * beside what the step itself takes (a matrix hook's on top). */
static void low_memory_moments(zt_plan_sim *S, const zt_plan_moment *O, const zt_matrix *ms, int nms) {
    const zt_optim *opt = zt_optim_or_default(S->in.optimizer);
    zt_engine_config c = state_settings(&S->in);
    for (int u = 0; u < S->in.spec->nunits; u++) {
        size_t n = owned(S, u), lo = S->in.stage == 0 ? 0 : (size_t)S->in.rank * S->in.spec->units[u].shard_numel;
        if (n == 0) continue;
        zt_plan_moment M = *O;
        M.name = "optimizer step (fp32 copies)";
        if (S->in.master_none) M.c[ZT_CAT_WORKSPACE] += 4 * n;
        for (int i = 0; S->in.state_bf16 && i < opt->nslots; i++)
            M.c[ZT_CAT_WORKSPACE] += 4 * opt->slot_words(&c, i, &S->in.spec->units[u], lo, lo + n);
        zt_plan_consider(S, &M);
        if (ms) matrix_moments(S, &M, u, ms, nms);
    }
}

/* A GPU's matrix hook without offload (optim/matrix_hook.c): per matrix,
 * this rank's slice of it and, on its owner, the whole matrix have
 * host-pool copies for the host gather and scatter, one matrix at a time. */
static size_t matrix_staging_bytes(const zt_plan_sim *S) {
    if (S->in.stage == 0 || S->in.world == 1) return 0; /* each rank transforms in place */
    int n;
    zt_matrix *ms = plan_matrices(S, &n);
    size_t most = 0, a, b;
    for (int i = 0; i < n; i++) {
        const zt_matrix *m = &ms[i];
        zt_matrix_slice(m, S->in.spec->units[m->unit].shard_numel, S->in.rank, &a, &b);
        size_t bytes = 4 * (b - a) + (m->owner == S->in.rank ? 4 * m->rows * m->cols : 0);
        if (bytes > most) most = bytes;
    }
    free(ms);
    return most;
}

/* The optimizer step: one chunk of widened 16-bit gradients
 * (zt_engine_optimizer_chunk: sub_group_size elements, or
 * ZT_OPTIMIZER_CHUNK, or the largest owned range if that is smaller). */
static void optimizer_moment(zt_plan_sim *S) {
    zt_plan_moment O = zt_plan_base(S);
    O.name = "optimizer step";
    const zt_optim *opt = zt_optim_or_default(S->in.optimizer);
    size_t most = 0, chunk = S->in.sub_group_size ? S->in.sub_group_size : ZT_OPTIMIZER_CHUNK;
    if (opt->chunk_align > 1) chunk = (chunk + opt->chunk_align - 1) / opt->chunk_align * opt->chunk_align;
    for (int u = 0; u < S->in.spec->nunits; u++)
        if (owned(S, u) > most) most = owned(S, u);
    if (most < chunk) chunk = most;
    if (S->in.dtype != ZT_FP32) O.c[ZT_CAT_WORKSPACE] = 4 * chunk; /* widened gradients */
    if (opt->update_workspace && !S->in.offload) { /* its update, and one unit's scratch at a time */
        size_t scratch = 0;
        for (int u = 0; u < S->in.spec->nunits; u++) {
            const zt_unit_spec *usp = &S->in.spec->units[u];
            size_t lo = S->in.stage == 0 ? 0 : (size_t)S->in.rank * usp->shard_numel, n = owned(S, u);
            size_t k = n && opt->scratch_numel ? opt->scratch_numel(usp, lo, lo + n, chunk) : 0;
            if (k > scratch) scratch = k;
        }
        O.c[ZT_CAT_WORKSPACE] += 4 * chunk + 4 * scratch;
    }
    zt_plan_consider(S, &O);
    int n;
    zt_matrix *ms = S->in.offload ? NULL : plan_matrices(S, &n);
    if ((S->in.master_none || S->in.state_bf16) && !S->in.offload)
        low_memory_moments(S, &O, ms, n); /* each unit's fp32 copies, and its matrices on top */
    else if (ms) matrix_moments(S, &O, -1, ms, n);
    free(ms);
}

/* Offload's host pool: master + m + v of the owned part, plus the transfer
 * buffers at their fullest (shard/offload_step.c). After backward every
 * unit's reduced gradients wait on the host as sent (g bytes each: fp32, or
 * 16-bit widened later); the step then gives unit u an fp32 copy (16-bit),
 * takes its output buffer while u-1's copy to the device may still be
 * reading its own, and only then frees u's gradients. Under the delayed
 * update the previous step's fp32 gradients are still with its CPU Adam
 * when this step's have all arrived. */
static size_t host_bytes(const zt_plan_sim *S) {
    const zt_model_spec *spec = S->in.spec;
    zt_state_bytes sb = state_bytes(S);
    size_t d = zt_dtype_size(S->in.dtype), g = d, all = 0;
    for (int u = 0; u < spec->nunits; u++) all += owned(S, u);
    size_t transfer = all * g, waiting = all, prev = 0;
    int nms;
    zt_matrix *ms = plan_matrices(S, &nms); /* a matrix hook's (Muon's), or none */
    for (int u = 0; u < spec->nunits; u++) {
        size_t o = owned(S, u);
        if (o == 0) continue; /* frozen: the engine skips it, its slots stay as they were */
        /* u's output slot; none where its shard is updated in place (offload_params) */
        size_t slot = S->in.offload_params && on_demand(S, u) ? 0 : o;
        /* delayed: the copies of the master out to the device, before this
         * step's gradients go to the CPU Adam */
        size_t at_u = S->in.offload_delay ? all * g + (prev + slot) * d : (waiting - o) * g + 4 * o + (prev + slot) * d;
        at_u += matrix_host_step_bytes(S, u, ms, nms); /* its host step's exchange (Muon) */
        if (at_u > transfer) transfer = at_u;
        /* 16-bit: u's gradients widened while they still wait as sent (the
         * peak where no output slot is taken after it) */
        if (!S->in.offload_delay && g != 4 && waiting * g + 4 * o + prev * d > transfer)
            transfer = waiting * g + 4 * o + prev * d;
        waiting -= o;
        if (slot) prev = slot;
    }
    free(ms);
    if (S->in.offload_delay && all * (4 + g) > transfer) transfer = all * (4 + g);
    zt_engine_config c = state_settings(&S->in);
    size_t stage, buffers = zt_nvme_buffer_bytes(spec, &c, &stage); /* 0 without the NVMe tier */
    return sb.host_master_params + sb.host_optimizer + sb.host_params + transfer + buffers + stage;
}

/* The NVMe tier's optimizer stream per step (shard/nvme_state.c): every
 * trained unit's owned range in chunks of block_bytes / 4 elements, each
 * array of each chunk one aligned request in, one out. */
static size_t nvme_bytes_per_step(const zt_plan_sim *S) {
    size_t chunk = S->in.nvme_block_bytes / 4, d = zt_dtype_size(S->in.dtype), total = 0;
    size_t arrays = 1 + (size_t)zt_optim_or_default(S->in.optimizer)->nslots; /* master and the slots */
    for (int u = 0; S->in.nvme_optimizer && u < S->in.spec->nunits; u++)
        for (size_t lo = 0; lo < owned(S, u); lo += chunk) {
            size_t n = owned(S, u) - lo < chunk ? owned(S, u) - lo : chunk;
            total += arrays * zt_nvme_round(n * 4) + (S->in.nvme_params && on_demand(S, u) ? zt_nvme_round(n * d) : 0);
        }
    return total;
}

void zt_plan_compute(const zt_plan_input *in, zt_plan_walk_fn walk, void *walk_arg, zt_plan *out) {
    memset(out, 0, sizeof *out);
    zt_plan_sim S;
    memset(&S, 0, sizeof S);
    S.in = *in;
    /* As zt-train resolves it, on the laid-out units: DeepSpeed's knob
     * counts parameters, ours units. */
    if (in->prefetch_params > 0 && in->spec->largest_unit_numel > 0)
        S.in.prefetch = (int)(in->prefetch_params / (long long)in->spec->largest_unit_numel);
    S.bucket = in->bucket_bytes ? in->bucket_bytes : 1;
    S.cap = (int)(sizeof ((zt_bucket *)0)->units / sizeof ((zt_bucket *)0)->units[0]);
    /* A unit's full-size fp32 gradients (grad32) live from its backward until
     * its bucket is packed: comm buffers at stages 2-3, a workspace at stages
     * 0-1 in a 16-bit dtype; at stages 0-1 in fp32 they are the persistent
     * grads themselves. */
    S.state = state_bytes(&S);
    S.state_ready = 1;
    S.feedback = S.state.feedback;
    S.waits = in->stage >= 2 || in->dtype != ZT_FP32;
    S.wait_cat = in->stage >= 2 ? ZT_CAT_COMM_BUFFERS : ZT_CAT_WORKSPACE;
    walk(walk_arg, &S);
    S.wire_live = 0; /* the step frees every gathered unit first (zt_engine_end_passes) */
    optimizer_moment(&S);
    zt_plan_moment base = zt_plan_base(&S);
    memcpy(out->by_category, S.best_c, sizeof out->by_category);
    memcpy(out->peak_by_category, S.cat_peak, sizeof out->peak_by_category);
    out->peak_bytes = S.best_total;
    out->peak_moment = S.best;
    for (int c = ZT_CAT_PARAMS; c <= ZT_CAT_OPTIMIZER; c++) out->persistent_bytes += base.c[c];
    out->feedback_bytes = S.feedback;
    out->activations_kept_bytes = S.activations_kept;
    out->gathered_shard_bytes_per_micro = S.gathered_shards;
    if (!in->offload && in->gpu) out->host_bytes = matrix_staging_bytes(&S);
    if (in->offload) {
        out->host_bytes = host_bytes(&S);
        /* shard/offload_step.c: each owned range out as sent, back in the
         * params' dtype unless it is updated in place (offload_params); such
         * shards come in at every gather instead (shard/gather.c). */
        size_t all = 0, back = 0, d = zt_dtype_size(in->dtype);
        for (int u = 0; u < in->spec->nunits; u++) {
            all += owned(&S, u);
            if (!(in->offload_params && on_demand(&S, u))) back += owned(&S, u);
        }
        out->transfer_bytes[ZT_LINK_D2H] = all * d;
        out->transfer_bytes[ZT_LINK_H2D] = back * d;
        out->shard_bytes_per_micro = S.shard_copies_in;
        zt_engine_config c = state_settings(&S.in);
        size_t stage;
        out->nvme_buffer_bytes = zt_nvme_buffer_bytes(in->spec, &c, &stage) + stage;
        out->nvme_file_bytes = state_bytes(&S).nvme;
        out->nvme_read_bytes = out->nvme_write_bytes = nvme_bytes_per_step(&S);
        out->nvme_shard_read_bytes_per_micro = S.shard_reads;
    }
}
