/* The NCCL communicator: one GPU per rank (by local rank), collectives on a
 * dedicated communication stream, completion tracked with CUDA events. The
 * unique id is created by rank 0 and broadcast over MPI; scalar helpers
 * (sums of norms, fingerprints) go over the embedded MPI communicator. The
 * reduce-scatter is the same deterministic algorithm as MPI's: grouped
 * send/recv (an all-to-all) and a sum in rank order on the device. */
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_reduce.h"
#include "zt_comm.h"

typedef struct {
    zt_comm host; /* MPI, for bootstrap and host scalars */
    ncclComm_t nccl;
    cudaStream_t stream;
    int device;
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

static zt_status record_event(nccl_impl *m, zt_comm_handle *h, zt_error *err) {
    cudaEvent_t *ev = malloc(sizeof *ev);
    if (!ev) return ZT_FAIL(err, ZT_ERR_OOM, "comm: cannot allocate an event");
    cudaError_t rc = cudaEventCreateWithFlags(ev, cudaEventDisableTiming);
    if (rc == cudaSuccess) rc = cudaEventRecord(*ev, m->stream);
    if (rc != cudaSuccess) {
        free(ev);
        return ZT_FAIL(err, ZT_ERR_COMM, "cudaEventRecord failed: %s", cudaGetErrorString(rc));
    }
    h->impl_req = ev;
    return ZT_OK;
}

static zt_status nccl_all_gather_start(zt_comm *c, const void *send, void *recv, size_t bytes_per_rank,
                                       zt_comm_handle *h, zt_error *err) {
    nccl_impl *m = impl_of(c);
    const void *src = send ? send : (const char *)recv + (size_t)c->rank * bytes_per_rank; /* in place */
    NCCL_TRY(ncclAllGather(src, recv, bytes_per_rank, ncclUint8, m->nccl, m->stream));
    return record_event(m, h, err);
}

static zt_status nccl_reduce_scatter_start(zt_comm *c, const float *send, float *staging, float *out,
                                           size_t count, zt_comm_handle *h, zt_error *err) {
    nccl_impl *m = impl_of(c);
    NCCL_TRY(ncclGroupStart());
    for (int r = 0; r < c->world_size; r++) {
        NCCL_TRY(ncclSend(send + (size_t)r * count, count, ncclFloat, r, m->nccl, m->stream));
        NCCL_TRY(ncclRecv(staging + (size_t)r * count, count, ncclFloat, r, m->nccl, m->stream));
    }
    NCCL_TRY(ncclGroupEnd());
    CUDA_TRY(zt_nccl_ordered_sum(out, staging, count, c->world_size, m->stream));
    return record_event(m, h, err);
}

static zt_status nccl_wait(zt_comm *c, zt_comm_handle *h, zt_error *err) {
    (void)c;
    cudaEvent_t *ev = h->impl_req;
    cudaError_t rc = cudaEventSynchronize(*ev);
    cudaEventDestroy(*ev);
    free(ev);
    h->impl_req = NULL;
    if (rc != cudaSuccess)
        return ZT_FAIL(err, ZT_ERR_COMM, "%s on the NCCL stream failed: %s", zt_coll_name(h->kind),
                       cudaGetErrorString(rc));
    return ZT_OK;
}

static zt_status nccl_test(zt_comm *c, zt_comm_handle *h, int *done, zt_error *err) {
    (void)c;
    cudaError_t rc = cudaEventQuery(*(cudaEvent_t *)h->impl_req);
    if (rc != cudaSuccess && rc != cudaErrorNotReady)
        return ZT_FAIL(err, ZT_ERR_COMM, "cudaEventQuery failed: %s", cudaGetErrorString(rc));
    *done = rc == cudaSuccess;
    return ZT_OK;
}

static zt_status nccl_sum_f64(zt_comm *c, double v, double *out, zt_error *err) {
    zt_comm *host = &impl_of(c)->host;
    return host->ops->sum_f64(host, v, out, err);
}
static zt_status nccl_all_gather_u64(zt_comm *c, unsigned long long v, unsigned long long *recv, zt_error *err) {
    zt_comm *host = &impl_of(c)->host;
    return host->ops->all_gather_u64(host, v, recv, err);
}
static zt_status nccl_broadcast(zt_comm *c, void *buf, size_t bytes, int root, zt_error *err) {
    nccl_impl *m = impl_of(c);
    NCCL_TRY(ncclBroadcast(buf, buf, bytes, ncclUint8, root, m->nccl, m->stream));
    CUDA_TRY(cudaStreamSynchronize(m->stream));
    return ZT_OK;
}
static zt_status nccl_barrier(zt_comm *c, zt_error *err) {
    zt_comm *host = &impl_of(c)->host;
    return host->ops->barrier(host, err);
}

static void nccl_destroy(zt_comm *c) {
    nccl_impl *m = c->impl;
    if (!m) return;
    if (m->nccl) ncclCommDestroy(m->nccl);
    if (m->stream) cudaStreamDestroy(m->stream);
    zt_comm_destroy(&m->host);
    free(m);
    c->impl = NULL;
}

static const zt_comm_ops nccl_ops = {
    .name = "nccl",
    .all_gather_start = nccl_all_gather_start,
    .reduce_scatter_start = nccl_reduce_scatter_start,
    .wait = nccl_wait,
    .test = nccl_test,
    .sum_f64 = nccl_sum_f64,
    .all_gather_u64 = nccl_all_gather_u64,
    .broadcast = nccl_broadcast,
    .barrier = nccl_barrier,
    .destroy = nccl_destroy,
};

zt_status zt_comm_create_nccl(zt_comm *c, zt_error *err) {
    memset(c, 0, sizeof *c);
    nccl_impl *m = calloc(1, sizeof *m);
    if (!m) return ZT_FAIL(err, ZT_ERR_OOM, "comm: cannot allocate");
    c->impl = m;
    c->ops = &nccl_ops;
    ZT_TRY(zt_comm_create_mpi(&m->host, err));
    c->rank = m->host.rank;
    c->world_size = m->host.world_size;
    c->local_rank = m->host.local_rank;
    c->local_size = m->host.local_size;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess) ndev = 0; /* any error: no usable GPU */
    if (ndev < c->local_size)
        return ZT_FAIL(err, ZT_ERR_UNSUPPORTED,
                       "NCCL needs one GPU per rank: %d rank(s) on this node, %d GPU(s) visible", c->local_size, ndev);
    m->device = c->local_rank;
    CUDA_TRY(cudaSetDevice(m->device));
    CUDA_TRY(cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking));
    ncclUniqueId id;
    if (c->rank == 0) NCCL_TRY(ncclGetUniqueId(&id));
    ZT_TRY(m->host.ops->broadcast(&m->host, &id, sizeof id, 0, err));
    NCCL_TRY(ncclCommInitRank(&m->nccl, c->world_size, id, c->rank));
    return ZT_OK;
}
