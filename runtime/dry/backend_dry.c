/* The dry backend (zt_backend_dry_create): the shape of a backend without
 * its work. Kernels do nothing, device buffers are addresses without pages
 * and host-pool buffers share a few pages, so the engine and a model run
 * their real allocation sequence, through the real allocator, for the cost
 * of the bookkeeping: what zt-plan's replay measures reserved bytes with. */
#include <stdlib.h>
#include <string.h>

#include "dry_internal.h"

typedef struct {
    zt_backend be;
    zt_dry_space device, host;
} dry_backend;

static int in_dry_space(const zt_backend *be, const void *p) {
    const dry_backend *d = be->impl;
    return zt_dry_space_holds(&d->device, p) || zt_dry_space_holds(&d->host, p);
}

/* A copy into real host memory (a loss, the norms' slots) leaves zeros
 * there, as copying a dry buffer's would-be zeros: every value the host
 * reads back is then finite. */
static zt_status dry_memcpy(zt_backend *be, void *dst, const void *src, size_t bytes, zt_copy_kind kind,
                            zt_stream *s, zt_error *err) {
    (void)src, (void)kind, (void)s, (void)err;
    if (bytes && !in_dry_space(be, dst)) memset(dst, 0, bytes);
    return ZT_OK;
}

static zt_status dry_memset(zt_backend *be, void *dst, int value, size_t bytes, zt_stream *s, zt_error *err) {
    (void)s, (void)err;
    if (bytes && !in_dry_space(be, dst)) memset(dst, value, bytes);
    return ZT_OK;
}

static zt_status dry_sync(zt_backend *be, zt_stream *s, zt_error *err) {
    (void)be, (void)s, (void)err;
    return ZT_OK;
}

/* Like a GPU's streams: the engine takes its event-ordered paths (which
 * allocate what they allocate on a GPU); every event has happened. */
static zt_status dry_event_record(zt_backend *be, zt_stream *s, void **event, zt_error *err) {
    (void)be, (void)s, (void)err;
    *event = NULL;
    return ZT_OK;
}

static zt_status dry_mem_info(zt_backend *be, size_t *free_bytes, size_t *total_bytes, zt_error *err) {
    (void)be, (void)err;
    *free_bytes = *total_bytes = 0;
    return ZT_OK;
}

static void dry_destroy(zt_backend *be) {
    dry_backend *d = be->impl;
    zt_dry_space_destroy(&d->device);
    zt_dry_space_destroy(&d->host);
    free(d);
}

zt_status zt_backend_dry_create(zt_device like, int nthreads, zt_backend **out, zt_error *err) {
    *out = NULL;
    dry_backend *d = calloc(1, sizeof *d);
    if (!d) return ZT_FAIL(err, ZT_ERR_OOM, "cannot allocate the dry backend");
    zt_status st = zt_dry_space_init(&d->device, 0, err);
    if (st == ZT_OK) st = zt_dry_space_init(&d->host, 1, err);
    if (st != ZT_OK) {
        zt_dry_space_destroy(&d->device);
        free(d);
        return st;
    }
    zt_backend *be = &d->be;
    be->device = like;
    be->name = like == ZT_DEVICE_CUDA ? "dry (as cuda)" : "dry (as cpu)";
    be->ops = &zt_dry_ops[ZT_FP32];
    for (int t = 0; t < ZT_NDTYPES; t++) be->ops_for[t] = &zt_dry_ops[t];
    be->raw_device = zt_dry_raw_allocator(&d->device);
    be->raw_host = zt_dry_raw_allocator(&d->host);
    be->nthreads = nthreads > 0 ? nthreads : 1;
    be->memcpy_async = dry_memcpy;
    be->memset_async = dry_memset;
    be->stream_sync = dry_sync;
    if (like == ZT_DEVICE_CUDA) be->event_record = dry_event_record;
    be->mem_info = dry_mem_info;
    be->destroy = dry_destroy;
    be->impl = d;
    *out = be;
    return ZT_OK;
}
