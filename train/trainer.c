#include "zt_time.h"
#include "trainer.h"
#include "plan_auto.h"
#include "matrix_owners.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "checkpointer.h"
#include "data.h"
#include "data_cursor.h"
#include "evaluate.h"
#include "seq_group.h"
#include "init_source.h"
#include "memory_snapshot.h"
#include "metrics.h"
#include "leak_watch.h"
#include "device_bill_out.h"
#include "proc_bill.h"
#include "train_log.h"
#include "zt_checkpoint.h"
#include "zt_imbalance.h"
#include "zt_rng.h"
#include "zt_lr_schedule.h"
#include "zt_optim.h"
#include "zt_step.h"
#include "zt_train_hooks.h"
#include "zt_train_model.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The learning rate of step `step` (0-based) under --lr-schedule. */
static float lr_at(const zt_train_config *c, int step) {
    zt_lr_schedule s = {.lr = c->lr, .warmup = c->warmup, .total_steps = c->schedule_steps ? c->schedule_steps : c->steps,
                        .min_lr_frac = c->min_lr_frac, .warmup_min_lr = c->warmup_min_lr,
                        .warmup_min_ratio = c->warmup_min_ratio, .cos_min_ratio = c->cos_min_ratio,
                        .warmup_shape = strcmp(c->warmup_type, "linear") == 0 ? ZT_WARMUP_LINEAR : ZT_WARMUP_LOG};
    if (!zt_lr_kind_parse(c->lr_schedule, &s.kind)) s.kind = ZT_LR_COSINE; /* the options table allows no other */
    return (float)zt_lr_at(&s, step);
}

typedef struct {
    zt_data data;
    zt_data val; /* --val-data's (kind 0 and empty: none) */
    const zt_train_model *family; /* the model's hooks */
    void *model;                  /* its instance (family->create) */
    zt_model_settings settings;   /* what it was created from */
    zt_engine eng;
    /* Hybrid sharding (--shard-group G < world): the shard group of G ranks
     * and the replica group across groups; unused (no ops) otherwise. */
    zt_comm shard, replicas;
    zt_comm secondary; /* hpZ's group (--reshard-after-forward); unused otherwise */
    /* Quantized gradients over several nodes: the hops' groups (a node's
     * ranks; one local rank's on every node); unused otherwise. */
    zt_comm hop_node, hop_cross;
    int groups; /* world / G (1: no hybrid sharding) */
    zt_seq_group seq; /* --seq-parallel's group (P = 1: none) */
    int32_t *tokens, *targets; /* host [B,T] */
    double *losses, *step_times;
    FILE *jsonl;
    zt_trace trace;
    json_t *run_info;
    zt_leak_watch leak;  /* over the whole bill's step-end samples */
    void **leak_blocks;  /* [nleak_blocks] ZT_TEST_LEAK's blocks, freed at the end */
    /* The GPU's whole bill (device_bill_out.h): here, not in run's frame,
     * because the OOM report reads its communicators after run returns. */
    zt_device_track device;
    int nleak_blocks;
} trainer;

static void trainer_free(trainer *t) {
    if (t->model && zt_engine_context(&t->eng)) /* the engine exists only after init */
        t->family->free_activations(t->model, &t->eng);
    zt_engine_destroy(&t->eng);
    if (t->shard.ops) zt_comm_destroy(&t->shard);
    if (t->replicas.ops) zt_comm_destroy(&t->replicas);
    if (t->secondary.ops) zt_comm_destroy(&t->secondary);
    if (t->hop_node.ops) zt_comm_destroy(&t->hop_node);
    if (t->hop_cross.ops) zt_comm_destroy(&t->hop_cross);
    zt_seq_group_close(&t->seq);
    if (t->model) t->family->destroy(t->model);
    zt_data_destroy(&t->data);
    zt_data_destroy(&t->val);
    free(t->tokens);
    free(t->targets);
    free(t->losses);
    free(t->step_times);
    if (t->jsonl) fclose(t->jsonl);
    zt_trace_close(&t->trace);
    if (t->run_info) json_decref(t->run_info);
    zt_leak_watch_destroy(&t->leak);
    for (int i = 0; i < t->nleak_blocks; i++) free(t->leak_blocks[i]);
    free(t->leak_blocks);
}

/* Test hooks at every crash point of a save (zt_ckpt_hooks):
 * ZT_TEST_SAVE_POINTS=1 lists them on stderr, numbered per save;
 * ZT_TEST_KILL_SAVE=STEP:RANK:K[:SIGNAL] kills that rank (SIGKILL, as
 * kill -9 does) at the K-th point of the save of STEP, or sends it SIGNAL
 * there and waits for the signal's watcher to end the process. */
typedef struct {
    const zt_train_hooks *hooks;
    int step, index; /* the save in progress and the next point's number */
} save_points;

static void at_save_point(void *arg, int rank, int step, const char *point) {
    save_points *sp = arg;
    const zt_train_hooks *h = sp->hooks;
    if (sp->step != step) sp->step = step, sp->index = 0;
    int k = sp->index++;
    if (h->list_points) fprintf(stderr, "save point: step %d rank %d #%d %s\n", step, rank, k, point);
    if (step == h->kill_step && rank == h->kill_rank && k == h->kill_point) {
        fprintf(stderr, "test hook: rank %d %s at save point #%d (%s) of step %d\n", rank,
                h->kill_signal ? zt_signal_name(h->kill_signal) : "killed", k, point, step);
        fflush(stderr);
        if (!h->kill_signal) raise(SIGKILL);
        kill(getpid(), h->kill_signal); /* to the process: the watcher thread takes it */
        sleep(30);
    }
}

/* Host staging's pinned memory (outside the memory reports): allocations
 * this step, bytes held now, peak. NULL for the other communicators. */
static json_t *staging_json(const zt_comm *comm, unsigned long long allocs_before) {
    if (comm->staging.pinned_peak_bytes == 0) return NULL;
    json_t *o = json_object();
    json_object_set_new(o, "pinned_allocs", json_integer((json_int_t)(comm->staging.pinned_allocs - allocs_before)));
    json_object_set_new(o, "pinned_bytes", json_integer((json_int_t)comm->staging.pinned_bytes));
    json_object_set_new(o, "pinned_peak_bytes", json_integer((json_int_t)comm->staging.pinned_peak_bytes));
    return o;
}

/* This step's collectives: the difference of the counters since `before`. */
static json_t *comm_json(const zt_comm *comm, const zt_coll_stats *before) {
    json_t *o = json_object();
    for (int k = 0; k < ZT_COLL_KINDS; k++) {
        const zt_coll_stats *now = &comm->stats[k];
        zt_coll_stats d = {.calls = now->calls - before[k].calls,
                           .bytes = now->bytes - before[k].bytes,
                           .uncompressed_bytes = now->uncompressed_bytes - before[k].uncompressed_bytes,
                           .time_s = now->time_s - before[k].time_s,
                           .wait_s = now->wait_s - before[k].wait_s,
                           .inter_bytes = now->inter_bytes - before[k].inter_bytes,
                           .intra_bytes = now->intra_bytes - before[k].intra_bytes};
        if (d.calls == 0) continue;
        double alg, bus;
        zt_coll_bandwidth(&d, (zt_coll_kind)k, comm->world_size, &alg, &bus);
        json_t *kj = json_object();
        json_object_set_new(kj, "calls", json_integer(d.calls));
        json_object_set_new(kj, "bytes", json_real(d.bytes));
        json_object_set_new(kj, "uncompressed_bytes", json_real(d.uncompressed_bytes)); /* without wire codes */
        json_object_set_new(kj, "time_s", json_real(d.time_s));
        json_object_set_new(kj, "wait_s", json_real(d.wait_s));
        json_object_set_new(kj, "algbw_gbs", json_real(alg));
        json_object_set_new(kj, "busbw_gbs", json_real(bus));
        /* what this rank received over each link class, and at what rate */
        json_object_set_new(kj, "inter_node_bytes", json_real(d.inter_bytes));
        json_object_set_new(kj, "intra_node_bytes", json_real(d.intra_bytes));
        json_object_set_new(kj, "inter_node_gbs", json_real(d.time_s > 0 ? d.inter_bytes / d.time_s / 1e9 : 0.0));
        json_object_set_new(kj, "intra_node_gbs", json_real(d.time_s > 0 ? d.intra_bytes / d.time_s / 1e9 : 0.0));
        json_object_set_new(o, zt_coll_name(k), kj);
    }
    return o;
}

/* One row per rank of everything the imbalance report and summary need. */
enum {
    ROW_DEV_CAT = 0,
    ROW_DEV_PEAK = ZT_NUM_CATEGORIES,
    ROW_HOST_PEAK,
    ROW_OS_PEAK,
    ROW_DRIVER_USED, /* cudaMemGetInfo: total - free now (0 on the CPU) */
    ROW_NODE,        /* zt_comm's node index and local rank */
    ROW_LOCAL_RANK,
    ROW_NODE_LIMIT,  /* the node's memory limit (zt_node_mem_limit_read; 0: unknown) */
    ROW_HOST_CAT,
    ROW_PROCESS = ROW_HOST_CAT + ZT_NUM_CATEGORIES, /* the whole bill's sample (zt_proc_sample_pack) */
    ROW_DEVICE = ROW_PROCESS + ZT_PROC_ROW,          /* the GPU's (zt_device_sample_pack) */
    RANK_ROW = ROW_DEVICE + ZT_DEVICE_ROW
};

