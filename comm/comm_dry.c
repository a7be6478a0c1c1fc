/* The dry communicator (zt_comm_create_dry): one rank of a world that is
 * not there, for zt-plan's replay. Collectives complete at once and move
 * nothing (device buffers are dry); host-side helpers answer as if every
 * rank had given this rank's value, which is what every rank gives for
 * the configuration and layout checks they serve. The engine's buffers
 * for them are allocated by the engine, so a replay counts them all. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zt_comm.h"

static zt_status dry_all_gather_start(zt_comm *c, const void *send, void *recv, size_t bytes_per_rank, void *ready,
                                      zt_comm_handle *h, zt_error *err) {
    (void)c, (void)send, (void)recv, (void)bytes_per_rank, (void)ready, (void)h, (void)err;
    return ZT_OK;
}

static zt_status dry_reduce_scatter_start(zt_comm *c, const void *send, void *staging, float *out, size_t count,
                                          zt_wire wire, void *ready, zt_comm_handle *h, zt_error *err) {
    (void)c, (void)send, (void)staging, (void)out, (void)count, (void)wire, (void)ready, (void)h, (void)err;
    return ZT_OK;
}

/* The statistics are the dispatcher's (comm.c), from the counts alone. */
static zt_status dry_all_to_all_start(zt_comm *c, const void *send, const size_t *send_counts,
                                      const size_t *send_offsets, void *recv, const size_t *recv_counts,
                                      const size_t *recv_offsets, void *ready, zt_comm_handle *h, zt_error *err) {
    (void)c, (void)send, (void)send_counts, (void)send_offsets, (void)recv, (void)recv_counts, (void)recv_offsets;
    (void)ready, (void)h, (void)err;
    return ZT_OK;
}

static zt_status dry_wait(zt_comm *c, zt_comm_handle *h, zt_error *err) {
    (void)c, (void)h, (void)err;
    return ZT_OK;
}

static zt_status dry_test(zt_comm *c, zt_comm_handle *h, int *done, zt_error *err) {
    (void)c, (void)h, (void)err;
    *done = 1;
    return ZT_OK;
}

/* The world's sum of one value every rank gives: the norm and the loss of
 * dry gradients are 0 on every rank. */
static zt_status dry_sum_f64(zt_comm *c, const double *v, int n, double *out, zt_error *err) {
    (void)err;
    for (int i = 0; i < n; i++) out[i] = v[i] * c->world_size;
    return ZT_OK;
}

static zt_status dry_all_gather_u64(zt_comm *c, unsigned long long v, unsigned long long *recv, zt_error *err) {
    (void)err;
    for (int r = 0; r < c->world_size; r++) recv[r] = v;
    return ZT_OK;
}

static zt_status dry_all_gather_host(zt_comm *c, void *recv, size_t bytes_per_rank, zt_error *err) {
    (void)err;
    const char *mine = (const char *)recv + (size_t)c->rank * bytes_per_rank;
    for (int r = 0; r < c->world_size; r++)
        if (r != c->rank) memcpy((char *)recv + (size_t)r * bytes_per_rank, mine, bytes_per_rank);
    return ZT_OK;
}

static zt_status dry_broadcast(zt_comm *c, void *buf, size_t bytes, int root, zt_error *err) {
    (void)c, (void)buf, (void)bytes, (void)root, (void)err;
    return ZT_OK;
}

static zt_status dry_barrier(zt_comm *c, zt_error *err) {
    (void)c, (void)err;
    return ZT_OK;
}

/* A replay moves no values: the buffers exist, their contents are not read. */
static zt_status dry_rooted_host(zt_comm *c, const void *send, void *recv, const size_t *counts, int root,
                                 zt_error *err) {
    (void)c, (void)send, (void)recv, (void)counts, (void)root, (void)err;
    return ZT_OK;
}

static void dry_destroy(zt_comm *c) { (void)c; }

static const zt_comm_ops dry_ops = {.name = "dry",
                                    .all_gather_start = dry_all_gather_start,
                                    .reduce_scatter_start = dry_reduce_scatter_start,
                                    .all_to_all_start = dry_all_to_all_start,
                                    .wait = dry_wait,
                                    .test = dry_test,
                                    .sum_f64 = dry_sum_f64,
                                    .all_gather_u64 = dry_all_gather_u64,
                                    .all_gather_host = dry_all_gather_host,
                                    .broadcast = dry_broadcast,
                                    .barrier = dry_barrier,
                                    .gather_host = dry_rooted_host,
                                    .scatter_host = dry_rooted_host,
                                    .destroy = dry_destroy};

zt_status zt_comm_create_dry(zt_comm *c, int rank, int world_size, int ranks_per_node, zt_error *err) {
    memset(c, 0, sizeof *c);
    if (world_size < 1 || rank < 0 || rank >= world_size || ranks_per_node < 1)
        return ZT_FAIL(err, ZT_ERR_INVALID, "dry communicator: rank %d of %d with %d per node", rank, world_size,
                       ranks_per_node);
    int per = ranks_per_node < world_size ? ranks_per_node : world_size;
    c->rank = rank;
    c->world_size = world_size;
    c->local_rank = rank % per;
    c->local_size = per;
    c->node = rank / per;
    c->nnodes = (world_size + per - 1) / per;
    snprintf(c->host, sizeof c->host, "dry%d", c->node);
    c->ops = &dry_ops;
    c->member_node = malloc((size_t)world_size * sizeof *c->member_node);
    if (!c->member_node) return ZT_FAIL(err, ZT_ERR_OOM, "dry communicator: no memory");
    for (int r = 0; r < world_size; r++) c->member_node[r] = r / per;
    return ZT_OK;
}
