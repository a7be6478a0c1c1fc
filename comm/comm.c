/* Dispatch to the implementation, and the per-collective statistics. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "zt_time.h"
#include "zt_comm.h"
#include "zt_cuda_module.h"

const char *zt_coll_name(zt_coll_kind k) {
    static const char *const names[ZT_COLL_KINDS] = {"all_gather", "reduce_scatter", "all_reduce", "broadcast",
                                                      "barrier",    "gather",         "scatter",    "all_to_all"};
    return (k >= 0 && k < ZT_COLL_KINDS) ? names[k] : "?";
}

void zt_comm_destroy(zt_comm *c) {
    if (c->ops && c->ops->destroy) c->ops->destroy(c);
    free(c->member_node);
    c->member_node = NULL;
    c->ops = NULL;
    c->impl = NULL;
}

/* Members of c on this rank's node (itself included). */
static int same_node(const zt_comm *c) {
    if (!c->member_node) return c->world_size;
    int n = 0;
    for (int r = 0; r < c->world_size; r++) n += c->member_node[r] == c->member_node[c->rank];
    return n;
}

/* A collective in which this rank receives `each` bytes from every other
 * member (all-gather, the all-to-all of the reduce-scatter). */
static void from_everyone(const zt_comm *c, size_t each, double *inter, double *intra) {
    int same = same_node(c);
    *inter = (double)each * (double)(c->world_size - same);
    *intra = (double)each * (double)(same - 1);
}

static size_t counts_total(const zt_comm *c, const size_t *counts) {
    size_t t = 0;
    for (int r = 0; r < c->world_size; r++) t += counts[r];
    return t;
}

static zt_status begin(zt_comm_handle *h, zt_coll_kind kind, size_t bytes, zt_error *err) {
    if (h->active) return ZT_FAIL(err, ZT_ERR_INTERNAL, "comm: handle already in flight");
    memset(h, 0, sizeof *h);
    h->kind = kind;
    h->bytes = h->uncompressed_bytes = bytes;
    h->t_start = zt_now_s();
    return ZT_OK;
}

zt_status zt_comm_all_gather_coded_start(zt_comm *c, const void *send, void *recv, size_t bytes_per_rank,
                                         size_t uncompressed_per_rank, void *ready, zt_comm_handle *h, zt_error *err) {
    ZT_TRY(begin(h, ZT_COLL_ALL_GATHER, bytes_per_rank * (size_t)c->world_size, err));
    h->uncompressed_bytes = uncompressed_per_rank * (size_t)c->world_size;
    from_everyone(c, bytes_per_rank, &h->inter_bytes, &h->intra_bytes);
    ZT_TRY(c->ops->all_gather_start(c, send, recv, bytes_per_rank, ready, h, err));
    h->active = 1;
    return ZT_OK;
}

zt_status zt_comm_all_gather_start(zt_comm *c, const void *send, void *recv, size_t bytes_per_rank, void *ready,
                                   zt_comm_handle *h, zt_error *err) {
    return zt_comm_all_gather_coded_start(c, send, recv, bytes_per_rank, bytes_per_rank, ready, h, err);
}

zt_status zt_comm_reduce_scatter_start(zt_comm *c, const void *send, void *staging, float *out, size_t count,
                                       zt_wire wire, void *ready, zt_comm_handle *h, zt_error *err) {
    if (wire.bits && (wire.bits != 8 && wire.bits != 4))
        return ZT_FAIL(err, ZT_ERR_INTERNAL, "comm: %d-bit wire codes (8 or 4)", wire.bits);
    size_t chunk = zt_wire_bytes(&wire, count);
    ZT_TRY(begin(h, ZT_COLL_REDUCE_SCATTER, chunk * (size_t)c->world_size, err));
    h->uncompressed_bytes = count * zt_dtype_size(wire.dtype) * (size_t)c->world_size;
    h->staging = staging;
    h->out = out;
    h->count = count;
    h->wire = wire;
    from_everyone(c, chunk, &h->inter_bytes, &h->intra_bytes);
    ZT_TRY(c->ops->reduce_scatter_start(c, send, staging, out, count, wire, ready, h, err));
    h->active = 1;
    return ZT_OK;
}

/* What the all-to-all's arguments must satisfy before any rank's work is
 * queued: this rank's chunk to itself the same size on both sides, and no
 * chunk reaching past the end of the address space. */
