/* The offload tiers' entry points (shard/offload_step.c: the host pool;
 * shard/nvme_state.c: the NVMe file; shard/delayed_update.c: the delayed
 * update). Only shard/tier.c, which puts them behind zt_tier_ops, and the
 * tiers' own files call them. */
#ifndef ZT_OFFLOAD_H
#define ZT_OFFLOAD_H

#include "zt_engine.h"

/* Offload: copies unit u's owned reduced gradients device -> host (fp32). */
zt_status zt_engine_offload_grads(zt_engine *e, int u);
/* Offload: the CPU optimizer of unit u's owned part, new params copied to the device. */
zt_status zt_engine_offload_step_unit(zt_engine *e, int u, float clip, float lr, int t);
/* Offload: unit u's reduced gradients are on the host, in fp32 (host_grads). */
zt_status zt_engine_offload_grads_landed(zt_engine *e, int u);
/* The NVMe tier (shard/nvme_state.c). Arrays of a unit in the file: the
 * fp32 master and the optimizer's slots 0 and 1 (per element) of the owned
 * part; the parameter shard. */
typedef enum { ZT_NVME_MASTER = 0, ZT_NVME_SLOT0, ZT_NVME_SLOT1, ZT_NVME_PARAMS, ZT_NVME_NARRAYS } zt_nvme_array;
/* Lays out the file, creates it and the host buffers (nvme_optimizer only). */
zt_status zt_engine_nvme_init(zt_engine *e);
void zt_engine_nvme_destroy(zt_engine *e);
/* Elements [i, i + n) of array a of unit u, read or written at once. */
zt_status zt_engine_nvme_get(zt_engine *e, int u, zt_nvme_array a, size_t i, size_t n, void *dst);
zt_status zt_engine_nvme_put(zt_engine *e, int u, zt_nvme_array a, size_t i, size_t n, const void *src);
/* The optimizer step through the buffers: begin (the first reads), each
 * trained unit in order (g: its [owned] fp32 gradients; out: its [owned]
 * new params, or NULL when they live in the file), end (every write done). */
zt_status zt_engine_nvme_begin_step(zt_engine *e);
zt_status zt_engine_nvme_step_unit(zt_engine *e, int u, float *g, void *out, float clip, float lr, int t);
zt_status zt_engine_nvme_end_step(zt_engine *e);
/* Unit u's parameter shard from the file into dst (on compute, `kind`). */
zt_status zt_engine_nvme_copy_shard(zt_engine *e, int u, void *dst, zt_copy_kind kind);

/* Offload: unit u's owned device params := its host master (rounded to the
 * params dtype), through an h2d slot, as the step's copies. */
zt_status zt_engine_offload_apply_unit(zt_engine *e, int u);

/* Offload: orders the h2d stream after everything enqueued on compute so
 * far. Start of the optimizer step's CPU part. */
zt_status zt_engine_offload_begin(zt_engine *e);

/* Offload: waits for the last parameter copies and releases their host
 * buffers; compute is ordered after them. End of the optimizer step. */
zt_status zt_engine_offload_finish(zt_engine *e);

/* Offload: waits for every copy still in flight (a step that failed) and
 * frees the transfer buffers. Engine teardown. */
void zt_engine_offload_release(zt_engine *e);

/* Delayed update (shard/delayed_update.c): the optimizer part of a step
 * under --offload-delay 1, given the unscale-and-clip multiplier; skip: the
 * gradients were not finite (nothing new starts). */
zt_status zt_engine_delayed_step(zt_engine *e, float mult, float lr, int skip);
/* Waits for the update in flight, if any: the host master and m, v are
 * then current (the device params may still be behind: params_behind). */
zt_status zt_engine_delayed_wait(zt_engine *e);
#endif
