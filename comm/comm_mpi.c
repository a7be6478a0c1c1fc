#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "zt_comm.h"

typedef struct {
    MPI_Comm world; /* a duplicate, so our traffic never meets the caller's */
    MPI_Comm node;
} mpi_impl;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *zt_coll_name(zt_coll_kind k) {
    static const char *const names[ZT_COLL_KINDS] = {"all_gather", "reduce_scatter", "all_reduce", "broadcast",
                                                      "barrier"};
    return (k >= 0 && k < ZT_COLL_KINDS) ? names[k] : "?";
}

static zt_status mpi_fail(zt_error *err, int rc, const char *what, const char *file, int line) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return zt_error_set(err, ZT_ERR_COMM, file, line, "%s failed: %s", what, msg);
}
#define MPI_TRY(call, what)                                                     \
    do {                                                                        \
        int mpi_rc_ = (call);                                                   \
        if (mpi_rc_ != MPI_SUCCESS) return mpi_fail(err, mpi_rc_, what, __FILE__, __LINE__); \
    } while (0)

static MPI_Comm world_of(const zt_comm *c) { return ((mpi_impl *)c->impl)->world; }

zt_status zt_comm_create_mpi(zt_comm *c, zt_error *err) {
    memset(c, 0, sizeof *c);
    mpi_impl *m = calloc(1, sizeof *m);
    if (!m) return ZT_FAIL(err, ZT_ERR_OOM, "comm: cannot allocate");
    c->impl = m;
    MPI_TRY(MPI_Comm_dup(MPI_COMM_WORLD, &m->world), "MPI_Comm_dup");
    /* Errors come back as codes (reported with context), not as aborts. */
    MPI_TRY(MPI_Comm_set_errhandler(m->world, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    MPI_TRY(MPI_Comm_rank(m->world, &c->rank), "MPI_Comm_rank");
    MPI_TRY(MPI_Comm_size(m->world, &c->world_size), "MPI_Comm_size");
    MPI_TRY(MPI_Comm_split_type(m->world, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &m->node),
            "MPI_Comm_split_type");
    MPI_TRY(MPI_Comm_rank(m->node, &c->local_rank), "MPI_Comm_rank(node)");
    MPI_TRY(MPI_Comm_size(m->node, &c->local_size), "MPI_Comm_size(node)");
    return ZT_OK;
}

void zt_comm_destroy(zt_comm *c) {
    mpi_impl *m = c->impl;
    if (!m) return;
    if (m->node != MPI_COMM_NULL && m->node != 0) MPI_Comm_free(&m->node);
    if (m->world != MPI_COMM_NULL && m->world != 0) MPI_Comm_free(&m->world);
    free(m);
    c->impl = NULL;
}

static zt_status begin(zt_comm_handle *h, zt_coll_kind kind, size_t bytes, zt_error *err) {
    if (h->active) return ZT_FAIL(err, ZT_ERR_INTERNAL, "comm: handle already in flight");
    memset(h, 0, sizeof *h);
    h->impl_req = malloc(sizeof(MPI_Request));
    if (!h->impl_req) return ZT_FAIL(err, ZT_ERR_OOM, "comm: cannot allocate a request");
    h->active = 1;
    h->kind = kind;
    h->bytes = bytes;
    h->t_start = now_s();
    return ZT_OK;
}

zt_status zt_comm_all_gather_start(zt_comm *c, const void *send, void *recv, size_t bytes_per_rank,
                                   zt_comm_handle *h, zt_error *err) {
    if (bytes_per_rank > (size_t)0x7fffffff)
        return ZT_FAIL(err, ZT_ERR_INVALID, "all_gather: %zu bytes per rank exceeds MPI's int count", bytes_per_rank);
    ZT_TRY(begin(h, ZT_COLL_ALL_GATHER, bytes_per_rank * (size_t)c->world_size, err));
    int rc = MPI_Iallgather(send ? send : MPI_IN_PLACE, (int)bytes_per_rank, MPI_BYTE, recv, (int)bytes_per_rank,
                            MPI_BYTE, world_of(c), h->impl_req);
    if (rc != MPI_SUCCESS) {
        free(h->impl_req);
        h->active = 0;
        return mpi_fail(err, rc, "MPI_Iallgather", __FILE__, __LINE__);
    }
    return ZT_OK;
}

zt_status zt_comm_reduce_scatter_start(zt_comm *c, const float *send, float *staging, float *out, size_t count,
                                       zt_comm_handle *h, zt_error *err) {
    if (count > (size_t)0x7fffffff)
        return ZT_FAIL(err, ZT_ERR_INVALID, "reduce_scatter: %zu elements per rank exceeds MPI's int count", count);
    ZT_TRY(begin(h, ZT_COLL_REDUCE_SCATTER, count * sizeof(float) * (size_t)c->world_size, err));
    h->staging = staging;
    h->out = out;
    h->count = count;
    int rc = MPI_Ialltoall(send, (int)count, MPI_FLOAT, staging, (int)count, MPI_FLOAT, world_of(c), h->impl_req);
    if (rc != MPI_SUCCESS) {
        free(h->impl_req);
        h->active = 0;
        return mpi_fail(err, rc, "MPI_Ialltoall (reduce-scatter)", __FILE__, __LINE__);
    }
    return ZT_OK;
}

zt_status zt_comm_wait(zt_comm *c, zt_comm_handle *h, zt_error *err) {
    if (!h->active) return ZT_OK;
    double t0 = now_s();
    int rc = MPI_Wait(h->impl_req, MPI_STATUS_IGNORE);
    free(h->impl_req);
    h->impl_req = NULL;
    h->active = 0;
    if (rc != MPI_SUCCESS) return mpi_fail(err, rc, zt_coll_name(h->kind), __FILE__, __LINE__);
    if (h->kind == ZT_COLL_REDUCE_SCATTER) {
        /* The fixed summation order: rank 0's chunk, + rank 1's, + ... */
        size_t n = h->count;
        int N = c->world_size;
        memcpy(h->out, h->staging, n * sizeof(float));
        for (int r = 1; r < N; r++) {
            const float *src = h->staging + (size_t)r * n;
            for (size_t i = 0; i < n; i++) h->out[i] += src[i];
        }
    }
    double t1 = now_s();
    zt_coll_stats *s = &c->stats[h->kind];
    s->calls++;
    s->bytes += (double)h->bytes;
    s->time_s += t1 - h->t_start;
    s->wait_s += t1 - t0;
    return ZT_OK;
}

static void record(zt_comm *c, zt_coll_kind k, size_t bytes, double t0) {
    double dt = now_s() - t0;
    c->stats[k].calls++;
    c->stats[k].bytes += (double)bytes;
    c->stats[k].time_s += dt;
    c->stats[k].wait_s += dt;
}

zt_status zt_comm_sum_f64(zt_comm *c, double v, double *out, zt_error *err) {
    double t0 = now_s();
    double stack[64], *all = c->world_size <= 64 ? stack : malloc(sizeof(double) * (size_t)c->world_size);
    if (!all) return ZT_FAIL(err, ZT_ERR_OOM, "comm: cannot allocate");
    int rc = MPI_Allgather(&v, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, world_of(c));
    if (rc == MPI_SUCCESS) {
        double s = 0.0;
        for (int r = 0; r < c->world_size; r++) s += all[r];
        *out = s;
    }
    if (all != stack) free(all);
    if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "MPI_Allgather (sum)", __FILE__, __LINE__);
    record(c, ZT_COLL_ALL_REDUCE, sizeof(double), t0);
    return ZT_OK;
}

zt_status zt_comm_all_gather_u64(zt_comm *c, unsigned long long v, unsigned long long *recv, zt_error *err) {
    double t0 = now_s();
    MPI_TRY(MPI_Allgather(&v, 1, MPI_UNSIGNED_LONG_LONG, recv, 1, MPI_UNSIGNED_LONG_LONG, world_of(c)),
            "MPI_Allgather");
    record(c, ZT_COLL_ALL_GATHER, sizeof v * (size_t)c->world_size, t0);
    return ZT_OK;
}

zt_status zt_comm_broadcast(zt_comm *c, void *buf, size_t bytes, int root, zt_error *err) {
    if (bytes > (size_t)0x7fffffff) return ZT_FAIL(err, ZT_ERR_INVALID, "broadcast: %zu bytes too large", bytes);
    double t0 = now_s();
    MPI_TRY(MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, world_of(c)), "MPI_Bcast");
    record(c, ZT_COLL_BROADCAST, bytes, t0);
    return ZT_OK;
}

zt_status zt_comm_barrier(zt_comm *c, zt_error *err) {
    double t0 = now_s();
    MPI_TRY(MPI_Barrier(world_of(c)), "MPI_Barrier");
    record(c, ZT_COLL_BARRIER, 0, t0);
    return ZT_OK;
}

void zt_coll_bandwidth(const zt_comm *c, zt_coll_kind k, double *algbw_gbs, double *busbw_gbs) {
    const zt_coll_stats *s = &c->stats[k];
    double n = c->world_size;
    double alg = s->time_s > 0 ? s->bytes / s->time_s / 1e9 : 0.0;
    double factor = k == ZT_COLL_ALL_REDUCE ? 2.0 * (n - 1) / n
                    : (k == ZT_COLL_ALL_GATHER || k == ZT_COLL_REDUCE_SCATTER) ? (n - 1) / n
                    : 1.0;
    *algbw_gbs = alg;
    *busbw_gbs = alg * factor;
}