/* Every rank's row goes to every rank: table[N][RANK_ROW]. */
static zt_status gather_rank_rows(zt_ctx *ctx, const zt_bill *bill, const zt_device_track *device, zt_comm *comm,
                                  size_t *table) {
    int N = comm->world_size;
    size_t row[RANK_ROW];
    zt_os_mem os = {0};
    ZT_TRY(zt_os_mem_read(&os, &ctx->err));
    for (int cc = 0; cc < ZT_NUM_CATEGORIES; cc++) {
        row[ROW_DEV_CAT + cc] = ctx->device_mem.by_category[cc].peak;
        row[ROW_HOST_CAT + cc] = ctx->host_mem.by_category[cc].peak;
    }
    row[ROW_DEV_PEAK] = ctx->device_mem.allocated.peak;
    row[ROW_HOST_PEAK] = ctx->host_mem.allocated.peak;
    row[ROW_OS_PEAK] = os.vm_hwm;
    size_t driver_total;
    zt_backend_driver_mem(ctx->be, &row[ROW_DRIVER_USED], &driver_total);
    row[ROW_NODE] = (size_t)comm->node;
    row[ROW_LOCAL_RANK] = (size_t)comm->local_rank;
    zt_proc_sample_pack(&bill->run_best, bill->have_run, row + ROW_PROCESS);
    zt_device_sample_pack(&device->best, device->have, row + ROW_DEVICE);
    zt_node_mem_limit limit;
    zt_error ignore = {0};
    row[ROW_NODE_LIMIT] = zt_node_mem_limit_read(&limit, &ignore) == ZT_OK ? limit.bytes : 0;
    unsigned long long *col = calloc((size_t)N, sizeof *col);
    if (!col) return ZT_FAIL(&ctx->err, ZT_ERR_OOM, "trainer: cannot allocate");
    zt_status st = ZT_OK;
    for (int k = 0; k < RANK_ROW && st == ZT_OK; k++) {
        st = zt_comm_all_gather_u64(comm, row[k], col, &ctx->err);
        for (int r = 0; r < N; r++) table[(size_t)r * RANK_ROW + k] = (size_t)col[r];
    }
    free(col);
    return st;
}

/* Several nodes: each node's ranks, their highest and mean peak (MiB). */
static void print_node_lines(int N, const size_t *table, const size_t *peaks) {
    size_t nodes = 0;
    for (int r = 0; r < N; r++)
        if (table[(size_t)r * RANK_ROW + ROW_NODE] + 1 > nodes) nodes = table[(size_t)r * RANK_ROW + ROW_NODE] + 1;
    for (size_t n = 0; nodes > 1 && n < nodes; n++) {
        size_t most = 0, sum = 0, count = 0;
        for (int r = 0; r < N; r++) {
            if (table[(size_t)r * RANK_ROW + ROW_NODE] != n) continue;
            most = peaks[r] > most ? peaks[r] : most;
            sum += peaks[r];
            count++;
        }
        printf("node %zu: %zu rank(s), peak max %.3f MiB, mean %.3f MiB\n", n, count, (double)most / 1048576.0,
               count ? (double)sum / (double)count / 1048576.0 : 0.0);
    }
}

/* The whole bill of every rank (its sample with the most os_bytes). */
static void print_process_table(int N, const size_t *table) {
    zt_proc_sample *samples = calloc((size_t)N, sizeof *samples);
    int *have = calloc((size_t)N, sizeof *have);
    for (int r = 0; samples && have && r < N; r++)
        have[r] = zt_proc_sample_unpack(table + (size_t)r * RANK_ROW + ROW_PROCESS, &samples[r]);
    if (samples && have) zt_proc_print_table(stdout, N, samples, have);
    free(samples);
    free(have);
    zt_device_sample *dev = calloc((size_t)N, sizeof *dev);
    int *have_dev = calloc((size_t)N, sizeof *have_dev);
    for (int r = 0; dev && have_dev && r < N; r++)
        have_dev[r] = zt_device_sample_unpack(table + (size_t)r * RANK_ROW + ROW_DEVICE, &dev[r]);
    if (dev && have_dev) zt_device_print_table(stdout, N, dev, have_dev);
    free(dev);
    free(have_dev);
}

/* Rank 0 prints rank x category peaks (MiB) and what drives the imbalance. */
static void print_rank_table(const zt_ctx *ctx, const zt_train_config *c, int N, const size_t *table,
                             const char *when) {
    if (ctx->rank != 0) return;
    size_t *peaks = calloc((size_t)N, sizeof *peaks), *cats = calloc((size_t)N * ZT_NUM_CATEGORIES, sizeof *cats);
    if (!peaks || !cats) {
        free(peaks);
        free(cats);
        return;
    }
    printf("memory by rank (%s), peak MiB per category:\nrank", when);
    for (int cc = 0; cc < ZT_NUM_CATEGORIES; cc++) printf(" %15s", zt_category_name(cc));
    int driver = 0; /* a GPU: show the driver's view too */
    for (int r = 0; r < N; r++) driver |= table[(size_t)r * RANK_ROW + ROW_DRIVER_USED] > 0;
    printf(" %12s %12s %12s %5s%s\n", "device peak", "host peak", "os (VmHWM)", "node", driver ? "  driver used" : "");
    for (int r = 0; r < N; r++) {
        const size_t *row = table + (size_t)r * RANK_ROW;
        printf("%4d", r);
        for (int cc = 0; cc < ZT_NUM_CATEGORIES; cc++) printf(" %15.3f", (double)row[ROW_DEV_CAT + cc] / 1048576.0);
        printf(" %12.3f %12.3f %12.3f %5zu", (double)row[ROW_DEV_PEAK] / 1048576.0,
               (double)row[ROW_HOST_PEAK] / 1048576.0, (double)row[ROW_OS_PEAK] / 1048576.0, row[ROW_NODE]);
        if (driver) printf(" %12.3f", (double)row[ROW_DRIVER_USED] / 1048576.0);
        printf("\n");
        peaks[r] = row[ROW_DEV_PEAK];
        memcpy(cats + (size_t)r * ZT_NUM_CATEGORIES, row + ROW_DEV_CAT, ZT_NUM_CATEGORIES * sizeof *row);
    }
    zt_imbalance im = zt_imbalance_compute(peaks, cats, N);
    char detail[160];
    const char *cause = zt_seq_split_cause(c->seq_parallel, c->seq_len, c->seq_len_jitter, im.top_category,
                                           im.peak_max_minus_min_bytes, detail, sizeof detail);
    char why[200] = "";
    if (cause) snprintf(why, sizeof why, " (cause: %s, %s)", cause, detail);
    printf("imbalance: max/mean %.4f, max-min %.3f MiB, highest rank %d, driven by %s%s\n", im.peak_max_over_mean,
           (double)im.peak_max_minus_min_bytes / 1048576.0, im.max_rank, zt_category_name(im.top_category), why);
    print_node_lines(N, table, peaks);
    /* cudaMemGetInfo sees the whole GPU: ranks that share one see each other */
    if (driver)
        printf("driver used: cudaMemGetInfo's total - free on the rank's GPU, including the CUDA context, library "
               "workspaces and every process sharing that GPU\n");
    print_process_table(N, table);
    fflush(stdout);
    free(peaks);
    free(cats);
}

/* One run's state across its steps. */
typedef struct {
    const zt_train_config *c;
    const zt_train_hooks *test; /* fault injection (tests only) */
    zt_ctx *ctx;
    zt_comm *comm;
    trainer *t;
    int start;          /* the step the run starts at (a checkpoint's, else 0) */
    double floor;       /* the data's best achievable mean loss (NaN: unknown) */
    save_points points; /* test hooks at a save's crash points */
    zt_ckpt_hooks hooks;
    double tokens_time; /* seconds and tokens of the steps after the first */
    long tokens_counted;
    int crowded;        /* the last step ended fragmented near the cap (warned once per onset) */
    zt_bill bill;       /* the whole bill's samples (proc_bill.h) */
    zt_stop_signals *signals;       /* --on-signal's watcher (NULL: none) */
    zt_checkpointer ckpt;           /* the saves */
    int stop_signo;                 /* the signal the ranks stopped on (0: none) */
    int end;                        /* the step the run stops at: --steps, or earlier on a signal */
    zt_data_cursor cursor;          /* token files: each step's stream position */
    double val_loss;                /* the last evaluation's (NaN: none yet) */
    zt_data_digests digests;        /* token files: what this rank read in the step so far */
    int val_step;
} run_state;

/* One step: what was counted before it, and what it measured. */
typedef struct {
    int step, T; /* 0-based step; this rank's sequence length */
    float lr;
    zt_step_result r;
    zt_coll_stats comm_before[ZT_COLL_KINDS];
    /* hybrid sharding: the shard group's and the replicas' collectives */
    zt_coll_stats shard_before[ZT_COLL_KINDS], replicas_before[ZT_COLL_KINDS], secondary_before[ZT_COLL_KINDS];
    unsigned long long staging_allocs_before;
    zt_transfer_stats xfer_before;
    zt_model_stats model_before; /* the model's replays and kept inputs' copies (--offload-activations) */
    zt_nvme_stats nvme_before;   /* the NVMe tier's I/O */
    zt_link_stats link_before; /* the modelled link's counters (zeros: none) */
    size_t driver_used, driver_total;
    zt_leak_warning leaks[ZT_LEAK_SERIES]; /* [nleaks] named at this step */
    int nleaks;
    /* token files: the stream position the step started at and its
     * inputs' digest over every rank (zt_data_token_hash, mod 2^32) */
    uint64_t data_position;
    uint32_t data_digest, rows_digest; /* ... and this rank's rows' (zt_data_digests) */
    double val_loss, val_s; /* an evaluation after this step and its time (NaN: none) */
} step_record;