static zt_status check_all_to_all(const zt_comm *c, const size_t *send_counts, const size_t *send_offsets,
                                  const size_t *recv_counts, const size_t *recv_offsets, zt_error *err) {
    if (!send_counts || !send_offsets || !recv_counts || !recv_offsets)
        return ZT_FAIL(err, ZT_ERR_INVALID, "all_to_all: a NULL count or offset array");
    if (send_counts[c->rank] != recv_counts[c->rank])
        return ZT_FAIL(err, ZT_ERR_INVALID, "all_to_all: rank %d sends %zu bytes to itself but receives %zu", c->rank,
                       send_counts[c->rank], recv_counts[c->rank]);
    for (int j = 0; j < c->world_size; j++)
        if (send_offsets[j] + send_counts[j] < send_offsets[j] || recv_offsets[j] + recv_counts[j] < recv_offsets[j])
            return ZT_FAIL(err, ZT_ERR_INVALID, "all_to_all: peer %d's offset plus count overflows", j);
    return ZT_OK;
}

zt_status zt_comm_all_to_all_start(zt_comm *c, const void *send, const size_t *send_counts, const size_t *send_offsets,
                                   void *recv, const size_t *recv_counts, const size_t *recv_offsets, void *ready,
                                   zt_comm_handle *h, zt_error *err) {
    if (!c->ops->all_to_all_start)
        return ZT_FAIL(err, ZT_ERR_UNSUPPORTED, "comm: the %s communicator has no all_to_all", c->ops->name);
    ZT_TRY(check_all_to_all(c, send_counts, send_offsets, recv_counts, recv_offsets, err));
    /* nccl-tests' size for alltoall: what this rank sends */
    ZT_TRY(begin(h, ZT_COLL_ALL_TO_ALL, counts_total(c, send_counts), err));
    for (int i = 0; i < c->world_size; i++) { /* received from others, by the sender's node */
        if (i == c->rank) continue;
        int remote = c->member_node && c->member_node[i] != c->member_node[c->rank];
        *(remote ? &h->inter_bytes : &h->intra_bytes) += (double)recv_counts[i];
    }
    ZT_TRY(c->ops->all_to_all_start(c, send, send_counts, send_offsets, recv, recv_counts, recv_offsets, ready, h,
                                    err));
    h->active = 1;
    return ZT_OK;
}

zt_status zt_comm_split(zt_comm *c, int color, int key, zt_comm *out, zt_error *err) {
    memset(out, 0, sizeof *out);
    if (!c->ops->split)
        return ZT_FAIL(err, ZT_ERR_UNSUPPORTED, "comm: the %s communicator cannot be split into groups", c->ops->name);
    ZT_TRY(c->ops->split(c, color, key, out, err));
    zt_comm_set_timeout(out, c->timeout_s);
    out->trace = c->trace;
    return ZT_OK;
}

void zt_comm_set_timeout(zt_comm *c, double seconds) {
    c->timeout_s = seconds > 0 ? seconds : 0;
    if (c->ops && c->ops->set_timeout) c->ops->set_timeout(c, c->timeout_s);
}

void zt_comm_abort(zt_comm *c) {
    if (c->ops && c->ops->abort) c->ops->abort(c);
}

void zt_comm_pending(zt_comm *c, char *buf, size_t cap) {
    if (cap) buf[0] = '\0';
    if (c->ops && c->ops->pending) c->ops->pending(c, buf, cap);
}

void zt_comm_describe(const zt_comm *c, char *buf, size_t cap) {
    snprintf(buf, cap, "%s (%d rank(s); this is its rank %d, on %s)", c->name[0] ? c->name : "the world",
             c->world_size, c->rank, c->host[0] ? c->host : "?");
    if (!c->name[0] && c->nnodes > 1) { /* the world's nodes say where the peers are */
        size_t len = strlen(buf);
        snprintf(buf + len, cap - len, " over %d nodes", c->nnodes);
    }
}

zt_status zt_comm_wait(zt_comm *c, zt_comm_handle *h, zt_error *err) {
    if (!h->active) return ZT_OK;
    double t0 = zt_now_s();
    zt_status st = c->ops->wait(c, h, err);
    h->active = 0;
    ZT_TRY(st);
    double t1 = zt_now_s();
    zt_coll_stats *s = zt_comm_stats_of(c, h->kind);
    s->calls++;
    s->bytes += (double)h->bytes;
    s->uncompressed_bytes += (double)h->uncompressed_bytes;
    s->time_s += t1 - h->t_start;
    s->wait_s += t1 - t0;
    s->inter_bytes += h->inter_bytes;
    s->intra_bytes += h->intra_bytes;
    zt_trace_span(c->trace, zt_coll_name(h->kind), "comm", 1, h->t_start);
    zt_trace_wait(c->trace, t0);
    return ZT_OK;
}

