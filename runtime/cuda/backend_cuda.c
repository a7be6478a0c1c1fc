/* The CUDA backend: one device, a non-blocking compute stream, a cuBLAS and
 * a cuBLASLt handle, cudaMalloc'd blocks under the tracked allocator, and the sticky
 * error that turns failures inside the (void) kernel launchers into a status
 * at the next stream_sync. */
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "cuda_ops.h"
#include "device_used.h"
#include "zt_time.h"
#include "vmm.h"


/* ---- errors -------------------------------------------------------------- */

zt_status zt_cuda_status_of(cudaError_t rc) {
    return rc == cudaErrorMemoryAllocation ? ZT_ERR_OOM : ZT_ERR_INTERNAL;
}

const char *zt_cublas_status_string(cublasStatus_t st) { return cublasGetStatusString(st); }

void zt_cuda_record(zt_cuda_impl *im, zt_status code, const char *file, int line, const char *fmt, ...) {
    pthread_mutex_lock(&im->lock);
    if (im->sticky.code == ZT_OK) {
        im->sticky.code = code;
        im->sticky.file = file;
        im->sticky.line = line;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(im->sticky.msg, sizeof im->sticky.msg, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&im->lock);
}

zt_cuda_impl *zt_cuda_impl_of(zt_stream *s) { return (zt_cuda_impl *)s->be->impl; }

int zt_cuda_check_rt(zt_stream *s, cudaError_t rc, const char *what, const char *file, int line) {
    if (rc == cudaSuccess) return 0;
    (void)cudaGetLastError(); /* consumed here: later launch checks must not see it */
    zt_cuda_record(zt_cuda_impl_of(s), zt_cuda_status_of(rc), file, line, "CUDA: %s failed: %s (%s)", what,
                   cudaGetErrorString(rc), cudaGetErrorName(rc));
    return 1;
}

int zt_cuda_check_launch(zt_stream *s, const char *what, const char *file, int line) {
    cudaError_t rc = cudaGetLastError();
    if (rc == cudaSuccess) return 0;
    zt_cuda_record(zt_cuda_impl_of(s), zt_cuda_status_of(rc), file, line,
                   "CUDA: launching kernel %s failed: %s (%s)", what, cudaGetErrorString(rc), cudaGetErrorName(rc));
    return 1;
}

cudaStream_t zt_cuda_enter(zt_stream *s) {
    zt_cuda_impl *im = zt_cuda_impl_of(s);
    /* Threads other than the creating one start on device 0. */
    ZT_CUDA_RT(s, cudaSetDevice(im->device));
    return s->handle ? (cudaStream_t)s->handle : im->stream;
}

cublasHandle_t zt_cuda_cublas_acquire(zt_stream *s, cudaStream_t stream) {
    zt_cuda_impl *im = zt_cuda_impl_of(s);
    pthread_mutex_lock(&im->lock);
    if (!im->cublas_bound || im->cublas_stream != stream) {
        /* The handle (the fallback for GEMMs cuBLASLt cannot run) uses the
         * backend's GEMM workspace, which gemm_cublas orders across streams
         * as the cuBLASLt calls do: no second pool, and results that do not
         * depend on the stream it last ran on. cublasSetStream resets the
         * workspace to cuBLAS's own pool, so it is set again each time. */
        cublasStatus_t st = cublasSetStream(im->cublas, stream);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasSetWorkspace(im->cublas, im->lt_workspace, ZT_CUDA_LT_WORKSPACE_BYTES);
        if (st != CUBLAS_STATUS_SUCCESS) {
            im->cublas_bound = 0; /* half bound: the next call binds again */
            pthread_mutex_unlock(&im->lock);
            zt_cuda_record(im, ZT_ERR_INTERNAL, __FILE__, __LINE__, "cuBLAS: binding the handle to a stream failed: %s",
                           cublasGetStatusString(st));
            return NULL;
        }
        im->cublas_stream = stream;
        im->cublas_bound = 1;
    }
    return im->cublas;
}

void zt_cuda_cublas_release(zt_stream *s) { pthread_mutex_unlock(&zt_cuda_impl_of(s)->lock); }

/* CUDA_CHECK for functions that return a zt_status: the failing call, its
 * error string and this file:line go into err. */
#define CUDA_CHECK(call)                                                                              \
    do {                                                                                              \
        cudaError_t cu_rc_ = (call);                                                                  \
        if (cu_rc_ != cudaSuccess) {                                                                  \
            (void)cudaGetLastError();                                                                 \
            return ZT_FAIL(err, zt_cuda_status_of(cu_rc_), "CUDA: %s failed: %s (%s)", #call,          \
                           cudaGetErrorString(cu_rc_), cudaGetErrorName(cu_rc_));                     \
        }                                                                                             \
    } while (0)

/* ---- the raw device allocator ------------------------------------------- */

static void *cuda_raw_alloc(void *ctx, size_t bytes) {
    zt_cuda_impl *im = ctx;
    void *p = NULL;
    if (cudaSetDevice(im->device) != cudaSuccess || cudaMalloc(&p, bytes) != cudaSuccess) {
        (void)cudaGetLastError(); /* an allocation refusal is reported by zt_mem, not as a launch error */
        return NULL;
    }
    return p;
}

/* Page-locked host memory for the offload pool: copies to and from it run
 * at full PCIe/NVLink speed and can be asynchronous. */
static void *cuda_host_alloc(void *ctx, size_t bytes) {
    (void)ctx;
    void *p = NULL;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocDefault) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

static void cuda_host_free(void *ctx, void *ptr) {
    (void)ctx;
    if (ptr) cudaFreeHost(ptr);
}

/* EXPANDABLE's segments (vmm.h). */
static void *cuda_reserve(void *ctx, size_t bytes) { return zt_cuda_vmm_reserve(((zt_cuda_impl *)ctx)->vmm, bytes); }
static int cuda_commit(void *ctx, void *ptr, size_t bytes) {
    return zt_cuda_vmm_commit(((zt_cuda_impl *)ctx)->vmm, ptr, bytes);
}
static int cuda_decommit(void *ctx, void *ptr, size_t bytes) {
    return zt_cuda_vmm_decommit(((zt_cuda_impl *)ctx)->vmm, ptr, bytes);
}
static void cuda_unreserve(void *ctx, void *ptr, size_t bytes) {
    zt_cuda_vmm_unreserve(((zt_cuda_impl *)ctx)->vmm, ptr, bytes);
}

static void cuda_raw_free(void *ctx, void *ptr) {
    zt_cuda_impl *im = ctx;
    if (!ptr) return;
    if (cudaSetDevice(im->device) != cudaSuccess || cudaFree(ptr) != cudaSuccess) {
        cudaError_t rc = cudaGetLastError();
        zt_cuda_record(im, ZT_ERR_INTERNAL, __FILE__, __LINE__, "CUDA: cudaFree(%p) failed: %s", ptr,
                       cudaGetErrorString(rc));
    }
}

/* ---- copies, fills, syncs ------------------------------------------------ */

static cudaStream_t stream_of(zt_backend *be, zt_stream *s) {
    zt_cuda_impl *im = be->impl;
    return s && s->handle ? (cudaStream_t)s->handle : im->stream;
}

static zt_status cuda_memcpy(zt_backend *be, void *dst, const void *src, size_t bytes, zt_copy_kind kind,
                             zt_stream *s, zt_error *err) {
    (void)kind; /* unified addressing: the runtime infers the direction */
    zt_cuda_impl *im = be->impl;
    if (!bytes) return ZT_OK;
    CUDA_CHECK(cudaSetDevice(im->device));
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_of(be, s)));
    return ZT_OK;
}