/* --val-data: the same format as token files for --data (what a token
 * means must not change between them), bytes only where the vocabulary is
 * 256; an evaluation longer than the set wraps over it, said once. */
static zt_status open_val(run_state *r, zt_token_format format) {
    const zt_train_config *c = r->c;
    zt_error *err = &r->ctx->err;
    int vocab = zt_train_data_vocab(c);
    zt_token_format fv = zt_token_format_resolve(c->val_data, format);
    zt_token_format fd = strcmp(c->data, "markov") == 0 ? ZT_TOKENS_AUTO : zt_token_format_resolve(c->data, format);
    if (fv == ZT_TOKENS_BYTES && vocab != 256)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--val-data %s is read as bytes (vocabulary 256), but the model's "
                       "vocabulary is %d (token files: llm.c shards, or --data-dtype uint16 or uint32)", c->val_data,
                       vocab);
    ZT_TRY(zt_data_tokens_create(&r->t->val, "--val-data", c->val_data, format, vocab, err));
    const zt_token_files *v = &r->t->val.files;
    if (fd != ZT_TOKENS_AUTO && fd != ZT_TOKENS_BYTES && (v->format != fd || v->width != r->t->data.files.width))
        return ZT_FAIL(err, ZT_ERR_INVALID, "--val-data %s holds %s tokens of %d bytes, --data %s tokens: one format "
                       "for both", c->val_data, zt_token_format_name(v->format), v->width, zt_token_format_name(fd));
    uint64_t per_eval = (uint64_t)c->eval_batches * (uint64_t)(r->comm->world_size / c->seq_parallel) *
                        (uint64_t)c->micro_batch * (uint64_t)c->seq_len;
    zt_log_rank0(&r->ctx->log, "val data: %d file(s) of %s tokens, %llu tokens; an evaluation reads %llu from its "
                 "start%s", v->nfiles, zt_token_format_name(v->format), (unsigned long long)v->ntokens,
                 (unsigned long long)per_eval, per_eval + 1 > v->ntokens ? " (more than it holds: it wraps)" : "");
    return ZT_OK;
}

/* The data source; sets r->floor. */
static zt_status open_data(run_state *r) {
    const zt_train_config *c = r->c;
    zt_error *err = &r->ctx->err;
    trainer *t = r->t;
    int file_data = strcmp(c->data, "markov") != 0;
    zt_token_format format = ZT_TOKENS_AUTO;
    zt_token_format_parse(c->data_dtype, &format); /* the options table allows no other */
    if (file_data && zt_token_format_resolve(c->data, format) != ZT_TOKENS_BYTES) {
        ZT_TRY(zt_data_tokens_create(&t->data, "--data", c->data, format, c->vocab, err));
    } else if (file_data) {
        if (zt_train_config_given(c, "vocab") && c->vocab != 256)
            return ZT_FAIL(err, ZT_ERR_INVALID, "--data %s reads bytes, so --vocab must be 256 (got %d; token files: "
                           "llm.c shards, or --data-dtype uint16 or uint32)", c->data, c->vocab);
        ZT_TRY(zt_data_file_create(&t->data, c->data, err));
        if (t->data.nbytes < (size_t)c->seq_len + 1)
            return ZT_FAIL(err, ZT_ERR_INVALID, "--data %s has %zu bytes; need at least seq-len + 1 = %d", c->data,
                           t->data.nbytes, c->seq_len + 1);
    } else {
        ZT_TRY(zt_data_markov_create(&t->data, c->vocab, c->markov_order, c->markov_branch, (uint64_t)c->seed, err));
        if (c->markov_order >= c->seq_len)
            return ZT_FAIL(err, ZT_ERR_INVALID, "--markov-order %d must be below --seq-len %d", c->markov_order, c->seq_len);
    }
    if (c->val_data[0]) ZT_TRY(open_val(r, format));
    r->floor = zt_data_loss_floor(&t->data, c->seq_len);
    if (!file_data)
        zt_log_rank0(&r->ctx->log, "data: order-%d Markov source, vocab %d, %d successors per context: entropy rate "
                     "%.6f nats, loss floor over %d positions %.6f nats", c->markov_order, c->vocab, c->markov_branch,
                     t->data.entropy_rate, c->seq_len, r->floor);
    return ZT_OK;
}

/* --shard-group: G from the option ("world", "node": the ranks of a node,
 * which every node must have alike; or a number dividing the world). */
static zt_status group_size(const run_state *r, int *G) {
    const zt_train_config *c = r->c;
    zt_comm *w = r->comm;
    zt_error *err = &r->ctx->err;
    if (strcmp(c->shard_group, "node") == 0) {
        unsigned long long mine = (unsigned long long)w->local_size, *all = calloc((size_t)w->world_size, sizeof *all);
        if (!all) return ZT_FAIL(err, ZT_ERR_OOM, "trainer: cannot allocate");
        zt_status st = zt_comm_all_gather_u64(w, mine, all, err);
        for (int q = 0; st == ZT_OK && q < w->world_size; q++)
            if (all[q] != mine)
                st = ZT_FAIL(err, ZT_ERR_INVALID, "--shard-group node needs as many ranks on every node: rank %d's node "
                             "has %llu, this one %d", q, all[q], w->local_size);
        free(all);
        *G = w->local_size;
        return st;
    }
    return zt_train_group_size("--shard-group", c->shard_group, w->world_size, w->local_size, G, err);
}

/* Hybrid sharding's communicators: group g holds ranks [gG, (g+1)G), and
 * replica group k the k-th rank of every group (world ranks in order, so
 * the replicas are summed in group order). */
static zt_status make_groups(run_state *r) {
    trainer *t = r->t;
    zt_comm *w = r->comm;
    int G = r->comm->world_size;
    ZT_TRY(group_size(r, &G));
    t->groups = w->world_size / G;
    if (t->groups == 1) return ZT_OK;
    ZT_TRY(zt_comm_split(w, w->rank / G, w->rank, &t->shard, &r->ctx->err));
    ZT_TRY(zt_comm_split(w, w->rank % G, w->rank, &t->replicas, &r->ctx->err));
    snprintf(t->shard.name, sizeof t->shard.name, "shard group %d", w->rank / G);
    snprintf(t->replicas.name, sizeof t->replicas.name, "replica group %d", w->rank % G);
    zt_log_rank0(&r->ctx->log, "hybrid sharding: %d group(s) of %d rank(s), state sharded in each group and "
                 "replicated across them", t->groups, G);
    return ZT_OK;
}

/* hpZ (--reshard-after-forward node|G): the secondary group, a node's ranks
 * or G consecutive ranks, handed to the engine. */
static zt_status make_secondary(run_state *r) {
    const char *v = r->c->reshard_after_forward;
    if (strcmp(v, "none") == 0) return ZT_OK;
    zt_comm *w = r->comm;
    int node = strcmp(v, "node") == 0, G;
    ZT_TRY(zt_train_group_size("--reshard-after-forward", v, w->world_size, w->local_size, &G, &r->ctx->err));
    ZT_TRY(zt_comm_split(w, node ? w->node : w->rank / G, w->rank, &r->t->secondary, &r->ctx->err));
    snprintf(r->t->secondary.name, sizeof r->t->secondary.name, "secondary group %d", node ? w->node : w->rank / G);
    return zt_engine_set_secondary(&r->t->eng, &r->t->secondary);
}

/* Quantized gradients on several nodes of equal size, numbered node by
 * node: the two hops' groups (ZeRO++'s hierarchical qgZ), counted as the
 * world's collectives. Anything else reduces flat, said. */
static zt_status make_grad_hops(run_state *r) {
    zt_comm *w = r->comm;
    if (strcmp(r->c->quantize_grads, "none") == 0 || w->nnodes <= 1) return ZT_OK;
    int L = w->world_size / w->nnodes, in_order = w->world_size % w->nnodes == 0 && w->member_node;
    for (int q = 0; in_order && q < w->world_size; q++) in_order = w->member_node[q] == q / L;
    if (!in_order) {
        zt_log_rank0(&r->ctx->log, "--quantize-grads: %d nodes not numbered node by node with equal ranks: one flat "
                     "reduce-scatter", w->nnodes);
        return ZT_OK;
    }
    trainer *t = r->t;
    ZT_TRY(zt_comm_split(w, w->node, w->rank, &t->hop_node, &r->ctx->err));
    ZT_TRY(zt_comm_split(w, w->local_rank, w->rank, &t->hop_cross, &r->ctx->err));
    snprintf(t->hop_node.name, sizeof t->hop_node.name, "node %d's ranks", w->node);
    snprintf(t->hop_cross.name, sizeof t->hop_cross.name, "local rank %d's across nodes", w->local_rank);
    t->hop_node.count_into = t->hop_cross.count_into = w;
    zt_log_rank0(&r->ctx->log, "--quantize-grads %s: hierarchical over %d nodes x %d ranks (within the node in "
                 "local-rank order, then across nodes in node order, each hop coded)", r->c->quantize_grads,
                 w->nnodes, L);
    return zt_engine_set_grad_hops(&t->eng, &t->hop_node, &t->hop_cross);
}

