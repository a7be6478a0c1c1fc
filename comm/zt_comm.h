/* The communicator: rank topology and collectives with asynchronous handles,
 * plus per-collective statistics (calls, bytes, time, algbw and busbw as
 * nccl-tests defines them).
 *
 * The MPI implementation works on host buffers with MPI-3 nonblocking
 * collectives. Its reduce-scatter is deterministic by construction: ranks
 * exchange chunks with an all-to-all and each rank adds the N contributions
 * to its chunk in rank order 0..N-1. So a sum never depends on the message
 * size, the bucket it travelled in, or the algorithm MPI picked, which is what
 * lets every ZeRO stage produce bitwise-identical results. */
#ifndef ZT_COMM_H
#define ZT_COMM_H

#include <stddef.h>

#include "zt_dtype.h"
#include "zt_error.h"
#include "zt_trace.h"
#include "zt_wire.h"

typedef enum {
    ZT_COLL_ALL_GATHER = 0,
    ZT_COLL_REDUCE_SCATTER,
    ZT_COLL_ALL_REDUCE,
    ZT_COLL_BROADCAST,
    ZT_COLL_BARRIER,
    ZT_COLL_GATHER,  /* to one root (a matrix to its owner: Muon) */
    ZT_COLL_SCATTER, /* from one root */
    ZT_COLL_ALL_TO_ALL, /* per-peer byte counts (Ulysses' sequence <-> head split) */
    ZT_COLL_KINDS
} zt_coll_kind;

const char *zt_coll_name(zt_coll_kind k);

typedef struct {
    long calls;
    double bytes;  /* nccl-tests "size": the full buffer (N x per-rank count), as it travels; for
                    * all_to_all, what this rank sent (the sum of its send counts, itself included) */
    double uncompressed_bytes; /* what `bytes` would be without the wire codes (zt_wire.h) */
    double time_s; /* start to completion, summed */
    double wait_s; /* time the caller was blocked in wait, summed */
    /* What this rank received, split by where it came from: ranks on other
     * nodes (the inter-node link) and other ranks of its node. The
     * collective's logical traffic, which MPI's algorithm may route
     * otherwise (a tree broadcast crosses a link once for several
     * receivers behind it). */
    double inter_bytes, intra_bytes;
} zt_coll_stats;

struct zt_comm;

typedef struct {
    int active;
    zt_coll_kind kind;
    double t_start;
    size_t bytes;
    size_t uncompressed_bytes; /* bytes without wire codes */
    double inter_bytes, intra_bytes; /* this rank's share, counted at completion */
    void *impl_req;  /* implementation request (MPI_Request) */
    char what[80];   /* what the caller waits on ("unit block1"), for the watchdog's message */
    /* reduce-scatter completion: out[count] (fp32) = sum over ranks of
     * staging's chunk r (count values as `wire` has them), added in fp32 */
    const void *staging;
    float *out;
    size_t count;
    zt_wire wire;
} zt_comm_handle;

/* One implementation of the collectives (MPI on host buffers, NCCL on
 * device buffers). Statistics are kept by the dispatchers in comm.c. */
