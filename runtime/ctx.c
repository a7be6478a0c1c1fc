#include "zt_ctx.h"

#include "blas_warm_up.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

zt_status zt_ctx_init(zt_ctx *ctx, zt_device device, int nthreads, size_t device_limit, int rank,
                      int world_size, int quiet) {
    return zt_ctx_init_on(ctx, device, -1, nthreads, device_limit, rank, world_size, quiet);
}

/* The memory spaces and streams over ctx->be. */
static zt_status spaces_and_streams(zt_ctx *ctx, size_t device_limit) {
    zt_mem_init(&ctx->device_mem, "device", ctx->be->raw_device, device_limit);
    zt_raw_allocator host = ctx->be->raw_host.alloc ? ctx->be->raw_host : zt_raw_allocator_host_locked(&ctx->host_lock);
    zt_mem_init(&ctx->host_mem, "host", host, 0);
    ctx->compute = zt_backend_stream(ctx->be);
    ZT_TRY(zt_stream_create(ctx->be, &ctx->h2d, &ctx->err));
    return zt_stream_create(ctx->be, &ctx->d2h, &ctx->err);
}

static void ctx_begin(zt_ctx *ctx, int rank, int world_size, int quiet) {
    memset(ctx, 0, sizeof *ctx);
    ctx->rank = rank;
    ctx->world_size = world_size;
    zt_log_init(&ctx->log, rank, world_size, quiet);
    zt_proc_mem_init(&ctx->proc);
}

zt_status zt_ctx_init_on(zt_ctx *ctx, zt_device device, int cuda_device, int nthreads, size_t device_limit,
                         int rank, int world_size, int quiet) {
    ctx_begin(ctx, rank, world_size, quiet);
    ZT_TRY(zt_backend_create_on(device, nthreads, cuda_device, &ctx->be, &ctx->err));
    zt_device_bill_init(&ctx->device_bill, ctx->be); /* the context's bytes: before any allocation */
    /* BLAS maps its buffers at its first call: made here, under a watch,
     * they are named lib_blas in the whole bill. */
    if (device == ZT_DEVICE_CPU) {
        ZT_TRY(zt_proc_watch_begin(&ctx->proc, &ctx->err));
        zt_cpu_blas_warm_up();
        ZT_TRY(zt_proc_watch_end(&ctx->proc, ZT_PART_LIB_BLAS, &ctx->err));
    }
    return spaces_and_streams(ctx, device_limit);
}

zt_status zt_ctx_init_dry(zt_ctx *ctx, zt_device like, size_t device_limit, int rank, int world_size) {
    ctx_begin(ctx, rank, world_size, 1);
    ctx->dry = 1;
    ZT_TRY(zt_backend_dry_create(like, 1, &ctx->be, &ctx->err));
    return spaces_and_streams(ctx, device_limit);
}

zt_status zt_ctx_set_link(zt_ctx *ctx, double h2d_gbs, double d2h_gbs) {
    /* The CPU's copy streams are the compute stream until the link gives
     * them their own state: nothing to destroy, and on a refusal (CUDA, a
     * bad bandwidth) the context stays as it was. */
    ZT_TRY(zt_backend_set_link(ctx->be, h2d_gbs, d2h_gbs, &ctx->err));
    ZT_TRY(zt_stream_create(ctx->be, &ctx->h2d, &ctx->err));
    return zt_stream_create(ctx->be, &ctx->d2h, &ctx->err);
}

void zt_ctx_capture_oom_report(zt_ctx *ctx) {
    free(ctx->oom_report);
    ctx->oom_report = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&ctx->oom_report, &len);
    if (!f) return;
    zt_mem_report(&ctx->device_mem, f, 10);
    /* The whole bill at the failure: what the process holds besides the
     * allocator's blocks (a GPU's device blocks are not its pages). */
    zt_proc_sample s;
    zt_error err = {0};
    const zt_mem *device = ctx->be->device == ZT_DEVICE_CPU ? &ctx->device_mem : NULL;
    if (zt_proc_sample_take(&ctx->proc, device, &ctx->host_mem, &s, &err) == ZT_OK) zt_proc_sample_print(f, &s);
    else fprintf(f, "process: not measured (%s)\n", err.msg);
    /* The GPU's: reserved against the parts outside the allocator and
     * the other processes, which a refusal with free memory left on the
     * device comes down to. */
    if (ctx->device_bill.active) {
        zt_device_sample ds;
        zt_device_sample_take(&ctx->device_bill, ctx->be, &ctx->device_mem, &ds);
        zt_device_sample_print(f, &ds);
        if (ctx->device_bill.nvml_why[0]) fprintf(f, "  (%s)\n", ctx->device_bill.nvml_why);
    }
    fclose(f);
}

void zt_ctx_destroy(zt_ctx *ctx) {
    free(ctx->oom_report);
    ctx->oom_report = NULL;
    zt_proc_mem_destroy(&ctx->proc);
    zt_device_bill_destroy(&ctx->device_bill);
    if (ctx->be) {
        zt_stream_destroy(ctx->be, &ctx->h2d);
        zt_stream_destroy(ctx->be, &ctx->d2h);
        zt_mem_destroy(&ctx->device_mem);
        zt_mem_destroy(&ctx->host_mem);
        zt_backend_destroy(ctx->be);
    }
    ctx->be = NULL;
}
