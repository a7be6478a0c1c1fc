/* zt-plan: predicts per-rank memory for a training configuration, from the
 * model family's flags (the same as zt-train's) or from a general description of a
 * GPT-shaped model (--params, --largest-unit-params with the shape flags).
 * Exit codes: 0 fits, 1 does not fit, 2 bad input. */
#include <jansson.h>
#include <mpi.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_fit.h"
#include "plan_auto_out.h"
#include "plan_calibrate.h"
#include "plan_job.h"
#include "plan_process.h"
#include "trainer.h"
#include "zt_checkpoint.h"
#include "zt_train.h"
#include "zt_train_model.h"
#include "train_config.h"
#include "zt_optim.h"

typedef struct {
    int world;
    size_t device_mem;
    double params, largest_unit_params;
    int json;
    int max_micro_batch, max_seq_len, max_layers; /* search for the largest that fits the budget */
    int no_replay;                    /* --no-replay: reserved from the closed form's band */
    int rank;                         /* --rank: whose memory (-1: the rank with the most state) */
    int nodes;                        /* --nodes: the world's nodes, for inter-node bytes (0: one) */
    size_t host_mem;                  /* --auto: host memory per node (0: not checked) */
    int top;                          /* --auto: candidates printed */
    const char *calibrate;            /* --calibrate FILE: measure this machine, write its profile */
} plan_flags;

static int take_flags(int argc, char **argv, plan_flags *pf, char **rest, int *nrest, zt_error *err) {
    *nrest = 0;
    rest[(*nrest)++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has_value = i + 1 < argc;
        if (strcmp(a, "--json") == 0) pf->json = 1;
        else if (strcmp(a, "--max-micro-batch") == 0) pf->max_micro_batch = 1;
        else if (strcmp(a, "--max-seq-len") == 0) pf->max_seq_len = 1;
        else if (strcmp(a, "--max-layers") == 0) pf->max_layers = 1;
        else if (strcmp(a, "--no-replay") == 0) pf->no_replay = 1;
        else if (strcmp(a, "--nodes") == 0) {
            char *end = NULL;
            long m = has_value ? strtol(argv[i + 1], &end, 10) : 0;
            if (!has_value || *end || m < 1 || m > 1 << 20)
                return ZT_FAIL(err, ZT_ERR_INVALID, "--nodes needs a node count in [1, 1048576]"), 0;
            pf->nodes = (int)m;
            i++;
        }
        else if (strcmp(a, "--rank") == 0) {
            char *end = NULL;
            long r = has_value ? strtol(argv[i + 1], &end, 10) : -1;
            if (!has_value || *end || r < 0 || r >= 1 << 20)
                return ZT_FAIL(err, ZT_ERR_INVALID, "--rank needs a rank in [0, 1048576)"), 0;
            pf->rank = (int)r;
            i++;
        }
        else if (strcmp(a, "--calibrate") == 0) {
            if (!has_value) return ZT_FAIL(err, ZT_ERR_INVALID, "--calibrate needs the profile file to write"), 0;
            pf->calibrate = argv[++i];
        } else if (strcmp(a, "--host-mem") == 0) {
            if (!has_value) return ZT_FAIL(err, ZT_ERR_INVALID, "--host-mem needs a size"), 0;
            if (zt_parse_size(argv[++i], &pf->host_mem, err) != ZT_OK) return 0;
        } else if (strcmp(a, "--top") == 0) {
            char *end = NULL;
            long k = has_value ? strtol(argv[i + 1], &end, 10) : 0;
            if (!has_value || *end || k < 1 || k > 64)
                return ZT_FAIL(err, ZT_ERR_INVALID, "--top needs a count in [1, 64]"), 0;
            pf->top = (int)k;
            i++;
        }
        else if (strcmp(a, "--world") == 0 || strcmp(a, "--device-mem") == 0 || strcmp(a, "--params") == 0 ||
                 strcmp(a, "--largest-unit-params") == 0) {
            if (!has_value) return ZT_FAIL(err, ZT_ERR_INVALID, "%s needs a value", a), 0;
            const char *v = argv[++i];
            char *end = NULL;
            if (strcmp(a, "--world") == 0) {
                long w = strtol(v, &end, 10);
                if (*end || w < 1 || w > 1 << 20) return ZT_FAIL(err, ZT_ERR_INVALID, "--world: '%s' is not in [1, 1048576]", v), 0;
                pf->world = (int)w;
            } else if (strcmp(a, "--device-mem") == 0) {
                if (zt_parse_size(v, &pf->device_mem, err) != ZT_OK) return 0;
            } else {
                double x = strtod(v, &end);
                if (*end || !(x > 0) || x > 1e16) return ZT_FAIL(err, ZT_ERR_INVALID, "%s: '%s' is not a positive count", a, v), 0;
                if (strcmp(a, "--params") == 0) pf->params = x;
                else pf->largest_unit_params = x;
            }
        } else rest[(*nrest)++] = argv[i];
    }
    return 1;
}

static zt_status model_units(zt_plan_job *j, zt_train_config *c, const plan_flags *pf, zt_error *err) {
    zt_plan_synth s = {pf->params, pf->largest_unit_params};
    return zt_plan_job_units(j, c, &s, err);
}

