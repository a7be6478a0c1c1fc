/* The NCCL communicator: one GPU per rank (by local rank), all-gathers on
 * one stream, reduce-scatters on another and all-to-alls on a third,
 * ordered against the compute stream with CUDA events only (the caller's
 * `ready` event before, a stream wait after), so the host never blocks
 * inside a step. The streams drive one communicator: NCCL runs a
 * communicator's operations in the order they were issued, which is the
 * same on every rank, so the streams cannot deadlock each other; what they
 * buy is that compute waits only for the collective it needs (an
 * activation's all-to-all never queues behind a prefetched all-gather or a
 * gradient bucket). The unique id is created by rank 0 and broadcast
 * over MPI; scalar helpers (sums of norms, fingerprints) go over the
 * embedded MPI communicator. The reduce-scatter is the same deterministic
 * algorithm as MPI's: grouped send/recv (an all-to-all) and a sum in rank
 * order on the device. */
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_used.h"
#include "nccl_reduce.h"
#include "comm_cuda.h"
#include "zt_time.h"

/* A collective in flight: timing events around it on its stream. */
typedef struct {
    cudaEvent_t start, end;
    zt_coll_kind kind;
    char what[80];  /* the handle's, for the watchdog's message */
    double t_start; /* when it was issued */
} nccl_req;

/* Collectives retired with wait_stream whose GPU time is not yet known. */
#define NCCL_MAX_UNTIMED 256

typedef struct {
    zt_comm host; /* MPI, for bootstrap and host scalars */
    ncclComm_t nccl;
    cudaStream_t ag_stream; /* all-gathers */
    cudaStream_t rs_stream; /* reduce-scatters and their ordered sums */
    cudaStream_t a2a_stream; /* all-to-alls */
    int device;
    nccl_req untimed[NCCL_MAX_UNTIMED];
    int nuntimed;
    unsigned kinds_issued; /* bit k: a collective of kind k has been issued (its setup measured) */
    int setup_unsaid;      /* the driver would not say the used bytes around a setup step */
} nccl_impl;