/* The model's instance, its spec laid out over the shard group. */
static zt_status build_model(run_state *r, zt_comm **shard) {
    const zt_train_config *c = r->c;
    zt_error *err = &r->ctx->err;
    trainer *t = r->t;
    ZT_TRY(zt_train_config_model(c, t->data.vocab, &t->settings, err));
    ZT_TRY(t->family->resolve(&t->settings, err));
    ZT_TRY(t->family->create(&t->model, &t->settings, err));
    ZT_TRY(t->family->freeze(t->model, c->freeze, err));
    ZT_TRY(make_groups(r));
    ZT_TRY(zt_seq_group_open(&t->seq, c->seq_parallel, r->comm, t->family, t->model, c->micro_batch, c->seq_len,
                             err));
    *shard = t->groups > 1 ? &t->shard : r->comm;
    zt_train_layout(c, t->family->spec(t->model), (*shard)->world_size);
    return ZT_OK;
}

/* Loads step_dir; under --resume auto a checkpoint that does not load
 * (damaged, or of another model) gives way to the previous complete one,
 * said on rank 0, until one loads (step_dir[cap] then names it). */
static zt_status load_checkpoint(run_state *r, zt_comm *shard, char *step_dir, size_t cap) {
    zt_ctx *ctx = r->ctx;
    const json_t *model = json_object_get(r->t->run_info, "model");
    for (;;) {
        zt_status st = zt_ckpt_load(&r->t->eng, shard, step_dir, model, &r->start, &ctx->err);
        char older[1024];
        if (st != ZT_ERR_INVALID || !r->c->resume_auto || !zt_ckpt_older_complete(step_dir, older, sizeof older))
            return st;
        if (ctx->rank == 0) /* every rank holds the agreed message */
            zt_log_warn(&ctx->log, "--resume auto: %s does not load (%s); taking the previous complete checkpoint, %s",
                    step_dir, ctx->err.msg, older);
        zt_error_clear(&ctx->err);
        snprintf(step_dir, cap, "%s", older);
    }
}

/* Token files: the stream position the checkpoint at step_dir left. */
static zt_status resume_stream(run_state *r, const char *step_dir) {
    zt_ckpt_info info;
    char warning[1024];
    ZT_TRY(zt_ckpt_open(step_dir, &info, warning, sizeof warning, &r->ctx->err));
    zt_status st = zt_data_cursor_resume(&r->cursor, json_object_get(info.manifest, "run"), r->start, &r->ctx->log,
                                         &r->ctx->err);
    zt_ckpt_close(&info);
    return st;
}

/* The model and the engine, resumed from a checkpoint when asked; sets r->start. */
static zt_status create_model(run_state *r) {
    const zt_train_config *c = r->c;
    zt_ctx *ctx = r->ctx;
    zt_error *err = &ctx->err;
    trainer *t = r->t;
    zt_comm *shard;
    ZT_TRY(build_model(r, &shard));
    zt_model_spec *spec = t->family->spec(t->model);
    zt_engine_config ec;
    ZT_TRY(zt_train_engine_config(c, r->test, ctx->be->nthreads, ctx->rank, spec, &ec, err));
    zt_mem_set_phase(&ctx->device_mem, ZT_PHASE_INIT);
    zt_init_source init; /* the family's init, or --init-from's Hugging Face directory */
    ZT_TRY(zt_init_source_open(c, t->family, &t->settings, t->model, spec, r->comm, &init, err));
    ZT_TRY(zt_init_source_close(&init, zt_engine_init_hybrid(&t->eng, ctx, shard, t->groups > 1 ? &t->replicas : NULL,
                                                             r->comm, spec, &ec, init.fn, init.arg), ctx, r->comm));
    ZT_TRY(make_secondary(r));
    ZT_TRY(make_grad_hops(r));
    zt_matrix_owners_log(&t->eng, &ctx->log, shard->world_size);
    zt_log_rank0(&ctx->log, "model: %s, %zu parameters in %d units (largest %zu padded), dtype %s, ZeRO stage %d on "
                 "%d rank(s)", t->family->family, spec->total_numel, spec->nunits, spec->largest_unit_numel, c->dtype,
                 c->stage, r->comm->world_size);
    zt_nvme_stats nv = zt_engine_nvme_stats(&t->eng);
    if (nv.path)
        zt_log_rank0(&ctx->log, "nvme: %s%s at %s (%zu bytes; %d buffers of %zu bytes per array)", nv.how,
                     strcmp(c->offload_params, "nvme") == 0 ? ", state and parameter shards" : ", state", nv.path,
                     nv.file_bytes, c->nvme_buffers, c->nvme_block_size);
    /* What a checkpoint must agree with to be loaded, and what it records. */
    t->run_info = json_pack("{s:o,s:I,s:s,s:i}", "model", t->family->describe(&t->settings), "seed",
                            (json_int_t)c->seed, "data", c->data, "micro_batch", c->micro_batch);
    if (!t->run_info) return ZT_FAIL(err, ZT_ERR_OOM, "trainer: cannot describe the run");
    r->start = 0;
    zt_data_cursor_init(&r->cursor, &t->data, c, t->seq.dp_world);
    if (c->resume[0]) {
        /* Every group loads the same slices: the checkpoint's layout is a group's. */
        char from[1024];
        snprintf(from, sizeof from, "%s", c->resume);
        ZT_TRY(load_checkpoint(r, shard, from, sizeof from));
        zt_log_rank0(&ctx->log, "resumed from %s at step %d", from, r->start);
        if (r->start > c->steps)
            return ZT_FAIL(err, ZT_ERR_INVALID, "--resume %s is at step %d, past --steps %d", c->resume, r->start,
                           c->steps);
        if (r->cursor.active) ZT_TRY(resume_stream(r, from));
    }
    if (!r->cursor.active) return ZT_OK;
    zt_data_cursor_log_start(&r->cursor, &t->data, &ctx->log);
    json_t *stream = zt_data_cursor_json(&r->cursor);
    if (!stream || json_object_set_new(t->run_info, "data_stream", stream) != 0)
        return ZT_FAIL(err, ZT_ERR_OOM, "trainer: cannot record the data stream");
    return ZT_OK;
}

/* --trace-per-rank: DIR/rank_traces/trace_rank<r>.json, a folder of its
 * own because HTA reads every .json of the folder it is given as a rank's
 * trace (docs/interop_traces.md). Kernels are on the rank's GPU (its local
 * rank) or, on the CPU, on device 0. */
static zt_status open_rank_trace(run_state *r) {
    zt_ctx *ctx = r->ctx;
    char dir[1100], path[1200];
    snprintf(dir, sizeof dir, "%s/rank_traces", r->c->log_dir);
    ZT_TRY(zt_mkdir_p(dir, &ctx->err));
    snprintf(path, sizeof path, "%s/trace_rank%d.json", dir, ctx->rank);
    const char *backend = strstr(r->comm->ops->name, "nccl") ? "nccl" : "mpi";
    int device = ctx->be->device == ZT_DEVICE_CPU ? 0 : r->comm->local_rank;
    return zt_trace_open_rank(&r->t->trace, path, r->comm->world_size, backend, device, &ctx->err);
}

/* Host buffers, DIR/rank<r>.jsonl and the timeline. */
static zt_status open_outputs(run_state *r) {
    const zt_train_config *c = r->c;
    zt_ctx *ctx = r->ctx;
    trainer *t = r->t;
    size_t BT = (size_t)c->micro_batch * c->seq_len;
    t->tokens = malloc(sizeof(int32_t) * BT);
    t->targets = malloc(sizeof(int32_t) * BT);
    t->losses = calloc((size_t)c->steps + 1, sizeof(double));
    t->step_times = calloc((size_t)c->steps + 1, sizeof(double));
    if (!t->tokens || !t->targets || !t->losses || !t->step_times)
        return ZT_FAIL(&ctx->err, ZT_ERR_OOM, "trainer: cannot allocate host buffers");
    if (c->log_dir[0]) ZT_TRY(zt_jsonl_open(c->log_dir, ctx->rank, &t->jsonl, &ctx->err));
    if (c->log_dir[0] && c->trace) {
        char part[1100];
        snprintf(part, sizeof part, "%s/trace.rank%d.part", c->log_dir, ctx->rank);
        ZT_TRY(zt_trace_open(&t->trace, part, ctx->rank, (long)c->trace_max_events, &ctx->err));
        ctx->trace = r->comm->trace = &t->trace;
        zt_trace_watch_mem(&t->trace, &ctx->device_mem);
        zt_trace_watch_mem(&t->trace, &ctx->host_mem);
        if (c->trace_per_rank) ZT_TRY(open_rank_trace(r));
    }
    r->points = (save_points){r->test, -1, 0};
    r->hooks = (zt_ckpt_hooks){r->test->list_points || r->test->kill_step >= 0 ? at_save_point : NULL, &r->points};
    return ZT_OK;
}

/* The sequence length of this rank's rows at a step: seq-len, or drawn
 * under --seq-len-jitter (a real cause of unequal activations), keyed by
 * the data-parallel index (one length per sequence-parallel group). */
