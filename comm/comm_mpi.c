/* The MPI communicator: host buffers, MPI-3 nonblocking collectives. Its
 * reduce-scatter is an all-to-all followed by a sum in rank order. */
#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

#include "zt_comm.h"
#include "zt_time.h"

typedef struct {
    MPI_Comm world; /* a duplicate, so our traffic never meets the caller's */
    MPI_Comm node;
} mpi_impl;

static zt_status mpi_fail(zt_error *err, int rc, const char *what, const char *file, int line) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return zt_error_set(err, ZT_ERR_COMM, file, line, "%s failed: %s", what, msg);
}
#define MPI_TRY(call, what)                                                                  \
    do {                                                                                     \
        int mpi_rc_ = (call);                                                                \
        if (mpi_rc_ != MPI_SUCCESS) return mpi_fail(err, mpi_rc_, what, __FILE__, __LINE__); \
    } while (0)

static MPI_Comm world_of(const zt_comm *c) { return ((mpi_impl *)c->impl)->world; }

static zt_status check_int(size_t n, const char *what, zt_error *err) {
    if (n > (size_t)0x7fffffff) return ZT_FAIL(err, ZT_ERR_INVALID, "%s: count %zu exceeds MPI's int", what, n);
    return ZT_OK;
}

/* Completes *req: MPI_Wait, or under the watchdog MPI_Test until it is
 * done or the timeout has passed (then ZT_ERR_TIMEOUT naming the
 * collective, what waited on it and the peer group; the request is left to
 * the job's abort, as nothing can cancel a collective). Yields the core
 * between tests: ranks may outnumber cores. */
static zt_status wait_request(zt_comm *c, MPI_Request *req, const char *coll, const char *what, zt_error *err) {
    if (c->timeout_s <= 0) {
        MPI_TRY(MPI_Wait(req, MPI_STATUS_IGNORE), coll);
        return ZT_OK;
    }
    double deadline = zt_now_s() + c->timeout_s;
    for (long k = 0;; k++) {
        int done = 0;
        MPI_TRY(MPI_Test(req, &done, MPI_STATUS_IGNORE), coll);
        if (done) return ZT_OK;
        if (k % 256 == 255 && zt_now_s() > deadline) break;
        sched_yield();
    }
    char group[160];
    zt_comm_describe(c, group, sizeof group);
    return ZT_FAIL(err, ZT_ERR_TIMEOUT, "collective watchdog: %s%s%s over %s did not complete within %g s "
                   "(`collective_timeout`): a peer stopped or the network is gone", coll, what && what[0] ? " of " : "",
                   what ? what : "", group, c->timeout_s);
}

static zt_status new_request(zt_comm_handle *h, zt_error *err) {
    h->impl_req = malloc(sizeof(MPI_Request));
    if (!h->impl_req) return ZT_FAIL(err, ZT_ERR_OOM, "comm: cannot allocate a request");
    return ZT_OK;
}

/* MPI reads host buffers, which are final when the CPU backend returns: an
 * event (or the all-to-all's stream) means a caller handed it device memory
 * behind a stream. */
static zt_status check_host_ready(void *ready, const char *what, const char *handle, zt_error *err) {
    if (ready)
        return ZT_FAIL(err, ZT_ERR_INTERNAL,
                       "comm: %s over MPI was given a device %s; device buffers need NCCL or host staging", what,
                       handle);
    return ZT_OK;
}

static zt_status mpi_all_gather_start(zt_comm *c, const void *send, void *recv, size_t bytes_per_rank, void *ready,
                                      zt_comm_handle *h, zt_error *err) {
    ZT_TRY(check_host_ready(ready, "all_gather", "event", err));
    ZT_TRY(check_int(bytes_per_rank, "all_gather", err));
    ZT_TRY(new_request(h, err));
    int rc = MPI_Iallgather(send ? send : MPI_IN_PLACE, (int)bytes_per_rank, MPI_BYTE, recv, (int)bytes_per_rank,
                            MPI_BYTE, world_of(c), h->impl_req);
    if (rc != MPI_SUCCESS) {
        free(h->impl_req);
        h->impl_req = NULL;
        return mpi_fail(err, rc, "MPI_Iallgather", __FILE__, __LINE__);
    }
    return ZT_OK;
}

