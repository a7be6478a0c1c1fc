/* MPI over device buffers through host staging: for ranks that share a GPU
 * (NCCL refuses two ranks on one device) or an MPI without CUDA support. Each
 * collective copies its device input to a pinned host buffer, runs the MPI
 * collective there, and copies the result back when waited for. Slower than
 * NCCL, but it lets several ranks share one GPU for memory experiments. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_cuda.h"

#define STAGED_POOL 16

typedef struct {
    zt_comm host; /* the MPI communicator doing the work */
    /* Pinned buffers of finished collectives, kept for the next ones:
     * cudaMallocHost and cudaFreeHost per collective cost far more than the
     * copies (and freeing pinned memory synchronizes the device). */
    struct {
        char *buf;
        size_t bytes;
    } pool[STAGED_POOL];
    int npool;
    /* Pinned memory kept between collectives is outside the memory reports,
     * so it is bounded: a finished collective's buffer is pooled only while
     * pooled and in-flight staging together stay within the most the
     * collectives have had in flight at once, or the floor if more. A
     * fixed 512 MiB cap churned: at GPT-2-small size (vocabulary 50257,
     * d_model 768) in bf16 over 2 ranks, the embedding's reduce-scatter needs
     * 386 MB of staging besides the rest, and it was freed and pinned again
     * every step (cudaFreeHost also synchronizes the device). */
    size_t floor_bytes;
    size_t inflight_bytes;      /* staging held by unfinished collectives */
    size_t peak_inflight_bytes; /* the most inflight_bytes has been */
} staged_impl;

/* One copy between a device buffer and its host staging. */
typedef struct {
    size_t device_at, host_at, bytes;
} staged_seg;

/* What a handle needs at completion: the MPI handle and where results go. */
typedef struct {
    zt_comm_handle mpi;
    void *device_out;
    size_t out_bytes;
    void *host_out;
    /* An all-to-all's received chunks, packed in host_out, each back to its
     * own offset of device_out: a copy per run of adjacent chunks, so that
     * bytes between chunks stay as they were (NULL: host_out[out_bytes]
     * to device_out in one copy). */
    staged_seg *back;
    int nback;
    char *owned; /* pinned staging of this call (from the pool or new) */
    size_t owned_bytes;
} staged_req;