static int seq_len_at(const zt_train_config *c, int rank, int step) {
    int T = c->seq_len;
    if (c->seq_len_jitter <= 0.0) return T;
    zt_rng jr = zt_rng_keyed((uint64_t)c->seed, 0x6a17u, (uint64_t)rank, (uint64_t)step);
    int lo = (int)ceil((1.0 - c->seq_len_jitter) * T);
    if (lo < 1) lo = 1;
    return lo + (int)zt_rng_below(&jr, (uint32_t)(T - lo + 1));
}

/* The model's half of a step (zt_step_model): each micro-batch's data,
 * then its forward and backward. */
typedef struct {
    run_state *r;
    int T; /* this rank's sequence length in this step */
} model_step;

static zt_status model_forward(void *arg, int step, int micro) {
    model_step *g = arg;
    const zt_train_config *c = g->r->c;
    trainer *t = g->r->t;
    zt_seq_group *q = &t->seq;
    int32_t *rows = zt_seq_group_rows(q, t->tokens), *targets = zt_seq_group_targets(q, t->targets); /* [B,T] */
    if (t->data.kind == ZT_DATA_TOKENS) {
        run_state *r = g->r;
        /* a group's ranks read the same rows: its first one counts them */
        ZT_TRY(zt_data_stream_batch(&t->data, zt_data_cursor_at(&r->cursor, step), q->dp_world, q->dp_rank, micro,
                                    c->micro_batch, c->seq_len, g->T, rows, targets,
                                    &r->digests, &r->ctx->err));
        if (q->sp.index != 0) r->digests.inputs = 0; /* a group's first rank counts its rows for the world */
    } else {
        zt_data_batch(&t->data, (uint64_t)c->seed, q->dp_rank, step, micro, c->micro_batch, g->T, rows, targets);
    }
    int T = zt_seq_group_split(q, c->micro_batch, g->T, t->tokens, t->targets); /* this rank's span */
    return t->family->forward(t->model, &t->eng, t->tokens, t->targets, c->micro_batch, T);
}

static zt_status model_backward(void *arg, int step, int micro, float loss_scale) {
    (void)micro;
    model_step *g = arg;
    const zt_train_config *c = g->r->c;
    const zt_train_hooks *test = g->r->test;
    /* The mean's gradient over the step's tokens, times the loss scale; under
     * sequence parallelism each position's share of its sequence's mean,
     * times P since the engine averages over all the group's ranks. */
    float dloss = loss_scale * (float)g->r->t->seq.sp.P / ((float)c->micro_batch * (float)g->T * (float)c->grad_accum);
    if (step + 1 == test->overflow_step && g->r->ctx->rank == test->overflow_rank) dloss = INFINITY;
    return g->r->t->family->backward(g->r->t->model, &g->r->t->eng, dloss);
}

static zt_status model_take_losses(void *arg, double *sum) {
    model_step *g = arg;
    ZT_TRY(g->r->t->family->take_losses(g->r->t->model, g->r->ctx, sum));
    *sum *= zt_seq_group_loss_weight(&g->r->t->seq, g->T); /* this rank's part of its sequences' mean */
    return ZT_OK;
}

/* ZT_TEST_EXIT_STEP/RANK: that rank dies between backward and the optimizer;
 * ZT_TEST_STALL: that rank stops answering there (the others' collectives
 * then wait for it: the watchdog's case). */
static void exit_hook(void *arg, int step) {
    run_state *r = arg;
    const zt_train_hooks *test = r->test;
    if (test->stall_step == step + 1 && test->stall_rank == r->ctx->rank && !test->stall_forward) {
        zt_log_error(&r->ctx->log, "test hook: rank %d stalls at step %d", r->ctx->rank, step + 1);
        for (;;) sleep(60);
    }
    if (test->exit_step != step + 1 || test->exit_rank != r->ctx->rank) return;
    zt_log_error(&r->ctx->log, "test hook: rank %d exits abruptly at step %d", r->ctx->rank, step + 1);
    _exit(7);
}

/* This rank's votes at the end of a step: the stop signal it received
 * (ZT_TEST_RAISE raises one first), and the saves' (checkpointer.h). */
static void vote(void *arg, int step, double votes[ZT_STEP_VOTES]) {
    run_state *r = arg;
    const zt_train_hooks *test = r->test;
    if (test->raise_step == step + 1 && test->raise_rank == r->ctx->rank) {
        zt_log_error(&r->ctx->log, "test hook: rank %d raises %s at step %d", r->ctx->rank,
                     zt_signal_name(test->raise_signal), step + 1);
        kill(getpid(), test->raise_signal);
        for (int i = 0; i < 1000 && r->signals && !zt_stop_signals_first(r->signals); i++) usleep(1000);
    }
    int first = r->signals ? zt_stop_signals_first(r->signals) : 0;
    if (first) votes[VOTE_SIGNAL + zt_stop_signal_index(first)] = 1.0;
    votes[VOTE_DATA_DIGEST] = (double)r->digests.inputs;
    zt_checkpointer_vote(&r->ckpt, votes);
}

/* ZT_TEST_LEAK=RANK:BYTES: this rank's heap grows by BYTES, touched, at
 * every step (the blocks stay to the end, so no leak checker objects). */
static zt_status test_leak(run_state *r) {
    const zt_train_hooks *h = r->test;
    trainer *t = r->t;
    if (h->leak_rank != r->ctx->rank || h->leak_bytes <= 0) return ZT_OK;
    void **grown = realloc(t->leak_blocks, (size_t)(t->nleak_blocks + 1) * sizeof *grown);
    char *block = grown ? malloc((size_t)h->leak_bytes) : NULL;
    if (grown) t->leak_blocks = grown;
    if (!block) return ZT_FAIL(&r->ctx->err, ZT_ERR_OOM, "ZT_TEST_LEAK: out of host memory");
    memset(block, 0x5a, (size_t)h->leak_bytes);
    t->leak_blocks[t->nleak_blocks++] = block;
    return ZT_OK;
}

/* The step-end sample into the leak watch; what it names goes to the log
 * now and to the step's JSONL line and the metrics after. */
static void watch_leaks(run_state *r, step_record *s) {
    const zt_proc_sample *end = zt_bill_step_end_sample(&r->bill);
    if (!end) return; /* the sampling budget declined this step's end */
    zt_leak_watch_add(&r->t->leak, end, s->leaks, &s->nleaks);
    for (int i = 0; i < s->nleaks; i++) {
        const zt_leak_warning *w = &s->leaks[i];
        zt_log_warn(&r->ctx->log, "leak watch: %s grew %.1f KiB per step over steps %d-%d (least squares over the "
                    "whole bill's step-end samples; --leak-min-rate %.1f KiB, --leak-window %d); allocated %s",
                    zt_leak_series_name(w->series), w->bytes_per_step / 1024.0, w->first_step, w->step,
                    r->c->leak_min_rate / 1024.0, r->c->leak_window,
                    w->series == ZT_PART_ALLOCATOR_CACHED || w->series == ZT_PART_HOST_POOL_CACHED
                        ? "stayed flat: the cache keeps growing"
                        : "is not this part: memory outside the allocator");
    }
}

/* The step's counters leave out an evaluation's collectives: what they
 * added (now - at) moves into the step's starting point. */
static void leave_out(zt_coll_stats before[ZT_COLL_KINDS], const zt_coll_stats at[ZT_COLL_KINDS],
                      const zt_coll_stats now[ZT_COLL_KINDS]) {
    for (int k = 0; k < ZT_COLL_KINDS; k++) {
        before[k].calls += now[k].calls - at[k].calls;
        before[k].bytes += now[k].bytes - at[k].bytes;
        before[k].uncompressed_bytes += now[k].uncompressed_bytes - at[k].uncompressed_bytes;
        before[k].time_s += now[k].time_s - at[k].time_s;
        before[k].wait_s += now[k].wait_s - at[k].wait_s;
        before[k].inter_bytes += now[k].inter_bytes - at[k].inter_bytes;
        before[k].intra_bytes += now[k].intra_bytes - at[k].intra_bytes;
    }
}

/* --val-data after step `done` when due: every --eval-every steps, and after the last. */
static zt_status maybe_evaluate(run_state *r, step_record *s, int done) {
    const zt_train_config *c = r->c;
    trainer *t = r->t;
    s->val_loss = NAN;
    if (!c->val_data[0]) return ZT_OK;
    /* not on a stop signal: the ranks are on their way out */
    int due = ((c->eval_every > 0 && done % c->eval_every == 0) || done == c->steps) && !r->stop_signo;
    if (!due) return ZT_OK;
    zt_eval_job job = {t->family, t->model, &t->eng, &t->val, c->micro_batch, c->seq_len, c->eval_batches,
                       t->tokens, t->targets, &t->seq};
    zt_comm *comms[4] = {r->comm, &t->shard, &t->replicas, &t->secondary};
    zt_coll_stats *befores[4] = {s->comm_before, s->shard_before, s->replicas_before, s->secondary_before};
    zt_coll_stats at[4][ZT_COLL_KINDS];
    for (int i = 0; i < 4; i++) memcpy(at[i], comms[i]->stats, sizeof at[i]);
    double t0 = zt_now_s();
    ZT_TRY(zt_evaluate(&job, r->comm, &s->val_loss, &r->ctx->err));
    s->val_s = zt_now_s() - t0;
    for (int i = 0; i < 4; i++) leave_out(befores[i], at[i], comms[i]->stats);
    r->val_loss = s->val_loss;
    r->val_step = done;
    return ZT_OK;
}