#define CUDA_TRY(call)                                                                                   \
    do {                                                                                                 \
        cudaError_t cu_rc_ = (call);                                                                     \
        if (cu_rc_ != cudaSuccess)                                                                       \
            return ZT_FAIL(err, ZT_ERR_COMM, "%s failed: %s", #call, cudaGetErrorString(cu_rc_));        \
    } while (0)
#define NCCL_TRY(call)                                                                                   \
    do {                                                                                                 \
        ncclResult_t nc_rc_ = (call);                                                                    \
        if (nc_rc_ != ncclSuccess)                                                                       \
            return ZT_FAIL(err, ZT_ERR_COMM, "%s failed: %s", #call, ncclGetErrorString(nc_rc_));        \
    } while (0)

static nccl_impl *impl_of(zt_comm *c) { return c->impl; }

/* What a setup step added to the device's used bytes, as this
 * communicator's (measured while every step's was). */
static void count_device(zt_comm *c, int said_before, size_t before) {
    nccl_impl *m = impl_of(c);
    size_t after = 0;
    if (!(said_before && zt_cuda_device_used(&after))) m->setup_unsaid = 1;
    else if (after > before) c->device_bytes += after - before;
    c->device_measured = !m->setup_unsaid;
}

/* The first collective of a kind: *before is the device's used bytes
 * then, and the return whether to count its setup after the issue. */
static int first_of_kind(nccl_impl *m, zt_coll_kind k, size_t *before) {
    if (m->kinds_issued & (1u << k)) return 0;
    m->kinds_issued |= 1u << k;
    return zt_cuda_device_used(before);
}
static zt_status nccl_split(zt_comm *c, int color, int key, zt_comm *out, zt_error *err);

static void free_req(nccl_req *r) {
    if (!r) return;
    if (r->start) cudaEventDestroy(r->start);
    if (r->end) cudaEventDestroy(r->end);
    free(r);
}

/* Adds the GPU time of finished untimed collectives to the statistics;
 * with `block`, waits for all of them. Returns the number still pending. */
static int harvest(zt_comm *c, int block) {
    nccl_impl *m = impl_of(c);
    int kept = 0;
    for (int i = 0; i < m->nuntimed; i++) {
        nccl_req *r = &m->untimed[i];
        cudaError_t rc = block ? cudaEventSynchronize(r->end) : cudaEventQuery(r->end);
        if (rc == cudaErrorNotReady) {
            (void)cudaGetLastError(); /* not a failure: must not reach the next launch check */
            m->untimed[kept++] = *r;
            continue;
        }
        float ms = 0.0f;
        if (rc == cudaSuccess && cudaEventElapsedTime(&ms, r->start, r->end) == cudaSuccess)
            zt_comm_stats_of(c, r->kind)->time_s += ms * 1e-3;
        (void)cudaGetLastError(); /* a failure surfaces at the next wait or sync */
        cudaEventDestroy(r->start);
        cudaEventDestroy(r->end);
    }
    m->nuntimed = kept;
    return kept;
}

/* Opens a request on `stream`: waits for the producer's event, then marks
 * the start. */
static zt_status begin_req(cudaStream_t stream, void *ready, zt_comm_handle *h, zt_error *err) {
    nccl_req *r = calloc(1, sizeof *r);
    if (!r) return ZT_FAIL(err, ZT_ERR_OOM, "comm: cannot allocate a request");
    r->kind = h->kind;
    cudaError_t rc = cudaEventCreate(&r->start);
    if (rc == cudaSuccess) rc = cudaEventCreate(&r->end);
    if (rc == cudaSuccess && ready) rc = cudaStreamWaitEvent(stream, (cudaEvent_t)ready, 0);
    if (rc == cudaSuccess) rc = cudaEventRecord(r->start, stream);
    if (rc != cudaSuccess) {
        free_req(r);
        return ZT_FAIL(err, ZT_ERR_COMM, "comm: ordering %s after its producer failed: %s", zt_coll_name(h->kind),
                       cudaGetErrorString(rc));
    }
    h->impl_req = r;
    return ZT_OK;
}

static zt_status end_req(zt_comm_handle *h, cudaStream_t stream, zt_error *err) {
    nccl_req *r = h->impl_req;
    cudaError_t rc = cudaEventRecord(r->end, stream);
    if (rc != cudaSuccess) {
        /* The collective is queued and its buffers may be freed on return. */
        (void)cudaStreamSynchronize(stream);
        free_req(r);
        h->impl_req = NULL;
        return ZT_FAIL(err, ZT_ERR_COMM, "cudaEventRecord failed: %s", cudaGetErrorString(rc));
    }
    return ZT_OK;
}

/* A failed enqueue: drop the request, report the NCCL error. */
static zt_status fail_req(zt_comm_handle *h, ncclResult_t rc, const char *what, zt_error *err) {
    free_req(h->impl_req);
    h->impl_req = NULL;
    return ZT_FAIL(err, ZT_ERR_COMM, "%s failed: %s", what, ncclGetErrorString(rc));
}

static zt_status nccl_all_gather_start(zt_comm *c, const void *send, void *recv, size_t bytes_per_rank, void *ready,
                                       zt_comm_handle *h, zt_error *err) {
    nccl_impl *m = impl_of(c);
    harvest(c, 0);
    ZT_TRY(begin_req(m->ag_stream, ready, h, err));
    const void *src = send ? send : (const char *)recv + (size_t)c->rank * bytes_per_rank; /* in place */
    size_t before = 0;
    int first = first_of_kind(m, ZT_COLL_ALL_GATHER, &before);
    ncclResult_t rc = ncclAllGather(src, recv, bytes_per_rank, ncclUint8, m->nccl, m->ag_stream);
    if (rc != ncclSuccess) return fail_req(h, rc, "ncclAllGather", err);
    if (first) count_device(c, 1, before);
    return end_req(h, m->ag_stream, err);
}

static zt_status nccl_reduce_scatter_start(zt_comm *c, const void *send, void *staging, float *out,
                                           size_t count, zt_wire wire, void *ready, zt_comm_handle *h,
                                           zt_error *err) {
    nccl_impl *m = impl_of(c);
    harvest(c, 0);
    ZT_TRY(begin_req(m->rs_stream, ready, h, err));
    size_t chunk = zt_wire_bytes(&wire, count);
    /* codes travel as bytes; only the sum interprets them */
    ncclDataType_t t = wire.bits ? ncclUint8 : wire.dtype == ZT_FP32 ? ncclFloat : wire.dtype == ZT_BF16 ? ncclBfloat16
                                                                                                         : ncclFloat16;
    size_t n = wire.bits ? chunk : count;
    size_t before = 0;
    int first = first_of_kind(m, ZT_COLL_REDUCE_SCATTER, &before);
    ncclResult_t rc = ncclGroupStart();
    for (int r = 0; r < c->world_size && rc == ncclSuccess; r++) {
        rc = ncclSend((const char *)send + (size_t)r * chunk, n, t, r, m->nccl, m->rs_stream);
        if (rc == ncclSuccess)
            rc = ncclRecv((char *)staging + (size_t)r * chunk, n, t, r, m->nccl, m->rs_stream);
    }
    ncclResult_t end_rc = ncclGroupEnd(); /* always closes the group */
    if (rc == ncclSuccess) rc = end_rc;
    if (rc != ncclSuccess) return fail_req(h, rc, "reduce-scatter (grouped ncclSend/ncclRecv)", err);
    if (first) count_device(c, 1, before);
    cudaError_t crc = wire.bits ? zt_nccl_ordered_sum_coded(out, staging, count, wire.bits, wire.block, c->world_size,
                                                            m->rs_stream)
                                : zt_nccl_ordered_sum(out, staging, (int)wire.dtype, count, c->world_size, m->rs_stream);
    if (crc != cudaSuccess) {
        (void)cudaStreamSynchronize(m->rs_stream); /* the exchange is queued into staging */
        free_req(h->impl_req);
        h->impl_req = NULL;
        return ZT_FAIL(err, ZT_ERR_COMM, "reduce-scatter's ordered sum failed: %s", cudaGetErrorString(crc));
    }
    return end_req(h, m->rs_stream, err);
}

/* The all-to-all's producer is a stream, not an event: an event recorded
 * on it now marks the work that fills send. The comm stream's wait captures
 * it, so the event can go at once. */
static zt_status after_stream(cudaStream_t comm_stream, void *ready, zt_comm_handle *h, zt_error *err) {
    if (!ready) return begin_req(comm_stream, NULL, h, err);
    cudaEvent_t produced = NULL;
    cudaError_t rc = cudaEventCreateWithFlags(&produced, cudaEventDisableTiming);
    if (rc == cudaSuccess) rc = cudaEventRecord(produced, (cudaStream_t)ready);
    zt_status st = rc == cudaSuccess ? begin_req(comm_stream, produced, h, err)
                                     : ZT_FAIL(err, ZT_ERR_COMM, "comm: marking the all_to_all's producer failed: %s",
                                               cudaGetErrorString(rc));
    if (produced) cudaEventDestroy(produced);
    return st;
}

/* Grouped ncclSend/ncclRecv of the chunks that are not empty, the rank's own
 * included (NCCL copies a send to itself). */
static zt_status nccl_all_to_all_start(zt_comm *c, const void *send, const size_t *send_counts,
                                       const size_t *send_offsets, void *recv, const size_t *recv_counts,
                                       const size_t *recv_offsets, void *ready, zt_comm_handle *h, zt_error *err) {
    nccl_impl *m = impl_of(c);
    harvest(c, 0);
    ZT_TRY(after_stream(m->a2a_stream, ready, h, err));
    size_t before = 0;
    int first = first_of_kind(m, ZT_COLL_ALL_TO_ALL, &before);
    ncclResult_t rc = ncclGroupStart();
    for (int j = 0; j < c->world_size && rc == ncclSuccess; j++) {
        if (send_counts[j])
            rc = ncclSend((const char *)send + send_offsets[j], send_counts[j], ncclUint8, j, m->nccl, m->a2a_stream);
        if (rc == ncclSuccess && recv_counts[j])
            rc = ncclRecv((char *)recv + recv_offsets[j], recv_counts[j], ncclUint8, j, m->nccl, m->a2a_stream);
    }
    ncclResult_t end_rc = ncclGroupEnd(); /* always closes the group */
    if (rc == ncclSuccess) rc = end_rc;
    if (rc != ncclSuccess) return fail_req(h, rc, "all_to_all (grouped ncclSend/ncclRecv)", err);
    if (first) count_device(c, 1, before);
    return end_req(h, m->a2a_stream, err);
}

/* A host wait under the watchdog: queries until done or the timeout. */
static cudaError_t wait_end(const zt_comm *c, nccl_req *r, int *late) {
    *late = 0;
    if (c->timeout_s <= 0) return cudaEventSynchronize(r->end);
    struct timespec nap = {0, 100000};
    double deadline = zt_now_s() + c->timeout_s;
    for (;;) {
        cudaError_t rc = cudaEventQuery(r->end);
        if (rc != cudaErrorNotReady) return rc;
        (void)cudaGetLastError();
        if (zt_now_s() > deadline) return *late = 1, rc;
        nanosleep(&nap, NULL);
    }
}

static zt_status nccl_wait(zt_comm *c, zt_comm_handle *h, zt_error *err) {
    nccl_req *r = h->impl_req;
    int late;
    cudaError_t rc = wait_end(c, r, &late);
    if (late) { /* the collective may still write its buffers: the request stays, the job aborts */
        char group[160];
        zt_comm_describe(c, group, sizeof group);
        return ZT_FAIL(err, ZT_ERR_TIMEOUT, "collective watchdog: %s%s%s on NCCL over %s did not complete within %g s "
                       "(`collective_timeout`): a peer stopped or the network is gone", zt_coll_name(h->kind),
                       h->what[0] ? " of " : "", h->what, group, c->timeout_s);
    }
    h->impl_req = NULL;
    free_req(r);
    if (rc != cudaSuccess)
        return ZT_FAIL(err, ZT_ERR_COMM, "%s on its NCCL stream failed: %s", zt_coll_name(h->kind),
                       cudaGetErrorString(rc));
    return ZT_OK;
}

/* The consumer stream waits on the collective's end; its GPU time is
 * collected later by harvest. */
static zt_status nccl_wait_stream(zt_comm *c, zt_comm_handle *h, void *stream, zt_error *err) {
    nccl_impl *m = impl_of(c);
    nccl_req *r = h->impl_req;
    h->impl_req = NULL;
    cudaError_t rc = cudaStreamWaitEvent((cudaStream_t)stream, r->end, 0);
    if (rc != cudaSuccess) {
        free_req(r);
        return ZT_FAIL(err, ZT_ERR_COMM, "cudaStreamWaitEvent after %s failed: %s", zt_coll_name(h->kind),
                       cudaGetErrorString(rc));
    }
    if (m->nuntimed == NCCL_MAX_UNTIMED && harvest(c, 0) == NCCL_MAX_UNTIMED) harvest(c, 1);
    snprintf(r->what, sizeof r->what, "%s", h->what);
    r->t_start = h->t_start;
    m->untimed[m->nuntimed++] = *r;
    free(r); /* its events now belong to the untimed list */
    return ZT_OK;
}

static zt_status nccl_test(zt_comm *c, zt_comm_handle *h, int *done, zt_error *err) {
    (void)c;
    nccl_req *r = h->impl_req;
    cudaError_t rc = cudaEventQuery(r->end);
    if (rc == cudaErrorNotReady) (void)cudaGetLastError(); /* not a failure: keep it from the next launch check */
    if (rc != cudaSuccess && rc != cudaErrorNotReady)
        return ZT_FAIL(err, ZT_ERR_COMM, "cudaEventQuery failed: %s", cudaGetErrorString(rc));
    *done = rc == cudaSuccess;
    return ZT_OK;
}

static zt_status nccl_sum_f64(zt_comm *c, const double *v, int n, double *out, zt_error *err) {
    zt_comm *host = &impl_of(c)->host;
    harvest(c, 0); /* once per step: keeps the statistics current */
    return host->ops->sum_f64(host, v, n, out, err);
}
static zt_status nccl_all_gather_host(zt_comm *c, void *recv, size_t bytes_per_rank, zt_error *err) {
    zt_comm *host = &impl_of(c)->host;
    return host->ops->all_gather_host(host, recv, bytes_per_rank, err);
}
static zt_status nccl_all_gather_u64(zt_comm *c, unsigned long long v, unsigned long long *recv, zt_error *err) {
    zt_comm *host = &impl_of(c)->host;
    return host->ops->all_gather_u64(host, v, recv, err);
}
/* Host buffers, as on every communicator (zt_comm.h): bootstrap data and
 * scalars, never device tensors. */
static zt_status nccl_broadcast(zt_comm *c, void *buf, size_t bytes, int root, zt_error *err) {
    zt_comm *host = &impl_of(c)->host;
    return host->ops->broadcast(host, buf, bytes, root, err);
}
/* Host buffers, as on every communicator (zt_comm.h). */
static zt_status nccl_gather_host(zt_comm *c, const void *send, void *recv, const size_t *counts, int root,
                                zt_error *err) {
    zt_comm *host = &impl_of(c)->host;
    return host->ops->gather_host(host, send, recv, counts, root, err);
}
static zt_status nccl_scatter_host(zt_comm *c, const void *send, void *recv, const size_t *counts, int root,
                                 zt_error *err) {
    zt_comm *host = &impl_of(c)->host;
    return host->ops->scatter_host(host, send, recv, counts, root, err);
}
static zt_status nccl_barrier(zt_comm *c, zt_error *err) {
    zt_comm *host = &impl_of(c)->host;
    return host->ops->barrier(host, err);
}

static void nccl_destroy(zt_comm *c) {
    nccl_impl *m = c->impl;
    if (!m) return;
    if (m->nuntimed) harvest(c, 1);
    /* Collectives still queued (an error path) finish before the
     * communicator and their streams go. */
    if (m->ag_stream) (void)cudaStreamSynchronize(m->ag_stream);
    if (m->rs_stream) (void)cudaStreamSynchronize(m->rs_stream);
    if (m->a2a_stream) (void)cudaStreamSynchronize(m->a2a_stream);
    (void)cudaGetLastError();
    if (m->nccl) ncclCommDestroy(m->nccl);
    if (m->ag_stream) cudaStreamDestroy(m->ag_stream);
    if (m->rs_stream) cudaStreamDestroy(m->rs_stream);
    if (m->a2a_stream) cudaStreamDestroy(m->a2a_stream);
    zt_comm_destroy(&m->host);
    free(m);
    c->impl = NULL;
}

static void nccl_abort(zt_comm *c) {
    nccl_impl *m = impl_of(c);
    if (m && m->nccl) ncclCommAbort(m->nccl);
    if (m) m->nccl = NULL;
}

/* The oldest collective queued on a stream that has not finished, for the
 * watchdog's message when a device sync timed out. */
static void nccl_pending(zt_comm *c, char *buf, size_t cap) {
    nccl_impl *m = impl_of(c);
    buf[0] = '\0';
    for (int i = 0; i < m->nuntimed; i++) {
        nccl_req *r = &m->untimed[i];
        if (cudaEventQuery(r->end) != cudaErrorNotReady) continue;
        (void)cudaGetLastError();
        char group[160];
        zt_comm_describe(c, group, sizeof group);
        snprintf(buf, cap, "%s%s%s on NCCL over %s, issued %.1f s ago", zt_coll_name(r->kind), r->what[0] ? " of " : "",
                 r->what, group, zt_now_s() - r->t_start);
        return;
    }
}

/* The watchdog on the host communicator under this one (its collectives
 * are MPI's). */
static void nccl_set_timeout(zt_comm *c, double seconds) { zt_comm_set_timeout(&impl_of(c)->host, seconds); }

static const zt_comm_ops nccl_ops = {
    .name = "nccl",
    .takes_events = 1,
    .all_gather_start = nccl_all_gather_start,
    .reduce_scatter_start = nccl_reduce_scatter_start,
    .all_to_all_start = nccl_all_to_all_start,
    .wait = nccl_wait,
    .wait_stream = nccl_wait_stream,
    .test = nccl_test,
    .sum_f64 = nccl_sum_f64,
    .all_gather_u64 = nccl_all_gather_u64,
    .all_gather_host = nccl_all_gather_host,
    .broadcast = nccl_broadcast,
    .barrier = nccl_barrier,
    .gather_host = nccl_gather_host,
    .scatter_host = nccl_scatter_host,
    .destroy = nccl_destroy,
    .set_timeout = nccl_set_timeout,
    .pending = nccl_pending,
    .abort = nccl_abort,
    .split = nccl_split,
};

/* The collective streams on m's device (the current device from then on). */
static zt_status create_streams(nccl_impl *m, zt_error *err) {
    CUDA_TRY(cudaSetDevice(m->device));
    CUDA_TRY(cudaStreamCreateWithFlags(&m->ag_stream, cudaStreamNonBlocking));
    CUDA_TRY(cudaStreamCreateWithFlags(&m->rs_stream, cudaStreamNonBlocking));
    CUDA_TRY(cudaStreamCreateWithFlags(&m->a2a_stream, cudaStreamNonBlocking));
    return ZT_OK;
}

/* This rank's own part of the start-up: a GPU of its own, and the
 * collective streams. */
static zt_status local_setup(zt_comm *c, nccl_impl *m, zt_error *err) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess) ndev = 0; /* any error: no usable GPU */
    if (ndev < c->local_size)
        return ZT_FAIL(err, ZT_ERR_UNSUPPORTED,
                       "NCCL needs one GPU per rank: %d rank(s) on this node, %d GPU(s) visible", c->local_size, ndev);
    m->device = c->local_rank;
    return create_streams(m, err);
}

