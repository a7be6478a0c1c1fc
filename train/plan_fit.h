/* zt-plan's questions about fitting, answered by replays (plan_replay.h):
 * the budget the device allocator has, and the largest micro-batch,
 * sequence length or layer count whose replay it does not refuse. */
#ifndef ZT_PLAN_FIT_H
#define ZT_PLAN_FIT_H

#include "plan_replay.h"

/* The device allocator's budget: the smaller of --mem-limit and
 * --device-mem less the rank's bytes no allocator hands out (0 where
 * neither is given). *unmeasured is set when --device-mem is given and no
 * constants exist for the device, so nothing was taken off it. */
size_t zt_plan_device_budget(size_t mem_limit, size_t device_mem, zt_device device, size_t host_reserved,
                             int *unmeasured);

typedef enum { ZT_SCAN_MICRO_BATCH = 0, ZT_SCAN_SEQ_LEN, ZT_SCAN_LAYERS } zt_scan_what;
const char *zt_scan_flag(zt_scan_what what); /* "--micro-batch", ... */

/* The largest value of `what` in [1, hi] whose replay under the budget
 * (w->cap) is not refused, found by walking one at a time from `start`
 * (the closed form's answer): up while the next fits, else down until one
 * fits. Reserved bytes need not grow with the value, so a bisection could
 * skip the boundary; the walk's answer fits and answer + 1 does not (or is
 * hi + 1). 0 when 1 does not fit. *replays: the values replayed. */
zt_status zt_plan_scan(const zt_train_config *c, const zt_train_model *family, const zt_replay_setup *w,
                       zt_scan_what what, int start, int hi, int *answer, int *replays, zt_error *err);

#endif