/* One training step (zt_train_step), with what it is measured against. */
static zt_status train_step(run_state *r, step_record *s) {
    const zt_train_config *c = r->c;
    trainer *t = r->t;
    const zt_train_hooks *test = r->test;
    if (test->stall_forward && test->stall_step == s->step + 1 && test->stall_rank == r->ctx->rank) {
        zt_log_error(&r->ctx->log, "test hook: rank %d stalls before step %d's forward", r->ctx->rank, s->step + 1);
        for (;;) sleep(60);
    }
    memcpy(s->comm_before, r->comm->stats, sizeof s->comm_before);
    memcpy(s->shard_before, r->t->shard.stats, sizeof s->shard_before);
    memcpy(s->replicas_before, r->t->replicas.stats, sizeof s->replicas_before);
    memcpy(s->secondary_before, r->t->secondary.stats, sizeof s->secondary_before);
    s->staging_allocs_before = r->comm->staging.pinned_allocs;
    s->xfer_before = zt_engine_transfers(&t->eng);
    s->model_before = t->family->stats(t->model);
    s->nvme_before = zt_engine_nvme_stats(&t->eng);
    if (r->ctx->be->link) s->link_before = *r->ctx->be->link;
    s->T = seq_len_at(c, t->seq.dp_rank, s->step);
    s->lr = lr_at(c, s->step);
    model_step g = {r, s->T};
    r->digests = (zt_data_digests){0, 0};
    zt_step_model model = {&g, model_forward, model_backward, model_take_losses};
    zt_step_options opt = {c->grad_accum, s->lr, c->max_skipped_steps, exit_hook, vote, r};
    zt_bill_step_begin(&r->bill, s->step);
    if (r->cursor.active) zt_data_cursor_log_step(&r->cursor, s->step, &r->ctx->log);
    ZT_TRY(zt_train_step(&t->eng, &model, &opt, s->step, &s->r));
    if (r->cursor.active) {
        s->data_position = zt_data_cursor_at(&r->cursor, s->step);
        s->data_digest = (uint32_t)(uint64_t)fmod(s->r.votes[VOTE_DATA_DIGEST], 4294967296.0);
        s->rows_digest = r->digests.rows;
    }
    ZT_TRY(test_leak(r));
    zt_bill_step_end(&r->bill);
    zt_device_track_step(&r->t->device, r->ctx);
    watch_leaks(r, s);
    zt_backend_driver_mem(r->ctx->be, &s->driver_used, &s->driver_total); /* once per step */
    t->losses[s->step - r->start] = s->r.loss;
    t->step_times[s->step - r->start] = s->r.time_s;
    if (s->step > r->start || c->steps - r->start == 1) {
        r->tokens_time += s->r.time_s;
        r->tokens_counted += (long)c->micro_batch * s->T * c->grad_accum * t->seq.dp_world;
    }
    return ZT_OK;
}

/* The engine's offload transfers since init plus the model's kept inputs'
 * (--offload-activations): what crosses the link for offload. */
static zt_transfer_stats all_transfers(const trainer *t) {
    zt_transfer_stats x = zt_engine_transfers(&t->eng);
    zt_model_transfers moved = t->family->stats(t->model).moved;
    x.d2h_bytes += moved.d2h_bytes;
    x.d2h_s += moved.d2h_s;
    x.h2d_bytes += moved.h2d_bytes;
    x.h2d_s += moved.h2d_s;
    return x;
}

/* The offload transfers of the step (bytes and GB/s each way, the kept
 * inputs' part of them, locked host bytes). */
static json_t *offload_json(const zt_ctx *ctx, const trainer *t, const step_record *s) {
    zt_transfer_stats now = all_transfers(t), before = s->xfer_before;
    zt_model_transfers moved = t->family->stats(t->model).moved, moved_before = s->model_before.moved;
    before.d2h_bytes += moved_before.d2h_bytes;
    before.d2h_s += moved_before.d2h_s;
    before.h2d_bytes += moved_before.h2d_bytes;
    before.h2d_s += moved_before.h2d_s;
    double d2h = now.d2h_bytes - before.d2h_bytes, d2h_s = now.d2h_s - before.d2h_s;
    double h2d = now.h2d_bytes - before.h2d_bytes, h2d_s = now.h2d_s - before.h2d_s;
    json_t *x = json_object();
    json_object_set_new(x, "activations_d2h_bytes", json_real(moved.d2h_bytes - moved_before.d2h_bytes));
    json_object_set_new(x, "activations_h2d_bytes", json_real(moved.h2d_bytes - moved_before.h2d_bytes));
    json_object_set_new(x, "d2h_bytes", json_real(d2h));
    json_object_set_new(x, "d2h_gbs", json_real(d2h_s > 0 ? d2h / d2h_s / 1e9 : 0.0));
    json_object_set_new(x, "h2d_bytes", json_real(h2d));
    json_object_set_new(x, "h2d_gbs", json_real(h2d_s > 0 ? h2d / h2d_s / 1e9 : 0.0));
    json_object_set_new(x, "host_locked_bytes", json_integer((json_int_t)ctx->host_lock.locked_bytes));
    json_object_set_new(x, "host_unlocked_bytes", json_integer((json_int_t)ctx->host_lock.unlocked_bytes));
    /* --offload-delay 1: the CPU Adam joined this step, and how long the step waited for it */
    json_object_set_new(x, "delayed_adam_s", json_real(now.delayed_adam_s - before.delayed_adam_s));
    json_object_set_new(x, "delayed_wait_s", json_real(now.delayed_wait_s - before.delayed_wait_s));
    return x;
}

/* The NVMe tier's I/O of the step: bytes each way and the host's waits. */
static json_t *nvme_json(const trainer *t, const step_record *s) {
    zt_nvme_stats now = zt_engine_nvme_stats(&t->eng), before = s->nvme_before;
    return json_pack("{s:f,s:f,s:f,s:I,s:s}", "read_bytes", now.read_bytes - before.read_bytes, "write_bytes",
                     now.write_bytes - before.write_bytes, "wait_s", now.wait_s - before.wait_s, "file_bytes",
                     (json_int_t)now.file_bytes, "io", now.how ? now.how : "");
}

/* The leak watch's warnings of the step: [{part, bytes_per_step, from_step}]. */
static json_t *leaks_json(const step_record *s) {
    json_t *a = json_array();
    for (int i = 0; i < s->nleaks; i++)
        json_array_append_new(a, json_pack("{s:s,s:f,s:i}", "part", zt_leak_series_name(s->leaks[i].series),
                                           "bytes_per_step", s->leaks[i].bytes_per_step, "from_step",
                                           s->leaks[i].first_step));
    return a;
}

/* The step's line in DIR/rank<r>.jsonl. */
static void write_step_json(const run_state *r, const step_record *s, double tps) {
    const zt_ctx *ctx = r->ctx;
    const trainer *t = r->t;
    const zt_engine *eng = &t->eng;
    json_t *o = json_object();
    json_object_set_new(o, "step", json_integer(s->step + 1));
    json_object_set_new(o, "loss", json_real(s->r.loss));
    json_object_set_new(o, "lr", json_real(s->lr));
    /* JSON has no inf or NaN: a skipped step's norm is null */
    json_object_set_new(o, "grad_norm", isfinite(s->r.grad_norm) ? json_real(s->r.grad_norm) : json_null());
    json_object_set_new(o, "skipped", json_boolean(s->r.skipped));
    json_object_set_new(o, "skipped_steps", json_integer(s->r.skipped_steps));
    json_object_set_new(o, "loss_scale", json_real(s->r.loss_scale));
    json_object_set_new(o, "step_time_s", json_real(s->r.time_s));
    json_object_set_new(o, "forward_s", json_real(s->r.forward_s));
    json_object_set_new(o, "backward_s", json_real(s->r.backward_s));
    json_object_set_new(o, "optimizer_s", json_real(s->r.optimizer_s));
    json_object_set_new(o, "recompute_time_s", json_real(t->family->stats(t->model).recompute_time_s -
                                                         s->model_before.recompute_time_s));
    json_object_set_new(o, "tokens_per_s", json_real(tps));
    json_object_set_new(o, "seq_len", json_integer(s->T));
    if (r->cursor.active) {
        char hex[16], rows[16];
        snprintf(hex, sizeof hex, "%08x", (unsigned)s->data_digest);
        snprintf(rows, sizeof rows, "%08x", (unsigned)s->rows_digest);
        json_object_set_new(o, "data", json_pack("{s:I,s:I,s:s,s:s}", "position", (json_int_t)s->data_position,
                                                 "epoch", (json_int_t)(s->data_position / r->cursor.epoch_tokens),
                                                 "tokens_digest", hex, "rows_digest", rows));
    }
    if (!isnan(s->val_loss)) {
        json_object_set_new(o, "val_loss", json_real(s->val_loss));
        json_object_set_new(o, "val_s", json_real(s->val_s));
    }
    json_object_set_new(o, "memory",
                        zt_mem_step_json(&ctx->device_mem, &ctx->host_mem, s->driver_used, s->driver_total));
    json_object_set_new(o, "comm", comm_json(r->comm, s->comm_before));
    if (t->groups > 1) { /* the engine's collectives run in the groups */
        json_object_set_new(o, "comm_shard_group", comm_json(&t->shard, s->shard_before));
        json_object_set_new(o, "comm_replicas", comm_json(&t->replicas, s->replicas_before));
    }
    if (t->secondary.ops) json_object_set_new(o, "comm_secondary", comm_json(&t->secondary, s->secondary_before));
    json_t *staging = staging_json(r->comm, s->staging_allocs_before);
    if (staging) json_object_set_new(o, "host_staging", staging);
    json_object_set_new(o, "gathered_inflight_peak_bytes", json_integer((json_int_t)zt_engine_gathered_peak(eng)));
    if (strcmp(r->c->offload, "none") != 0 || strcmp(r->c->offload_activations, "cpu") == 0)
        json_object_set_new(o, "offload", offload_json(ctx, t, s));
    if (strcmp(r->c->offload, "nvme") == 0) json_object_set_new(o, "nvme", nvme_json(t, s));
    if (ctx->be->link) json_object_set_new(o, "link", zt_link_step_json(ctx->be->link, &s->link_before));
    const zt_proc_sample *bill = zt_bill_step_sample(&r->bill);
    if (bill) json_object_set_new(o, "process", zt_proc_sample_json(bill));
    if (r->t->device.have)
        json_object_set_new(o, "device_process",
                            zt_device_sample_json(&r->t->device.latest, r->ctx->device_bill.nvml_why));
    if (s->nleaks) json_object_set_new(o, "leaks", leaks_json(s));
    if (r->ckpt.stall_s > 0) /* what this step boundary spent on saves: the whole write, or the staging and commit */
        json_object_set_new(o, "checkpoint_stall_s", json_real(r->ckpt.stall_s));
    if (zt_bill_step_end_sample(&r->bill)) /* a step end the leak watch saw: whether it could judge */
        json_object_set_new(o, "leak_judged", json_boolean(t->leak.judged_now));
    char *line = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(o);
    if (line) {
        fprintf(t->jsonl, "%s\n", line);
        free(line);
    }
}

