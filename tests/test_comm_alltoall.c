/* zt_comm_all_to_all_start (comm/zt_comm.h) under mpirun, at any world
 * size: rank r sends (r+1)(j+2) x scale bytes to rank j, nothing where
 * r + j = 1 mod 3 (r != j), so uneven counts and empty pairs meet; every
 * rank's chunk to itself is never empty. Every received byte is checked,
 * and so is every byte between the chunks (it must stay as it was), for
 * chunks packed in peer order and for chunks in reverse order with gaps
 * between them, at scale 1 and at a scale whose chunks cross 1 MiB (MPI
 * then moves them as units of many bytes). Also: two exchanges in flight
 * at once, completed in reverse order; an exchange inside groups of two
 * ranks (zt_comm_split: Ulysses' sequence groups); the statistics (calls,
 * bytes sent, bytes received from the other ranks); the refusals (a chunk
 * to itself of two sizes, a handle in flight, counts past MPI's ints); the
 * watchdog naming the all-to-all and what waited on it; and the dry
 * communicator's counts with busbw's factor.
 *   launch/zt-run -np 3 build/tests/test_comm_alltoall
 * Built a second time with ZT_A2A_CUDA for device buffers, `ready` a
 * producer stream and the results read on a consumer stream:
 *   ZT_EMU_DEVICES=3 launch/zt-run -np 3 build-emu/tests/test_comm_alltoall_cuda nccl
 *   ZT_EMU_DEVICES=1 launch/zt-run -np 2 build-emu/tests/test_comm_alltoall_cuda staged
 * Exit code 77 (skipped) there without a CUDA device, or without NCCL. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "test_util.h"
#include "zt_comm.h"

#ifdef ZT_A2A_CUDA
#include <cuda_runtime_api.h>

#include "comm_cuda.h"
#endif

#define MAX_RANKS 16
#define GAP_SEND 7 /* bytes before each chunk in the gapped layouts */
#define GAP_RECV 5
#define SENTINEL 0xEE   /* every byte of recv before the exchange */
#define BIG_SCALE 65537 /* np 4's largest chunk 20 x 65537 bytes: past 1 MiB */

/* ---- buffers: host memory for MPI, device memory behind streams for CUDA ---- */

#ifdef ZT_A2A_CUDA
typedef cudaStream_t stream_t;
static void *buf_alloc(size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        printf("FAIL: cudaMalloc(%zu)\n", bytes);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return p;
}
static void buf_free(void *p) { cudaFree(p); }
/* host_alloc'd memory: it must outlive the asynchronous copies. */
static void *host_alloc(size_t bytes) {
    void *p = NULL;
    if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess) {
        printf("FAIL: cudaMallocHost(%zu)\n", bytes);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return p;
}
static void host_free(void *p) { cudaFreeHost(p); }
/* Queued on the producer: the exchange must wait for it through `ready`. */
static void upload(void *dst, const void *src, size_t bytes, stream_t s) {
    CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s) == cudaSuccess, "cudaMemcpyAsync up");
}
/* Queued on the consumer, after zt_comm_wait_stream there. */
static void download(void *dst, const void *src, size_t bytes, stream_t s) {
    CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s) == cudaSuccess, "cudaMemcpyAsync down");
    CHECK(cudaStreamSynchronize(s) == cudaSuccess, "cudaStreamSynchronize");
}
#else
typedef void *stream_t;
static void *buf_alloc(size_t bytes) { return xmalloc(bytes); }
static void buf_free(void *p) { free(p); }
static void *host_alloc(size_t bytes) { return xmalloc(bytes); }
static void host_free(void *p) { free(p); }
static void upload(void *dst, const void *src, size_t bytes, stream_t s) {
    (void)s;
    memcpy(dst, src, bytes);
}
static void download(void *dst, const void *src, size_t bytes, stream_t s) {
    (void)s;
    memcpy(dst, src, bytes);
}
#endif

/* ---- the exchange's pattern ---- */

/* dense: no empty pairs (an exchange that must wait for every peer). */
static size_t pair_bytes(int from, int to, size_t scale, int dense) {
    if (!dense && from != to && (from + to) % 3 == 1) return 0;
    return (size_t)(from + 1) * (size_t)(to + 2) * scale;
}

/* Byte i of the chunk from `from` to `to` in exchange `salt`: a chunk
 * landing at another peer's place, shifted, or from another exchange reads
 * wrong. */