/* Bytes one rank receives per step from ranks on other nodes (each
 * collective's logical traffic, as zt-train's JSONL counts it), with the
 * world's ranks in blocks of world / nodes per node and shard groups of G
 * consecutive ranks: stage 3's all-gathers of each micro-batch, the
 * reductions (each trained unit's slices from every other group member:
 * once per micro-batch at stages 2-3, per step at 0-1; the replicas' sums
 * of them under hybrid sharding; stage 0's all-gather of the reduced
 * gradients), stages 1-2's all-gather of the new parameters, and the
 * loss's and norm's sums. */
static double inter_node_bytes(const zt_plan_job *j, const zt_plan *p, const zt_train_config *c, int world, int nodes) {
    int L = nodes > 0 && world % nodes == 0 ? world / nodes : world; /* ranks per node */
    int G = j->shard_group > 0 && j->shard_group < world && world % j->shard_group == 0 ? j->shard_group : world;
    int R = world / G;
    double other_g = G > L ? G - L : 0;                 /* group members on other nodes */
    double other_r = R - (G < L ? (L / G > 0 ? L / G : 1) : 1); /* replicas on other nodes */
    double d = zt_dtype_size(j->in.dtype), rd = zt_dtype_size(j->in.reduce_dtype), slices = 0, params = 0;
    for (int u = 0; u < j->spec->nunits; u++) {
        const zt_unit_spec *us = &j->spec->units[u];
        int full = c->stage < 3 || us->numel < j->in.persist_threshold;
        if (!us->frozen) slices += (double)us->shard_numel;
        if (full && c->stage > 0 && !us->frozen) params += (double)us->shard_numel;
    }
    double reductions = c->stage >= 2 ? c->grad_accum : 1;
    double bytes = (double)c->grad_accum * other_g * (double)p->gathered_shard_bytes_per_micro;
    /* quantized gradients: codes and a scale per block; by hops only the K - 1 other nodes' sums cross */
    double per_value = j->in.quant_grads_bits ? j->in.quant_grads_bits / 8.0 + 4.0 / j->in.quant_block : rd;
    double reduce_from = j->in.grad_nodes > 1 ? j->in.grad_nodes - 1 : other_g;
    bytes += reductions * (reduce_from * slices * per_value + other_r * slices * 4 +
                           (c->stage == 0 ? other_g * slices * d : 0));
    bytes += other_g * params * d;
    bytes += 8.0 * (world - L) + 8.0 * other_g; /* the loss over the world, the norm over the group */
    return bytes;
}

/* Smallest world size at which the peak fits (0: none up to 2^20); under
 * sequence parallelism a multiple of its group size. */
static int min_world(zt_plan_job j, int stage, size_t device_mem) {
    zt_plan p;
    int P = j.model.seq_parallel > 1 ? j.model.seq_parallel : 1, hi = 1;
    while (hi <= 1 << 20) {
        zt_plan_job_plan(&j, hi * P, stage, &p);
        if (p.peak_bytes <= device_mem) break;
        hi *= 2;
    }
    if (hi > 1 << 20) return 0;
    int lo = hi / 2 + 1;
    while (lo < hi) { /* the peak falls as ranks are added */
        int mid = lo + (hi - lo) / 2;
        zt_plan_job_plan(&j, mid * P, stage, &p);
        if (p.peak_bytes <= device_mem) hi = mid;
        else lo = mid + 1;
    }
    return hi * P;
}

/* Bytes for people: decimal GB for large sizes (as device capacities are
 * sold), binary units otherwise. */
static void gb(char *buf, size_t cap, double bytes) {
    char bin[32];
    zt_format_bytes((size_t)bytes, bin, sizeof bin);
    if (bytes >= 1e9) snprintf(buf, cap, "%.3f GB (%s)", bytes / 1e9, bin);
    else snprintf(buf, cap, "%s", bin);
}

static void print_plan_error(const zt_error *err) {
    char shown[sizeof err->msg + 256];
    zt_settings_as_flags(err->msg, shown, sizeof shown);
    fprintf(stderr, "zt-plan: error: %s\n", shown);
}

/* Options, as zt-train reads them, and zt-plan's own; 2 on bad input,
 * 0 after --help, -1 to go on. */
static int read_options(int argc, char **argv, plan_flags *pf, zt_train_config *c) {
    zt_error err = {0};
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    int nrest = 0, want_help = 0;
    zt_train_config_defaults(c);
    if (!rest || !take_flags(argc, argv, pf, rest, &nrest, &err) ||
        zt_train_config_parse(c, nrest, rest, &want_help, &err) != ZT_OK ||
        (!want_help && zt_train_config_validate(c, &err) != ZT_OK)) {
        print_plan_error(&err);
        free(rest);
        return 2;
    }
    free(rest);
    if (!want_help) return -1;
    printf("usage: zt-plan [--world N] [--nodes M] [--rank R] [--device-mem SIZE] [--json]\n"
           "               [--params N --largest-unit-params N]\n"
           "               [--max-micro-batch] [--max-seq-len] [--max-layers] [--no-replay]\n"
           "               [any zt-train option: model shape, --stage, --offload, --recompute, --dtype,\n"
           "                --prefetch, --bucket-size, --micro-batch, ...]\n"
           "Predicts per-rank device memory by category at the peak, host memory, the allocator's reserved\n"
           "bytes (by replaying init and two steps of every rank over a backend without memory; --no-replay:\n"
           "the closed form's estimate), whether it fits the smaller of --mem-limit and --device-mem less the\n"
           "process's other bytes, and for each stage the smallest world size at which it fits; with\n"
           "--max-micro-batch / --max-seq-len / --max-layers, the largest value that fits.\n"
           "Without --params the model is the --model family (default gpt) with the given flags;\n"
           "with --params, one shaped like it (embedding, blocks, head) from the totals. --rank plans that\n"
           "rank's memory (default: the rank with the most optimizer state; ranks differ only under\n"
           "adafactor, adam8bit and muon, whose state follows the parameters a rank's slices touch).\n\n");
    zt_train_config_print_help(stdout, "zt-plan (zt-train options)");
    return 0;
}


