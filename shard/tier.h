/* Where the optimizer state and the parameter shards live, behind one hook
 * (DeepSpeed's offload_optimizer / offload_param devices): the device
 * (no offload), the host pool (--offload cpu, with --offload-params cpu
 * the shards too), the host pool with the delayed update
 * (--offload-delay 1), or the NVMe file (--offload nvme, --offload-params
 * nvme). The engine picks one at init (zt_tier_for) and calls its hooks at
 * fixed points of a step; reduce.c, gather.c and the update never test
 * offload flags themselves.
 *
 *   on a step:  grads_reduced(u)   after u's last bucket of the step
 *               update(args)       the optimizer step of every unit
 *   on a gather: load_shard(u)     this rank's part, into the gather buffer
 *   at init / teardown: init, quiesce (before the buffers go), release */
#ifndef ZT_TIER_H
#define ZT_TIER_H

#include "zt_engine.h"

/* What every unit's update of one step shares. */
typedef struct {
    zt_tensor *ws;  /* one chunk of widened 16-bit gradients */
    zt_tensor *wu;  /* the optimizer's update_workspace: one chunk of its update */
    float mult, lr; /* unscale-and-clip multiplier; learning rate */
    int t;          /* the step count of this update */
} zt_update_args;

typedef struct zt_tier_ops {
    const char *name;
    int on_device; /* the update runs on the device (it takes device workspaces) */
    /* After the units' buffers exist (the NVMe tier's file). */
    zt_status (*init)(zt_engine *e);
    /* Unit u's reduced gradients are final for this step. */
    zt_status (*grads_reduced)(zt_engine *e, int u);
    /* The optimizer step of every trained unit; skip: the gradients were
     * not finite (nothing changes, but an update in flight still lands). */
    zt_status (*update)(zt_engine *e, const zt_update_args *a, int skip);
    /* This rank's shard of gathered-on-demand unit u into dst (device
     * memory, on compute): the first half of its all-gather. */
    zt_status (*load_shard)(zt_engine *e, int u, void *dst);
    /* Teardown: waits for the tier's work in flight (a thread writing host
     * buffers), then, after the units' buffers are freed, releases its own. */
    void (*quiesce)(zt_engine *e);
    void (*release)(zt_engine *e);
} zt_tier_ops;

/* The tier a configuration runs (checked by zt_engine_init). */
const zt_tier_ops *zt_tier_for(const zt_engine_config *cfg);

#endif
