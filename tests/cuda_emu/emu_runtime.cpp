/* The CUDA runtime API on the emulated device: streams with worker threads,
 * events, device and pinned memory, copies, launch checks, errors.
 *
 * The emulator stands in for a process-wide driver, so its state is one
 * process-wide object, as the CUDA runtime's is (this is test infrastructure,
 * not library code; the library keeps its no-globals rule).
 *
 * Knobs (environment):
 *   ZT_EMU_DEVICES    devices cudaGetDeviceCount reports (default 1; 0 = none)
 *   ZT_EMU_MEM_MB     device memory per device in MiB (default 8192)
 *   ZT_EMU_JITTER_US  each stream worker sleeps a random 0..N us before each
 *                     operation (default 0): shakes out missing event waits
 *   ZT_EMU_SEED       seed of that jitter */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "emu_device.h"

struct CUstream_st {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::function<void()>> queue;
    uint64_t issued = 0, done = 0;
    bool stopping = false;
    std::thread worker;
};

/* One cudaEventRecord: done once the stream has reached it. Waits hold the
 * record they were given, so re-recording or destroying the event later
 * does not change what they wait for (CUDA's semantics). */
struct event_record {
    bool done = false;
    std::chrono::steady_clock::time_point when;
};

struct CUevent_st {
    std::shared_ptr<event_record> last; /* guarded by the emulator's mutex */
    bool timing = true;
};

namespace {

struct allocation {
    size_t bytes;
    bool device; /* false: pinned host memory */
    bool mapped; /* a granule cuMemMap put there (emu_vmm.cpp): adjacent ones form one range */
};

struct emulator {
    std::mutex mu;                /* guards everything below and all events */
    std::condition_variable cv;   /* any event completed, any stream drained */
    std::map<uintptr_t, allocation> allocations;
    std::vector<CUstream_st *> streams;
    std::map<const void *, size_t> max_dynamic_smem;
    std::map<const void *, size_t> static_smem; /* per kernel, learned as its blocks run */
    size_t device_used = 0, device_capacity = 0;
    int device_count = 1, current_device = 0;
    unsigned jitter_us = 0;
    uint64_t seed = 1;
    std::string fault; /* sticky device fault, empty when none */
    CUstream_st *legacy = nullptr;