/* Does the configuration with `what` = value fit in `budget` by the closed
 * form, with the allocator's rounding? */
static int fits_with(zt_plan_job j, const zt_train_config *c, const plan_flags *pf, size_t budget, int value,
                     zt_scan_what what, zt_error *err) {
    zt_train_config v = *c;
    if (what == ZT_SCAN_SEQ_LEN) v.seq_len = value;
    else if (what == ZT_SCAN_LAYERS) v.layers = value;
    else v.micro_batch = value;
    zt_plan p;
    zt_plan_job k = j;
    k.spec = NULL;
    if (model_units(&k, &v, pf, err) != ZT_OK) {
        free(k.spec);
        return 0;
    }
    k.in.spec = k.spec;
    zt_plan_job_plan(&k, pf->world, c->stage, &p);
    int fits = p.peak_bytes + ZT_PLAN_BLOCKS_MARGIN(k.spec->nunits) <= budget;
    free(k.spec);
    return fits;
}

/* The largest value of `what` in [1, hi] that fits `budget` by the closed
 * form; 0 when even 1 does not. Allocated bytes grow with each, so a
 * bisection finds it: the replay's walk starts here. */
static int largest_fitting(zt_plan_job j, const zt_train_config *c, const plan_flags *pf, size_t budget,
                           zt_scan_what what, int hi) {
    zt_error err = {0};
    if (!fits_with(j, c, pf, budget, 1, what, &err)) return 0;
    int lo = 1; /* fits */
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (fits_with(j, c, pf, budget, mid, what, &err)) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

static zt_alloc_mode allocator_of(const zt_train_config *c) {
    zt_alloc_mode mode = ZT_ALLOC_SIMPLE;
    (void)zt_alloc_mode_parse(c->allocator, &mode); /* the options table allows no other */
    return mode;
}

/* Host-device bytes per step, [ZT_LINK_H2D], [ZT_LINK_D2H]: the engine's
 * (offload; offload_params' shards at every micro-batch's gathers) and the
 * model's, per micro-batch its kept inputs out and back
 * (--offload-activations), its tokens and targets in
 * (int32) and its per-token losses out (fp32), and the gradient norm's
 * partial sums out (a double per unit, the usual count of pieces). */
typedef struct {
    double bytes[2], gbs[2], seconds[2];
    int link_given; /* --link or --link-gbs; else PCIe 4.0's figure is assumed */
} plan_transfers;

static plan_transfers transfers_of(const zt_plan_job *j, const zt_plan *p, const zt_train_config *c) {
    plan_transfers t;
    memset(&t, 0, sizeof t);
    double BT = (double)c->micro_batch * c->seq_len, accum = c->grad_accum;
    double inputs = (double)j->family->plan_offloaded_bytes(&j->model, j->in.compute_dtype);
    t.bytes[ZT_LINK_H2D] = (double)p->transfer_bytes[ZT_LINK_H2D] +
                           accum * ((double)p->shard_bytes_per_micro + 2 * BT * 4 + inputs);
    t.bytes[ZT_LINK_D2H] = (double)p->transfer_bytes[ZT_LINK_D2H] + accum * (BT * 4 + inputs) + 8.0 * j->spec->nunits;
    zt_error err = {0};
    if (zt_train_config_link(c, t.gbs, &err) == ZT_OK && t.gbs[0] > 0) t.link_given = 1;
    else t.gbs[0] = t.gbs[1] = 26.0; /* --link pcie4 */
    for (int d = 0; d < 2; d++) t.seconds[d] = t.bytes[d] / (t.gbs[d] * 1e9);
    return t;
}

/* The NVMe tier per rank: the swap file, its host buffers (in host_bytes),
 * and per step the optimizer's reads and writes plus the shards read for
 * every micro-batch's gathers. */
static json_t *nvme_json(const zt_plan *p, const zt_train_config *c) {
    double reads = (double)p->nvme_read_bytes + (double)c->grad_accum * (double)p->nvme_shard_read_bytes_per_micro;
    return json_pack("{s:I,s:I,s:f,s:f}", "file_bytes", (json_int_t)p->nvme_file_bytes, "buffer_bytes",
                     (json_int_t)p->nvme_buffer_bytes, "read_bytes_per_step", reads, "write_bytes_per_step",
                     (double)p->nvme_write_bytes);
}

static json_t *transfers_json(const plan_transfers *t) {
    json_t *x = json_object();
    json_object_set_new(x, "h2d_bytes", json_real(t->bytes[ZT_LINK_H2D]));
    json_object_set_new(x, "d2h_bytes", json_real(t->bytes[ZT_LINK_D2H]));
    json_object_set_new(x, "h2d_gbs", json_real(t->gbs[ZT_LINK_H2D]));
    json_object_set_new(x, "d2h_gbs", json_real(t->gbs[ZT_LINK_D2H]));
    json_object_set_new(x, "h2d_s", json_real(t->seconds[ZT_LINK_H2D]));
    json_object_set_new(x, "d2h_s", json_real(t->seconds[ZT_LINK_D2H]));
    json_object_set_new(x, "link_given", json_boolean(t->link_given));
    return x;
}

/* The device reserved bytes zt-plan states: replayed (plan_replay.h) for
 * a family's model, else the closed form's figure and band. */
typedef struct {
    int replayed;
    zt_replay_result r;
    size_t bytes;
    size_t budget;          /* the cap the replay ran under (0: none) */
    int budget_unmeasured;  /* --device-mem was taken whole: no constants for the device */
    char why_not[128];      /* when not replayed */
} plan_reserved;

static zt_device device_of(const zt_train_config *c) {
    return strcmp(c->device, "cuda") == 0 ? ZT_DEVICE_CUDA : ZT_DEVICE_CPU;
}

static zt_replay_setup replay_setup(const plan_flags *pf, const zt_train_config *c, size_t budget) {
    int per = pf->nodes > 0 && pf->world % pf->nodes == 0 ? pf->world / pf->nodes : pf->world;
    zt_replay_setup w = {pf->world, per, budget, device_of(c)};
    return w;
}

/* The replay under the budget: 0, or 2 when it could not run (options
 * zt-train would refuse too, such as an NVMe tier it cannot run, or a
 * failure of this host), with the error printed. */
static int reserved_of(const zt_plan_job *j, const zt_plan *p, const plan_flags *pf, const zt_train_config *c,
                       plan_reserved *out) {
    memset(out, 0, sizeof *out);
    out->bytes = zt_plan_expected_reserved(p->peak_bytes, allocator_of(c));
    out->budget = zt_plan_device_budget(c->mem_limit, pf->device_mem, device_of(c), p->host_bytes,
                                        &out->budget_unmeasured);
    if (pf->no_replay) return snprintf(out->why_not, sizeof out->why_not, "--no-replay"), 0;
    if (pf->params > 0) return snprintf(out->why_not, sizeof out->why_not, "a model from --params has no layers to run"), 0;
    zt_replay_setup w = replay_setup(pf, c, out->budget);
    zt_error err = {0};
    zt_status st = zt_plan_replay(c, j->family, &w, &out->r, &err);
    if (st != ZT_OK) {
        print_plan_error(&err);
        return 2;
    }
    out->replayed = 1;
    out->bytes = out->r.reserved_peak;
    return 0;
}

/* Where --max-micro-batch, --max-seq-len and --max-layers look. */
static const int scan_hi[3] = {65536, 65536, 4096};

/* The largest value that fits: the closed form's, and with a replay, the
 * replay's walk from it (plan_fit.h). 2 on an error. */
static int largest_answer(zt_plan_job j, const zt_train_config *c, const plan_flags *pf, const plan_reserved *res,
                          zt_scan_what what, int *answer) {
    *answer = largest_fitting(j, c, pf, res->budget, what, scan_hi[what]);
    if (!res->replayed) return 0;
    zt_replay_setup w = replay_setup(pf, c, res->budget);
    zt_error err = {0};
    int replays = 0;
    if (zt_plan_scan(c, j.family, &w, what, *answer, scan_hi[what], answer, &replays, &err) != ZT_OK) {
        print_plan_error(&err);
        return 2;
    }
    return 0;
}

/* The OS's view of the plan (plan_process.h): this rank's process and its
 * node's ranks together, from the expected reserved bytes. */
static zt_plan_process process_of(const zt_plan *p, const plan_flags *pf, const zt_train_config *c,
                                  const plan_reserved *res) {
    zt_plan_process out;
    zt_error err = {0};
    int nodes = pf->nodes > 0 ? pf->nodes : 1;
    int local = pf->world / nodes > 0 ? pf->world / nodes : 1;
    if (zt_plan_process_predict(device_of(c), res->bytes, p->host_bytes, local, &out, &err) != ZT_OK)
        memset(&out, 0, sizeof out); /* no /proc/meminfo: nothing to say */
    out.local_ranks = local;
    return out;
}

static json_t *process_json(const zt_plan_process *q) {
    if (!q->measured) return json_pack("{s:b}", "measured", 0);
    return json_pack("{s:b,s:I,s:I,s:i,s:I,s:s,s:b,s:s}", "measured", 1, "rank_bytes", (json_int_t)q->rank_bytes,
                     "node_bytes", (json_int_t)q->node_bytes, "local_ranks", q->local_ranks, "node_limit_bytes",
                     (json_int_t)q->limit.bytes, "node_limit_source", q->limit.source ? q->limit.source : "",
                     "node_fits", q->node_fits, "constants_measured", q->measured_on);
}

static void print_process(const zt_plan_process *q) {
    if (!q->measured) {
        printf("  process total: not predicted (no measured constants for this device yet, train/plan_process.c)\n");
        return;
    }
    char a[64], b2[64], l[64];
    gb(a, sizeof a, (double)q->rank_bytes);
    gb(b2, sizeof b2, (double)q->node_bytes);
    gb(l, sizeof l, (double)q->limit.bytes);
    printf("  process total per rank (resident, the OS's view): %s; this node's %d rank(s) together (Pss): %s of "
           "%s (%s): %s\n", a, q->local_ranks, b2, l, q->limit.source ? q->limit.source : "?",
           q->node_fits ? "fits" : "DOES NOT FIT the node's memory");
}

/* The reserved figure: the replay's, or the closed form's with its band. */
static json_t *reserved_json(const plan_reserved *res, const zt_train_config *c) {
    zt_alloc_mode mode = allocator_of(c);
    json_t *o = json_object();
    json_object_set_new(o, "allocator", json_string(zt_alloc_mode_name(mode)));
    json_object_set_new(o, "bytes", json_integer((json_int_t)res->bytes));
    json_object_set_new(o, "how", json_string(res->replayed ? "replay" : "estimate"));
    json_object_set_new(o, "budget_bytes", res->budget ? json_integer((json_int_t)res->budget) : json_null());
    /* --device-mem taken whole: no constants for the bytes outside the allocator on this device */
    json_object_set_new(o, "budget_unmeasured", json_boolean(res->budget_unmeasured));
    if (!res->replayed) {
        zt_plan_band band = zt_plan_reserved_band(mode);
        json_object_set_new(o, "band", json_pack("[f, f]", band.lo, band.hi));
        json_object_set_new(o, "not_replayed", json_string(res->why_not));
        return o;
    }
    /* The replay's error as the tests hold it to (tests/mpi/zt_replay_test.py). */
    json_object_set_new(o, "band", json_pack("[f, f]", -0.01, 0.01));
    json_object_set_new(o, "rank", json_integer(res->r.rank));
    json_object_set_new(o, "allocated_peak_bytes", json_integer((json_int_t)res->r.allocated_peak));
    if (res->r.host_replayed) /* the NVMe tier's host side is its buffers, not the host tier's pool */
        json_object_set_new(o, "host_reserved_bytes", json_integer((json_int_t)res->r.host_reserved_peak));
    json_object_set_new(o, "system_allocs", json_integer((json_int_t)res->r.system_allocs));
    json_object_set_new(o, "ranks_replayed", json_integer(res->r.ranks_replayed));
    json_object_set_new(o, "seconds", json_real(res->r.seconds));
    json_object_set_new(o, "oom", json_boolean(res->r.oom));
    if (res->r.oom) json_object_set_new(o, "oom_message", json_string(res->r.oom_msg));
    return o;
}

/* largest[3]: the largest micro-batch, sequence length and layer count that fit (-1: not asked). */
static void print_json(const zt_plan_job *j, const zt_plan *p, const plan_flags *pf, const zt_train_config *c,
                       const plan_reserved *res, const int *minw, int fits, const int *largest,
                       const zt_time_pred *tp, const zt_time_profile *prof) {
    json_t *o = json_object(), *cats = json_object(), *cat_peaks = json_object(), *mw = json_object();
    for (int cc = 0; cc < ZT_NUM_CATEGORIES; cc++) {
        json_object_set_new(cats, zt_category_name(cc), json_integer((json_int_t)p->by_category[cc]));
        json_object_set_new(cat_peaks, zt_category_name(cc), json_integer((json_int_t)p->peak_by_category[cc]));
    }
    for (int s = 0; s < 4 && pf->device_mem; s++) {
        char k[12]; /* a stage number, room for any int */
        snprintf(k, sizeof k, "%d", s);
        json_object_set_new(mw, k, minw[s] ? json_integer(minw[s]) : json_null());
    }
    json_object_set_new(o, "peak_bytes", json_integer((json_int_t)p->peak_bytes));
    json_object_set_new(o, "by_category", cats);
    /* Each category at its own peak (as zt-train's summary reports it). */
    json_object_set_new(o, "peak_by_category", cat_peaks);
    json_object_set_new(o, "host_bytes", json_integer((json_int_t)p->host_bytes));
    json_object_set_new(o, "checkpoint_staging_bytes", json_integer((json_int_t)p->checkpoint_staging_bytes));
    /* --offload-activations cpu: the kept inputs' part of the host pool (its activations category) */
    json_object_set_new(o, "host_activations_bytes",
                        json_integer((json_int_t)j->family->plan_offloaded_bytes(&j->model, j->in.compute_dtype)));
    json_object_set_new(o, "expected_reserved", reserved_json(res, c));
    plan_transfers t = transfers_of(j, p, c);
    json_object_set_new(o, "transfers_per_step", transfers_json(&t));
    json_object_set_new(o, "nodes", json_integer(pf->nodes > 0 ? pf->nodes : 1));
    json_object_set_new(o, "inter_node_bytes_per_step", json_real(inter_node_bytes(j, p, c, pf->world, pf->nodes)));
    if (j->in.nvme_optimizer) json_object_set_new(o, "nvme", nvme_json(p, c));
    json_object_set_new(o, "fits", json_boolean(fits));
    json_object_set_new(o, "peak_moment", json_string(p->peak_moment));
    json_object_set_new(o, "params", json_integer((json_int_t)j->spec->total_numel));
    json_object_set_new(o, "world", json_integer(pf->world));
    json_object_set_new(o, "stage", json_integer(c->stage));
    json_object_set_new(o, "rank", json_integer(j->in.rank)); /* whose memory this is */
    json_object_set_new(o, "model_state_bytes_per_rank", json_integer((json_int_t)p->persistent_bytes));
    json_object_set_new(o, "error_feedback_bytes", json_integer((json_int_t)p->feedback_bytes));
    json_object_set_new(o, "activations_kept_bytes", json_integer((json_int_t)p->activations_kept_bytes));
    json_object_set_new(o, "device_mem", pf->device_mem ? json_integer((json_int_t)pf->device_mem) : json_null());
    json_object_set_new(o, "min_world_by_stage", mw);
    if (largest[0] >= 0) json_object_set_new(o, "max_micro_batch", json_integer(largest[0]));
    if (largest[1] >= 0) json_object_set_new(o, "max_seq_len", json_integer(largest[1]));
    if (largest[2] >= 0) json_object_set_new(o, "max_layers", json_integer(largest[2]));
    zt_plan_process q = process_of(p, pf, c, res);
    json_object_set_new(o, "process", process_json(&q));
    json_object_set_new(o, "time", zt_time_pred_json(tp, prof));
    char *text = json_dumps(o, JSON_INDENT(1));
    printf("%s\n", text);
    free(text);
    json_decref(o);
}

/* The part of the report on fitting: the verdict, its reason, each stage's smallest world. */
static void print_verdict(const zt_plan *p, const plan_flags *pf, const plan_reserved *res,
                          const zt_recompute_policy *rp, int fused, const int *minw, int fits) {
    char a[64], b2[64];
    if (res->replayed && res->budget) {
        gb(a, sizeof a, (double)res->budget);
        printf("  verdict: %s: the replay under the allocator's budget of %s %s\n", fits ? "FITS" : "DOES NOT FIT",
               a, fits ? "was never refused" : "ran out of memory");
    } else {
        gb(a, sizeof a, (double)pf->device_mem);
        gb(b2, sizeof b2, (double)p->peak_bytes);
        printf("  verdict: %s: the peak %s is %s the %s device\n", fits ? "FITS" : "DOES NOT FIT", b2,
               fits ? "within" : "above", a);
    }
    /* The reason: model state against the largest other category. */
    int top = ZT_CAT_ACTIVATIONS;
    for (int cc = ZT_CAT_ACTIVATIONS; cc < ZT_NUM_CATEGORIES; cc++)
        if (p->by_category[cc] > p->by_category[top]) top = cc;
    gb(a, sizeof a, (double)p->persistent_bytes);
    gb(b2, sizeof b2, (double)p->by_category[top]);
    printf("  reason: model state takes %s per rank; the largest other part is %s with %s%s\n", a,
           zt_category_name(top), b2,
           top != ZT_CAT_ACTIVATIONS ? ""
           : !zt_recompute_any(rp) && !fused ? " (try --attention fused, --recompute full or a smaller --micro-batch)"
           : !zt_recompute_any(rp) ? " (try --recompute full or a smaller --micro-batch)"
           : !fused ? " (try --attention fused or a smaller --micro-batch)"
                    : " (try a smaller --micro-batch)");
    for (int s = 0; s < 4; s++) {
        if (minw[s]) printf("  stage %d fits from %d rank(s)\n", s, minw[s]);
        else printf("  stage %d does not fit at any world size up to 1048576\n", s);
    }
}

/* The reserved line: replayed (where the cap refused, how), or estimated. */
static void print_reserved(const plan_reserved *res, const zt_train_config *c) {
    zt_alloc_mode mode = allocator_of(c);
    char a[64], b2[64];
    gb(a, sizeof a, (double)res->bytes);
    if (!res->replayed) {
        zt_plan_band band = zt_plan_reserved_band(mode);
        printf("  expected reserved (%s allocator, uncapped): %s; measured runs fell within %+.0f%% .. %+.0f%% of "
               "this figure (docs/memory.md); not replayed: %s\n", zt_alloc_mode_name(mode), a, 100 * band.lo,
               100 * band.hi, res->why_not);
        return;
    }
    gb(b2, sizeof b2, (double)res->budget);
    printf("  reserved (%s allocator, replayed: init and two steps of %d rank(s) in %.2f s%s%s): %s on rank %d\n",
           zt_alloc_mode_name(mode), res->r.ranks_replayed, res->r.seconds, res->budget ? ", capped at " : "",
           res->budget ? b2 : "", a, res->r.rank);
    if (res->r.oom) printf("  the cap refuses rank %d: %s\n", res->r.rank, res->r.oom_msg);
    if (res->budget_unmeasured)
        printf("  note: --device-mem is taken whole: the bytes this device's processes hold outside the allocator "
               "are not measured yet (train/plan_process.c)\n");
}

/* The optimizer's state per parameter over the whole model (its closed
 * form, unsharded): AdamW's 8, Muon's 4 on hidden matrices and 8 elsewhere,
 * half that in bf16. */
static double optimizer_bytes_per_param(const zt_plan_job *j) {
    zt_engine_config ec = {.dtype = j->in.dtype, .optimizer = j->in.optimizer, .adafactor_beta1 = j->in.adafactor_beta1,
                           .state_bf16 = j->in.state_bf16};
    const zt_optim *opt = zt_optim_or_default(j->in.optimizer);
    double bytes = 0.0;
    for (int u = 0; u < j->spec->nunits; u++) {
        const zt_unit_spec *us = &j->spec->units[u];
        if (!us->frozen) bytes += (double)zt_optim_state_bytes(opt, &ec, us, 0, us->numel);
    }
    return j->spec->total_numel ? bytes / (double)j->spec->total_numel : 0.0;
}

static void print_text(const zt_plan_job *j, const zt_plan *p, const plan_flags *pf, const zt_train_config *c,
                       const plan_reserved *res, const int *minw, int fits, const int *largest,
                       const zt_time_pred *tp, const zt_time_profile *prof) {
    char a[64], b2[64], c2[64];
    double P = (double)j->spec->total_numel;
    zt_dtype dt = j->in.dtype;
    size_t d = zt_dtype_size(dt);
    int master = (dt != ZT_FP32 && !j->in.master_none) || j->in.offload;
    double per_param = optimizer_bytes_per_param(j);
    printf("zt-plan: %.4g parameters (%d units, largest %.4g), %s, ZeRO stage %d, %d rank(s), offload %s, "
           "recompute %s, attention %s\n", P, j->spec->nunits, (double)j->spec->largest_unit_numel,
           zt_dtype_name(dt), c->stage, pf->world, c->offload, c->recompute, c->attention);
    gb(a, sizeof a, P * (double)d);
    gb(b2, sizeof b2, P * ((double)(2 * d + 4 * master) + per_param));
    gb(c2, sizeof c2, (double)p->persistent_bytes);
    printf("  weights alone (%s): %s\n  model state (params %zu + grads %zu + fp32 master %d + %s%s %.4g bytes/param): "
           "%s in all\n  model state per rank at this stage: %s\n", zt_dtype_name(dt), a, d, d, master ? 4 : 0,
           c->optimizer, j->in.state_bf16 ? " in bf16" : "", per_param, b2, c2);
    if (p->feedback_bytes) {
        gb(a, sizeof a, (double)p->feedback_bytes);
        printf("  error feedback per rank (--quantize-grads-feedback: the whole gradient, not sharded; in "
               "comm_buffers): %s\n", a);
    }
    printf("  per-rank device memory at the peak (%s):\n", p->peak_moment);
    for (int cc = 0; cc < ZT_NUM_CATEGORIES; cc++) {
        gb(a, sizeof a, (double)p->by_category[cc]);
        printf("    %-16s %s\n", zt_category_name(cc), a);
    }
    gb(a, sizeof a, (double)p->peak_bytes);
    printf("    %-16s %s\n", "peak", a);
    print_reserved(res, c);
    gb(a, sizeof a, (double)p->host_bytes);
    size_t inputs = j->family->plan_offloaded_bytes(&j->model, j->in.compute_dtype);
    gb(b2, sizeof b2, (double)inputs);
    if (inputs) printf("  host pool (offload): %s, of which the blocks' kept inputs %s (--offload-activations cpu)\n", a, b2);
    else printf("  host pool (offload): %s\n", a);
    gb(b2, sizeof b2, (double)p->checkpoint_staging_bytes);
    if (p->checkpoint_staging_bytes) printf("  of the host pool, checkpoint_staging (--async-save 1): %s\n", b2);
    if (j->in.nvme_optimizer) {
        char f[32];
        gb(a, sizeof a, (double)p->nvme_file_bytes);
        gb(b2, sizeof b2, (double)p->nvme_buffer_bytes);
        gb(f, sizeof f, (double)p->nvme_read_bytes + (double)c->grad_accum * (double)p->nvme_shard_read_bytes_per_micro);
        printf("  NVMe (--offload nvme): a swap file of %s per rank, through %s of host buffers; per step %s read, ",
               a, b2, f);
        gb(a, sizeof a, (double)p->nvme_write_bytes);
        printf("%s written\n", a);
    }
    if (pf->nodes > 1) {
        gb(a, sizeof a, inter_node_bytes(j, p, c, pf->world, pf->nodes));
        printf("  received from other nodes per step (%d nodes): %s\n", pf->nodes, a);
    }
    plan_transfers t = transfers_of(j, p, c);
    gb(a, sizeof a, t.bytes[ZT_LINK_H2D]);
    gb(b2, sizeof b2, t.bytes[ZT_LINK_D2H]);
    printf("  host<->device per step: %s in, %s out; at %g,%g GB/s (%s): %.3f ms in, %.3f ms out\n", a, b2,
           t.gbs[ZT_LINK_H2D], t.gbs[ZT_LINK_D2H], t.link_given ? "the given link" : "PCIe 4.0, --link pcie4",
           1e3 * t.seconds[ZT_LINK_H2D], 1e3 * t.seconds[ZT_LINK_D2H]);
    zt_plan_process q = process_of(p, pf, c, res);
    print_process(&q);
    zt_time_pred_print(tp, prof);
    if (pf->device_mem || res->budget) print_verdict(p, pf, res, &j->model.s.recompute, j->model.s.attention_fused, minw, fits);
    if (largest[0] >= 0) printf("  the largest micro-batch that fits: %d\n", largest[0]);
    if (largest[1] >= 0) printf("  the longest sequence that fits: %d\n", largest[1]);
    if (largest[2] >= 0) printf("  the most layers that fit: %d\n", largest[2]);
}

/* --calibrate FILE: every rank measures (under mpirun, the collectives
 * between them), rank 0 writes the profile. 0, or 2 on a failure. */
static int calibrate_main(int argc, char **argv, const plan_flags *pf, const zt_train_config *c) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    zt_calibrate_setup s = {strcmp(c->device, "cuda") == 0 ? "cuda" : "cpu", c->threads,
                            c->nvme_path[0] ? c->nvme_path : NULL, 0};
    zt_time_profile prof;
    zt_error err = {0};
    zt_status st = zt_time_calibrate(&s, &prof, &err);
    if (st == ZT_OK && rank == 0) st = zt_time_profile_save(pf->calibrate, &prof, &err);
    if (rank == 0) {
        if (st != ZT_OK) print_plan_error(&err);
        else printf("zt-plan --calibrate: wrote %s (%s)\n", pf->calibrate, prof.source);
    }
    int bad = st != ZT_OK, any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any ? 2 : 0;
}