/* --metrics-file after a step. */
static zt_status write_metrics(const run_state *r, const step_record *s, double tps) {
    zt_transfer_stats x = all_transfers(r->t);
    zt_metrics_values v = {s->step + 1, tps, x.h2d_bytes, x.d2h_bytes, 0, zt_bill_latest(&r->bill), &r->t->leak,
                           r->t->device.have ? &r->t->device.latest : NULL};
    return zt_metrics_write(r->c->metrics_file, r->ctx->rank, &r->ctx->device_mem, &r->ctx->host_mem, &v,
                            &r->ctx->err);
}

/* A warning when the step's peak came within 10% of --mem-limit with more
 * than 30% of what was reserved then not allocated: the next larger
 * request may find no free block large enough. Once per onset. */
static void warn_if_crowded(run_state *r) {
    const zt_mem *m = &r->ctx->device_mem;
    size_t res = m->window_reserved_peak, alloc = m->window_allocated_peak;
    double frag = res ? (double)(res - (alloc < res ? alloc : res)) / (double)res : 0.0;
    int crowded = m->limit_bytes && (double)res > 0.9 * (double)m->limit_bytes && frag > 0.3;
    if (crowded && !r->crowded)
        zt_log_warn(&r->ctx->log, "device memory is fragmented near the cap: reserved %.1f MiB of %.1f MiB at the "
                    "step's peak, %.0f%% of it not allocated (%s allocator); a larger request may find no free "
                    "block (see docs/memory.md)", (double)res / 1048576.0, (double)m->limit_bytes / 1048576.0,
                    100.0 * frag, zt_alloc_mode_name(m->mode));
    r->crowded = crowded;
}

/* After a step: the JSONL line, the periodic rank table, a checkpoint, the log line. */
static zt_status after_step(run_state *r, step_record *s) {
    const zt_train_config *c = r->c;
    zt_ctx *ctx = r->ctx;
    zt_comm *comm = r->comm;
    int done = s->step + 1;
    double tps = (double)c->micro_batch * s->T * c->grad_accum * r->t->seq.dp_world / s->r.time_s;
    for (int i = 0; i < ZT_STOP_SIGNALS && !r->stop_signo; i++) /* the lowest-numbered slot every rank sees */
        if (s->r.votes[VOTE_SIGNAL + i] > 0) r->stop_signo = zt_stop_signal_number(i);
    if (r->stop_signo && r->signals) zt_stop_signals_stopping(r->signals, r->stop_signo);
    ZT_TRY(zt_checkpointer_after_step(&r->ckpt, done, s->r.votes, r->stop_signo != 0));
    ZT_TRY(maybe_evaluate(r, s, done)); /* after the save: a failing evaluation loses no checkpoint */
    if (r->t->jsonl) write_step_json(r, s, tps);
    if (c->metrics_file[0]) ZT_TRY(write_metrics(r, s, tps));
    warn_if_crowded(r);
    char peak[96];
    zt_format_bytes(ctx->device_mem.window_allocated_peak, peak, sizeof peak);
    if (s->driver_total > 0) {
        char used[32];
        zt_format_bytes(s->driver_used, used, sizeof used);
        size_t n = strlen(peak);
        snprintf(peak + n, sizeof peak - n, " (driver: %s used)", used);
    }
    if (c->report_every > 0 && done % c->report_every == 0 && done < c->steps) {
        size_t *rows = calloc((size_t)comm->world_size * RANK_ROW, sizeof *rows);
        if (!rows) return ZT_FAIL(&ctx->err, ZT_ERR_OOM, "trainer: cannot allocate the rank table");
        zt_status rs = gather_rank_rows(ctx, &r->bill, &r->t->device, comm, rows);
        char when[32];
        snprintf(when, sizeof when, "after step %d", done);
        if (rs == ZT_OK && !c->quiet) print_rank_table(ctx, c, comm->world_size, rows, when);
        free(rows);
        ZT_TRY(rs);
    }
    /* DeepSpeed's steps_per_print; the last step and a stop's always */
    if (done % c->print_every != 0 && done != c->steps && !r->stop_signo && isnan(s->val_loss)) return ZT_OK;
    char phases[96] = "";
    if (c->wall_clock_breakdown)
        snprintf(phases, sizeof phases, " (forward %.1f, backward %.1f, optimizer %.1f)", s->r.forward_s * 1e3,
                 s->r.backward_s * 1e3, s->r.optimizer_s * 1e3);
    char val[64] = ""; /* llm.c's val loss beside the step's */
    if (!isnan(s->val_loss)) snprintf(val, sizeof val, " | val loss %.6f (%.1f ms)", s->val_loss, s->val_s * 1e3);
    zt_log_rank0(&ctx->log, "step %5d/%d | loss %.6f%s | lr %.2e | grad norm %.3f | %.1f ms%s | %.0f tok/s | peak %s",
                 done, c->steps, s->r.loss, val, s->lr, s->r.grad_norm, s->r.time_s * 1e3, phases, tps, peak);
    return ZT_OK;
}

/* The median of the run's step times (NaN when none ran). */
static zt_status median_step_time(const run_state *r, double *median) {
    int ran = r->end - r->start;
    *median = NAN;
    if (ran <= 0) return ZT_OK;
    double *sorted = malloc(sizeof(double) * (size_t)ran);
    if (!sorted) return ZT_FAIL(&r->ctx->err, ZT_ERR_OOM, "trainer: cannot sort step times");
    memcpy(sorted, r->t->step_times, sizeof(double) * (size_t)ran);
    qsort(sorted, (size_t)ran, sizeof(double), cmp_double);
    *median = sorted[ran / 2];
    free(sorted);
    return ZT_OK;
}

/* Rank 0: DIR/summary.json from every rank's rows (table[N][RANK_ROW]). */
static zt_status write_summary(const run_state *r, const size_t *table, const char *hosts, const char *digest,
                               double tps, double median) {
    int N = r->comm->world_size;
    size_t *cols = calloc((size_t)N * RANK_ROW, sizeof *cols);
    if (!cols) return ZT_FAIL(&r->ctx->err, ZT_ERR_OOM, "trainer: cannot allocate the summary table");
    /* Columns of the per-rank rows, in the layout zt_summary wants. */
    size_t *peak = cols, *cat = peak + N, *host = cat + (size_t)N * ZT_NUM_CATEGORIES, *osp = host + N;
    size_t *hcat = osp + N;
    for (int k = 0; k < N; k++) {
        const size_t *row = table + (size_t)k * RANK_ROW;
        memcpy(cat + (size_t)k * ZT_NUM_CATEGORIES, row + ROW_DEV_CAT, ZT_NUM_CATEGORIES * sizeof *row);
        memcpy(hcat + (size_t)k * ZT_NUM_CATEGORIES, row + ROW_HOST_CAT, ZT_NUM_CATEGORIES * sizeof *row);
        peak[k] = row[ROW_DEV_PEAK];
        host[k] = row[ROW_HOST_PEAK];
        osp[k] = row[ROW_OS_PEAK];
    }
    int *node = calloc((size_t)N * 2 + 1, sizeof *node), *local = node ? node + N : NULL;
    size_t *limits = osp + N + (size_t)N * ZT_NUM_CATEGORIES; /* after hcat */
    if (!node) {
        free(cols);
        return ZT_FAIL(&r->ctx->err, ZT_ERR_OOM, "trainer: cannot allocate the summary table");
    }
    for (int k = 0; k < N; k++) {
        limits[k] = table[(size_t)k * RANK_ROW + ROW_NODE_LIMIT];
        node[k] = (int)table[(size_t)k * RANK_ROW + ROW_NODE];
        local[k] = (int)table[(size_t)k * RANK_ROW + ROW_LOCAL_RANK];
    }
    json_t *process = json_array(); /* [N]: each rank's whole bill, or null */
    for (int k = 0; k < N; k++) {
        zt_proc_sample ps;
        int have = zt_proc_sample_unpack(table + (size_t)k * RANK_ROW + ROW_PROCESS, &ps);
        json_array_append_new(process, have ? zt_proc_sample_json(&ps) : json_null());
    }
    json_t *device = json_array(); /* [N]: each rank's GPU bill, or null (a CPU run's) */
    for (int k = 0; k < N; k++) {
        zt_device_sample ds;
        int have = zt_device_sample_unpack(table + (size_t)k * RANK_ROW + ROW_DEVICE, &ds);
        json_array_append_new(device, have ? zt_device_sample_json(&ds, NULL) : json_null());
    }
    const zt_train_config *c = r->c;
    zt_summary s = {c,      N,    r->t->family->spec(r->t->model)->total_numel, c->steps, r->start, r->end,
                    r->stop_signo ? zt_signal_name(r->stop_signo) : "completed", r->t->losses, r->floor, tps, median, digest, peak, cat, host, osp, hcat, node, local, hosts, r->comm->nnodes,
                    json_object_get(r->t->run_info, "model"), process, limits, zt_bill_overhead(&r->bill), device,
                    zt_matrix_owners_json(&r->t->eng), r->val_loss, r->val_step, NAN, NULL};
    /* The step-time model's prediction for this configuration, beside the measured median. */
    zt_time_profile prof;
    zt_plan plan;
    zt_time_pred pred;
    zt_error perr = {0};
    zt_train_config pc = *c;
    s.predicted_step_s = NAN;
    if (zt_auto_profile(c, &prof, &perr) == ZT_OK &&
        zt_auto_predict(&pc, r->t->family, N, r->comm->nnodes, &prof, &plan, &pred, &perr) == ZT_OK)
        s.predicted_step_s = pred.step_s, s.predicted_profile = prof.source;
    zt_status st = zt_summary_write(&s, c->log_dir, &r->ctx->err);
    json_decref(s.muon_owners);
    json_decref(process);
    json_decref(device);
    free(cols);
    free(node);
    return st;
}