static zt_status mpi_reduce_scatter_start(zt_comm *c, const void *send, void *staging, float *out, size_t count,
                                          zt_wire wire, void *ready, zt_comm_handle *h, zt_error *err) {
    (void)out;
    ZT_TRY(check_host_ready(ready, "reduce_scatter", "event", err));
    /* 16-bit values and codes travel as their bits; only the sum interprets them. */
    MPI_Datatype t = wire.bits ? MPI_BYTE : wire.dtype == ZT_FP32 ? MPI_FLOAT : MPI_UINT16_T;
    size_t n = wire.bits ? zt_wire_bytes(&wire, count) : count;
    ZT_TRY(check_int(n, "reduce_scatter", err));
    ZT_TRY(new_request(h, err));
    int rc = MPI_Ialltoall(send, (int)n, t, staging, (int)n, t, world_of(c), h->impl_req);
    if (rc != MPI_SUCCESS) {
        free(h->impl_req);
        h->impl_req = NULL;
        return mpi_fail(err, rc, "MPI_Ialltoall (reduce-scatter)", __FILE__, __LINE__);
    }
    return ZT_OK;
}

/* An all-to-all in flight: its request first (what wait and test read
 * through h->impl_req), then the int counts and displacements MPI reads
 * until it completes: [4][N] send counts, send displacements, receive
 * counts, receive displacements. */
typedef struct {
    MPI_Request req;
    int v[];
} a2a_req;