zt_status zt_comm_wait_stream(zt_comm *c, zt_comm_handle *h, void *stream, zt_error *err) {
    if (!h->active) return ZT_OK;
    if (!c->ops->wait_stream || !stream) return zt_comm_wait(c, h, err);
    double t0 = zt_now_s();
    zt_status st = c->ops->wait_stream(c, h, stream, err);
    h->active = 0;
    ZT_TRY(st);
    /* Calls and bytes now; the implementation adds the GPU time later. */
    zt_coll_stats *s = zt_comm_stats_of(c, h->kind);
    s->calls++;
    s->bytes += (double)h->bytes;
    s->uncompressed_bytes += (double)h->uncompressed_bytes;
    s->wait_s += zt_now_s() - t0;
    s->inter_bytes += h->inter_bytes;
    s->intra_bytes += h->intra_bytes;
    return ZT_OK;
}

zt_status zt_comm_progress(zt_comm *c, zt_comm_handle *h, zt_error *err) {
    if (!h->active) return ZT_OK;
    int done = 0;
    return c->ops->test(c, h, &done, err);
}

static void record(zt_comm *c, zt_coll_kind k, size_t bytes, double t0, double inter, double intra) {
    double dt = zt_now_s() - t0;
    zt_coll_stats *s = zt_comm_stats_of(c, k);
    s->inter_bytes += inter;
    s->intra_bytes += intra;
    s->calls++;
    s->bytes += (double)bytes;
    s->uncompressed_bytes += (double)bytes;
    s->time_s += dt;
    s->wait_s += dt;
}

zt_status zt_comm_sum_f64v(zt_comm *c, const double *v, int n, double *out, zt_error *err) {
    if (n < 1 || n > ZT_SUM_F64_MAX) return ZT_FAIL(err, ZT_ERR_INVALID, "comm: %d values to sum (1..%d)", n, ZT_SUM_F64_MAX);
    double t0 = zt_now_s();
    ZT_TRY(c->ops->sum_f64(c, v, n, out, err));
    double inter, intra;
    from_everyone(c, sizeof(double) * (size_t)n, &inter, &intra); /* an all-gather of the values */
    record(c, ZT_COLL_ALL_REDUCE, sizeof(double) * (size_t)n, t0, inter, intra);
    return ZT_OK;
}

zt_status zt_comm_sum_f64(zt_comm *c, double v, double *out, zt_error *err) {
    return zt_comm_sum_f64v(c, &v, 1, out, err);
}

zt_status zt_comm_all_gather_u64(zt_comm *c, unsigned long long v, unsigned long long *recv, zt_error *err) {
    double t0 = zt_now_s();
    ZT_TRY(c->ops->all_gather_u64(c, v, recv, err));
    double inter, intra;
    from_everyone(c, sizeof v, &inter, &intra);
    record(c, ZT_COLL_ALL_GATHER, sizeof v * (size_t)c->world_size, t0, inter, intra);
    return ZT_OK;
}

zt_status zt_comm_all_gather_host(zt_comm *c, void *recv, size_t bytes_per_rank, zt_error *err) {
    double t0 = zt_now_s();
    ZT_TRY(c->ops->all_gather_host(c, recv, bytes_per_rank, err));
    double inter, intra;
    from_everyone(c, bytes_per_rank, &inter, &intra);
    record(c, ZT_COLL_ALL_GATHER, bytes_per_rank * (size_t)c->world_size, t0, inter, intra);
    return ZT_OK;
}

zt_status zt_comm_broadcast(zt_comm *c, void *buf, size_t bytes, int root, zt_error *err) {
    double t0 = zt_now_s();
    ZT_TRY(c->ops->broadcast(c, buf, bytes, root, err));
    int remote = c->member_node && c->member_node[root] != c->member_node[c->rank];
    double got = c->rank == root ? 0.0 : (double)bytes;
    record(c, ZT_COLL_BROADCAST, bytes, t0, remote ? got : 0.0, remote ? 0.0 : got);
    return ZT_OK;
}

/* Bytes rank `from` sends to rank `to` in a gather or scatter: the
 * counted traffic is what the receiver gets, split by link. */
static void rooted_traffic(const zt_comm *c, const size_t *counts, int root, int gather, double *inter,
                           double *intra) {
    *inter = *intra = 0.0;
    for (int r = 0; r < c->world_size; r++) {
        int from = gather ? r : root, to = gather ? root : r;
        if (to != c->rank || from == to) continue;
        int remote = c->member_node && c->member_node[from] != c->member_node[to];
        *(remote ? inter : intra) += (double)counts[r];
    }
}