    emulator() {
        const char *e = getenv("ZT_EMU_DEVICES");
        if (e) device_count = atoi(e);
        e = getenv("ZT_EMU_MEM_MB");
        device_capacity = (size_t)(e ? atoll(e) : 8192) << 20;
        e = getenv("ZT_EMU_JITTER_US");
        if (e) jitter_us = (unsigned)atoi(e);
        e = getenv("ZT_EMU_SEED");
        if (e) seed = (uint64_t)atoll(e);
    }
};

emulator &emu() {
    static emulator *e = new emulator(); /* never destroyed: workers may outlive exit() */
    return *e;
}

thread_local cudaError_t tl_last_error = cudaSuccess;

cudaError_t set_error(cudaError_t e) {
    if (e != cudaSuccess) tl_last_error = e;
    return e;
}

void worker_loop(CUstream_st *s, uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (;;) {
        std::function<void()> op;
        {
            std::unique_lock<std::mutex> lk(s->mu);
            s->cv.wait(lk, [&] { return s->stopping || !s->queue.empty(); });
            if (s->queue.empty()) return;
            op = std::move(s->queue.front());
            s->queue.pop_front();
        }
        unsigned j = emu().jitter_us;
        if (j) std::this_thread::sleep_for(std::chrono::microseconds(rng() % (j + 1)));
        op();
        {
            std::lock_guard<std::mutex> lk(s->mu);
            s->done++;
        }
        {
            std::lock_guard<std::mutex> lk(emu().mu);
            emu().cv.notify_all();
        }
    }
}

CUstream_st *new_stream() {
    CUstream_st *s = new CUstream_st();
    emulator &e = emu();
    uint64_t seed;
    {
        std::lock_guard<std::mutex> lk(e.mu);
        seed = e.seed * 7919u + e.streams.size();
        e.streams.push_back(s);
    }
    s->worker = std::thread(worker_loop, s, seed);
    return s;
}

CUstream_st *resolve(cudaStream_t s) {
    if (s) return s;
    emulator &e = emu();
    std::lock_guard<std::mutex> lk(e.mu);
    if (!e.legacy) {
        e.legacy = new CUstream_st();
        e.streams.push_back(e.legacy);
        e.legacy->worker = std::thread(worker_loop, e.legacy, e.seed * 7919u + 104729u);
    }
    return e.legacy;
}

uint64_t issued(CUstream_st *s) {
    std::lock_guard<std::mutex> lk(s->mu);
    return s->issued;
}

bool drained(CUstream_st *s, uint64_t upto) {
    std::lock_guard<std::mutex> lk(s->mu);
    return s->done >= upto;
}

cudaError_t fault_status() {
    std::lock_guard<std::mutex> lk(emu().mu);
    return emu().fault.empty() ? cudaSuccess : cudaErrorLaunchFailure;
}

/* Host waits until stream s has executed its first `upto` operations. */
cudaError_t wait_stream(CUstream_st *s, uint64_t upto) {
    emulator &e = emu();
    std::unique_lock<std::mutex> lk(e.mu);
    e.cv.wait(lk, [&] { return drained(s, upto); });
    return e.fault.empty() ? cudaSuccess : cudaErrorLaunchFailure;
}

cudaError_t sync_all() {
    std::vector<std::pair<CUstream_st *, uint64_t>> targets;
    {
        std::lock_guard<std::mutex> lk(emu().mu);
        for (CUstream_st *s : emu().streams) targets.push_back({s, 0});
    }
    for (auto &t : targets) t.second = issued(t.first);
    for (auto &t : targets) wait_stream(t.first, t.second);
    return fault_status();
}

/* The allocation containing [p, p + bytes), or null. Caller holds emu().mu. */
const allocation *find_allocation(const void *p, size_t bytes, uintptr_t *base) {
    emulator &e = emu();
    uintptr_t a = (uintptr_t)p;
    auto it = e.allocations.upper_bound(a);
    if (it == e.allocations.begin()) return nullptr;
    --it;
    if (a < it->first || a >= it->first + it->second.bytes + (bytes == 0)) return nullptr;
    if (base) *base = it->first;
    /* Mapped granules side by side are one range, as one virtual range on a GPU. */
    for (auto next = it; a + bytes > next->first + next->second.bytes;) {
        uintptr_t end = next->first + next->second.bytes;
        if (!next->second.mapped || ++next == e.allocations.end() || next->first != end || !next->second.mapped)
            return nullptr;
    }
    return &it->second;
}

enum mem_kind { MEM_DEVICE, MEM_PINNED, MEM_PAGEABLE, MEM_OUT_OF_RANGE };

/* Where [p, p + bytes) lives. A range that starts inside an allocation and
 * runs past its end is out of range: a GPU copy would fault there. */
mem_kind classify(const void *p, size_t bytes) {
    emulator &e = emu();
    std::lock_guard<std::mutex> lk(e.mu);
    const allocation *a = find_allocation(p, bytes, nullptr);
    if (a) return a->device ? MEM_DEVICE : MEM_PINNED;
    if (find_allocation(p, 1, nullptr)) return MEM_OUT_OF_RANGE;
    return MEM_PAGEABLE;
}

bool is_host(mem_kind k) { return k == MEM_PINNED || k == MEM_PAGEABLE; }

cudaError_t check_copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    if (bytes == 0) return cudaSuccess;
    if (!dst || !src) return cudaErrorInvalidValue;
    mem_kind d = classify(dst, bytes), s = classify(src, bytes);
    if (d == MEM_OUT_OF_RANGE || s == MEM_OUT_OF_RANGE) return cudaErrorInvalidValue;
    switch (kind) {
    case cudaMemcpyHostToDevice: return is_host(s) && d == MEM_DEVICE ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToHost: return s == MEM_DEVICE && is_host(d) ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToDevice: return s == MEM_DEVICE && d == MEM_DEVICE ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyHostToHost: return is_host(s) && is_host(d) ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDefault: return cudaSuccess;
    default: return cudaErrorInvalidMemcpyDirection;
    }
}

} // namespace

