/* zt-plan's fitting questions by replay (plan_fit.h). */
#include "plan_fit.h"

#include "plan_process.h"

size_t zt_plan_device_budget(size_t mem_limit, size_t device_mem, zt_device device, size_t host_reserved,
                             int *unmeasured) {
    *unmeasured = 0;
    size_t budget = mem_limit;
    if (device_mem) {
        const zt_process_constants *k = zt_process_constants_for(device);
        size_t other = 0;
        if (k) other = k->rss_bytes + (device == ZT_DEVICE_CPU ? host_reserved : 0); /* the CPU's pool is this memory */
        else *unmeasured = 1;
        size_t room = device_mem > other ? device_mem - other : 1; /* 1: nothing fits, yet a cap is set */
        if (!budget || room < budget) budget = room;
    }
    return budget;
}

const char *zt_scan_flag(zt_scan_what what) {
    return what == ZT_SCAN_SEQ_LEN ? "--seq-len" : what == ZT_SCAN_LAYERS ? "--layers" : "--micro-batch";
}

/* Does the run with `what` = v fit the budget? */
static zt_status fits_at(const zt_train_config *c, const zt_train_model *family, const zt_replay_setup *w,
                         zt_scan_what what, int v, int *fits, int *replays, zt_error *err) {
    zt_train_config at = *c;
    if (what == ZT_SCAN_SEQ_LEN) at.seq_len = v;
    else if (what == ZT_SCAN_LAYERS) at.layers = v;
    else at.micro_batch = v;
    zt_replay_result r;
    ZT_TRY(zt_plan_replay(&at, family, w, &r, err));
    (*replays)++;
    *fits = !r.oom;
    return ZT_OK;
}

zt_status zt_plan_scan(const zt_train_config *c, const zt_train_model *family, const zt_replay_setup *w,
                       zt_scan_what what, int start, int hi, int *answer, int *replays, zt_error *err) {
    *replays = 0;
    int v = start < 1 ? 1 : start > hi ? hi : start, fits = 0;
    ZT_TRY(fits_at(c, family, w, what, v, &fits, replays, err));
    if (fits) {
        for (int next = 1; v < hi && next;) {
            ZT_TRY(fits_at(c, family, w, what, v + 1, &next, replays, err));
            if (next) v++;
        }
        *answer = v;
        return ZT_OK;
    }
    while (--v >= 1) {
        ZT_TRY(fits_at(c, family, w, what, v, &fits, replays, err));
        if (fits) break;
    }
    *answer = v > 0 ? v : 0;
    return ZT_OK;
}