/* --auto: the search, printed; 0 when something fits, 1 when nothing does. */
static int auto_main(zt_train_config *c, const zt_train_model *family, const plan_flags *pf,
                     const zt_plan_synth *synth, const zt_time_profile *prof) {
    zt_auto_setup s = {.device_mem = pf->device_mem, .mem_limit = c->mem_limit, .host_mem = pf->host_mem,
                       .world = pf->world, .nodes = pf->nodes, .global_batch = c->global_batch,
                       .top = pf->top ? pf->top : 5, .replay = !pf->no_replay, .nvme_path = c->nvme_path,
                       .synth = *synth, .axes = c->auto_axes};
    zt_auto_result r;
    zt_error err = {0};
    memset(&r, 0, sizeof r);
    if (zt_auto_axes_check(c->auto_axes, &err) != ZT_OK || zt_auto_search(c, family, &s, prof, &r, &err) != ZT_OK) {
        print_plan_error(&err);
        zt_auto_result_free(&r);
        return 2;
    }
    if (pf->json) zt_auto_print_json(&r, prof);
    else zt_auto_print_text(&r, prof);
    if (!r.nbest) fprintf(stderr, "zt-plan: error: %s\n", r.none_fits);
    int rc = r.nbest ? 0 : 1;
    zt_auto_result_free(&r);
    return rc;
}