/* NCCL's start-up can fail where CUDA itself works: its bootstrap
 * sockets, shared memory or proxy thread refused by a sandbox. Every rank
 * learns whether rank 0 got an id and whether every rank's init succeeded,
 * so that all of them return ZT_ERR_UNSUPPORTED together (the caller then
 * uses host staging) instead of some stopping while others wait in a
 * collective. A rank whose init fails while the others block inside theirs
 * is beyond this: NCCL's init is collective. */
static zt_status init_nccl(zt_comm *c, nccl_impl *m, zt_error *err) {
    struct {
        int rc;
        ncclUniqueId id;
    } boot;
    memset(&boot, 0, sizeof boot);
    if (c->rank == 0) boot.rc = (int)ncclGetUniqueId(&boot.id);
    ZT_TRY(m->host.ops->broadcast(&m->host, &boot, sizeof boot, 0, err));
    if (boot.rc != (int)ncclSuccess)
        return ZT_FAIL(err, ZT_ERR_UNSUPPORTED, "ncclGetUniqueId failed on rank 0: %s",
                       ncclGetErrorString((ncclResult_t)boot.rc));
    size_t before = 0;
    int said = zt_cuda_device_used(&before);
    ncclResult_t rc = ncclCommInitRank(&m->nccl, c->world_size, boot.id, c->rank);
    if (rc != ncclSuccess) m->nccl = NULL;
    else count_device(c, said, before);
    double failed = 0.0, mine = rc != ncclSuccess ? 1.0 : 0.0;
    ZT_TRY(m->host.ops->sum_f64(&m->host, &mine, 1, &failed, err));
    if (failed > 0.0) {
        if (m->nccl) ncclCommAbort(m->nccl);
        m->nccl = NULL;
        if (rc != ncclSuccess)
            return ZT_FAIL(err, ZT_ERR_UNSUPPORTED, "ncclCommInitRank failed: %s", ncclGetErrorString(rc));
        return ZT_FAIL(err, ZT_ERR_UNSUPPORTED, "ncclCommInitRank failed on %.0f other rank(s)", failed);
    }
    return ZT_OK;
}
/* A group of this communicator's ranks (hybrid sharding): its host part
 * split alike, and an NCCL communicator of its own over the same GPU. */