static zt_status cuda_memcpy2d(zt_backend *be, void *dst, size_t dst_pitch, const void *src, size_t src_pitch,
                               size_t width, size_t rows, zt_copy_kind kind, zt_stream *s, zt_error *err) {
    (void)kind;
    zt_cuda_impl *im = be->impl;
    if (!width || !rows) return ZT_OK;
    CUDA_CHECK(cudaSetDevice(im->device));
    CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDefault, stream_of(be, s)));
    return ZT_OK;
}

static zt_status cuda_memset(zt_backend *be, void *dst, int value, size_t bytes, zt_stream *s,
                             zt_error *err) {
    zt_cuda_impl *im = be->impl;
    if (!bytes) return ZT_OK;
    CUDA_CHECK(cudaSetDevice(im->device));
    CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, stream_of(be, s)));
    return ZT_OK;
}

/* The sticky error (the earliest asynchronous failure) as a status. */
static zt_status sticky_status(zt_cuda_impl *im, zt_error *err) {
    zt_status code = ZT_OK;
    pthread_mutex_lock(&im->lock);
    if (im->sticky.code != ZT_OK)
        code = zt_error_set(err, im->sticky.code, im->sticky.file, im->sticky.line, "%s", im->sticky.msg);
    pthread_mutex_unlock(&im->lock);
    return code;
}

/* The watchdog's wait: queries until done or be->sync_timeout_s has
 * passed (then cudaErrorNotReady stays in *rc); a plain blocking wait
 * without a timeout. */