typedef struct {
    const char *name;
    /* 1: start calls accept a backend event as `ready` (device streams);
     * 0: host buffers only, the caller waits for the producer first. */
    int takes_events;
    zt_status (*all_gather_start)(struct zt_comm *c, const void *send, void *recv, size_t bytes_per_rank,
                                  void *ready, zt_comm_handle *h, zt_error *err);
    zt_status (*reduce_scatter_start)(struct zt_comm *c, const void *send, void *staging, float *out,
                                      size_t count, zt_wire wire, void *ready, zt_comm_handle *h, zt_error *err);
    /* As zt_comm_all_to_all_start, after its checks; `ready` is the
     * producer's stream (NULL: none), not an event as above. */
    zt_status (*all_to_all_start)(struct zt_comm *c, const void *send, const size_t *send_counts,
                                  const size_t *send_offsets, void *recv, const size_t *recv_counts,
                                  const size_t *recv_offsets, void *ready, zt_comm_handle *h, zt_error *err);
    /* Blocks until h completes (and, for reduce-scatter, out holds the sum). */
    zt_status (*wait)(struct zt_comm *c, zt_comm_handle *h, zt_error *err);
    /* Orders work queued later on `stream` (a cudaStream_t) after h without
     * blocking the host, and retires h; NULL where the implementation can
     * only wait on the host (then zt_comm_wait_stream calls wait). */
    zt_status (*wait_stream)(struct zt_comm *c, zt_comm_handle *h, void *stream, zt_error *err);
    /* Lets h progress without blocking; sets *done. */
    zt_status (*test)(struct zt_comm *c, zt_comm_handle *h, int *done, zt_error *err);
    /* out[n] = every rank's v[n] added element-wise in rank order. */
    zt_status (*sum_f64)(struct zt_comm *c, const double *v, int n, double *out, zt_error *err);
    zt_status (*all_gather_u64)(struct zt_comm *c, unsigned long long v, unsigned long long *recv, zt_error *err);
    zt_status (*all_gather_host)(struct zt_comm *c, void *recv, size_t bytes_per_rank, zt_error *err);
    zt_status (*broadcast)(struct zt_comm *c, void *buf, size_t bytes, int root, zt_error *err);
    zt_status (*barrier)(struct zt_comm *c, zt_error *err);
    /* Host buffers: root's recv receives every rank's send[counts[r]]
     * bytes in rank order; the reverse for scatter (rank r's recv gets part
     * r of root's send). counts[N] are the same on every rank. */
    zt_status (*gather_host)(struct zt_comm *c, const void *send, void *recv, const size_t *counts, int root,
                             zt_error *err);
    zt_status (*scatter_host)(struct zt_comm *c, const void *send, void *recv, const size_t *counts, int root,
                              zt_error *err);
    void (*destroy)(struct zt_comm *c);
    /* Passes the watchdog's timeout to inner communicators (NULL: none). */
    void (*set_timeout)(struct zt_comm *c, double seconds);
    /* A communicator of the ranks with the same color, ordered by key
     * (MPI_Comm_split); NULL where the implementation has none. */
    zt_status (*split)(struct zt_comm *c, int color, int key, struct zt_comm *out, zt_error *err);
    /* The oldest collective queued on a device stream and not finished, in
     * words ("" when none or unknown); NULL where collectives never wait on
     * a stream. */
    void (*pending)(struct zt_comm *c, char *buf, size_t cap);
    /* Stops what is in flight without waiting for it (ncclCommAbort), on
     * the way out after a timeout; NULL where there is nothing to stop. */
    void (*abort)(struct zt_comm *c);
} zt_comm_ops;

/* Pinned host memory of the host-staging communicator (zero elsewhere):
 * outside the memory reports, so counted here. */
typedef struct {
    unsigned long long pinned_allocs; /* cudaMallocHost calls so far */
    size_t pinned_bytes;              /* held now: in flight and pooled */
    size_t pinned_peak_bytes;         /* the most pinned_bytes has been */
} zt_staging_stats;

#define ZT_HOST_NAME 64

typedef struct zt_comm {
    int rank, world_size;
    /* The node (ranks that share memory: MPI_Comm_split_type SHARED), never
     * the launcher's environment: this rank's index and count within it,
     * the node's index (nodes numbered by their lowest world rank) of
     * nnodes, and the host's name. */
    int local_rank, local_size;
    int node, nnodes;
    char host[ZT_HOST_NAME];
    zt_coll_stats stats[ZT_COLL_KINDS];
    zt_staging_stats staging;
    const zt_comm_ops *ops;
    void *impl;
    zt_trace *trace; /* collectives appear on the timeline when set */
    /* The collective watchdog (as NCCL's): a collective not complete after
     * this many seconds fails with ZT_ERR_TIMEOUT naming it, what waited on
     * it and the peer group (0: wait for ever). zt_comm_set_timeout. */
    double timeout_s;
    char name[48]; /* the peer group in messages ("": the world) */
    int *member_node; /* [world_size]: each member's node index (malloc'd; NULL: all on this node) */
    /* NCCL: the device memory this communicator holds outside the tracked
     * allocator, measured as the device's used bytes (cudaMemGetInfo)
     * around its init and around the first collective of each kind (its
     * connections and their buffers); device_measured 0 elsewhere. */
    size_t device_bytes;
    int device_measured;
    /* A group whose collectives count as another communicator's (the hops
     * of the hierarchical quantized reduce-scatter count as the world's);
     * NULL: its own stats. */
    struct zt_comm *count_into;
} zt_comm;

/* Where collective kind k of c is counted. */
static inline zt_coll_stats *zt_comm_stats_of(zt_comm *c, zt_coll_kind k) {
    return &(c->count_into ? c->count_into : c)->stats[k];
}

/* Sets the watchdog's timeout (seconds; 0: none) on c and the
 * communicators it is built on. */
void zt_comm_set_timeout(zt_comm *c, double seconds);
/* After the watchdog fired: releases what the communicator has in flight
 * on a device (NCCL: ncclCommAbort) so that the process can end; the
 * communicator is unusable after it. */
void zt_comm_abort(zt_comm *c);
/* The oldest collective still queued on a device stream, in words, for the
 * watchdog's message after a device sync timed out ("" when none). */
