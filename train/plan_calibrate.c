/* zt-plan --calibrate (plan_calibrate.h): times the runtime's own kernels,
 * host optimizer, swap file and collectives, with every rank busy as in a
 * run, and writes the rates into a zt_time_profile. */
#include "plan_calibrate.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "zt_comm.h"
#include "zt_cpu_adam.h"
#include "zt_ctx.h"
#include "zt_nvme.h"
#include "zt_time.h"

#define CAL_MAX_BLOCKS 8
#define CAL_PATTERN ((size_t)1 << 20)

typedef struct {
    zt_comm comm;
    zt_ctx ctx;
    int have_comm;
    int threads;
    double min_s; /* the least duration of one timed round */
    zt_block *blocks[CAL_MAX_BLOCKS];
    zt_mem *spaces[CAL_MAX_BLOCKS];
    int nblocks;
    unsigned char *pattern; /* [CAL_PATTERN]: what buffers are filled with */
    zt_error *err;
} calib;

/* One operation to time: run issues it once, on the compute stream. */
typedef struct bench {
    zt_status (*run)(calib *c, const struct bench *b);
    const zt_ops *o;
    void *x[6];
    int dim[5];
    size_t n;
} bench;

/* ---- buffers ---- */

/* Random values, finite in every dtype: 16-bit words 0x3cXX or 0xbcXX,
 * +-(0.008 .. 0.03) in bf16 and in fp32 (whose high half such a word is),
 * +-(1 .. 1.25) in fp16. Not a constant, since a GPU runs a GEMM of
 * constant operands faster than one of real data (fewer bits toggle). */
static zt_status make_pattern(calib *c) {
    c->pattern = malloc(CAL_PATTERN);
    if (!c->pattern) return ZT_FAIL(c->err, ZT_ERR_OOM, "calibrate: cannot allocate its fill pattern");
    unsigned x = 12345u;
    for (size_t i = 0; i < CAL_PATTERN; i += 2) {
        x = x * 1664525u + 1013904223u;
        c->pattern[i] = (unsigned char)(x >> 24), c->pattern[i + 1] = (x >> 16) & 1u ? 0xbc : 0x3c;
    }
    return ZT_OK;
}

/* bytes of the device space (or the host pool) for this measurement,
 * filled with the pattern: touched before anything is timed. */
static zt_status buf(calib *c, int host, size_t bytes, void **p) {
    if (c->nblocks == CAL_MAX_BLOCKS) return ZT_FAIL(c->err, ZT_ERR_INTERNAL, "calibrate: too many buffers");
    zt_mem *m = host ? &c->ctx.host_mem : &c->ctx.device_mem;
    zt_block *b = NULL;
    ZT_TRY(zt_mem_alloc(m, bytes, ZT_CAT_WORKSPACE, "calibration", &b, c->err));
    c->blocks[c->nblocks] = b, c->spaces[c->nblocks++] = m;
    *p = b->ptr;
    for (size_t at = 0; at < bytes; at += CAL_PATTERN) {
        size_t n = bytes - at < CAL_PATTERN ? bytes - at : CAL_PATTERN;
        if (host) memcpy((char *)*p + at, c->pattern, n); /* the host pool (pinned on CUDA): the host writes it */
        else ZT_TRY(c->ctx.be->memcpy_async(c->ctx.be, (char *)*p + at, c->pattern, n, ZT_COPY_H2D, &c->ctx.compute,
                                            c->err));
    }
    return ZT_OK;
}

static zt_status bufs(calib *c, int host, int n, const size_t *bytes, void **p) {
    for (int i = 0; i < n; i++) ZT_TRY(buf(c, host, bytes[i], &p[i]));
    return ZT_OK;
}

/* Frees this measurement's buffers and gives their memory back, so the
 * process holds one measurement's at a time. */
static void release(calib *c) {
    for (; c->nblocks > 0; c->nblocks--) zt_mem_free(c->spaces[c->nblocks - 1], c->blocks[c->nblocks - 1]);
    zt_mem_release_cache(&c->ctx.device_mem);
    zt_mem_release_cache(&c->ctx.host_mem);
}

/* ---- timing ---- */

static zt_status run_k(calib *c, const bench *b, long k, double *sec) {
    double t0 = zt_now_s();
    for (long i = 0; i < k; i++) ZT_TRY(b->run(c, b));
    ZT_TRY(c->ctx.be->stream_sync(c->ctx.be, &c->ctx.compute, c->err)); /* a GPU's queue drained */
    *sec = zt_now_s() - t0;
    return ZT_OK;
}