static int timed_out(zt_backend *be, cudaError_t (*query)(void *), cudaError_t (*block)(void *), void *what,
                     cudaError_t *rc) {
    if (be->sync_timeout_s <= 0) {
        *rc = block(what);
        return 0;
    }
    struct timespec nap = {0, 100000}; /* 0.1 ms between queries */
    double deadline = zt_now_s() + be->sync_timeout_s;
    for (;;) {
        *rc = query(what);
        if (*rc != cudaErrorNotReady) return 0;
        (void)cudaGetLastError(); /* not ready is no failure */
        if (zt_now_s() > deadline) return 1;
        nanosleep(&nap, NULL);
    }
}

static cudaError_t query_stream(void *s) { return cudaStreamQuery((cudaStream_t)s); }
static cudaError_t block_stream(void *s) { return cudaStreamSynchronize((cudaStream_t)s); }
static cudaError_t query_event(void *e) { return cudaEventQuery((cudaEvent_t)e); }
static cudaError_t block_event(void *e) { return cudaEventSynchronize((cudaEvent_t)e); }

static zt_status device_timeout(zt_backend *be, const char *what, zt_error *err) {
    return ZT_FAIL(err, ZT_ERR_TIMEOUT, "collective watchdog: the device's %s did not finish within %g s "
                   "(`collective_timeout`): a collective queued on it may wait for a peer that is gone", what,
                   be->sync_timeout_s);
}

/* Waits for the stream, then reports the sticky error (the earliest failure
 * of any launch on this backend) ahead of the synchronization's own. */
static zt_status cuda_sync(zt_backend *be, zt_stream *s, zt_error *err) {
    zt_cuda_impl *im = be->impl;
    cudaError_t rc = cudaSetDevice(im->device);
    if (rc == cudaSuccess && timed_out(be, query_stream, block_stream, stream_of(be, s), &rc))
        return device_timeout(be, "stream", err);
    if (rc != cudaSuccess) {
        (void)cudaGetLastError();
        zt_cuda_record(im, zt_cuda_status_of(rc), __FILE__, __LINE__,
                       "CUDA: cudaStreamSynchronize failed: %s (%s) (a kernel on this stream failed)",
                       cudaGetErrorString(rc), cudaGetErrorName(rc));
    }
    return sticky_status(im, err);
}

/* ---- events and further streams ------------------------------------------ */

static zt_status cuda_event_record(zt_backend *be, zt_stream *s, void **event, zt_error *err) {
    zt_cuda_impl *im = be->impl;
    cudaEvent_t ev = NULL;
    *event = NULL;
    CUDA_CHECK(cudaSetDevice(im->device));
    /* Timing off: recording and waiting are cheaper, and nothing reads times. */
    CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    cudaError_t rc = cudaEventRecord(ev, stream_of(be, s));
    if (rc != cudaSuccess) {
        (void)cudaGetLastError();
        (void)cudaEventDestroy(ev);
        return ZT_FAIL(err, zt_cuda_status_of(rc), "CUDA: cudaEventRecord failed: %s", cudaGetErrorString(rc));
    }
    *event = ev;
    return ZT_OK;
}

static zt_status cuda_stream_wait_event(zt_backend *be, zt_stream *s, void *event, zt_error *err) {
    zt_cuda_impl *im = be->impl;
    CUDA_CHECK(cudaSetDevice(im->device));
    CUDA_CHECK(cudaStreamWaitEvent(stream_of(be, s), (cudaEvent_t)event, 0));
    return ZT_OK;
}

/* Like stream_sync, a failure of any kernel before the event surfaces here
 * together with the sticky error. */
static zt_status cuda_event_sync(zt_backend *be, void *event, zt_error *err) {
    zt_cuda_impl *im = be->impl;
    cudaError_t rc;
    if (timed_out(be, query_event, block_event, event, &rc)) return device_timeout(be, "event", err);
    if (rc != cudaSuccess) {
        (void)cudaGetLastError();
        zt_cuda_record(im, zt_cuda_status_of(rc), __FILE__, __LINE__, "CUDA: cudaEventSynchronize failed: %s (%s)",
                       cudaGetErrorString(rc), cudaGetErrorName(rc));
    }
    return sticky_status(im, err);
}

static void cuda_event_destroy(zt_backend *be, void *event) {
    (void)be;
    (void)cudaEventDestroy((cudaEvent_t)event);
}