bool zt_emu_is_device_range(const void *p, size_t bytes) { return bytes == 0 || classify(p, bytes) == MEM_DEVICE; }

bool zt_emu_check_kernel_pointer(const void *p, int index, const char *kernel) {
    if (!p) return true;
    {
        std::lock_guard<std::mutex> lk(emu().mu);
        /* inside an allocation, or one past its end */
        if (find_allocation(p, 0, nullptr) || ((uintptr_t)p > 0 && find_allocation((const char *)p - 1, 1, nullptr)))
            return true;
    }
    char buf[200];
    snprintf(buf, sizeof buf, "kernel %s, argument %d: %p is neither device nor pinned host memory", kernel, index, p);
    zt_emu_device_fault(buf);
    return false;
}

/* ---- the emulator's internal interface ------------------------------------ */

bool zt_emu_take_device_bytes(size_t bytes) {
    emulator &e = emu();
    std::lock_guard<std::mutex> lk(e.mu);
    if (e.device_used + bytes > e.device_capacity) return false;
    e.device_used += bytes;
    return true;
}

void zt_emu_give_device_bytes(size_t bytes) {
    std::lock_guard<std::mutex> lk(emu().mu);
    emu().device_used -= bytes;
}

void zt_emu_note_mapping(void *p, size_t bytes, bool mapped) {
    emulator &e = emu();
    std::lock_guard<std::mutex> lk(e.mu);
    if (mapped) e.allocations[(uintptr_t)p] = allocation{bytes, true, true};
    else e.allocations.erase((uintptr_t)p);
}

void zt_emu_enqueue(cudaStream_t stream, std::function<void()> op) {
    CUstream_st *s = resolve(stream);
    std::lock_guard<std::mutex> lk(s->mu);
    s->queue.push_back(std::move(op));
    s->issued++;
    s->cv.notify_one();
}

void zt_emu_device_fault(const char *what) {
    emulator &e = emu();
    std::lock_guard<std::mutex> lk(e.mu);
    if (e.fault.empty()) {
        e.fault = what;
        fprintf(stderr, "cuda emulator: device fault: %s\n", what);
    }
}

/* A per-kernel value (emulator maps keyed by the kernel), 0 if none. */
static size_t kernel_value(const std::map<const void *, size_t> &values, const void *func) {
    std::lock_guard<std::mutex> lk(emu().mu);
    auto it = values.find(func);
    return it == values.end() ? 0 : it->second;
}

size_t zt_emu_dynamic_smem_optin(const void *func) { return kernel_value(emu().max_dynamic_smem, func); }

void zt_emu_note_static_smem(const void *func, size_t bytes) {
    emulator &e = emu();
    std::lock_guard<std::mutex> lk(e.mu);
    size_t &known = e.static_smem[func];
    if (bytes > known) known = bytes;
}

/* The launch-time limit on dynamic shared memory is the opt-in, or 48 KiB
 * without one; 48 KiB minus the static size on a GPU, but the emulator may
 * not know that size yet and checks the sum as blocks run. */
bool zt_emu_check_launch(dim3 grid, dim3 block, size_t dynamic_smem, cudaStream_t stream, size_t smem_optin) {
    (void)stream;
    cudaError_t rc = cudaSuccess;
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0)
        rc = cudaErrorInvalidConfiguration;
    else if (grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535)
        rc = cudaErrorInvalidConfiguration;
    else if (block.x > 1024 || block.y > 1024 || block.z > 64 || (size_t)block.x * block.y * block.z > 1024)
        rc = cudaErrorInvalidConfiguration;
    else if (dynamic_smem > (smem_optin ? smem_optin : zt_emu_smem_default_max))
        rc = cudaErrorInvalidValue;
    if (rc != cudaSuccess) {
        set_error(rc);
        return false;
    }
    return true;
}

/* ---- devices ---------------------------------------------------------------- */