/* Seconds per call of b: a warm-up call, then k grown until k calls last
 * min_s (that round counts), best of 3 rounds. Rounds, not single calls,
 * since a GPU's launches are asynchronous and a CPU's clock is coarse. */
static zt_status time_op(calib *c, const bench *b, double *per_call) {
    double t, best;
    long k = 1;
    ZT_TRY(run_k(c, b, 1, &t));
    ZT_TRY(run_k(c, b, k, &t));
    while (t < c->min_s) {
        double grow = t > 0 ? 1.2 * c->min_s / t : 1000;
        k = (long)ceil((double)k * fmin(fmax(grow, 2), 1000));
        ZT_TRY(run_k(c, b, k, &t));
    }
    best = t;
    for (int r = 1; r < 3; r++) {
        ZT_TRY(run_k(c, b, k, &t));
        best = fmin(best, t);
    }
    *per_call = best / (double)k;
    return ZT_OK;
}

/* Allocates n buffers for b, times it and frees them. */
static zt_status time_with(calib *c, bench *b, int host, int n, const size_t *bytes, double *per_call) {
    zt_status st = bufs(c, host, n, bytes, b->x);
    if (st == ZT_OK) st = time_op(c, b, per_call);
    release(c);
    return st;
}

/* ---- the operations ---- */

static zt_status run_matmul(calib *c, const bench *b) {
    b->o->matmul_fwd(&c->ctx.compute, b->x[0], b->x[1], b->x[2], NULL, b->dim[0], b->dim[1], b->dim[2]);
    return ZT_OK;
}
/* dim: B, T, C, NH, which (materialized forward, backward, fused forward,
 * backward); x: qkv[B,T,3C], out[B,T,C] (also the backward's dout: both
 * are only read), att[B,NH,T,T] or lse[B,NH,T], dqkv[B,T,3C], datt[B,NH,T],
 * scratch[n] */
static zt_status run_attention(calib *c, const bench *b) {
    const int *d = b->dim;
    zt_stream *s = &c->ctx.compute;
    void *const *x = b->x;
    if (d[4] == 0) b->o->attention_fwd(s, x[1], x[2], x[0], d[0], d[1], d[2], d[3]);
    else if (d[4] == 1) b->o->attention_bwd(s, x[3], x[4], x[1], x[0], x[2], d[0], d[1], d[2], d[3], x[5], b->n);
    else if (d[4] == 2) b->o->attention_fused_fwd(s, x[1], x[2], x[0], d[0], d[1], d[2], d[3]);
    else b->o->attention_fused_bwd(s, x[3], x[4], x[1], x[0], x[1], x[2], d[0], d[1], d[2], d[3], x[5], b->n);
    return ZT_OK;
}
static zt_status run_gelu(calib *c, const bench *b) {
    b->o->gelu_fwd(&c->ctx.compute, b->x[1], b->x[0], b->n);
    return ZT_OK;
}
/* The hyperparameters are a run's usual ones; the step count 1 makes the
 * bias corrections nontrivial. x: p, g, m, v (and the host's out copy). */
static zt_status run_adam_device(calib *c, const bench *b) {
    b->o->adamw(&c->ctx.compute, b->x[0], b->x[1], b->x[2], b->x[3], b->n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1);
    return ZT_OK;
}
static zt_status run_adam_host(calib *c, const bench *b) {
    zt_cpu_adam_fused(zt_cpu_adam_best_isa(), c->threads, b->x[0], b->x[1], b->x[2], b->x[3], b->x[4], ZT_FP32, b->n,
                      1.0f, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1);
    return ZT_OK;
}
static zt_status run_copy(calib *c, const bench *b) {
    return c->ctx.be->memcpy_async(c->ctx.be, b->x[1], b->x[0], b->n, (zt_copy_kind)b->dim[0], &c->ctx.compute,
                                   c->err);
}

/* ---- compute ---- */

/* tokens x in -> out per class; a GPU's large class at a size its rate is
 * reached at (the CPU's already is at 2048 x 1024 -> 1024). */
static const int gemm_shape[2][ZT_GEMM_CLASSES][3] = {
    {{64, 64, 192}, {512, 256, 768}, {2048, 1024, 1024}},
    {{64, 64, 192}, {512, 256, 768}, {4096, 4096, 4096}},
};