int zt_plan_main(int argc, char **argv, const zt_train_model *const *models, int nmodels) {
    plan_flags pf = {.world = 1, .rank = -1};
    zt_train_config c;
    int rc = read_options(argc, argv, &pf, &c);
    if (rc == 0) zt_train_print_families(stdout, models, nmodels); /* after --help */
    if (rc >= 0) return rc;
    if (pf.calibrate) return calibrate_main(argc, argv, &pf, &c);
    zt_error err = {0};
    zt_plan_job j;
    memset(&j, 0, sizeof j);
    if (!zt_train_config_given(&c, "model") && nmodels > 0) /* the program's first family */
        snprintf(c.model, sizeof c.model, "%s", models[0]->family);
    j.family = zt_train_model_find(models, nmodels, c.model);
    if (!j.family || !j.family->plan_walk) {
        fprintf(stderr, "zt-plan: error: --model %s: %s\n", c.model,
                j.family ? "this family has no planner walk" : "not a model family of this program");
        zt_train_print_families(stderr, models, nmodels);
        return 2;
    }
    if ((pf.max_micro_batch || pf.max_seq_len || pf.max_layers) && !pf.device_mem && !c.mem_limit) {
        fprintf(stderr, "zt-plan: error: --max-micro-batch, --max-seq-len and --max-layers need --device-mem or "
                "--mem-limit\n");
        return 2;
    }
    if (pf.max_layers && pf.params > 0) {
        fprintf(stderr, "zt-plan: error: --max-layers needs a family's model, not --params\n");
        return 2;
    }
    zt_plan_synth synth = {pf.params, pf.largest_unit_params};
    zt_time_profile prof;
    if (zt_auto_profile(&c, &prof, &err) != ZT_OK ||
        zt_plan_job_init(&j, &c, j.family, &synth, pf.world, pf.nodes, pf.rank, &err) != ZT_OK) {
        print_plan_error(&err);
        zt_plan_job_free(&j);
        return 2;
    }
    if (c.auto_config) {
        zt_plan_job_free(&j);
        return auto_main(&c, j.family, &pf, &synth, &prof);
    }
    zt_plan p;
    int minw[4] = {0, 0, 0, 0};
    for (int s = 0; s < 4 && pf.device_mem; s++) minw[s] = min_world(j, s, pf.device_mem);
    zt_plan_job_plan(&j, pf.world, c.stage, &p); /* after min_world, which re-lays the spec */
    plan_reserved res;
    int largest[3] = {-1, -1, -1};
    const int asked[3] = {pf.max_micro_batch, pf.max_seq_len, pf.max_layers};
    if ((rc = reserved_of(&j, &p, &pf, &c, &res)) != 0) {
        free(j.spec);
        return rc;
    }
    for (int w = 0; w < 3 && rc == 0; w++)
        if (asked[w]) rc = largest_answer(j, &c, &pf, &res, (zt_scan_what)w, &largest[w]);
    if (rc) {
        free(j.spec);
        return rc;
    }
    zt_plan_job_plan(&j, pf.world, c.stage, &p); /* the scans re-lay the spec */
    int fits = res.replayed ? !res.r.oom : !res.budget || p.peak_bytes <= res.budget;
    zt_time_input ti;
    zt_time_pred tp;
    zt_auto_time_input(&j, &c, pf.world, pf.nodes, &ti);
    zt_time_predict(&ti, &p, j.spec, &prof, &tp);
    if (pf.json) print_json(&j, &p, &pf, &c, &res, minw, fits, largest, &tp, &prof);
    else print_text(&j, &p, &pf, &c, &res, minw, fits, largest, &tp, &prof);
    free(j.spec);
    return fits ? 0 : 1;
}
