/* zt-plan's view from the operating system (plan_process.h). */
#include "plan_process.h"

#include <string.h>

#define MIB ((size_t)1 << 20)

/* A CPU rank's parts beyond its allocators (heap, MPI, BLAS, the other
 * libraries, MPI's shared memory, thread stacks): bench/bench_bill.py's
 * second table (Rss: the most at np 1, 2, 4; Pss fitted as a + b / n
 * through np 1 and 4). No GPU row yet: no GPU run has been measured. */
static const zt_process_constants table[] = {
    {ZT_DEVICE_CPU, (size_t)(18.28 * MIB), (size_t)(5.61 * MIB), (size_t)(5.64 * MIB),
     "2026-12-04, 2-core AMD EPYC (AVX-512), Debian, Open MPI 4: python3 bench/bench_bill.py"},
};

const zt_process_constants *zt_process_constants_for(zt_device device) {
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i].device == device) return &table[i];
    return NULL;
}

zt_status zt_plan_process_predict(zt_device device, size_t device_reserved, size_t host_reserved, int local_ranks,
                                  zt_plan_process *out, zt_error *err) {
    memset(out, 0, sizeof *out);
    if (local_ranks < 1) return ZT_FAIL(err, ZT_ERR_INVALID, "ranks per node must be at least 1 (got %d)", local_ranks);
    ZT_TRY(zt_node_mem_limit_read(&out->limit, err));
    const zt_process_constants *k = zt_process_constants_for(device);
    if (!k) return ZT_OK;
    /* On the CPU backend the device is this process's memory. */
    size_t own = host_reserved + (device == ZT_DEVICE_CPU ? device_reserved : 0);
    out->measured = 1;
    out->local_ranks = local_ranks;
    out->measured_on = k->measured;
    out->rank_bytes = own + k->rss_bytes;
    size_t pss = k->pss_fixed_bytes + k->pss_shared_bytes / (size_t)local_ranks;
    out->node_bytes = (size_t)local_ranks * (own + pss);
    out->node_fits = out->node_bytes <= out->limit.bytes;
    return ZT_OK;
}