static zt_status gemm_rate(calib *c, zt_dtype d, const int *sh, double *flops) {
    bench b = {.run = run_matmul, .o = c->ctx.be->ops_for[d], .dim = {sh[0], sh[1], sh[2]}};
    size_t e = zt_dtype_size(d), N = (size_t)sh[0], C = (size_t)sh[1], OC = (size_t)sh[2];
    size_t bytes[3] = {N * OC * e, N * C * e, OC * C * e}; /* out, inp, w */
    double s = 0;
    ZT_TRY(time_with(c, &b, 0, 3, bytes, &s));
    *flops = 2.0 * (double)N * (double)C * (double)OC / s;
    return ZT_OK;
}

static zt_status measure_gemm(calib *c, zt_time_profile *p) {
    int gpu = c->ctx.be->device == ZT_DEVICE_CUDA;
    for (int d = 0; d < ZT_TIME_DTYPES; d++)
        for (int k = 0; k < ZT_GEMM_CLASSES; k++) {
            /* Without kernels in a dtype the engine computes in fp32. */
            if (!c->ctx.be->ops_for[d]) p->gemm_flops[d][k] = p->gemm_flops[ZT_FP32][k];
            else ZT_TRY(gemm_rate(c, (zt_dtype)d, gemm_shape[gpu][k], &p->gemm_flops[d][k]));
        }
    return ZT_OK;
}

/* Both kinds, forward and backward, in fp32 (the default --dtype; the
 * profile has one attention rate for every dtype). Materialized before
 * fused, forward before backward: each backward reads what its forward
 * left (att, or lse in the same buffer). */
static zt_status measure_attention(calib *c, zt_time_profile *p) {
    static const int shape[2][4] = {{2, 256, 256, 4}, {4, 1024, 1024, 16}}; /* B, T, C, NH */
    const int *sh = shape[c->ctx.be->device == ZT_DEVICE_CUDA];
    size_t B = (size_t)sh[0], T = (size_t)sh[1], C = (size_t)sh[2], NH = (size_t)sh[3], NC = B * T * C;
    size_t bt = B * NH * T, scratch = (8 * NC > NH * T * T ? 8 * NC : NH * T * T) * 4; /* as a GPT block lends */
    size_t bytes[6] = {3 * NC * 4, NC * 4, bt * T * 4, 3 * NC * 4, bt * 4, scratch};
    bench b = {.run = run_attention, .o = c->ctx.be->ops, .dim = {sh[0], sh[1], sh[2], sh[3]}, .n = scratch};
    zt_status st = bufs(c, 0, 6, bytes, b.x);
    for (int i = 0; i < 4 && st == ZT_OK; i++) {
        double s = 0;
        b.dim[4] = i;
        st = time_op(c, &b, &s);
        double flops = (i % 2 ? 8.0 : 4.0) * (double)B * (double)(T * T) * (double)C; /* backward: twice */
        if (st == ZT_OK) p->attn_flops[i / 2][i % 2] = flops / s;
    }
    release(c);
    return st;
}

/* gelu over 16M fp32 elements (bytes read + written), and one call on 8
 * elements for what any kernel call costs beyond its work. */
static zt_status measure_pointwise(calib *c, zt_time_profile *p) {
    size_t n = (size_t)16 << 20, bytes[2] = {n * 4, n * 4};
    bench b = {.run = run_gelu, .o = c->ctx.be->ops, .n = n};
    double s = 0;
    zt_status st = bufs(c, 0, 2, bytes, b.x);
    if (st == ZT_OK) st = time_op(c, &b, &s);
    if (st == ZT_OK) p->pointwise_gbs = 2.0 * (double)n * 4 / s / 1e9;
    b.n = 8;
    if (st == ZT_OK) st = time_op(c, &b, &p->kernel_overhead_s);
    release(c);
    return st;
}

/* The device's AdamW kernel, and the fused host AdamW the engine runs under
 * --offload cpu (optim/adamw.c: on the host pool, writing the new params'
 * copy, the backend's threads), each over 4M elements. */
static zt_status measure_adam(calib *c, zt_time_profile *p) {
    size_t n = (size_t)4 << 20, bytes[5] = {n * 4, n * 4, n * 4, n * 4, n * 4};
    bench dev = {.run = run_adam_device, .o = c->ctx.be->ops, .n = n};
    bench host = {.run = run_adam_host, .n = n};
    double s = 0;
    ZT_TRY(time_with(c, &dev, 0, 4, bytes, &s));
    p->adam_device_eps = (double)n / s;
    ZT_TRY(time_with(c, &host, 1, 5, bytes, &s));
    p->adam_host_eps = (double)n / s;
    return ZT_OK;
}