#define CUDA_TRY(call)                                                                            \
    do {                                                                                          \
        cudaError_t rc_ = (call);                                                                 \
        if (rc_ != cudaSuccess)                                                                   \
            return ZT_FAIL(err, ZT_ERR_COMM, "%s failed: %s", #call, cudaGetErrorString(rc_));    \
    } while (0)

static staged_impl *impl_of(zt_comm *c) { return c->impl; }

static size_t pooled_bytes(const staged_impl *m) {
    size_t sum = 0;
    for (int i = 0; i < m->npool; i++) sum += m->pool[i].bytes;
    return sum;
}

/* Keeps the communicator's zt_staging_stats current. */
static void publish(zt_comm *c) {
    staged_impl *m = impl_of(c);
    c->staging.pinned_bytes = m->inflight_bytes + pooled_bytes(m);
    if (c->staging.pinned_bytes > c->staging.pinned_peak_bytes) c->staging.pinned_peak_bytes = c->staging.pinned_bytes;
}

/* A request with at least `bytes` of pinned staging: the smallest pooled
 * buffer that fits, else a new one. */
static zt_status new_req(zt_comm *c, size_t bytes, staged_req **out, zt_error *err) {
    staged_impl *m = impl_of(c);
    staged_req *r = calloc(1, sizeof *r);
    if (!r) return ZT_FAIL(err, ZT_ERR_OOM, "comm: cannot allocate a request");
    if (!bytes) bytes = 1;
    int best = -1;
    for (int i = 0; i < m->npool; i++)
        if (m->pool[i].bytes >= bytes && (best < 0 || m->pool[i].bytes < m->pool[best].bytes)) best = i;
    if (best >= 0) {
        r->owned = m->pool[best].buf;
        r->owned_bytes = m->pool[best].bytes;
        m->pool[best] = m->pool[--m->npool];
    } else if (cudaMallocHost((void **)&r->owned, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        free(r);
        return ZT_FAIL(err, ZT_ERR_OOM, "comm: cannot allocate %zu bytes of pinned staging", bytes);
    } else {
        r->owned_bytes = bytes;
        c->staging.pinned_allocs++;
    }
    m->inflight_bytes += r->owned_bytes;
    if (m->inflight_bytes > m->peak_inflight_bytes) m->peak_inflight_bytes = m->inflight_bytes;
    publish(c);
    *out = r;
    return ZT_OK;
}

static void drop_pooled(staged_impl *m, int i) {
    cudaFreeHost(m->pool[i].buf);
    m->pool[i] = m->pool[--m->npool];
}

/* Returns r's staging to the pool, evicting smaller pooled buffers (the
 * smallest first) to make room: a slot, and bytes under the bound above.
 * When even evicting all of them would not make room, r's buffer is freed
 * instead and the pool is left as it is. */
static void free_req(zt_comm *c, staged_req *r) {
    if (!r) return;
    staged_impl *m = impl_of(c);
    char *buf = r->owned;
    size_t bytes = r->owned_bytes;
    m->inflight_bytes -= bytes;
    size_t bound = m->peak_inflight_bytes > m->floor_bytes ? m->peak_inflight_bytes : m->floor_bytes;
    size_t pooled = pooled_bytes(m), smaller_bytes = 0; /* smaller: what eviction may free */
    int smaller = 0;
    for (int i = 0; i < m->npool; i++)
        if (m->pool[i].bytes < bytes) {
            smaller_bytes += m->pool[i].bytes;
            smaller++;
        }
    int room = m->npool - smaller < STAGED_POOL && m->inflight_bytes + (pooled - smaller_bytes) + bytes <= bound;
    if (!room) {
        cudaFreeHost(buf);
    } else {
        while (m->npool == STAGED_POOL || m->inflight_bytes + pooled + bytes > bound) {
            int smallest = 0;
            for (int i = 1; i < m->npool; i++)
                if (m->pool[i].bytes < m->pool[smallest].bytes) smallest = i;
            pooled -= m->pool[smallest].bytes;
            drop_pooled(m, smallest); /* smaller than bytes: the check above */
        }
        m->pool[m->npool].buf = buf;
        m->pool[m->npool].bytes = bytes;
        m->npool++;
    }
    publish(c);
    free(r->back);
    free(r);
}

/* The copies to host staging are synchronous on the legacy stream, which is
 * not ordered with the runtime's non-blocking streams: wait for the producer. */
static zt_status wait_ready(void *ready, zt_error *err) {
    if (ready) CUDA_TRY(cudaEventSynchronize((cudaEvent_t)ready));
    return ZT_OK;
}

static zt_status staged_all_gather_start(zt_comm *c, const void *send, void *recv, size_t bytes_per_rank,
                                         void *ready, zt_comm_handle *h, zt_error *err) {
    staged_impl *m = impl_of(c);
    ZT_TRY(wait_ready(ready, err));
    size_t total = bytes_per_rank * (size_t)c->world_size;
    staged_req *r = NULL;
    ZT_TRY(new_req(c, total, &r, err));
    const void *src = send ? send : (const char *)recv + (size_t)c->rank * bytes_per_rank;
    cudaError_t rc = cudaMemcpy(r->owned + (size_t)c->rank * bytes_per_rank, src, bytes_per_rank, cudaMemcpyDefault);
    if (rc != cudaSuccess) {
        free_req(c, r);
        return ZT_FAIL(err, ZT_ERR_COMM, "staging copy failed: %s", cudaGetErrorString(rc));
    }
    r->mpi.kind = ZT_COLL_ALL_GATHER;
    zt_status st = m->host.ops->all_gather_start(&m->host, NULL, r->owned, bytes_per_rank, NULL, &r->mpi, err);
    if (st != ZT_OK) {
        free_req(c, r);
        return st;
    }
    r->device_out = recv;
    r->host_out = r->owned;
    r->out_bytes = total;
    h->impl_req = r;
    return ZT_OK;
}

static zt_status staged_reduce_scatter_start(zt_comm *c, const void *send, void *staging, float *out,
                                             size_t count, zt_wire wire, void *ready, zt_comm_handle *h,
                                             zt_error *err) {
    (void)staging; /* the device staging is replaced by host staging */
    staged_impl *m = impl_of(c);
    ZT_TRY(wait_ready(ready, err));
    size_t N = (size_t)c->world_size, chunk = zt_wire_bytes(&wire, count), bytes = count * sizeof(float);
    staged_req *r = NULL;
    ZT_TRY(new_req(c, chunk * 2 * N + bytes, &r, err)); /* send | received chunks | fp32 sum */
    char *hsend = r->owned, *hrecv = hsend + N * chunk;
    float *hout = (float *)(hrecv + N * chunk);
    cudaError_t rc = cudaMemcpy(hsend, send, chunk * N, cudaMemcpyDefault);
    if (rc != cudaSuccess) {
        free_req(c, r);
        return ZT_FAIL(err, ZT_ERR_COMM, "staging copy failed: %s", cudaGetErrorString(rc));
    }
    r->mpi.kind = ZT_COLL_REDUCE_SCATTER;
    r->mpi.staging = hrecv;
    r->mpi.out = hout;
    r->mpi.count = count;
    r->mpi.wire = wire;
    zt_status st = m->host.ops->reduce_scatter_start(&m->host, hsend, hrecv, hout, count, wire, NULL, &r->mpi, err);
    if (st != ZT_OK) {
        free_req(c, r);
        return st;
    }
    r->device_out = out;
    r->host_out = hout;
    r->out_bytes = bytes;
    h->impl_req = r;
    return ZT_OK;
}

/* counts[N] bytes at offsets[N] of a device buffer, packed in peer order on
 * the host: packed[j] is chunk j's place there, and segs[] (at most N) the
 * copies that move the chunks, chunks adjacent on the device in one.
 * Returns how many segs. */
static int pack_chunks(int N, const size_t *counts, const size_t *offsets, size_t *packed, staged_seg *segs) {
    int n = 0;
    size_t at = 0;
    for (int j = 0; j < N; j++) {
        packed[j] = at;
        if (!counts[j]) continue;
        if (n && segs[n - 1].device_at + segs[n - 1].bytes == offsets[j]) segs[n - 1].bytes += counts[j];
        else segs[n++] = (staged_seg){offsets[j], at, counts[j]};
        at += counts[j];
    }
    return n;
}

/* segs from a device buffer to its host staging (to_host), or back. */
static cudaError_t copy_segs(void *dst, const void *src, const staged_seg *segs, int n, int to_host) {
    cudaError_t rc = cudaSuccess;
    for (int i = 0; i < n && rc == cudaSuccess; i++) {
        size_t dst_at = to_host ? segs[i].host_at : segs[i].device_at;
        size_t src_at = to_host ? segs[i].device_at : segs[i].host_at;
        rc = cudaMemcpy((char *)dst + dst_at, (const char *)src + src_at, segs[i].bytes, cudaMemcpyDefault);
    }
    return rc;
}

/* The chunks packed into pinned staging [sent | received], MPI's
 * all-to-all between the packed layouts, and the received chunks copied
 * back to their offsets at wait. */
static zt_status staged_all_to_all_start(zt_comm *c, const void *send, const size_t *send_counts,
                                         const size_t *send_offsets, void *recv, const size_t *recv_counts,
                                         const size_t *recv_offsets, void *ready, zt_comm_handle *h, zt_error *err) {
    staged_impl *m = impl_of(c);
    /* The producer's stream: the copies below run on the legacy stream. */
    if (ready) CUDA_TRY(cudaStreamSynchronize((cudaStream_t)ready));
    int N = c->world_size;
    size_t *packed = malloc(2 * (size_t)N * sizeof *packed); /* [2][N]: sent, received */
    staged_seg *out = malloc((size_t)N * sizeof *out), *back = malloc((size_t)N * sizeof *back);
    staged_req *r = NULL;
    zt_status st = packed && out && back ? ZT_OK : ZT_FAIL(err, ZT_ERR_OOM, "comm: cannot allocate %d chunks", N);
    int nout = 0, nback = 0;
    size_t sent = 0, received = 0;
    if (st == ZT_OK) {
        nout = pack_chunks(N, send_counts, send_offsets, packed, out);
        nback = pack_chunks(N, recv_counts, recv_offsets, packed + N, back);
        for (int j = 0; j < N; j++) sent += send_counts[j], received += recv_counts[j];
        st = new_req(c, sent + received, &r, err);
    }
    if (st == ZT_OK) {
        cudaError_t rc = copy_segs(r->owned, send, out, nout, 1);
        if (rc != cudaSuccess) st = ZT_FAIL(err, ZT_ERR_COMM, "staging copy failed: %s", cudaGetErrorString(rc));
    }
    if (st == ZT_OK) {
        r->mpi.kind = ZT_COLL_ALL_TO_ALL;
        st = m->host.ops->all_to_all_start(&m->host, r->owned, send_counts, packed, r->owned + sent, recv_counts,
                                           packed + N, NULL, &r->mpi, err);
    }
    free(packed);
    free(out);
    if (st != ZT_OK) {
        free(back);
        if (r) free_req(c, r);
        return st;
    }
    r->device_out = recv;
    r->host_out = r->owned + sent;
    r->out_bytes = received;
    r->back = back;
    r->nback = nback;
    h->impl_req = r;
    return ZT_OK;
}

static zt_status staged_wait(zt_comm *c, zt_comm_handle *h, zt_error *err) {
    staged_impl *m = impl_of(c);
    staged_req *r = h->impl_req;
    h->impl_req = NULL;
    snprintf(r->mpi.what, sizeof r->mpi.what, "%s", h->what); /* the caller labels h after the start */
    zt_status st = m->host.ops->wait(&m->host, &r->mpi, err);
    if (st == ZT_ERR_TIMEOUT) { /* MPI may still write the staging: the request stays, as MPI's does */
        h->impl_req = r;
        return st;
    }
    if (st == ZT_OK) {
        staged_seg whole = {0, 0, r->out_bytes};
        cudaError_t rc = r->back ? copy_segs(r->device_out, r->host_out, r->back, r->nback, 0)
                                 : copy_segs(r->device_out, r->host_out, &whole, 1, 0);
        if (rc != cudaSuccess) st = ZT_FAIL(err, ZT_ERR_COMM, "staging copy back failed: %s", cudaGetErrorString(rc));
    }
    free_req(c, r);
    return st;
}

static zt_status staged_test(zt_comm *c, zt_comm_handle *h, int *done, zt_error *err) {
    staged_impl *m = impl_of(c);
    staged_req *r = h->impl_req;
    return m->host.ops->test(&m->host, &r->mpi, done, err);
}

static zt_status staged_sum_f64(zt_comm *c, const double *v, int n, double *out, zt_error *err) {
    return impl_of(c)->host.ops->sum_f64(&impl_of(c)->host, v, n, out, err);
}
static zt_status staged_all_gather_host(zt_comm *c, void *recv, size_t bytes_per_rank, zt_error *err) {
    return impl_of(c)->host.ops->all_gather_host(&impl_of(c)->host, recv, bytes_per_rank, err);
}
static zt_status staged_all_gather_u64(zt_comm *c, unsigned long long v, unsigned long long *recv, zt_error *err) {
    return impl_of(c)->host.ops->all_gather_u64(&impl_of(c)->host, v, recv, err);
}
static zt_status staged_broadcast(zt_comm *c, void *buf, size_t bytes, int root, zt_error *err) {
    /* Host buffers only (bootstrap data, scalars). */
    return impl_of(c)->host.ops->broadcast(&impl_of(c)->host, buf, bytes, root, err);
}
/* Host buffers, as on every communicator (zt_comm.h). */
static zt_status staged_gather_host(zt_comm *c, const void *send, void *recv, const size_t *counts, int root,
                                zt_error *err) {
    zt_comm *host = &impl_of(c)->host;
    return host->ops->gather_host(host, send, recv, counts, root, err);
}
static zt_status staged_scatter_host(zt_comm *c, const void *send, void *recv, const size_t *counts, int root,
                                 zt_error *err) {
    zt_comm *host = &impl_of(c)->host;
    return host->ops->scatter_host(host, send, recv, counts, root, err);
}
static zt_status staged_barrier(zt_comm *c, zt_error *err) {
    return impl_of(c)->host.ops->barrier(&impl_of(c)->host, err);
}
static void staged_destroy(zt_comm *c) {
    staged_impl *m = c->impl;
    if (!m) return;
    while (m->npool) drop_pooled(m, 0);
    publish(c);
    zt_comm_destroy(&m->host);
    free(m);
    c->impl = NULL;
}

/* The watchdog on the host communicator under this one (its collectives
 * are MPI's). */
static void staged_set_timeout(zt_comm *c, double seconds) { zt_comm_set_timeout(&impl_of(c)->host, seconds); }

static const zt_comm_ops staged_ops = {
    .name = "mpi+host-staging",
    .takes_events = 1,
    .all_gather_start = staged_all_gather_start,
    .reduce_scatter_start = staged_reduce_scatter_start,
    .all_to_all_start = staged_all_to_all_start,
    .wait = staged_wait,
    .test = staged_test,
    .sum_f64 = staged_sum_f64,
    .all_gather_u64 = staged_all_gather_u64,
    .all_gather_host = staged_all_gather_host,
    .broadcast = staged_broadcast,
    .barrier = staged_barrier,
    .gather_host = staged_gather_host,
    .scatter_host = staged_scatter_host,
    .destroy = staged_destroy,
    .set_timeout = staged_set_timeout,
};

zt_status zt_comm_staged_create(zt_comm *c, size_t pool_floor_bytes, zt_error *err) {
    memset(c, 0, sizeof *c);
    staged_impl *m = calloc(1, sizeof *m);
    if (!m) return ZT_FAIL(err, ZT_ERR_OOM, "comm: cannot allocate");
    m->floor_bytes = pool_floor_bytes ? pool_floor_bytes : ZT_STAGED_POOL_FLOOR_DEFAULT;
    c->impl = m;
    c->ops = &staged_ops;
    ZT_TRY(zt_comm_create_mpi(&m->host, err));
    zt_comm_copy_topology(c, &m->host);
    return ZT_OK;
}
