#include "memory_snapshot.h"

#include <stdio.h>

#include "zt_fs.h"
#include "zt_log.h"
#include "zt_mem.h"

zt_status zt_memory_snapshot_start(const zt_train_config *c, zt_ctx *ctx) {
    if (!c->memory_snapshot[0]) return ZT_OK;
    zt_error why = {0};
    zt_status st = zt_mkdir_p(c->memory_snapshot, &why);
    if (st != ZT_OK) return ZT_FAIL(&ctx->err, st, "--memory-snapshot: %s", why.msg);
    return zt_mem_trace_enable(&ctx->device_mem, (size_t)c->memory_snapshot_entries, &ctx->err);
}

zt_status zt_memory_snapshot_finish(const zt_train_config *c, zt_ctx *ctx, zt_status run) {
    if (!c->memory_snapshot[0] || !ctx->device_mem.trace) return run;
    char path[1100];
    snprintf(path, sizeof path, "%s/rank%d.pickle", c->memory_snapshot, ctx->rank);
    zt_error err = {0};
    /* Device index 0: each rank's file holds its own device only. */
    zt_status st = zt_mem_snapshot_write(&ctx->device_mem, 0, path, &err);
    if (st == ZT_OK) {
        zt_log_info(&ctx->log, "memory snapshot: %s (open it in memory_viz: docs/interop_memory_viz.md)", path);
        return run;
    }
    if (run != ZT_OK) {
        zt_log_warn(&ctx->log, "%s", err.msg);
        return run;
    }
    ctx->err = err;
    return st;
}