static size_t gcd_size(size_t a, size_t b) {
    while (b) {
        size_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* The largest unit (up to MPI's int) that divides every nonzero count and
 * its offset: MPI counts in ints, so chunks travel as whole units (a
 * contiguous datatype of that many bytes) and reach 2^31 - 1 units, not
 * bytes. A receiver's unit may differ from its sender's: MPI matches the
 * bytes underneath. */
static size_t a2a_unit(int N, const size_t *counts, const size_t *offsets) {
    size_t g = 0;
    for (int j = 0; j < N; j++)
        if (counts[j]) g = gcd_size(gcd_size(g, counts[j]), offsets[j]);
    while (g > INT_MAX && g % 2 == 0) g /= 2;
    return g && g <= INT_MAX ? g : 1; /* 1: the count check below refuses such a chunk */
}

/* counts[j] and offsets[j] in units into n[N] and at[N] (0 for empty chunks). */
static zt_status a2a_ints(int N, const size_t *counts, const size_t *offsets, size_t unit, int *n, int *at,
                          const char *side, zt_error *err) {
    for (int j = 0; j < N; j++) {
        size_t cj = counts[j] / unit, oj = counts[j] ? offsets[j] / unit : 0;
        if (cj > INT_MAX || oj > INT_MAX)
            return ZT_FAIL(err, ZT_ERR_INVALID,
                           "all_to_all over MPI: peer %d's %s chunk (%zu bytes at offset %zu) is past MPI's int "
                           "counts: %zu units at unit %zu, in units of %zu bytes (the most that divides every count "
                           "and offset), over 2^31 - 1",
                           j, side, counts[j], offsets[j], cj, oj, unit);
        n[j] = (int)cj;
        at[j] = (int)oj;
    }
    return ZT_OK;
}

/* MPI_BYTE, or a committed contiguous type of `unit` (<= INT_MAX) bytes
 * (*made: free it). */
static zt_status unit_type(size_t unit, MPI_Datatype *t, int *made, zt_error *err) {
    *t = MPI_BYTE;
    *made = 0;
    if (unit == 1) return ZT_OK;
    MPI_TRY(MPI_Type_contiguous((int)unit, MPI_BYTE, t), "MPI_Type_contiguous");
    *made = 1;
    MPI_TRY(MPI_Type_commit(t), "MPI_Type_commit");
    return ZT_OK;
}

static zt_status mpi_all_to_all_start(zt_comm *c, const void *send, const size_t *send_counts,
                                      const size_t *send_offsets, void *recv, const size_t *recv_counts,
                                      const size_t *recv_offsets, void *ready, zt_comm_handle *h, zt_error *err) {
    ZT_TRY(check_host_ready(ready, "all_to_all", "stream", err));
    int N = c->world_size;
    a2a_req *r = malloc(sizeof *r + 4 * (size_t)N * sizeof r->v[0]);
    if (!r) return ZT_FAIL(err, ZT_ERR_OOM, "comm: cannot allocate an all_to_all request");
    int *scount = r->v, *sdispl = scount + N, *rcount = sdispl + N, *rdispl = rcount + N;
    size_t sunit = a2a_unit(N, send_counts, send_offsets), runit = a2a_unit(N, recv_counts, recv_offsets);
    MPI_Datatype stype = MPI_BYTE, rtype = MPI_BYTE;
    int smade = 0, rmade = 0;
    zt_status st = a2a_ints(N, send_counts, send_offsets, sunit, scount, sdispl, "send", err);
    if (st == ZT_OK) st = a2a_ints(N, recv_counts, recv_offsets, runit, rcount, rdispl, "receive", err);
    if (st == ZT_OK) st = unit_type(sunit, &stype, &smade, err);
    if (st == ZT_OK) st = unit_type(runit, &rtype, &rmade, err);
    if (st == ZT_OK) {
        int rc = MPI_Ialltoallv(send, scount, sdispl, stype, recv, rcount, rdispl, rtype, world_of(c), &r->req);
        if (rc != MPI_SUCCESS) st = mpi_fail(err, rc, "MPI_Ialltoallv", __FILE__, __LINE__);
    }
    /* A type freed while in use stays alive until its communication ends. */
    if (smade) MPI_Type_free(&stype);
    if (rmade) MPI_Type_free(&rtype);
    if (st != ZT_OK) {
        free(r);
        return st;
    }
    h->impl_req = r; /* &r->req: wait and test see an MPI_Request, and free the whole */
    return ZT_OK;
}

/* The fixed summation order, in fp32: rank 0's chunk, + rank 1's, + ...,
 * each value decoded from the wire. */
static void ordered_sum(const zt_comm *c, zt_comm_handle *h) {
    size_t n = h->count, chunk = zt_wire_bytes(&h->wire, n);
    for (int r = 0; r < c->world_size; r++) {
        const uint8_t *at = (const uint8_t *)h->staging + (size_t)r * chunk;
        if (h->wire.bits) {
            zt_wire_accumulate(h->out, at, n, h->wire.bits, h->wire.block, r == 0);
            continue;
        }
        for (size_t i = 0; i < n; i++) {
            float v = zt_dtype_load(at, h->wire.dtype, i);
            h->out[i] = r == 0 ? v : h->out[i] + v;
        }
    }
}

static zt_status mpi_wait(zt_comm *c, zt_comm_handle *h, zt_error *err) {
    zt_status st = wait_request(c, h->impl_req, zt_coll_name(h->kind), h->what, err);
    if (st == ZT_ERR_TIMEOUT) return st; /* MPI may still write the request: it stays */
    free(h->impl_req);
    h->impl_req = NULL;
    ZT_TRY(st);
    if (h->kind == ZT_COLL_REDUCE_SCATTER) ordered_sum(c, h);
    return ZT_OK;
}

static zt_status mpi_test(zt_comm *c, zt_comm_handle *h, int *done, zt_error *err) {
    (void)c;
    /* MPI_Test would free a completed request; MPI_Request_get_status only
     * progresses and reports, so zt_comm_wait still finishes the job. */
    MPI_TRY(MPI_Request_get_status(*(MPI_Request *)h->impl_req, done, MPI_STATUS_IGNORE), "MPI_Request_get_status");
    return ZT_OK;
}

static zt_status mpi_sum_f64(zt_comm *c, const double *v, int n, double *out, zt_error *err) {
    size_t count = (size_t)c->world_size * (size_t)n;
    double stack[256], *all = count <= 256 ? stack : malloc(sizeof(double) * count); /* [N][n] */
    if (!all) return ZT_FAIL(err, ZT_ERR_OOM, "comm: cannot allocate");
    MPI_Request req;
    int rc = MPI_Iallgather(v, n, MPI_DOUBLE, all, n, MPI_DOUBLE, world_of(c), &req);
    const char *what = "the values summed over the ranks (a loss or the gradient norm)";
    zt_status st = rc == MPI_SUCCESS ? wait_request(c, &req, "all-gather", what, err)
                                     : mpi_fail(err, rc, "MPI_Iallgather (sum)", __FILE__, __LINE__);
    if (st == ZT_OK) {
        for (int i = 0; i < n; i++) {
            double s = 0.0;
            for (int r = 0; r < c->world_size; r++) s += all[(size_t)r * n + i];
            out[i] = s;
        }
    }
    if (all != stack && st != ZT_ERR_TIMEOUT) free(all); /* after a timeout MPI may still write it */
    return st;
}

/* A blocking collective as its nonblocking twin and wait_request. */
#define MPI_BLOCKING(start, coll, what)                                        \
    do {                                                                       \
        MPI_Request req_;                                                      \
        MPI_TRY(start, coll);                                                  \
        return wait_request(c, &req_, coll, what, err);                        \
    } while (0)

static zt_status mpi_all_gather_host(zt_comm *c, void *recv, size_t bytes_per_rank, zt_error *err) {
    ZT_TRY(check_int(bytes_per_rank, "all_gather", err));
    MPI_BLOCKING(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_BYTE, recv, (int)bytes_per_rank, MPI_BYTE, world_of(c), &req_),
                 "all-gather", "host values");
}

static zt_status mpi_all_gather_u64(zt_comm *c, unsigned long long v, unsigned long long *recv, zt_error *err) {
    MPI_BLOCKING(MPI_Iallgather(&v, 1, MPI_UNSIGNED_LONG_LONG, recv, 1, MPI_UNSIGNED_LONG_LONG, world_of(c), &req_),
                 "all-gather", "a value per rank");
}

static zt_status mpi_broadcast(zt_comm *c, void *buf, size_t bytes, int root, zt_error *err) {
    ZT_TRY(check_int(bytes, "broadcast", err));
    MPI_BLOCKING(MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, world_of(c), &req_), "broadcast", "");
}

static zt_status mpi_barrier(zt_comm *c, zt_error *err) {
    MPI_BLOCKING(MPI_Ibarrier(world_of(c), &req_), "barrier", "");
}

/* counts[N] and their displacements as MPI's ints (NULL: too large or out of memory). */
static int *int_counts(const zt_comm *c, const size_t *counts, const char *coll, zt_error *err) {
    int N = c->world_size;
    int *v = malloc(2 * (size_t)N * sizeof *v);
    if (!v) {
        ZT_FAIL(err, ZT_ERR_OOM, "comm: cannot allocate %d counts", N);
        return NULL;
    }
    size_t at = 0;
    for (int r = 0; r < N; r++) {
        if (check_int(counts[r], coll, err) != ZT_OK || check_int(at, coll, err) != ZT_OK) {
            free(v);
            return NULL;
        }
        v[r] = (int)counts[r];
        v[N + r] = (int)at;
        at += counts[r];
    }
    return v;
}

static zt_status mpi_gather_host(zt_comm *c, const void *send, void *recv, const size_t *counts, int root,
                                 zt_error *err) {
    int *v = int_counts(c, counts, "gather", err), N = c->world_size;
    if (!v) return err->code;
    MPI_Request req_;
    zt_status st = ZT_OK;
    int rc = MPI_Igatherv(send, v[c->rank], MPI_BYTE, recv, v, v + N, MPI_BYTE, root, world_of(c), &req_);
    if (rc != MPI_SUCCESS) st = mpi_fail(err, rc, "gather", __FILE__, __LINE__);
    else st = wait_request(c, &req_, "gather", "a matrix to its owner", err);
    if (st != ZT_ERR_TIMEOUT) free(v); /* after a timeout MPI may still read it */
    return st;
}

static zt_status mpi_scatter_host(zt_comm *c, const void *send, void *recv, const size_t *counts, int root,
                                  zt_error *err) {
    int *v = int_counts(c, counts, "scatter", err), N = c->world_size;
    if (!v) return err->code;
    MPI_Request req_;
    zt_status st = ZT_OK;
    int rc = MPI_Iscatterv(send, v, v + N, MPI_BYTE, recv, v[c->rank], MPI_BYTE, root, world_of(c), &req_);
    if (rc != MPI_SUCCESS) st = mpi_fail(err, rc, "scatter", __FILE__, __LINE__);
    else st = wait_request(c, &req_, "scatter", "a matrix from its owner", err);
    if (st != ZT_ERR_TIMEOUT) free(v);
    return st;
}

static const zt_comm_ops mpi_ops;

static zt_status mpi_split(zt_comm *c, int color, int key, zt_comm *out, zt_error *err) {
    mpi_impl *m = calloc(1, sizeof *m);
    if (!m) return ZT_FAIL(err, ZT_ERR_OOM, "comm: cannot allocate");
    m->world = m->node = MPI_COMM_NULL;
    zt_comm_copy_topology(out, c); /* the machine's node fields */
    out->impl = m;
    out->ops = &mpi_ops;
    MPI_TRY(MPI_Comm_split(world_of(c), color, key, &m->world), "MPI_Comm_split");
    MPI_TRY(MPI_Comm_set_errhandler(m->world, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    MPI_TRY(MPI_Comm_rank(m->world, &out->rank), "MPI_Comm_rank");
    MPI_TRY(MPI_Comm_size(m->world, &out->world_size), "MPI_Comm_size");
    free(out->member_node); /* the parent's copy: this group's members differ */
    out->member_node = malloc((size_t)out->world_size * sizeof *out->member_node);
    if (!out->member_node) return ZT_FAIL(err, ZT_ERR_OOM, "comm: cannot allocate");
    MPI_TRY(MPI_Allgather(&c->node, 1, MPI_INT, out->member_node, 1, MPI_INT, m->world), "MPI_Allgather(nodes)");
    return ZT_OK;
}

static void mpi_destroy(zt_comm *c) {
    mpi_impl *m = c->impl;
    if (!m) return;
    if (m->node != MPI_COMM_NULL) MPI_Comm_free(&m->node);
    if (m->world != MPI_COMM_NULL) MPI_Comm_free(&m->world);
    free(m);
    c->impl = NULL;
}

static const zt_comm_ops mpi_ops = {
    .split = mpi_split,
    .name = "mpi",
    .all_gather_start = mpi_all_gather_start,
    .reduce_scatter_start = mpi_reduce_scatter_start,
    .all_to_all_start = mpi_all_to_all_start,
    .wait = mpi_wait,
    .test = mpi_test,
    .sum_f64 = mpi_sum_f64,
    .all_gather_u64 = mpi_all_gather_u64,
    .all_gather_host = mpi_all_gather_host,
    .broadcast = mpi_broadcast,
    .barrier = mpi_barrier,
    .gather_host = mpi_gather_host,
    .scatter_host = mpi_scatter_host,
    .destroy = mpi_destroy,
};

/* Each node is known by the world rank of its local rank 0; nodes are
 * numbered in the order of those ranks. */
static zt_status number_nodes(zt_comm *c, mpi_impl *m, zt_error *err) {
    int leader = c->rank;
    MPI_TRY(MPI_Bcast(&leader, 1, MPI_INT, 0, m->node), "MPI_Bcast(node leader)");
    int *leaders = calloc((size_t)c->world_size, sizeof *leaders);
    if (!leaders) return ZT_FAIL(err, ZT_ERR_OOM, "comm: cannot allocate");
    int rc = MPI_Allgather(&leader, 1, MPI_INT, leaders, 1, MPI_INT, m->world);
    c->node = c->nnodes = 0;
    for (int r = 0; rc == MPI_SUCCESS && r < c->world_size; r++) {
        if (leaders[r] != r) continue; /* not a node's first rank */
        if (r < leader) c->node++;
        c->nnodes++;
    }
    /* Each member's node: the number of node leaders before its own. */
    for (int q = 0; rc == MPI_SUCCESS && q < c->world_size; q++) {
        int node = 0;
        for (int r = 0; r < leaders[q]; r++) node += leaders[r] == r;
        leaders[q] = node;
    }
    c->member_node = leaders;
    if (rc != MPI_SUCCESS) return ZT_FAIL(err, ZT_ERR_COMM, "MPI_Allgather(node leaders) failed (%d)", rc);
    if (gethostname(c->host, sizeof c->host) != 0) snprintf(c->host, sizeof c->host, "?");
    c->host[sizeof c->host - 1] = '\0';
    return ZT_OK;
}

zt_status zt_comm_create_mpi(zt_comm *c, zt_error *err) {
    memset(c, 0, sizeof *c);
    mpi_impl *m = calloc(1, sizeof *m);
    if (!m) return ZT_FAIL(err, ZT_ERR_OOM, "comm: cannot allocate");
    m->world = m->node = MPI_COMM_NULL;
    c->impl = m;
    c->ops = &mpi_ops;
    MPI_TRY(MPI_Comm_dup(MPI_COMM_WORLD, &m->world), "MPI_Comm_dup");
    /* Errors come back as codes (reported with context), not as aborts. */
    MPI_TRY(MPI_Comm_set_errhandler(m->world, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    MPI_TRY(MPI_Comm_rank(m->world, &c->rank), "MPI_Comm_rank");
    MPI_TRY(MPI_Comm_size(m->world, &c->world_size), "MPI_Comm_size");
    MPI_TRY(MPI_Comm_split_type(m->world, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &m->node),
            "MPI_Comm_split_type");
    MPI_TRY(MPI_Comm_rank(m->node, &c->local_rank), "MPI_Comm_rank(node)");
    MPI_TRY(MPI_Comm_size(m->node, &c->local_size), "MPI_Comm_size(node)");
    return number_nodes(c, m, err);
}

void zt_comm_copy_topology(zt_comm *dst, const zt_comm *src) {
    free(dst->member_node);
    dst->member_node = NULL;
    if (src->member_node) {
        dst->member_node = malloc((size_t)src->world_size * sizeof *dst->member_node);
        if (dst->member_node) memcpy(dst->member_node, src->member_node, (size_t)src->world_size * sizeof *dst->member_node);
    }
    dst->rank = src->rank;
    dst->world_size = src->world_size;
    dst->local_rank = src->local_rank;
    dst->local_size = src->local_size;
    dst->node = src->node;
    dst->nnodes = src->nnodes;
    memcpy(dst->host, src->host, sizeof dst->host);
}