/* The CPU: a 64 MiB memcpy in device memory. CUDA: the pinned host pool
 * to the device and back, the rate of both together. */
static zt_status measure_copy(calib *c, zt_time_profile *p) {
    size_t n = (size_t)64 << 20;
    int gpu = c->ctx.be->device == ZT_DEVICE_CUDA;
    bench in = {.run = run_copy, .n = n, .dim = {gpu ? ZT_COPY_H2D : ZT_COPY_D2D}};
    double s = 0, back = 0;
    zt_status st = buf(c, gpu, n, &in.x[0]);
    if (st == ZT_OK) st = buf(c, 0, n, &in.x[1]);
    if (st == ZT_OK) st = time_op(c, &in, &s);
    bench out = {.run = run_copy, .n = n, .dim = {ZT_COPY_D2H}, .x = {in.x[1], in.x[0]}};
    if (st == ZT_OK && gpu) st = time_op(c, &out, &back);
    release(c);
    if (st == ZT_OK) p->copy_gbs = (gpu ? 2.0 : 1.0) * (double)n / (s + back) / 1e9;
    return st;
}

/* ---- the swap file ---- */

#define NVME_FILE ((size_t)64 << 20)
#define NVME_REQUEST ((size_t)1 << 20) /* --nvme-block-size's default */

static zt_status nvme_pass(calib *c, zt_nvme_file *f, int write, char *data) {
    zt_nvme_ticket t = {0};
    zt_status st = ZT_OK;
    for (size_t off = 0; off < NVME_FILE && st == ZT_OK; off += NVME_REQUEST)
        st = zt_nvme_submit(f, write, data + off, off, NVME_REQUEST, &t, c->err);
    zt_status w = zt_nvme_wait(f, &t, c->err); /* what was queued completes either way */
    return st != ZT_OK ? st : w;
}

/* Writes the file (fsync'd), then reads it back from the device: buffered
 * files drop their cached pages first. One pass each, as the engine's
 * swap file is opened (O_DIRECT and io_uring where allowed). */
static zt_status nvme_rates(calib *c, zt_nvme_file *f, char *data, zt_time_profile *p) {
    double t0 = zt_now_s();
    ZT_TRY(nvme_pass(c, f, 1, data));
    if (fsync(f->fd) != 0) return ZT_FAIL(c->err, ZT_ERR_IO, "calibrate: cannot fsync %s", f->path);
    double tw = zt_now_s() - t0;
    if (!f->direct) (void)posix_fadvise(f->fd, 0, 0, POSIX_FADV_DONTNEED);
    t0 = zt_now_s();
    ZT_TRY(nvme_pass(c, f, 0, data));
    double tr = zt_now_s() - t0;
    p->nvme_gbs[0] = (double)NVME_FILE / tr / 1e9, p->nvme_gbs[1] = (double)NVME_FILE / tw / 1e9;
    return ZT_OK;
}

/* The file goes into a directory of this process's own under dir, since
 * the swap file's name (zt-swap-rank<R>.bin) may be a running job's. */
static zt_status measure_nvme(calib *c, const char *dir, zt_time_profile *p) {
    char own[1024];
    void *raw = NULL;
    zt_nvme_file f;
    zt_nvme_options opt = {0};
    snprintf(own, sizeof own, "%.960s/zt-calibrate-%ld", dir, (long)getpid());
    if (mkdir(own, 0700) != 0)
        return ZT_FAIL(c->err, ZT_ERR_IO, "calibrate: cannot create %s: %s", own, strerror(errno));
    zt_status st = buf(c, 1, NVME_FILE + ZT_NVME_ALIGN, &raw);
    char *data = (char *)(((uintptr_t)raw + ZT_NVME_ALIGN - 1) / ZT_NVME_ALIGN * ZT_NVME_ALIGN);
    if (st == ZT_OK) st = zt_nvme_open(&f, own, c->ctx.rank, NVME_FILE, &opt, c->err);
    if (st == ZT_OK) {
        st = nvme_rates(c, &f, data, p);
        zt_nvme_close(&f); /* removes the file */
    }
    rmdir(own);
    release(c);
    return st;
}