static zt_status nccl_split(zt_comm *c, int color, int key, zt_comm *out, zt_error *err) {
    nccl_impl *parent = impl_of(c), *m = calloc(1, sizeof *m);
    if (!m) return ZT_FAIL(err, ZT_ERR_OOM, "comm: cannot allocate");
    out->impl = m;
    out->ops = &nccl_ops;
    ZT_TRY(zt_comm_split(&parent->host, color, key, &m->host, err));
    zt_comm_copy_topology(out, &m->host);
    m->device = parent->device;
    ZT_TRY(create_streams(m, err));
    return init_nccl(out, m, err);
}

zt_status zt_comm_nccl_create(zt_comm *c, zt_error *err) {
    memset(c, 0, sizeof *c);
    nccl_impl *m = calloc(1, sizeof *m);
    if (!m) return ZT_FAIL(err, ZT_ERR_OOM, "comm: cannot allocate");
    c->impl = m;
    c->ops = &nccl_ops;
    ZT_TRY(zt_comm_create_mpi(&m->host, err));
    zt_comm_copy_topology(c, &m->host);
    /* Every rank returns the same status, so that none waits in a
     * collective that another has left: the local part's outcome is agreed
     * first (ZT_ERR_COMM if a CUDA call failed anywhere, else
     * ZT_ERR_UNSUPPORTED if some node has fewer GPUs than ranks: the caller
     * then uses host staging). */
    zt_status local = local_setup(c, m, err);
    double total = 0.0, mine = local == ZT_OK ? 0.0 : local == ZT_ERR_UNSUPPORTED ? 1.0 : 1000.0;
    ZT_TRY(m->host.ops->sum_f64(&m->host, &mine, 1, &total, err));
    if (total >= 1000.0)
        return local != ZT_OK ? local : ZT_FAIL(err, ZT_ERR_COMM, "NCCL: the CUDA set-up failed on another rank");
    if (total > 0.0)
        return local != ZT_OK ? local
                              : ZT_FAIL(err, ZT_ERR_UNSUPPORTED,
                                        "NCCL needs one GPU per rank: %.0f rank(s) elsewhere see too few GPUs", total);
    return init_nccl(c, m, err);
}
