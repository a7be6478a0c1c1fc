/* Backend selection. */
#include <stdlib.h>

#include "zt_backend.h"
#include "zt_cuda_module.h"

/* The CUDA ordinal for this process: ZT_CUDA_DEVICE, else the launcher's
 * local rank (as the NCCL communicator picks its device), else 0. */
static int cuda_device_index(void) {
    static const char *vars[] = {"ZT_CUDA_DEVICE", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                 "SLURM_LOCALID", "LOCAL_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) {
            char *end = NULL;
            long d = strtol(v, &end, 10);
            if (*end == '\0' && d >= 0 && d < 1 << 20) return (int)d;
        }
    }
    return 0;
}

zt_status zt_backend_create(zt_device device, int nthreads, zt_backend **out, zt_error *err) {
    return zt_backend_create_on(device, nthreads, -1, out, err);
}

zt_status zt_backend_create_on(zt_device device, int nthreads, int cuda_device, zt_backend **out, zt_error *err) {
    *out = NULL;
    if (device == ZT_DEVICE_CPU) return zt_backend_cpu_create(nthreads, out, err);
    if (device != ZT_DEVICE_CUDA) return ZT_FAIL(err, ZT_ERR_INVALID, "unknown device %d", (int)device);
    const zt_cuda_module *m = NULL;
    ZT_TRY(zt_cuda_module_open(&m, err));
    if (cuda_device < 0) cuda_device = cuda_device_index();
    return m->backend_create(nthreads, cuda_device, out, err);
}

int zt_cuda_devices_visible(void) {
    const zt_cuda_module *m = NULL;
    zt_error ignore = {0};
    if (!zt_cuda_driver_present() || zt_cuda_module_open(&m, &ignore) != ZT_OK) return 0;
    return m->device_count();
}

zt_status zt_backend_set_link(zt_backend *be, double h2d_gbs, double d2h_gbs, zt_error *err) {
    if (be->device != ZT_DEVICE_CPU)
        return ZT_FAIL(err, ZT_ERR_UNSUPPORTED, "`link_gbs` / `link` model a host-device link on the CPU backend; "
                       "on %s the real link is used (drop the setting)", be->name);
    if (!(h2d_gbs > 0) || !(d2h_gbs > 0))
        return ZT_FAIL(err, ZT_ERR_INVALID, "a modelled link needs bandwidths > 0 (got %g,%g GB/s)", h2d_gbs, d2h_gbs);
    if (be->event_record || be->link)
        return ZT_FAIL(err, ZT_ERR_INVALID, "a modelled link replaces the copy streams' schedule, which "
                       "ZT_CPU_DEFER_COPIES (or an earlier link) has set already");
    return zt_cpu_install_link(be, h2d_gbs, d2h_gbs, err);
}

void zt_backend_destroy(zt_backend *be) {
    if (be && be->destroy) be->destroy(be);
}

zt_stream zt_backend_stream(zt_backend *be) {
    zt_stream s = {be, be->default_stream, be->nthreads};
    return s;
}

void zt_backend_driver_mem(zt_backend *be, size_t *used, size_t *total) {
    size_t free_b = 0;
    zt_error ignore = {0};
    *used = *total = 0;
    if (!be->mem_info || be->mem_info(be, &free_b, total, &ignore) != ZT_OK || *total < free_b) {
        *total = 0;
        return;
    }
    *used = *total - free_b;
}

zt_status zt_memcpy2d_async(zt_backend *be, void *dst, size_t dst_pitch, const void *src, size_t src_pitch,
                            size_t width, size_t rows, zt_copy_kind kind, zt_stream *s, zt_error *err) {
    if (be->memcpy2d_async) return be->memcpy2d_async(be, dst, dst_pitch, src, src_pitch, width, rows, kind, s, err);
    for (size_t i = 0; i < rows; i++)
        ZT_TRY(be->memcpy_async(be, (char *)dst + i * dst_pitch, (const char *)src + i * src_pitch, width, kind, s,
                                err));
    return ZT_OK;
}

zt_status zt_event_record(zt_backend *be, zt_stream *s, void **event, zt_error *err) {
    *event = NULL;
    return be->event_record ? be->event_record(be, s, event, err) : ZT_OK;
}

zt_status zt_stream_wait_event(zt_backend *be, zt_stream *s, void *event, zt_error *err) {
    if (!event || !be->stream_wait_event) return ZT_OK;
    return be->stream_wait_event(be, s, event, err);
}

zt_status zt_stream_after(zt_backend *be, zt_stream *waiter, zt_stream *after, zt_error *err) {
    if (!be->event_record || waiter->handle == after->handle) return ZT_OK; /* one queue: already ordered */
    void *ev = NULL;
    ZT_TRY(zt_event_record(be, after, &ev, err));
    zt_status st = zt_stream_wait_event(be, waiter, ev, err);
    zt_event_destroy(be, ev);
    return st;
}

zt_status zt_event_sync(zt_backend *be, void *event, zt_error *err) {
    if (!event || !be->event_sync) return ZT_OK;
    return be->event_sync(be, event, err);
}

void zt_event_destroy(zt_backend *be, void *event) {
    if (event && be->event_destroy) be->event_destroy(be, event);
}

zt_status zt_stream_create(zt_backend *be, zt_stream *out, zt_error *err) {
    *out = zt_backend_stream(be);
    return be->stream_create ? be->stream_create(be, out, err) : ZT_OK;
}

void zt_stream_destroy(zt_backend *be, zt_stream *s) {
    if (be->stream_destroy && s->handle && s->handle != be->default_stream) be->stream_destroy(be, s);
    s->handle = NULL;
}