static uint8_t pair_byte(int from, int to, size_t i, int salt) {
    uint32_t x = (uint32_t)from * 0x9E3779B1u ^ (uint32_t)to * 0x85EBCA77u ^ (uint32_t)i * 0xC2B2AE3Du ^
                 (uint32_t)salt * 0x27D4EB2Fu;
    x ^= x >> 15;
    x *= 0x2C1B3C6Du;
    x ^= x >> 12;
    return (uint8_t)x;
}

/* One rank's side of one exchange: counts and offsets per peer, and the
 * extents of its send and recv buffers. */
typedef struct {
    int N, rank, salt;
    size_t send_n[MAX_RANKS], send_off[MAX_RANKS], recv_n[MAX_RANKS], recv_off[MAX_RANKS];
    size_t send_bytes, recv_bytes;
} layout;

/* Packed: chunks in peer order, back to back. Gapped: in reverse peer
 * order with `gap` bytes before each and after the last. */
static void place(int N, const size_t *n, size_t *off, size_t *extent, int gapped, size_t gap) {
    size_t at = 0;
    for (int k = 0; k < N; k++) {
        int j = gapped ? N - 1 - k : k;
        at += gapped ? gap : 0;
        off[j] = at;
        at += n[j];
    }
    *extent = at + (gapped ? gap : 0);
}

static layout make_layout_of(const zt_comm *c, size_t scale, int gapped, int salt, int dense) {
    layout L = {.N = c->world_size, .rank = c->rank, .salt = salt};
    for (int j = 0; j < L.N; j++) {
        L.send_n[j] = pair_bytes(L.rank, j, scale, dense);
        L.recv_n[j] = pair_bytes(j, L.rank, scale, dense);
    }
    place(L.N, L.send_n, L.send_off, &L.send_bytes, gapped, GAP_SEND);
    place(L.N, L.recv_n, L.recv_off, &L.recv_bytes, gapped, GAP_RECV);
    return L;
}

static layout make_layout(const zt_comm *c, size_t scale, int gapped, int salt) {
    return make_layout_of(c, scale, gapped, salt, 0);
}

/* Wrong bytes in a received buffer: chunk i's bytes against pair_byte,
 * every other byte against the sentinel. */
static size_t count_wrong(const layout *L, const uint8_t *got) {
    uint8_t *want = xmalloc(L->recv_bytes);
    memset(want, SENTINEL, L->recv_bytes);
    for (int i = 0; i < L->N; i++)
        for (size_t k = 0; k < L->recv_n[i]; k++) want[L->recv_off[i] + k] = pair_byte(i, L->rank, k, L->salt);
    size_t bad = 0;
    for (size_t k = 0; k < L->recv_bytes; k++) bad += got[k] != want[k];
    free(want);
    return bad;
}

/* An exchange in flight: its layout, buffers and handle. */
typedef struct {
    layout L;
    uint8_t *send, *recv;         /* device (CUDA) or host: [send_bytes], [recv_bytes] */
    uint8_t *host_send, *host_got; /* host mirrors */
    zt_comm_handle h;
} exchange;

typedef struct {
    zt_comm *c;
    stream_t producer, consumer; /* NULL streams on the CPU */
    zt_error err;
} ctx;

/* Fills the buffers on the producer stream and starts the exchange. */
static zt_status start(ctx *t, zt_comm *c, exchange *x, const layout *L, const char *what) {
    memset(x, 0, sizeof *x);
    x->L = *L;
    x->send = buf_alloc(L->send_bytes);
    x->recv = buf_alloc(L->recv_bytes);
    x->host_send = host_alloc(L->send_bytes);
    x->host_got = host_alloc(L->recv_bytes);
    memset(x->host_send, SENTINEL ^ 0x55, L->send_bytes); /* gaps of send: never to be sent */
    for (int j = 0; j < L->N; j++)
        for (size_t k = 0; k < L->send_n[j]; k++) x->host_send[L->send_off[j] + k] = pair_byte(L->rank, j, k, L->salt);
    memset(x->host_got, SENTINEL, L->recv_bytes);
    upload(x->send, x->host_send, L->send_bytes, t->producer);
    upload(x->recv, x->host_got, L->recv_bytes, t->producer);
    zt_status st = zt_comm_all_to_all_start(c, x->send, L->send_n, L->send_off, x->recv, L->recv_n, L->recv_off,
                                            t->producer, &x->h, &t->err);
    snprintf(x->h.what, sizeof x->h.what, "%s", what); /* after the start, which clears the handle */
    return st;
}

