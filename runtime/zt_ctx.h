/* The per-process runtime context: everything that would otherwise be a
 * global (error slot, logger, memory spaces, backend, compute stream, rank)
 * lives here and is passed explicitly. */
#ifndef ZT_CTX_H
#define ZT_CTX_H

#include "zt_backend.h"
#include "zt_device_bill.h"
#include "zt_error.h"
#include "zt_fs.h"
#include "zt_log.h"
#include "zt_mem.h"
#include "zt_proc_mem.h"
#include "zt_trace.h"

typedef struct {
    zt_error err;
    zt_logger log;
    zt_mem device_mem; /* the compute device: every tracked category */
    zt_mem host_mem;   /* the host offload pool (page-locked), counted apart */
    zt_host_lock_stats host_lock;
    zt_trace *trace; /* the timeline, or NULL */
    zt_backend *be;
    zt_stream compute;
    /* Copy streams for offload traffic, so host<->device transfers overlap
     * with kernels on `compute` (on the CPU: the same synchronous stream). */
    zt_stream h2d;
    zt_stream d2h;
    int rank;
    int world_size;
    /* The device memory report taken at the moment an allocation failed
     * (before cleanup frees everything); owned, NULL when none. */
    char *oom_report;
    /* What the whole-bill sampler knows of this process's libraries (the
     * pages their initialisation made, zt_proc_mem.h). */
    zt_proc_mem proc;
    /* A replay (zt_ctx_init_dry): the kernels do nothing, so neither does
     * the host code that computes over host-pool buffers (zeroing them,
     * the offloaded optimizer), whose cost would grow with the model. */
    int dry;
    /* The GPU's side of the whole bill (CUDA runs; inactive elsewhere). */
    zt_device_bill device_bill;
    /* Checkpoint writes: their count and the tests' fault hook. */
    zt_fs fs;
} zt_ctx;

/* Captures zt_mem_report of the device space into ctx->oom_report. */
void zt_ctx_capture_oom_report(zt_ctx *ctx);

/* Creates the backend and both memory spaces. device_limit caps device_mem
 * (0: none). */
zt_status zt_ctx_init(zt_ctx *ctx, zt_device device, int nthreads, size_t device_limit, int rank,
                      int world_size, int quiet);
/* As zt_ctx_init on CUDA ordinal cuda_device (the local rank; -1: the
 * launcher's local-rank variable, see zt_backend_create). */
zt_status zt_ctx_init_on(zt_ctx *ctx, zt_device device, int cuda_device, int nthreads, size_t device_limit,
                         int rank, int world_size, int quiet);
/* A context over the dry backend (zt_backend_dry_create) shaped like
 * `like`: the same allocator and cap, no memory behind the buffers, no
 * work in the kernels, and a quiet log. zt-plan replays a rank's run in one. */
zt_status zt_ctx_init_dry(zt_ctx *ctx, zt_device like, size_t device_limit, int rank, int world_size);
/* A modelled host-device link under ctx's copy streams (zt_backend_set_link),
 * which are made anew: call before anything else creates a stream. */
zt_status zt_ctx_set_link(zt_ctx *ctx, double h2d_gbs, double d2h_gbs);
void zt_ctx_destroy(zt_ctx *ctx);

#endif