static zt_status cuda_stream_create(zt_backend *be, zt_stream *out, zt_error *err) {
    zt_cuda_impl *im = be->impl;
    cudaStream_t st = NULL;
    CUDA_CHECK(cudaSetDevice(im->device));
    /* Non-blocking: never implicitly ordered with the legacy default stream. */
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    out->be = be;
    out->handle = st;
    out->nthreads = be->nthreads;
    return ZT_OK;
}

static void cuda_stream_destroy(zt_backend *be, zt_stream *s) {
    zt_cuda_impl *im = be->impl;
    (void)cudaSetDevice(im->device);
    (void)cudaStreamSynchronize((cudaStream_t)s->handle);
    (void)cudaStreamDestroy((cudaStream_t)s->handle);
    (void)cudaGetLastError();
}

static zt_status cuda_mem_info(zt_backend *be, size_t *free_bytes, size_t *total_bytes, zt_error *err) {
    zt_cuda_impl *im = be->impl;
    *free_bytes = 0;
    *total_bytes = 0;
    CUDA_CHECK(cudaSetDevice(im->device));
    CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
    return ZT_OK;
}

static void cuda_destroy(zt_backend *be) {
    zt_cuda_impl *im = be->impl;
    if (im) {
        (void)cudaSetDevice(im->device);
        if (im->stream) (void)cudaStreamSynchronize(im->stream);
        if (im->cublas) cublasDestroy(im->cublas);
        zt_cuda_lt_plans_destroy(im);
        if (im->lt) cublasLtDestroy(im->lt);
        if (im->lt_workspace) (void)cudaFree(im->lt_workspace);
        if (im->lt_ws_event) (void)cudaEventDestroy(im->lt_ws_event);
        if (im->sumsq_scratch) (void)cudaFree(im->sumsq_scratch);
        if (im->stream) (void)cudaStreamDestroy(im->stream);
        zt_cuda_vmm_destroy(im->vmm);
        (void)cudaGetLastError();
        pthread_mutex_destroy(&im->lock);
        free(im);
    }
    free(be);
}

/* ---- creation ------------------------------------------------------------ */

#define CUBLAS_CHECK(call)                                                                             \
    do {                                                                                               \
        cublasStatus_t cb_st_ = (call);                                                                \
        if (cb_st_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            st = ZT_FAIL(err, cb_st_ == CUBLAS_STATUS_ALLOC_FAILED ? ZT_ERR_OOM : ZT_ERR_INTERNAL,     \
                         "cuBLAS: %s failed: %s", #call, cublasGetStatusString(cb_st_));               \
            goto fail;                                                                                 \
        }                                                                                              \
    } while (0)
#define CUDA_CHECK_GOTO(call)                                                                          \
    do {                                                                                               \
        cudaError_t cu_rc_ = (call);                                                                   \
        if (cu_rc_ != cudaSuccess) {                                                                   \
            (void)cudaGetLastError();                                                                  \
            st = ZT_FAIL(err, zt_cuda_status_of(cu_rc_), "CUDA: %s failed: %s (%s)", #call,            \
                         cudaGetErrorString(cu_rc_), cudaGetErrorName(cu_rc_));                        \
            goto fail;                                                                                 \
        }                                                                                              \
    } while (0)

int zt_backend_cuda_device_count(void) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver or no device: not an error here */
        return 0;
    }
    return count;
}