/* A gather (gather = 1) or scatter and its statistics. */
static zt_status rooted(zt_comm *c, int gather, const void *send, void *recv, const size_t *counts, int root,
                        zt_error *err) {
    double t0 = zt_now_s(), inter, intra;
    ZT_TRY((gather ? c->ops->gather_host : c->ops->scatter_host)(c, send, recv, counts, root, err));
    rooted_traffic(c, counts, root, gather, &inter, &intra);
    record(c, gather ? ZT_COLL_GATHER : ZT_COLL_SCATTER, counts_total(c, counts), t0, inter, intra);
    return ZT_OK;
}

zt_status zt_comm_gather_host(zt_comm *c, const void *send, void *recv, const size_t *counts, int root,
                              zt_error *err) {
    return rooted(c, 1, send, recv, counts, root, err);
}

zt_status zt_comm_scatter_host(zt_comm *c, const void *send, void *recv, const size_t *counts, int root,
                               zt_error *err) {
    return rooted(c, 0, send, recv, counts, root, err);
}

zt_status zt_comm_barrier(zt_comm *c, zt_error *err) {
    double t0 = zt_now_s();
    ZT_TRY(c->ops->barrier(c, err));
    record(c, ZT_COLL_BARRIER, 0, t0, 0.0, 0.0);
    return ZT_OK;
}

zt_status zt_comm_agree(zt_comm *c, zt_status st, zt_error *err) {
    int N = c->world_size;
    unsigned long long *codes = calloc((size_t)N, sizeof *codes);
    if (!codes) return ZT_FAIL(err, ZT_ERR_OOM, "comm: cannot allocate the agreement");
    zt_error mine = *err; /* the collectives below must not record over it */
    zt_error scratch = {0};
    zt_status cst = zt_comm_all_gather_u64(c, (unsigned long long)st, codes, &scratch);
    int first = -1;
    for (int r = 0; cst == ZT_OK && r < N && first < 0; r++)
        if (codes[r] != ZT_OK) first = r;
    zt_status code = first >= 0 ? (zt_status)codes[first] : ZT_OK;
    free(codes);
    if (cst != ZT_OK) {
        if (st == ZT_OK) *err = scratch;
        return st != ZT_OK ? st : cst;
    }
    if (first < 0) return ZT_OK;
    struct {
        char where[sizeof err->where];
        char msg[sizeof err->msg];
    } shared;
    memset(&shared, 0, sizeof shared);
    if (c->rank == first) {
        snprintf(shared.where, sizeof shared.where, "%s", mine.where);
        snprintf(shared.msg, sizeof shared.msg, "%s", mine.msg);
    }
    cst = zt_comm_broadcast(c, &shared, sizeof shared, first, &scratch);
    if (cst != ZT_OK) {
        if (st == ZT_OK) *err = scratch;
        return st != ZT_OK ? st : cst;
    }
    zt_error_clear(err);
    zt_error_adopt(err, code, shared.where, shared.msg);
    return code;
}

void zt_coll_bandwidth(const zt_coll_stats *s, zt_coll_kind k, int world_size, double *algbw_gbs, double *busbw_gbs) {
    double n = world_size;
    double alg = s->time_s > 0 ? s->bytes / s->time_s / 1e9 : 0.0;
    double factor = k == ZT_COLL_ALL_REDUCE ? 2.0 * (n - 1) / n
                    : (k == ZT_COLL_ALL_GATHER || k == ZT_COLL_REDUCE_SCATTER || k == ZT_COLL_ALL_TO_ALL) ? (n - 1) / n
                    : 1.0;
    *algbw_gbs = alg;
    *busbw_gbs = alg * factor;
}

/* The CUDA communicators live in the CUDA module (runtime/zt_cuda_module.h):
 * opening it maps the CUDA libraries, which a CPU run never does. */
zt_status zt_comm_create_nccl(zt_comm *c, zt_error *err) {
    memset(c, 0, sizeof *c);
    const zt_cuda_module *m = NULL;
    ZT_TRY(zt_cuda_module_open(&m, err));
    return m->comm_create_nccl(c, err);
}

zt_status zt_comm_create_staged(zt_comm *c, size_t pool_floor_bytes, zt_error *err) {
    memset(c, 0, sizeof *c);
    const zt_cuda_module *m = NULL;
    ZT_TRY(zt_cuda_module_open(&m, err));
    return m->comm_create_staged(c, pool_floor_bytes, err);
}