cudaError_t cudaGetDeviceCount(int *count) {
    if (!count) return set_error(cudaErrorInvalidValue);
    *count = emu().device_count > 0 ? emu().device_count : 0;
    return emu().device_count > 0 ? cudaSuccess : set_error(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device) {
    if (device < 0 || device >= emu().device_count) return set_error(cudaErrorInvalidDevice);
    emu().current_device = device;
    return cudaSuccess;
}

/* The emulated devices sit on bus numbers 0, 1, ... of domain 0. */
cudaError_t cudaDeviceGetPCIBusId(char *pci_bus_id, int len, int device) {
    if (!pci_bus_id || len < 13) return set_error(cudaErrorInvalidValue);
    if (device < 0 || device >= emu().device_count) return set_error(cudaErrorInvalidDevice);
    snprintf(pci_bus_id, (size_t)len, "0000:%02X:00.0", device);
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
    if (!device) return set_error(cudaErrorInvalidValue);
    *device = emu().current_device;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) { return set_error(sync_all()); }

cudaError_t cudaGetLastError(void) {
    cudaError_t e = tl_last_error;
    tl_last_error = cudaSuccess;
    if (e == cudaSuccess) e = fault_status();
    return e;
}

cudaError_t cudaPeekAtLastError(void) { return tl_last_error != cudaSuccess ? tl_last_error : fault_status(); }

const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    default: return "cudaErrorUnknown";
    }
}

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure: return "unspecified launch failure (emulated device fault)";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorNotSupported: return "operation not supported (by the CUDA emulator)";
    default: return "unknown error";
    }
}

/* A kernel's static shared memory is known once one of its blocks has
 * declared it; before its first launch sharedSizeBytes is 0 here (a GPU
 * knows it from the binary), and the sum is checked as blocks run. */
cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func) {
    if (!attr) return set_error(cudaErrorInvalidValue);
    if (!func) return set_error(cudaErrorInvalidDeviceFunction);
    memset(attr, 0, sizeof *attr);
    attr->maxThreadsPerBlock = 1024;
    attr->sharedSizeBytes = kernel_value(emu().static_smem, func);
    size_t optin = zt_emu_dynamic_smem_optin(func);
    attr->maxDynamicSharedSizeBytes = (int)(optin ? optin : zt_emu_smem_default_max - attr->sharedSizeBytes);
    return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value) {
    if (!func) return set_error(cudaErrorInvalidDeviceFunction);
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        /* an H200 (sm_90): 227 KiB of shared memory per block at most */
        if (value < 0 || (size_t)value > zt_emu_smem_optin_max) return set_error(cudaErrorInvalidValue);
        std::lock_guard<std::mutex> lk(emu().mu);
        emu().max_dynamic_smem[func] = (size_t)value;
    }
    return cudaSuccess;
}

/* ---- memory ----------------------------------------------------------------- */

static cudaError_t allocate(void **p, size_t bytes, bool device) {
    if (!p) return set_error(cudaErrorInvalidValue);
    *p = nullptr;
    if (bytes == 0) return cudaSuccess;
    emulator &e = emu();
    size_t rounded = (bytes + 255) & ~(size_t)255;
    {
        std::lock_guard<std::mutex> lk(e.mu);
        if (device && e.device_used + rounded > e.device_capacity) return set_error(cudaErrorMemoryAllocation);
    }
    /* The exact size (posix_memalign takes any size): under AddressSanitizer
     * a kernel that reads or writes past the end of its buffer is reported. */
    void *mem = nullptr;
    if (posix_memalign(&mem, 256, bytes) != 0) return set_error(cudaErrorMemoryAllocation);
    /* Fresh device memory is garbage on a GPU: NaN bytes here, so a kernel
     * that reads what nobody wrote gives NaN rather than a lucky zero. */
    if (device) memset(mem, 0xff, bytes);
    std::lock_guard<std::mutex> lk(e.mu);
    e.allocations[(uintptr_t)mem] = allocation{bytes, device, false};
    if (device) e.device_used += rounded;
    *p = mem;
    return cudaSuccess;
}

static cudaError_t release(void *p, bool device) {
    if (!p) return cudaSuccess;
    /* cudaFree and cudaFreeHost wait for the device before freeing */
    sync_all();
    emulator &e = emu();
    std::lock_guard<std::mutex> lk(e.mu);
    auto it = e.allocations.find((uintptr_t)p);
    if (it == e.allocations.end() || it->second.device != device) return set_error(cudaErrorInvalidValue);
    if (device) e.device_used -= (it->second.bytes + 255) & ~(size_t)255;
    e.allocations.erase(it);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes) { return allocate(p, bytes, true); }