/* Completes x (on the consumer stream when by_stream), checks every byte
 * and frees it. */
static void finish(ctx *t, zt_comm *c, exchange *x, int by_stream, const char *name) {
    zt_status st = by_stream ? zt_comm_wait_stream(c, &x->h, t->consumer, &t->err) : zt_comm_wait(c, &x->h, &t->err);
    CHECK(st == ZT_OK, "%s: wait: %s", name, t->err.msg);
    download(x->host_got, x->recv, x->L.recv_bytes, t->consumer);
    size_t bad = count_wrong(&x->L, x->host_got);
    CHECK(bad == 0, "%s: %zu of %zu received bytes wrong (rank %d of %d)", name, bad, x->L.recv_bytes, x->L.rank,
          x->L.N);
    buf_free(x->send);
    buf_free(x->recv);
    host_free(x->host_send);
    host_free(x->host_got);
}

static size_t sum(const size_t *v, int n, int skip) {
    size_t s = 0;
    for (int j = 0; j < n; j++) s += j == skip ? 0 : v[j];
    return s;
}

/* The all-to-all statistics since `before` against calls exchanges of L
 * (every rank on one node: what comes from the others is intra-node). */
static void check_stats(const zt_comm *c, const zt_coll_stats *before, long calls, const layout *L, const char *name) {
    const zt_coll_stats *s = &c->stats[ZT_COLL_ALL_TO_ALL];
    double sent = (double)calls * (double)sum(L->send_n, L->N, -1);
    double got = (double)calls * (double)sum(L->recv_n, L->N, L->rank);
    CHECK(s->calls - before->calls == calls, "%s: %ld all_to_all calls counted, want %ld", name,
          s->calls - before->calls, calls);
    CHECK(s->bytes - before->bytes == sent, "%s: bytes %.0f, want %.0f (what this rank sends)", name,
          s->bytes - before->bytes, sent);
    CHECK(s->uncompressed_bytes - before->uncompressed_bytes == sent, "%s: uncompressed_bytes %.0f, want %.0f", name,
          s->uncompressed_bytes - before->uncompressed_bytes, sent);
    CHECK(s->intra_bytes - before->intra_bytes == got && s->inter_bytes == before->inter_bytes,
          "%s: received intra %.0f inter %.0f, want %.0f and 0", name, s->intra_bytes - before->intra_bytes,
          s->inter_bytes - before->inter_bytes, got);
}

/* One exchange, checked byte for byte and counted. */
static void round_trip(ctx *t, zt_comm *c, size_t scale, int gapped, int by_stream, int salt, const char *name) {
    zt_coll_stats before = c->stats[ZT_COLL_ALL_TO_ALL];
    layout L = make_layout(c, scale, gapped, salt);
    exchange x;
    CHECK(start(t, c, &x, &L, name) == ZT_OK, "%s: start: %s", name, t->err.msg);
    finish(t, c, &x, by_stream, name);
    check_stats(c, &before, 1, &L, name);
}

/* Two exchanges in flight at once, completed in reverse order. */
static void two_in_flight(ctx *t) {
    zt_coll_stats before = t->c->stats[ZT_COLL_ALL_TO_ALL];
    layout a = make_layout(t->c, 1, 0, 11), b = make_layout(t->c, 3, 1, 12);
    exchange xa, xb;
    CHECK(start(t, t->c, &xa, &a, "first of two") == ZT_OK, "first of two: %s", t->err.msg);
    CHECK(start(t, t->c, &xb, &b, "second of two") == ZT_OK, "second of two: %s", t->err.msg);
    CHECK(zt_comm_progress(t->c, &xa.h, &t->err) == ZT_OK, "progress: %s", t->err.msg);
    finish(t, t->c, &xb, 1, "second of two");
    finish(t, t->c, &xa, 0, "first of two");
    CHECK(t->c->stats[ZT_COLL_ALL_TO_ALL].calls - before.calls == 2, "two in flight: %ld calls",
          t->c->stats[ZT_COLL_ALL_TO_ALL].calls - before.calls);
}

/* Ulysses exchanges within groups of consecutive ranks: pairs here (np 3:
 * {0, 1} and {2} alone). */