zt_status zt_backend_cuda_create(int nthreads, int device, zt_backend **out, zt_error *err) {
    *out = NULL;
    if (nthreads < 1) return ZT_FAIL(err, ZT_ERR_INVALID, "threads must be >= 1 (got %d)", nthreads);
    if (device < 0) return ZT_FAIL(err, ZT_ERR_INVALID, "`device` cuda: device index must be >= 0 (got %d)", device);
    int count = 0;
    cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess || count <= 0) {
        (void)cudaGetLastError();
        return ZT_FAIL(err, ZT_ERR_UNSUPPORTED,
                       "`device` cuda: no CUDA device is visible (cudaGetDeviceCount: %s); use `device` cpu",
                       rc != cudaSuccess ? cudaGetErrorString(rc) : "0 devices");
    }
    zt_backend *be = calloc(1, sizeof *be);
    zt_cuda_impl *im = calloc(1, sizeof *im);
    if (!be || !im) {
        free(be);
        free(im);
        return ZT_FAIL(err, ZT_ERR_OOM, "cannot allocate the CUDA backend");
    }
    if (pthread_mutex_init(&im->lock, NULL) != 0) {
        free(be);
        free(im);
        return ZT_FAIL(err, ZT_ERR_INTERNAL, "cannot initialize the CUDA backend's lock");
    }
    be->impl = im;
    be->destroy = cuda_destroy;
    im->device = device % count;
    zt_status st = ZT_OK;

    CUDA_CHECK_GOTO(cudaSetDevice(im->device));
    CUDA_CHECK_GOTO(cudaFree(0)); /* the context, now: what follows is measured against it */
    CUDA_CHECK_GOTO(cudaDeviceGetPCIBusId(be->setup.pci_bus_id, (int)sizeof be->setup.pci_bus_id, im->device));
    size_t used0, used1, used2;
    int said = zt_cuda_device_used(&used0);
    CUDA_CHECK_GOTO(cudaStreamCreateWithFlags(&im->stream, cudaStreamNonBlocking));
    CUDA_CHECK_GOTO(cudaMalloc((void **)&im->sumsq_scratch, (ZT_CUDA_SUMSQ_BLOCKS + 1) * sizeof(double)));
    said &= zt_cuda_device_used(&used1);
    CUBLAS_CHECK(cublasCreate(&im->cublas)); /* bound to a stream and the workspace at its first use */
    /* fp32 GEMMs in fp32: no TF32 (NVIDIA_TF32_OVERRIDE=1 in the environment
     * would still force it), and no atomics, for run-to-run reproducibility. */
    CUBLAS_CHECK(cublasSetMathMode(im->cublas, CUBLAS_DEFAULT_MATH));
    CUBLAS_CHECK(cublasSetAtomicsMode(im->cublas, CUBLAS_ATOMICS_NOT_ALLOWED));
    CUBLAS_CHECK(cublasSetPointerMode(im->cublas, CUBLAS_POINTER_MODE_HOST));
    /* cuBLASLt, which runs the GEMMs (ops_matmul.cu): a handle and a fixed
     * workspace. The workspace is a plain cudaMalloc, outside the tracked
     * allocator and its accounting, like the cuBLAS handle's own memory. */
    {
        cublasStatus_t lt_st = cublasLtCreate(&im->lt);
        if (lt_st != CUBLAS_STATUS_SUCCESS) {
            im->lt = NULL;
            st = ZT_FAIL(err, lt_st == CUBLAS_STATUS_ALLOC_FAILED ? ZT_ERR_OOM : ZT_ERR_INTERNAL,
                         "cuBLASLt: cublasLtCreate failed on CUDA device %d: %s (%s)", im->device,
                         cublasLtGetStatusString(lt_st), cublasLtGetStatusName(lt_st));
            goto fail;
        }
    }
    CUDA_CHECK_GOTO(cudaMalloc(&im->lt_workspace, ZT_CUDA_LT_WORKSPACE_BYTES));
    CUDA_CHECK_GOTO(cudaEventCreateWithFlags(&im->lt_ws_event, cudaEventDisableTiming));
    said &= zt_cuda_device_used(&used2);
    be->setup.own_bytes = used1 > used0 ? used1 - used0 : 0;
    be->setup.blas_bytes = used2 > used1 ? used2 - used1 : 0;
    be->setup.measured = said;

    be->device = ZT_DEVICE_CUDA;
    be->name = "cuda";
    be->ops = zt_cuda_ops();
    for (int d = 0; d < ZT_NDTYPES; d++) be->ops_for[d] = zt_cuda_ops_for((zt_dtype)d);
    be->raw_device = (zt_raw_allocator){.alloc = cuda_raw_alloc, .free = cuda_raw_free, .ctx = im};
    im->vmm = zt_cuda_vmm_create(im->device, im->vmm_why, sizeof im->vmm_why);
    if (im->vmm) {
        be->raw_device.reserve = cuda_reserve;
        be->raw_device.commit = cuda_commit;
        be->raw_device.decommit = cuda_decommit;
        be->raw_device.unreserve = cuda_unreserve;
    } else {
        be->raw_device.no_reserve_why = im->vmm_why;
    }
    be->raw_host = (zt_raw_allocator){.alloc = cuda_host_alloc, .free = cuda_host_free, .ctx = im};
    be->nthreads = nthreads;
    be->default_stream = im->stream;
    be->memcpy_async = cuda_memcpy;
    be->memcpy2d_async = cuda_memcpy2d;
    be->memset_async = cuda_memset;
    be->stream_sync = cuda_sync;
    be->mem_info = cuda_mem_info;
    be->event_record = cuda_event_record;
    be->stream_wait_event = cuda_stream_wait_event;
    be->event_sync = cuda_event_sync;
    be->event_destroy = cuda_event_destroy;
    be->stream_create = cuda_stream_create;
    be->stream_destroy = cuda_stream_destroy;
    *out = be;
    return ZT_OK;

fail:
    cuda_destroy(be);
    return st;
}