cudaError_t cudaFree(void *p) { return release(p, true); }
cudaError_t cudaMallocHost(void **p, size_t bytes) { return allocate(p, bytes, false); }
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned int flags) {
    (void)flags;
    return allocate(p, bytes, false);
}
cudaError_t cudaFreeHost(void *p) { return release(p, false); }

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    emulator &e = emu();
    std::lock_guard<std::mutex> lk(e.mu);
    if (free_bytes) *free_bytes = e.device_capacity - e.device_used;
    if (total_bytes) *total_bytes = e.device_capacity;
    return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attr, const void *p) {
    if (!attr) return set_error(cudaErrorInvalidValue);
    memset(attr, 0, sizeof *attr);
    mem_kind k = classify(p, 1);
    attr->type = k == MEM_DEVICE ? cudaMemoryTypeDevice : k == MEM_PINNED ? cudaMemoryTypeHost : cudaMemoryTypeUnregistered;
    attr->device = emu().current_device;
    if (k == MEM_DEVICE) attr->devicePointer = (void *)p;
    if (k == MEM_PINNED) attr->hostPointer = attr->devicePointer = (void *)p;
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t stream) {
    cudaError_t rc = check_copy(dst, src, bytes, kind);
    if (rc != cudaSuccess) return set_error(rc);
    /* CUDA leaves overlapping copies undefined: refused here */
    if (bytes && (uintptr_t)dst < (uintptr_t)src + bytes && (uintptr_t)src < (uintptr_t)dst + bytes)
        return set_error(cudaErrorInvalidValue);
    if (bytes) zt_emu_enqueue(stream, [=]() { memcpy(dst, src, bytes); });
    return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                              enum cudaMemcpyKind kind, cudaStream_t stream) {
    if (width == 0 || height == 0) return cudaSuccess;
    if (width > dpitch || width > spitch) return set_error(cudaErrorInvalidPitchValue);
    size_t dspan = (height - 1) * dpitch + width, sspan = (height - 1) * spitch + width;
    if (classify(dst, dspan) == MEM_OUT_OF_RANGE || classify(src, sspan) == MEM_OUT_OF_RANGE)
        return set_error(cudaErrorInvalidValue); /* a span that leaves its allocation */
    cudaError_t rc = check_copy(dst, src, dspan < sspan ? dspan : sspan, kind);
    if (rc != cudaSuccess) return set_error(rc);
    char *d = (char *)dst;
    const char *sp = (const char *)src;
    zt_emu_enqueue(stream, [=]() {
        for (size_t i = 0; i < height; i++) memcpy(d + i * dpitch, sp + i * spitch, width);
    });
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
    cudaError_t rc = cudaMemcpyAsync(dst, src, bytes, kind, 0);
    if (rc != cudaSuccess) return rc;
    CUstream_st *s = resolve(0);
    return set_error(wait_stream(s, issued(s)));
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t stream) {
    if (bytes == 0) return cudaSuccess;
    if (classify(dst, bytes) != MEM_DEVICE) return set_error(cudaErrorInvalidValue);
    zt_emu_enqueue(stream, [=]() { memset(dst, value, bytes); });
    return cudaSuccess;
}

cudaError_t cudaMemset(void *dst, int value, size_t bytes) {
    cudaError_t rc = cudaMemsetAsync(dst, value, bytes, 0);
    if (rc != cudaSuccess) return rc;
    CUstream_st *s = resolve(0);
    return set_error(wait_stream(s, issued(s)));
}

/* ---- streams ---------------------------------------------------------------- */

/* Only non-blocking streams: zerotrain creates no other kind, and the
 * legacy default stream's implicit barriers with blocking streams are not
 * modelled, so a blocking stream is refused rather than run wrongly. */