static void in_groups(ctx *t) {
    zt_comm g;
    zt_status st = zt_comm_split(t->c, t->c->rank / 2, t->c->rank, &g, &t->err);
    if (st == ZT_ERR_UNSUPPORTED) { /* host staging has no groups */
        zt_error_clear(&t->err);
        return;
    }
    CHECK(st == ZT_OK, "split: %s", t->err.msg);
    if (st != ZT_OK) return;
    CHECK(g.world_size == (t->c->rank / 2 * 2 + 1 < t->c->world_size ? 2 : 1), "group of %d", g.world_size);
    round_trip(t, &g, 5, 1, 1, 21, "in a group of two");
    zt_comm_destroy(&g);
}

/* ---- refusals, each with the twin that shows the check can fail ---- */

static void refusals(ctx *t) {
    zt_comm *c = t->c;
    int me = c->rank;
    zt_coll_stats before = c->stats[ZT_COLL_ALL_TO_ALL];
    size_t n[MAX_RANKS] = {0}, off[MAX_RANKS] = {0}, rn[MAX_RANKS] = {0};
    uint8_t dummy[8] = {0}; /* never read: every start here is refused */
    zt_comm_handle h;
    memset(&h, 0, sizeof h);
    /* The chunk to itself two sizes: refused on every rank, before MPI. */
    n[me] = 4, rn[me] = 5;
    zt_status st = zt_comm_all_to_all_start(c, dummy, n, off, dummy, rn, off, NULL, &h, &t->err);
    CHECK(st == ZT_ERR_INVALID && strstr(t->err.msg, "to itself"), "self chunk 4 vs 5 bytes: %s (%s)",
          zt_status_name(st), t->err.msg);
    CHECK(!h.active, "a refused all_to_all left its handle active");
    zt_error_clear(&t->err);
#ifndef ZT_A2A_CUDA
    /* 2^31 + 1 bytes at offset 1: no unit larger than a byte divides both,
     * so MPI's int counts cannot say it. Nothing is read (refused first). */
    n[me] = rn[me] = (size_t)INT32_MAX + 2;
    off[me] = 1;
    st = zt_comm_all_to_all_start(c, dummy, n, off, dummy, rn, off, NULL, &h, &t->err);
    CHECK(st == ZT_ERR_INVALID && strstr(t->err.msg, "int counts"), "a chunk of 2^31 + 1 bytes: %s (%s)",
          zt_status_name(st), t->err.msg);
    CHECK(!h.active, "a refused all_to_all left its handle active");
    zt_error_clear(&t->err);
    /* A device stream where MPI reads host memory. */
    n[me] = rn[me] = 1, off[me] = 0;
    st = zt_comm_all_to_all_start(c, dummy, n, off, dummy + 4, rn, off, dummy, &h, &t->err);
    CHECK(st == ZT_ERR_INTERNAL && strstr(t->err.msg, "device stream"), "MPI given a stream: %s (%s)",
          zt_status_name(st), t->err.msg);
    zt_error_clear(&t->err);
#endif
    CHECK(c->stats[ZT_COLL_ALL_TO_ALL].calls == before.calls, "refused all_to_alls were counted");
    /* A handle in flight is not started again; the first still completes. */
    layout L = make_layout(c, 2, 0, 31);
    exchange x;
    CHECK(start(t, c, &x, &L, "in flight") == ZT_OK, "in flight: %s", t->err.msg);
    st = zt_comm_all_to_all_start(c, dummy, L.send_n, L.send_off, dummy, L.recv_n, L.recv_off, NULL, &x.h, &t->err);
    CHECK(st == ZT_ERR_INTERNAL && strstr(t->err.msg, "in flight"), "a handle in flight started again: %s (%s)",
          zt_status_name(st), t->err.msg);
    zt_error_clear(&t->err);
    finish(t, c, &x, 0, "in flight");
}

/* The byte check itself rejects one wrong byte, in a chunk and in a gap. */
static void checker_fails(const zt_comm *c) {
    layout L = make_layout(c, 1, 1, 41);
    uint8_t *got = xmalloc(L.recv_bytes);
    memset(got, SENTINEL, L.recv_bytes);
    for (int i = 0; i < L.N; i++)
        for (size_t k = 0; k < L.recv_n[i]; k++) got[L.recv_off[i] + k] = pair_byte(i, L.rank, k, L.salt);
    CHECK(count_wrong(&L, got) == 0, "the byte check rejects right bytes");
    got[L.recv_off[L.rank] + 1] ^= 1;
    CHECK(count_wrong(&L, got) == 1, "the byte check misses a wrong byte in a chunk");
    got[L.recv_off[L.rank] + 1] ^= 1;
    got[0] = 0; /* in the first gap */
    CHECK(count_wrong(&L, got) == 1, "the byte check misses a written gap");
    free(got);
}