/* Every rank's trace part is complete before rank 0 joins them. Tracing is
 * a per-rank choice, so every rank takes part in the barrier. */
static zt_status merge_trace(const run_state *r) {
    zt_ctx *ctx = r->ctx;
    ctx->trace = r->comm->trace = NULL;
    ctx->device_mem.observer = ctx->host_mem.observer = NULL;
    int traced = r->t->trace.f != NULL;
    zt_trace_close(&r->t->trace);
    ZT_TRY(zt_comm_barrier(r->comm, &ctx->err));
    if (!traced || ctx->rank != 0) return ZT_OK;
    int missing = 0;
    ZT_TRY(zt_trace_merge(r->c->log_dir, r->comm->world_size, &missing, &ctx->err));
    if (missing > 0)
        zt_log_warn(&ctx->log, "trace.json: %d rank(s) wrote no trace part into %s (tracing off or another "
                    "--log-dir there)", missing, r->c->log_dir);
    return ZT_OK;
}

/* The end of the run: digest, the rank table, labels, summary, trace. */
static zt_status finish(run_state *r) {
    const zt_train_config *c = r->c;
    zt_ctx *ctx = r->ctx;
    char digest[33];
    ZT_TRY(zt_engine_digest(&r->t->eng, digest));
    double median, tps = r->tokens_time > 0 ? (double)r->tokens_counted / r->tokens_time : NAN;
    ZT_TRY(median_step_time(r, &median));
    int ran = r->end - r->start;
    if (ran > 0)
        zt_log_rank0(&ctx->log, "done: final loss %.6f (floor %.6f, gap %.4f), %.0f tokens/s, params digest %s",
                     r->t->losses[ran - 1], r->floor, r->t->losses[ran - 1] - r->floor, tps, digest);
    else
        zt_log_rank0(&ctx->log, "done: no steps to run (at step %d), params digest %s", r->start, digest);
    if (c->log_dir[0]) ZT_TRY(zt_labels_write(c->log_dir, ctx->rank, &ctx->device_mem, &ctx->host_mem, &ctx->err));
    const zt_leak_watch *lw = &r->t->leak;
    if (ran >= c->leak_window && lw->judgements == 0 && !r->bill.failed)
        zt_log_warn(&ctx->log, "leak watch: judged nothing: %ld step ends sampled in %d steps (sampling keeps to 1%% "
                    "of the run), never %d within a window of %d steps; a longer --leak-window sees more",
                    lw->samples, ran, ZT_LEAK_MIN_SAMPLES, c->leak_window);
    int N = r->comm->world_size;
    size_t *table = calloc((size_t)N * RANK_ROW, sizeof *table);
    if (!table) return ZT_FAIL(&ctx->err, ZT_ERR_OOM, "trainer: cannot allocate the rank table");
    char *hosts = calloc((size_t)N, ZT_HOST_NAME); /* [N][ZT_HOST_NAME]: every rank's host */
    zt_status st = hosts ? gather_rank_rows(ctx, &r->bill, &r->t->device, r->comm, table)
                         : ZT_FAIL(&ctx->err, ZT_ERR_OOM, "trainer: cannot allocate the host names");
    if (st == ZT_OK) {
        memcpy(hosts + (size_t)ctx->rank * ZT_HOST_NAME, r->comm->host, ZT_HOST_NAME);
        st = zt_comm_all_gather_host(r->comm, hosts, ZT_HOST_NAME, &ctx->err);
    }
    if (st == ZT_OK && !c->quiet) print_rank_table(ctx, c, N, table, "at exit");
    if (st == ZT_OK && c->log_dir[0] && ctx->rank == 0) st = write_summary(r, table, hosts, digest, tps, median);
    free(table);
    free(hosts);
    zt_status merged = merge_trace(r);
    return st != ZT_OK ? st : merged;
}

/* The steps, until --steps or a stop the ranks agreed on; then the save
 * in flight is committed. */
static zt_status steps(run_state *r) {
    r->end = r->c->steps;
    for (int step = r->start; step < r->c->steps; step++) {
        step_record s;
        memset(&s, 0, sizeof s);
        s.step = step;
        ZT_TRY(train_step(r, &s));
        ZT_TRY(after_step(r, &s));
        if (r->stop_signo) {
            r->end = step + 1;
            zt_log_rank0(&r->ctx->log, "stopped at step %d on %s (--on-signal %s)", r->end,
                         zt_signal_name(r->stop_signo), r->c->on_signal);
            break;
        }
    }
    return zt_checkpointer_finish(&r->ckpt);
}

static zt_status run(const zt_train_config *c, const zt_train_hooks *test, zt_stop_signals *signals,
                     zt_ctx *ctx, zt_comm *comm, trainer *t, int *stop_signo) {
    run_state r;
    memset(&r, 0, sizeof r);
    r.c = c, r.test = test, r.ctx = ctx, r.comm = comm, r.t = t, r.signals = signals;
    r.val_loss = NAN;
    ZT_TRY(open_data(&r));
    ZT_TRY(create_model(&r));
    ZT_TRY(open_outputs(&r));
    ZT_TRY(zt_leak_watch_init(&t->leak, c->leak_window, (double)c->leak_min_rate, &ctx->err));
    zt_bill_start(&r.bill, ctx);
    zt_comm *comms[] = {comm, &t->shard, &t->replicas, &t->secondary, &t->hop_node, &t->hop_cross};
    zt_device_track_start(&t->device, ctx, comms, 6);
    int hybrid = t->groups > 1;
    zt_checkpointer_init(&r.ckpt, c, ctx, comm, hybrid ? &t->shard : comm, !hybrid || comm->rank < t->shard.world_size,
                         &t->eng, t->run_info, &r.hooks);
    zt_status st = steps(&r);
    if (st != ZT_OK) { /* the writer thread reads the engine's staging: it ends before anything is freed */
        zt_ckpt_save_abandon(r.ckpt.pending);
        return st;
    }
    *stop_signo = r.stop_signo;
    return finish(&r);
}

zt_status zt_train_run(const zt_train_config *c, const zt_train_model *family, const zt_train_hooks *test,
                       zt_stop_signals *signals, zt_ctx *ctx, zt_comm *comm, int *stop_signo) {
    trainer t;
    memset(&t, 0, sizeof t);
    t.family = family;
    *stop_signo = 0;
    zt_status st = zt_memory_snapshot_start(c, ctx);
    if (st == ZT_OK) st = run(c, test, signals, ctx, comm, &t, stop_signo);
    /* A collective timed out: the caller aborts the job, and freeing device
     * memory now would wait for the collective that never ends. */
    if (st == ZT_ERR_TIMEOUT) return st;
    if (st == ZT_ERR_OOM) zt_ctx_capture_oom_report(ctx); /* before cleanup frees the evidence */
    st = zt_memory_snapshot_finish(c, ctx, st); /* at exit and at an OOM, while the blocks are held */
    /* The timeline lives in t, the whole bill's sampler in run's frame:
     * unhook both before anything else is freed. */
    ctx->trace = comm->trace = NULL;
    ctx->device_mem.observer = ctx->host_mem.observer = NULL;
    ctx->device_mem.on_phase_end = NULL;
    ctx->device_mem.on_peak = NULL;
    ctx->device_mem.peak_watch_bytes = 0;
    zt_device_track_stop(ctx); /* its communicators go with t */
    trainer_free(&t);
    return st;
}