cudaError_t cudaStreamCreate(cudaStream_t *s) {
    (void)s;
    return set_error(cudaErrorNotSupported);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    if (!s) return set_error(cudaErrorInvalidValue);
    if (flags != cudaStreamNonBlocking) return set_error(cudaErrorNotSupported);
    *s = new_stream();
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (!s) return set_error(cudaErrorInvalidResourceHandle);
    {
        std::lock_guard<std::mutex> lk(s->mu);
        s->stopping = true;
        s->cv.notify_one();
    }
    s->worker.join(); /* pending work still runs first, as on a GPU */
    {
        std::lock_guard<std::mutex> lk(emu().mu);
        auto &v = emu().streams;
        for (size_t i = 0; i < v.size(); i++)
            if (v[i] == s) {
                v.erase(v.begin() + (long)i);
                break;
            }
    }
    delete s;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    CUstream_st *s = resolve(stream);
    return set_error(wait_stream(s, issued(s)));
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
    CUstream_st *s = resolve(stream);
    return drained(s, issued(s)) ? fault_status() : set_error(cudaErrorNotReady);
}

/* ---- events ----------------------------------------------------------------- */

cudaError_t cudaEventCreate(cudaEvent_t *ev) { return cudaEventCreateWithFlags(ev, cudaEventDefault); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned int flags) {
    if (!ev) return set_error(cudaErrorInvalidValue);
    if (flags & ~(unsigned)(cudaEventDisableTiming | cudaEventBlockingSync)) return set_error(cudaErrorInvalidValue);
    *ev = new CUevent_st();
    (*ev)->timing = !(flags & cudaEventDisableTiming);
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t ev) {
    if (!ev) return set_error(cudaErrorInvalidResourceHandle);
    /* Legal while records or waits on it are pending: they hold the record
     * they refer to, not the event. */
    delete ev;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t stream) {
    if (!ev) return set_error(cudaErrorInvalidResourceHandle);
    std::shared_ptr<event_record> rec = std::make_shared<event_record>();
    {
        std::lock_guard<std::mutex> lk(emu().mu);
        ev->last = rec;
    }
    zt_emu_enqueue(stream, [rec]() {
        emulator &em = emu();
        std::lock_guard<std::mutex> lk(em.mu);
        rec->done = true;
        rec->when = std::chrono::steady_clock::now();
        em.cv.notify_all();
    });
    return cudaSuccess;
}

/* The event's most recent record (null when never recorded). */
static std::shared_ptr<event_record> last_record(cudaEvent_t ev) {
    std::lock_guard<std::mutex> lk(emu().mu);
    return ev->last;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t ev, unsigned int flags) {
    if (!ev) return set_error(cudaErrorInvalidResourceHandle);
    if (flags != 0) return set_error(cudaErrorInvalidValue);
    /* the most recent record at call time, as CUDA; none: nothing to wait for */
    std::shared_ptr<event_record> rec = last_record(ev);
    if (!rec) return cudaSuccess;
    zt_emu_enqueue(stream, [rec]() {
        emulator &em = emu();
        std::unique_lock<std::mutex> lk(em.mu);
        em.cv.wait(lk, [&] { return rec->done; });
    });
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
    if (!ev) return set_error(cudaErrorInvalidResourceHandle);
    std::shared_ptr<event_record> rec = last_record(ev);
    emulator &e = emu();
    std::unique_lock<std::mutex> lk(e.mu);
    if (rec) e.cv.wait(lk, [&] { return rec->done; });
    return e.fault.empty() ? cudaSuccess : set_error(cudaErrorLaunchFailure);
}

cudaError_t cudaEventQuery(cudaEvent_t ev) {
    if (!ev) return set_error(cudaErrorInvalidResourceHandle);
    bool ready;
    {
        std::lock_guard<std::mutex> lk(emu().mu);
        ready = !ev->last || ev->last->done;
    }
    /* Not-ready also becomes the thread's last error, as the CUDA runtime
     * records it: callers must clear it before their next launch check. */
    return ready ? fault_status() : set_error(cudaErrorNotReady);
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    if (!ms || !start || !end) return set_error(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> lk(emu().mu);
    if (!start->timing || !end->timing) return set_error(cudaErrorInvalidResourceHandle);
    if (!start->last || !end->last) return set_error(cudaErrorInvalidResourceHandle);
    if (!start->last->done || !end->last->done) return set_error(cudaErrorNotReady);
    *ms = std::chrono::duration<float, std::milli>(end->last->when - start->last->when).count();
    return cudaSuccess;
}