/* ---- the watchdog and the pending collective ---- */

static void nap(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Rank 0 joins 1 s late. The others' wait under a 0.25 s watchdog fails
 * naming the all-to-all and what waited on it; the request stays, so once
 * rank 0 is there, waiting again completes it. NCCL also names it as the
 * pending collective of a stream that waits on it. */
static void watchdog(ctx *t, int nccl) {
    zt_comm *c = t->c;
    if (c->world_size < 2) return;
    layout L = make_layout_of(c, 1, 0, 51, 1); /* every rank waits for rank 0's chunk */
    exchange x;
    MPI_Barrier(MPI_COMM_WORLD);
    if (c->rank == 0) {
        nap(1.0);
        CHECK(start(t, c, &x, &L, "the test's late exchange") == ZT_OK, "late start: %s", t->err.msg);
        finish(t, c, &x, 0, "late exchange");
    } else {
        zt_comm_set_timeout(c, 0.25);
        CHECK(start(t, c, &x, &L, "the test's late exchange") == ZT_OK, "start: %s", t->err.msg);
        zt_status st = zt_comm_wait(c, &x.h, &t->err);
        CHECK(st == ZT_ERR_TIMEOUT && strstr(t->err.msg, "all_to_all of the test's late exchange"),
              "the watchdog: %s (%s)", zt_status_name(st), t->err.msg);
        zt_error_clear(&t->err);
        zt_comm_set_timeout(c, 0);
        x.h.active = st == ZT_ERR_TIMEOUT; /* zt_comm_wait retired the handle; its request stayed behind it */
        finish(t, c, &x, 0, "late exchange, waited for again");
    }
    if (!nccl) return;
    MPI_Barrier(MPI_COMM_WORLD);
    L.salt = 52;
    if (c->rank == 0) {
        nap(1.0);
        CHECK(start(t, c, &x, &L, "the test's late exchange") == ZT_OK, "late start: %s", t->err.msg);
        finish(t, c, &x, 1, "late exchange");
    } else {
        CHECK(start(t, c, &x, &L, "the test's late exchange") == ZT_OK, "start: %s", t->err.msg);
        CHECK(zt_comm_wait_stream(c, &x.h, t->consumer, &t->err) == ZT_OK, "wait_stream: %s", t->err.msg);
        char pending[256];
        zt_comm_pending(c, pending, sizeof pending);
        CHECK(strncmp(pending, "all_to_all of the test's late exchange on NCCL", 46) == 0, "pending: '%s'", pending);
        finish(t, c, &x, 1, "late exchange, on the consumer stream"); /* already retired: the wait is a no-op */
    }
}

/* ---- the dry communicator: counts only, nodes of two ranks ---- */

static void dry_counts(void) {
    zt_comm d;
    zt_error err = {0};
    CHECK(zt_comm_create_dry(&d, 2, 4, 2, &err) == ZT_OK, "dry: %s", err.msg); /* rank 2 of 4, nodes {0,1} {2,3} */
    layout L = make_layout(&d, 1, 0, 61);
    zt_comm_handle h;
    memset(&h, 0, sizeof h);
    CHECK(zt_comm_all_to_all_start(&d, NULL, L.send_n, L.send_off, NULL, L.recv_n, L.recv_off, NULL, &h, &err) ==
              ZT_OK, "dry start: %s", err.msg);
    CHECK(zt_comm_wait_stream(&d, &h, NULL, &err) == ZT_OK, "dry wait: %s", err.msg);
    const zt_coll_stats *s = &d.stats[ZT_COLL_ALL_TO_ALL];
    /* Rank 2 receives 4 and 8 bytes from node 0, 16 from rank 3 beside it. */
    CHECK(s->calls == 1 && s->bytes == (double)sum(L.send_n, 4, -1), "dry: %ld calls, %.0f bytes", s->calls,
          s->bytes);
    CHECK(s->intra_bytes == (double)L.recv_n[3] && s->inter_bytes == (double)(L.recv_n[0] + L.recv_n[1]),
          "dry: intra %.0f (want %zu), inter %.0f (want %zu)", s->intra_bytes, L.recv_n[3], s->inter_bytes,
          L.recv_n[0] + L.recv_n[1]);
    CHECK(s->inter_bytes == 12 && s->intra_bytes == 16, "dry: the pattern changed (inter %.0f, intra %.0f)",
          s->inter_bytes, s->intra_bytes);
    zt_comm_destroy(&d);
    zt_coll_stats b = {.calls = 1, .bytes = 8e9, .time_s = 1.0};
    double alg = 0, bus = 0;
    zt_coll_bandwidth(&b, ZT_COLL_ALL_TO_ALL, 4, &alg, &bus);
    CHECK(alg == 8.0 && bus == 6.0, "all_to_all at np 4: algbw %g busbw %g, want 8 and 6 ((n-1)/n)", alg, bus);
    CHECK(strcmp(zt_coll_name(ZT_COLL_ALL_TO_ALL), "all_to_all") == 0, "name %s", zt_coll_name(ZT_COLL_ALL_TO_ALL));
}

/* ---- main ---- */

/* The communicator under test: MPI, or NCCL / host staging by argv[1].
 * Returns 77 when this build or machine cannot run it. */
static int create(zt_comm *c, int argc, char **argv, ctx *t, int *nccl) {
    *nccl = 0;
#ifdef ZT_A2A_CUDA
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    const char *mode = argc > 1 ? argv[1] : "nccl";
    zt_status st = ZT_ERR_UNSUPPORTED;
    if (strcmp(mode, "staged") == 0) {
        st = zt_comm_staged_create(c, 0, &t->err);
    } else {
#ifdef ZT_HAVE_NCCL
        st = zt_comm_nccl_create(c, &t->err);
        *nccl = 1;
#else
        snprintf(t->err.msg, sizeof t->err.msg, "this build has no NCCL");
#endif
    }
    if (st == ZT_ERR_UNSUPPORTED) {
        printf("SKIP: %s: %s\n", mode, t->err.msg);
        return 77;
    }
    if (st != ZT_OK) return printf("FAIL: %s: %s\n", mode, t->err.msg), 1;
    /* The comm's device is current now. */
    CHECK(cudaStreamCreateWithFlags(&t->producer, cudaStreamNonBlocking) == cudaSuccess, "stream");
    CHECK(cudaStreamCreateWithFlags(&t->consumer, cudaStreamNonBlocking) == cudaSuccess, "stream");
    return 0;
#else
    (void)argc, (void)argv;
    if (zt_comm_create_mpi(c, &t->err) != ZT_OK) return printf("FAIL: zt_comm_create_mpi: %s\n", t->err.msg), 1;
    return 0;
#endif
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    zt_comm c;
    ctx t = {.c = &c};
    int nccl = 0, rc = create(&c, argc, argv, &t, &nccl);
    if (rc) {
        MPI_Finalize();
        return rc;
    }
    CHECK(c.world_size <= MAX_RANKS, "np %d: the test holds %d", c.world_size, MAX_RANKS);
    round_trip(&t, &c, 1, 0, 0, 1, "packed, scale 1");
    round_trip(&t, &c, 1, 1, 1, 2, "gapped, scale 1");
    round_trip(&t, &c, BIG_SCALE, 0, 1, 3, "packed, scale 65537");
    round_trip(&t, &c, BIG_SCALE, 1, 0, 4, "gapped, scale 65537");
    two_in_flight(&t);
    in_groups(&t);
    refusals(&t);
    checker_fails(&c);
    watchdog(&t, nccl);
    dry_counts();
#ifdef ZT_A2A_CUDA
    cudaStreamDestroy(t.producer);
    cudaStreamDestroy(t.consumer);
#endif
    const zt_coll_stats *s = &c.stats[ZT_COLL_ALL_TO_ALL];
    printf("rank %d of %d (%s): %ld all_to_all calls, %.0f bytes sent, %.0f received from others\n", c.rank,
           c.world_size, c.ops->name, s->calls, s->bytes, s->intra_bytes + s->inter_bytes);
    int rank = c.rank;
    zt_comm_destroy(&c);
    int failures = g_failures, any = 0;
    MPI_Allreduce(&failures, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0 || failures) printf("%s: %ld checks, %d failures\n", any ? "FAIL" : "PASS", g_checks, failures);
    MPI_Finalize();
    return any ? 1 : 0;
}
