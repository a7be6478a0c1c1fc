/* zt-plan's view from the operating system (docs/planner.md, "The process
 * and the node"): the resident bytes it expects each rank's process to hold
 * (its allocators' reserved bytes plus the parts no allocator hands out,
 * measured per backend and kept in one table, train/plan_process.c), and,
 * per node, what its ranks hold together (Pss: shared library pages and
 * MPI's shared memory counted once) against MemTotal or the memory
 * cgroup's limit. */
#ifndef ZT_PLAN_PROCESS_H
#define ZT_PLAN_PROCESS_H

#include <stddef.h>

#include "zt_backend.h"
#include "zt_error.h"
#include "zt_mem.h"

/* The bytes of a rank's process that no allocator hands out, as measured
 * (bench/bench_bill.py) for one backend: Rss, and Pss as a + b / (ranks on
 * the node) (the shared pages divide among the node's ranks). */
typedef struct {
    zt_device device;
    size_t rss_bytes;
    size_t pss_fixed_bytes, pss_shared_bytes; /* a, b */
    const char *measured;                     /* date, machine, command */
} zt_process_constants;

/* The table's row for a backend, or NULL where it was never measured. */
const zt_process_constants *zt_process_constants_for(zt_device device);

typedef struct {
    int measured;            /* 0: the backend has no row: nothing below is set */
    size_t rank_bytes;       /* one rank's process, resident */
    size_t node_bytes;       /* every local rank together, Pss */
    zt_node_mem_limit limit; /* this node's */
    int node_fits;           /* node_bytes <= limit.bytes */
    int local_ranks;
    const char *measured_on;
} zt_plan_process;

/* device_reserved: the device allocator's (host memory on the CPU backend,
 * not this process's pages on a GPU); host_reserved: the host pool's
 * (pinned offload buffers, host tiers); local_ranks: ranks on this node. */
zt_status zt_plan_process_predict(zt_device device, size_t device_reserved, size_t host_reserved, int local_ranks,
                                  zt_plan_process *out, zt_error *err);

#endif