void zt_comm_pending(zt_comm *c, char *buf, size_t cap);
/* The peer group of c in words, for messages: "the world (4 ranks on 2 nodes)". */
void zt_comm_describe(const zt_comm *c, char *buf, size_t cap);

/* From MPI_COMM_WORLD (MPI must be initialised by the caller). */
zt_status zt_comm_create_mpi(zt_comm *c, zt_error *err);
/* The ranks of c with the same color, ordered by key, as a communicator of
 * their own (collective over c): rank and world_size are within it, the
 * node fields stay the machine's. ZT_ERR_UNSUPPORTED where the
 * implementation cannot split (NCCL, host staging). */
zt_status zt_comm_split(zt_comm *c, int color, int key, zt_comm *out, zt_error *err);
/* dst's rank, world and node fields from src (a communicator built on another). */
void zt_comm_copy_topology(zt_comm *dst, const zt_comm *src);
/* NCCL over the GPU of this rank's local rank, bootstrapped over MPI (rank 0's
 * ncclUniqueId is broadcast). Buffers passed to it are device memory. Refused
 * when the build has no CUDA. */
zt_status zt_comm_create_nccl(zt_comm *c, zt_error *err);
/* MPI over device buffers with pinned host staging (ranks sharing a GPU).
 * A finished collective's staging buffer is kept for the next ones when
 * pooled and in-flight staging together then stay within the most the
 * collectives have had in flight at once, or pool_floor_bytes if that is
 * more (0: ZT_STAGED_POOL_FLOOR_DEFAULT). Refused when the build has no
 * CUDA. */
#define ZT_STAGED_POOL_FLOOR_DEFAULT ((size_t)512 << 20)
zt_status zt_comm_create_staged(zt_comm *c, size_t pool_floor_bytes, zt_error *err);
/* Rank `rank` of a world of world_size that is not there (blocks of
 * ranks_per_node per node): every collective completes at once and moves
 * nothing, host-side gathers answer with this rank's value for every rank.
 * zt-plan replays one rank's run over it and the dry backend. It has no
 * split: a replay makes each group's communicator with this call. */
zt_status zt_comm_create_dry(zt_comm *c, int rank, int world_size, int ranks_per_node, zt_error *err);
void zt_comm_destroy(zt_comm *c);
/* Lets every collective in flight on h progress (MPI only advances
 * nonblocking collectives inside MPI calls); never blocks. */
zt_status zt_comm_progress(zt_comm *c, zt_comm_handle *h, zt_error *err);

/* Starting a collective: `ready` is a backend event (zt_event_record: a
 * cudaEvent_t) after which the input buffers hold their values, or NULL
 * when they already do (host buffers; the CPU backend). NCCL makes its
 * stream wait on it; host staging waits for it on the host before copying.
 * The caller may destroy the event once the start call has returned. */

/* recv[N * bytes_per_rank] gets every rank's send[bytes_per_rank] in rank
 * order. send == NULL means in place: this rank's part is already at
 * recv + rank * bytes_per_rank. */
zt_status zt_comm_all_gather_start(zt_comm *c, const void *send, void *recv, size_t bytes_per_rank, void *ready,
                                   zt_comm_handle *h, zt_error *err);
/* The same for bytes that stand for more (wire codes, zt_wire.h):
 * uncompressed_per_rank is what each rank's part would have been, for the
 * statistics. */
zt_status zt_comm_all_gather_coded_start(zt_comm *c, const void *send, void *recv, size_t bytes_per_rank,
                                         size_t uncompressed_per_rank, void *ready, zt_comm_handle *h, zt_error *err);
/* send's N chunks (chunk r goes to rank r) -> out[count] = sum over ranks
 * in rank order. A chunk is count values as `wire` has them (zt_wire.h):
 * fp32, a 16-bit dtype at half the bytes, or block-wise int8/int4 codes
 * with their scales, zt_wire_bytes(count) bytes each; the sum is
 * accumulated in fp32 and out is fp32 either way. staging (N chunks)
 * receives them and must stay untouched until zt_comm_wait; out may alias
 * neither. */
zt_status zt_comm_reduce_scatter_start(zt_comm *c, const void *send, void *staging, float *out, size_t count,
                                       zt_wire wire, void *ready, zt_comm_handle *h, zt_error *err);
