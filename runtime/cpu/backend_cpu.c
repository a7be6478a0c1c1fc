/* The CPU backend: kernels run at once on the calling thread's OpenMP team, so
 * every stream operation is complete when it returns and syncs are no-ops. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"

const zt_ops *zt_cpu_ops(void) { return &zt_cpu_ops_fp32; }

static zt_status cpu_memcpy(zt_backend *be, void *dst, const void *src, size_t bytes,
                            zt_copy_kind kind, zt_stream *s, zt_error *err) {
    (void)be, (void)kind, (void)s, (void)err;
    if (bytes) memmove(dst, src, bytes);
    return ZT_OK;
}

static zt_status cpu_memset(zt_backend *be, void *dst, int value, size_t bytes, zt_stream *s,
                            zt_error *err) {
    (void)be, (void)s, (void)err;
    if (bytes) memset(dst, value, bytes);
    return ZT_OK;
}

static zt_status cpu_sync(zt_backend *be, zt_stream *s, zt_error *err) {
    (void)be, (void)s, (void)err;
    return ZT_OK;
}

/* No device memory to report: zeros. */
static zt_status cpu_mem_info(zt_backend *be, size_t *free_bytes, size_t *total_bytes, zt_error *err) {
    (void)be, (void)err;
    *free_bytes = 0;
    *total_bytes = 0;
    return ZT_OK;
}

static void cpu_destroy(zt_backend *be) {
    zt_cpu_link_destroy(be);
    free(be);
}

zt_status zt_backend_cpu_create(int nthreads, zt_backend **out, zt_error *err) {
    if (nthreads < 1) return ZT_FAIL(err, ZT_ERR_INVALID, "threads must be >= 1 (got %d)", nthreads);
    zt_backend *be = calloc(1, sizeof *be);
    if (!be) return ZT_FAIL(err, ZT_ERR_OOM, "cannot allocate the CPU backend");
    be->device = ZT_DEVICE_CPU;
    be->name = "cpu";
    be->ops = &zt_cpu_ops_fp32;
    be->ops_for[ZT_FP32] = &zt_cpu_ops_fp32;
    be->ops_for[ZT_BF16] = &zt_cpu_ops_bf16;
    be->ops_for[ZT_FP16] = &zt_cpu_ops_fp16;
    be->raw_device = zt_raw_allocator_cpu();
    be->nthreads = nthreads;
    be->memcpy_async = cpu_memcpy;
    be->memset_async = cpu_memset;
    be->stream_sync = cpu_sync;
    be->mem_info = cpu_mem_info;
    be->destroy = cpu_destroy;
    /* Tests: make copy streams asynchronous to expose missing waits. */
    const char *defer = getenv("ZT_CPU_DEFER_COPIES");
    if (defer && strcmp(defer, "1") == 0) zt_cpu_install_copy_queues(be);
    /* GEMMs run one per OpenMP thread (see ops_matmul.c), so OpenBLAS itself
     * stays single-threaded; its setting is per process. */
    openblas_set_num_threads(1);
    *out = be;
    return ZT_OK;
}