/* ---- collectives ---- */

/* An all-reduce as the engine makes it (fp32 reduce-scatter, then the
 * all-gather of the sums), or its reduce-scatter alone. */
typedef struct {
    void *send, *staging; /* [N * count] fp32; the all-gather lands in send */
    float *out;           /* [count] */
    size_t count;
    int rs_only;
} coll;

static zt_status coll_once(calib *c, zt_comm *g, const coll *k) {
    zt_comm_handle rs = {0}, ag = {0};
    ZT_TRY(zt_comm_reduce_scatter_start(g, k->send, k->staging, k->out, k->count, zt_wire_plain(ZT_FP32), NULL, &rs,
                                        c->err));
    ZT_TRY(zt_comm_wait(g, &rs, c->err));
    if (k->rs_only) return ZT_OK;
    ZT_TRY(zt_comm_all_gather_start(g, k->out, k->send, k->count * sizeof(float), NULL, &ag, c->err));
    return zt_comm_wait(g, &ag, c->err);
}

static zt_status coll_bufs(calib *c, zt_comm *g, size_t total_bytes, int rs_only, coll *k) {
    k->count = total_bytes / sizeof(float) / (size_t)g->world_size, k->rs_only = rs_only;
    if (k->count == 0) k->count = 1; /* more ranks than floats */
    size_t n = k->count * (size_t)g->world_size * sizeof(float);
    ZT_TRY(buf(c, 0, n, &k->send));
    ZT_TRY(buf(c, 0, n, &k->staging));
    void *out = NULL;
    ZT_TRY(buf(c, 0, k->count * sizeof(float), &out));
    k->out = out;
    return c->ctx.be->stream_sync(c->ctx.be, &c->ctx.compute, c->err); /* filled before any rank sends */
}

/* Seconds per call, best of 3 rounds of k calls; every rank runs rank 0's
 * k (from a timed call after the warm-up), so the calls pair up. */
static zt_status time_coll(calib *c, zt_comm *g, const coll *k, double *per_call) {
    ZT_TRY(coll_once(c, g, k)); /* connections and buffers made on first use */
    double t0 = zt_now_s(), t;
    ZT_TRY(coll_once(c, g, k));
    t = zt_now_s() - t0;
    ZT_TRY(zt_comm_broadcast(g, &t, sizeof t, 0, c->err));
    long reps = (long)fmin(ceil(c->min_s / fmax(t, 1e-7)), 1e6);
    *per_call = INFINITY;
    for (int r = 0; r < 3; r++) {
        ZT_TRY(zt_comm_barrier(g, c->err));
        t0 = zt_now_s();
        for (long i = 0; i < reps; i++) ZT_TRY(coll_once(c, g, k));
        *per_call = fmin(*per_call, (zt_now_s() - t0) / (double)reps);
    }
    return ZT_OK;
}

/* All-reduces of 1 KiB, 1 MiB and 16 MiB over g, fitted as 2 calls x
 * latency + bytes x 2(N-1)/N / busbw (comm.c's zt_coll_bandwidth): the
 * slope from the two large ones, the latency from the small one, whose
 * bytes cost almost nothing (a cache-resident 1 MiB moves faster per byte
 * than 16 MiB, so the slope overprices them). */
static zt_status measure_link(calib *c, zt_comm *g, int link, zt_time_profile *p) {
    static const size_t sizes[3] = {(size_t)1 << 10, (size_t)1 << 20, (size_t)16 << 20};
    double n = g->world_size, x[3], t[3];
    for (int i = 0; i < 3; i++) {
        coll k;
        zt_status st = coll_bufs(c, g, sizes[i], 0, &k);
        if (st == ZT_OK) st = time_coll(c, g, &k, &t[i]);
        release(c);
        ZT_TRY(st);
        x[i] = 2 * (n - 1) / n * (double)(k.count * sizeof(float)) * n;
    }
    double slope = t[2] > t[1] ? (t[2] - t[1]) / (x[2] - x[1]) : t[2] / x[2];
    double lat = fmax(t[0] - slope * x[0], 0.1 * t[0]); /* noise must not make it negative */
    p->coll_gbs[link] = 1 / slope / 1e9, p->coll_latency_s[link] = lat / 2;
    return ZT_OK;
}

/* Several nodes: the world's rates are the inter-node link's; the
 * intra-node one is timed within each node where the communicator can
 * split (MPI) and the node has several ranks, else the table's stays. */