/* Every rank sends send_counts[j] bytes at send + send_offsets[j] to rank j
 * and receives recv_counts[i] bytes from rank i at recv + recv_offsets[i]
 * (device buffers on a GPU backend, host on MPI). Queued after `ready` (the
 * stream whose work produced send: the compute stream on a GPU; NULL on the
 * CPU), like zt_comm_all_gather_start; complete it with zt_comm_wait or
 * zt_comm_wait_stream. Counted as ZT_COLL_ALL_TO_ALL.
 * MPI_Alltoallv's contract: recv_counts[i] on rank j equals send_counts[j]
 * on rank i (only the rank's own pair, send_counts[rank] ==
 * recv_counts[rank], is checked here: the rest would cost a collective; a
 * mismatch may hang NCCL or corrupt its data, or fail MPI); send and recv
 * do not overlap; a zero count moves nothing and its offset is not read;
 * the chunk to itself is copied like any other. send_counts[N],
 * send_offsets[N], recv_counts[N] and recv_offsets[N] may be reused once
 * this returns. Statistics as nccl-tests' alltoall: `bytes` is what this
 * rank sends, busbw is algbw x (N-1)/N; inter/intra are the bytes received
 * from other ranks, split by the sender's node. Over MPI every count and
 * offset, in units of the largest byte count dividing all of this rank's
 * send (or receive) counts and offsets, must fit an int (2^31 - 1):
 * otherwise ZT_ERR_INVALID, on this rank alone (the others then wait for it
 * until the watchdog's timeout). */
zt_status zt_comm_all_to_all_start(zt_comm *c, const void *send, const size_t *send_counts, const size_t *send_offsets,
                                   void *recv, const size_t *recv_counts, const size_t *recv_offsets, void *ready,
                                   zt_comm_handle *h, zt_error *err);
/* Blocks the host until h completes; its outputs are then valid everywhere. */
zt_status zt_comm_wait(zt_comm *c, zt_comm_handle *h, zt_error *err);
/* Completes h for the work queued on `stream` (zt_stream.handle: a
 * cudaStream_t, or NULL on the CPU): NCCL makes the stream wait on the
 * collective's event and returns at once; the host implementations wait
 * (MPI_Wait, then the copy back). Either way h is retired, and kernels
 * enqueued on `stream` afterwards see the results. Time on the GPU is added
 * to the statistics when the collective is seen to have finished. */
zt_status zt_comm_wait_stream(zt_comm *c, zt_comm_handle *h, void *stream, zt_error *err);

/* Blocking helpers. */
/* out = sum over ranks of v, added in rank order (same bits on every rank). */
zt_status zt_comm_sum_f64(zt_comm *c, double v, double *out, zt_error *err);
/* The same for n (<= ZT_SUM_F64_MAX) values at once, in one collective. */
#define ZT_SUM_F64_MAX 16
zt_status zt_comm_sum_f64v(zt_comm *c, const double *v, int n, double *out, zt_error *err);
/* recv[N] = every rank's value. */
zt_status zt_comm_all_gather_u64(zt_comm *c, unsigned long long v, unsigned long long *recv, zt_error *err);
/* In place on a HOST buffer recv[N * bytes_per_rank] (this rank's part at
 * rank x bytes_per_rank), whatever the communicator's device: digests and
 * other host-side bookkeeping. */
zt_status zt_comm_all_gather_host(zt_comm *c, void *recv, size_t bytes_per_rank, zt_error *err);
/* root's HOST buffer buf[bytes] to every rank, whatever the communicator's
 * device (configuration, ids; never tensors). */
zt_status zt_comm_broadcast(zt_comm *c, void *buf, size_t bytes, int root, zt_error *err);
zt_status zt_comm_barrier(zt_comm *c, zt_error *err);
/* HOST buffers, whatever the communicator's device: root's recv[sum counts]
 * = every rank's send[counts[r]] in rank order (gather); rank r's
 * recv[counts[r]] = part r of root's send (scatter). Every rank passes the
 * same counts[N]; a rank whose count is 0 sends or receives nothing. */
zt_status zt_comm_gather_host(zt_comm *c, const void *send, void *recv, const size_t *counts, int root,
                              zt_error *err);
zt_status zt_comm_scatter_host(zt_comm *c, const void *send, void *recv, const size_t *counts, int root,
                               zt_error *err);
/* Every rank reports st (its own outcome of a phase every rank runs, such as
 * verifying a checkpoint). When any failed, every rank returns the lowest
 * failing rank's status with that rank's error in err (the others' own
 * errors are replaced), so the job fails with one message. */
zt_status zt_comm_agree(zt_comm *c, zt_status st, zt_error *err);

/* nccl-tests' algbw (bytes / time) and busbw (algbw x (n-1)/n for all-gather,
 * reduce-scatter and all-to-all, 2(n-1)/n for all-reduce) in GB/s, for statistics s of
 * collective kind k over world_size ranks (a run's or one step's). */
void zt_coll_bandwidth(const zt_coll_stats *s, zt_coll_kind k, int world_size, double *algbw_gbs, double *busbw_gbs);

#endif