static zt_status measure_node_link(calib *c, zt_time_profile *p) {
    zt_comm node;
    zt_status st = zt_comm_split(&c->comm, c->comm.node, c->comm.rank, &node, c->err);
    if (st == ZT_ERR_UNSUPPORTED) return zt_error_clear(c->err), ZT_OK;
    ZT_TRY(st);
    if (node.world_size > 1) st = measure_link(c, &node, 0, p);
    zt_comm_destroy(&node);
    return st;
}

/* The overlap: a 16 MiB reduce-scatter started, then as many medium fp32
 * GEMMs as it lasts, progressed between them as the engine does between
 * units; overlap = 1 - (t_both - t_gemm) / t_comm, in [0, 1]. Every rank
 * runs rank 0's GEMM count, so the ranks stay in step. */
static zt_status overlap_loop(calib *c, const coll *k, const bench *g, long reps, double *best) {
    *best = INFINITY; /* best of 3, with k's reduce-scatter or (k NULL) without */
    for (int r = 0; r < 3; r++) {
        zt_comm_handle h = {0};
        ZT_TRY(zt_comm_barrier(&c->comm, c->err));
        double t0 = zt_now_s();
        if (k)
            ZT_TRY(zt_comm_reduce_scatter_start(&c->comm, k->send, k->staging, k->out, k->count,
                                                zt_wire_plain(ZT_FP32), NULL, &h, c->err));
        for (long i = 0; i < reps; i++) {
            ZT_TRY(g->run(c, g));
            if (k) ZT_TRY(zt_comm_progress(&c->comm, &h, c->err));
        }
        if (k) ZT_TRY(zt_comm_wait(&c->comm, &h, c->err));
        ZT_TRY(c->ctx.be->stream_sync(c->ctx.be, &c->ctx.compute, c->err));
        *best = fmin(*best, zt_now_s() - t0);
    }
    return ZT_OK;
}

static zt_status overlap_of(calib *c, const coll *k, const bench *g, double *overlap) {
    double t_comm = 0, call = 0, t_gemm = 0, t_both = 0;
    ZT_TRY(time_coll(c, &c->comm, k, &t_comm));
    ZT_TRY(time_op(c, g, &call));
    long reps = (long)fmax(1, ceil(t_comm / call));
    ZT_TRY(zt_comm_broadcast(&c->comm, &reps, sizeof reps, 0, c->err));
    ZT_TRY(overlap_loop(c, NULL, g, reps, &t_gemm));
    ZT_TRY(overlap_loop(c, k, g, reps, &t_both));
    *overlap = fmin(1, fmax(0, 1 - (t_both - t_gemm) / t_comm));
    return ZT_OK;
}

static zt_status measure_overlap(calib *c, zt_time_profile *p) {
    const int *sh = gemm_shape[c->ctx.be->device == ZT_DEVICE_CUDA][ZT_GEMM_MEDIUM];
    bench g = {.run = run_matmul, .o = c->ctx.be->ops, .dim = {sh[0], sh[1], sh[2]}};
    size_t N = (size_t)sh[0], C = (size_t)sh[1], OC = (size_t)sh[2], bytes[3] = {N * OC * 4, N * C * 4, OC * C * 4};
    coll k;
    zt_status st = coll_bufs(c, &c->comm, (size_t)16 << 20, 1, &k);
    if (st == ZT_OK) st = bufs(c, 0, 3, bytes, g.x);
    if (st == ZT_OK) st = overlap_of(c, &k, &g, &p->overlap);
    release(c);
    return st;
}

/* With one node the intra- and inter-node figures are one link's. */
static zt_status measure_comm(calib *c, zt_time_profile *p) {
    int cross = c->comm.nnodes > 1;
    ZT_TRY(measure_link(c, &c->comm, cross, p));
    if (cross) ZT_TRY(measure_node_link(c, p));
    else p->coll_gbs[1] = p->coll_gbs[0], p->coll_latency_s[1] = p->coll_latency_s[0];
    return measure_overlap(c, p);
}

static zt_status measure_local(calib *c, const zt_calibrate_setup *setup, zt_time_profile *p) {
    ZT_TRY(measure_gemm(c, p));
    ZT_TRY(measure_attention(c, p));
    ZT_TRY(measure_pointwise(c, p));
    ZT_TRY(measure_adam(c, p));
    ZT_TRY(measure_copy(c, p));
    return setup->nvme_path ? measure_nvme(c, setup->nvme_path, p) : ZT_OK;
}

/* ---- set-up ---- */

/* As zt-train: MPI on the CPU; NCCL over the GPUs, or MPI with host
 * staging where NCCL cannot start. One rank times no collective, so MPI
 * serves it everywhere. */
static zt_status create_comm(calib *c, zt_device dev) {
    ZT_TRY(zt_comm_create_mpi(&c->comm, c->err));
    c->have_comm = 1;
    if (dev == ZT_DEVICE_CPU || c->comm.world_size == 1) return ZT_OK;
    zt_comm_destroy(&c->comm);
    c->have_comm = 0;
    zt_status st = zt_comm_create_nccl(&c->comm, c->err);
    if (st == ZT_ERR_UNSUPPORTED) {
        zt_comm_destroy(&c->comm);
        zt_error_clear(c->err);
        st = zt_comm_create_staged(&c->comm, 0, c->err);
    }
    c->have_comm = st == ZT_OK;
    return st;
}

/* The communicator, then the context on this rank's GPU with zt-train's
 * threads (cores / ranks on the node unless given), settled by every rank. */
static zt_status start(calib *c, const zt_calibrate_setup *setup, zt_device dev) {
    ZT_TRY(create_comm(c, dev));
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int local = c->comm.local_size;
    c->threads = setup->threads > 0 ? setup->threads : cores > local ? (int)(cores / local) : 1;
    zt_status st = zt_ctx_init_on(&c->ctx, dev, c->comm.local_rank, c->threads, 0, c->comm.rank,
                                  c->comm.world_size, 1);
    if (st != ZT_OK) zt_error_adopt(c->err, st, c->ctx.err.where, c->ctx.err.msg);
    if (st == ZT_OK) st = make_pattern(c);
    return zt_comm_agree(&c->comm, st, c->err);
}

static void describe(const calib *c, const zt_calibrate_setup *setup, zt_time_profile *p) {
    char date[24];
    time_t now = time(NULL);
    struct tm tm;
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime_r(&now, &tm));
    snprintf(p->device, sizeof p->device, "%s", setup->device);
    p->measured = 1, p->ranks_per_node = c->comm.local_size, p->threads = c->threads, p->efficiency = 1;
    size_t cap = sizeof p->source;
    int n = snprintf(p->source, cap, "measured by zt-plan --calibrate on %.40s, %.20s, %d rank(s) x %d thread(s)",
                     c->comm.host, date, c->comm.world_size, c->threads);
    if (n > 0 && (size_t)n < cap) /* what the built-in table still gives */
        snprintf(p->source + n, cap - (size_t)n, "; built-in: host overheads%s%s",
                 c->comm.world_size == 1 ? ", collectives, overlap" : "", setup->nvme_path ? "" : ", nvme");
}

zt_status zt_time_calibrate(const zt_calibrate_setup *setup, zt_time_profile *out, zt_error *err) {
    const char *dev = setup->device ? setup->device : "";
    if (strcmp(dev, "cpu") != 0 && strcmp(dev, "cuda") != 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "calibrate: device must be cpu or cuda (got '%s')", dev);
    ZT_TRY(zt_time_profile_builtin(dev, out, err));
    calib *c = calloc(1, sizeof *c);
    if (!c) return ZT_FAIL(err, ZT_ERR_OOM, "calibrate: cannot allocate its state");
    c->err = err;
    c->min_s = fmin(fmax(0.003 * (setup->budget_s > 0 ? setup->budget_s : 10), 0.002), 0.5);
    zt_status st = start(c, setup, strcmp(dev, "cuda") == 0 ? ZT_DEVICE_CUDA : ZT_DEVICE_CPU);
    if (st == ZT_OK) st = zt_comm_agree(&c->comm, measure_local(c, setup, out), err);
    if (st == ZT_OK && c->comm.world_size > 1) st = zt_comm_agree(&c->comm, measure_comm(c, out), err);
    if (st == ZT_OK) describe(c, setup, out);
    if (st == ZT_OK) st = zt_comm_broadcast(&c->comm, out, sizeof *out, 0, err); /* one profile on every rank */
    release(c);
    zt_ctx_destroy(&c->ctx);
    if (c->have_comm) zt_comm_destroy(&c->comm);
    free(c->pattern);
    free(c);
    return st;
}
