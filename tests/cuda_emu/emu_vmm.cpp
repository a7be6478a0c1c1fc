/* The CUDA driver's virtual memory management, as runtime/cuda/vmm.c uses
 * it: address ranges reserved without memory (mmap PROT_NONE), physical
 * allocations that count against the emulated capacity, and mappings that
 * put fresh NaN-byte memory at a granule and register it as device memory.
 * The driver functions are reached through cudaGetDriverEntryPointByVersion,
 * as on a GPU. One simplification: a handle's memory is the mapping's, so
 * mapping one handle twice would not share its bytes (zerotrain maps each
 * once). ZT_EMU_NO_VMM=1 emulates a device without VMM support. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <map>
#include <mutex>

#include "emu_device.h"

namespace {

constexpr size_t granule = (size_t)2 << 20; /* an H200's minimum VMM granularity */

struct handle_state {
    size_t bytes;
    int mappings;
    bool released;
};

struct vmm_state {
    std::mutex mu;
    std::map<uintptr_t, size_t> reserved;                      /* base -> bytes */
    std::map<uintptr_t, std::pair<size_t, uint64_t>> mappings; /* address -> bytes, handle */
    std::map<uint64_t, handle_state> handles;
    uint64_t next_handle = 1;
};

vmm_state &vmm() {
    static vmm_state *v = new vmm_state(); /* never destroyed, as the emulator's state */
    return *v;
}

bool inside_reserved(vmm_state &v, uintptr_t p, size_t bytes) {
    auto it = v.reserved.upper_bound(p);
    if (it == v.reserved.begin()) return false;
    --it;
    return p >= it->first && p + bytes <= it->first + it->second;
}

/* Frees a handle's memory once it is released and mapped nowhere. Caller holds v.mu. */
void maybe_free(vmm_state &v, uint64_t h) {
    auto it = v.handles.find(h);
    if (it == v.handles.end() || !it->second.released || it->second.mappings) return;
    zt_emu_give_device_bytes(it->second.bytes);
    v.handles.erase(it);
}

bool vmm_off() {
    const char *off = getenv("ZT_EMU_NO_VMM");
    return off && *off && strcmp(off, "0") != 0;
}

CUresult device_get(CUdevice *dev, int ordinal) {
    if (!dev || ordinal < 0) return CUDA_ERROR_INVALID_VALUE;
    *dev = ordinal;
    return CUDA_SUCCESS;
}

CUresult device_get_attribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
    (void)dev;
    if (!pi) return CUDA_ERROR_INVALID_VALUE;
    *pi = attrib == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED && !vmm_off() ? 1 : 0;
    return CUDA_SUCCESS;
}

CUresult get_granularity(size_t *g, const CUmemAllocationProp *prop, CUmemAllocationGranularity_flags option) {
    (void)option;
    if (!g || !prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
    *g = granule;
    return CUDA_SUCCESS;
}

CUresult address_reserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags) {
    (void)addr;
    (void)flags;
    if (!ptr || !size || size % granule || (alignment && granule % alignment && alignment % granule))
        return CUDA_ERROR_INVALID_VALUE;
    /* Over-reserved by a granule so the base can be aligned to one. */
    void *raw = mmap(nullptr, size + granule, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    uintptr_t base = ((uintptr_t)raw + granule - 1) / granule * granule;
    if (base > (uintptr_t)raw) munmap(raw, base - (uintptr_t)raw);
    if (base + size < (uintptr_t)raw + size + granule)
        munmap((void *)(base + size), (uintptr_t)raw + size + granule - (base + size));
    std::lock_guard<std::mutex> lk(vmm().mu);
    vmm().reserved[base] = size;
    *ptr = (CUdeviceptr)base;
    return CUDA_SUCCESS;
}

CUresult address_free(CUdeviceptr ptr, size_t size) {
    vmm_state &v = vmm();
    std::lock_guard<std::mutex> lk(v.mu);
    auto it = v.reserved.find((uintptr_t)ptr);
    if (it == v.reserved.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
    auto m = v.mappings.lower_bound((uintptr_t)ptr);
    if (m != v.mappings.end() && m->first < (uintptr_t)ptr + size) return CUDA_ERROR_INVALID_VALUE; /* still mapped */
    munmap((void *)(uintptr_t)ptr, size);
    v.reserved.erase(it);
    return CUDA_SUCCESS;
}

CUresult create(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                unsigned long long flags) {
    (void)flags;
    if (!h || !prop || !size || size % granule || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    if (!zt_emu_take_device_bytes(size)) return CUDA_ERROR_OUT_OF_MEMORY;
    vmm_state &v = vmm();
    std::lock_guard<std::mutex> lk(v.mu);
    *h = v.next_handle++;
    v.handles[*h] = handle_state{size, 0, false};
    return CUDA_SUCCESS;
}

CUresult release(CUmemGenericAllocationHandle h) {
    vmm_state &v = vmm();
    std::lock_guard<std::mutex> lk(v.mu);
    auto it = v.handles.find(h);
    if (it == v.handles.end() || it->second.released) return CUDA_ERROR_INVALID_VALUE;
    it->second.released = true;
    maybe_free(v, h);
    return CUDA_SUCCESS;
}

CUresult map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long flags) {
    (void)flags;
    vmm_state &v = vmm();
    std::lock_guard<std::mutex> lk(v.mu);
    auto it = v.handles.find(h);
    uintptr_t p = (uintptr_t)ptr;
    if (it == v.handles.end() || it->second.released || offset || size != it->second.bytes || p % granule ||
        !inside_reserved(v, p, size))
        return CUDA_ERROR_INVALID_VALUE;
    auto m = v.mappings.lower_bound(p);
    if ((m != v.mappings.end() && m->first < p + size) ||
        (m != v.mappings.begin() && std::prev(m)->first + std::prev(m)->second.first > p))
        return CUDA_ERROR_INVALID_VALUE; /* overlaps a mapping */
    void *mem = mmap((void *)p, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (mem == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    memset(mem, 0xff, size); /* fresh device memory is garbage: NaN bytes */
    it->second.mappings++;
    v.mappings[p] = {size, h};
    zt_emu_note_mapping(mem, size, true);
    return CUDA_SUCCESS;
}

CUresult unmap(CUdeviceptr ptr, size_t size) {
    vmm_state &v = vmm();
    std::lock_guard<std::mutex> lk(v.mu);
    auto m = v.mappings.find((uintptr_t)ptr);
    if (m == v.mappings.end() || m->second.first != size) return CUDA_ERROR_INVALID_VALUE; /* whole mappings only */
    zt_emu_note_mapping((void *)(uintptr_t)ptr, size, false);
    mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    uint64_t h = m->second.second;
    v.mappings.erase(m);
    v.handles[h].mappings--;
    maybe_free(v, h);
    return CUDA_SUCCESS;
}

CUresult set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
    vmm_state &v = vmm();
    std::lock_guard<std::mutex> lk(v.mu);
    if (!desc || !count || desc->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) return CUDA_ERROR_INVALID_VALUE;
    for (uintptr_t p = (uintptr_t)ptr; p < (uintptr_t)ptr + size;) { /* every byte mapped */
        auto m = v.mappings.find(p);
        if (m == v.mappings.end()) return CUDA_ERROR_INVALID_VALUE;
        p += m->second.first;
    }
    return CUDA_SUCCESS;
}

struct entry_point {
    const char *name;
    void *fn;
};

const entry_point entry_points[] = {
    {"cuDeviceGet", (void *)device_get},
    {"cuDeviceGetAttribute", (void *)device_get_attribute},
    {"cuMemGetAllocationGranularity", (void *)get_granularity},
    {"cuMemAddressReserve", (void *)address_reserve},
    {"cuMemAddressFree", (void *)address_free},
    {"cuMemCreate", (void *)create},
    {"cuMemRelease", (void *)release},
    {"cuMemMap", (void *)map},
    {"cuMemUnmap", (void *)unmap},
    {"cuMemSetAccess", (void *)set_access},
};

} // namespace

cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned int version,
                                             unsigned long long flags, cudaDriverEntryPointQueryResult *status) {
    (void)version;
    (void)flags;
    if (!symbol || !fn) return cudaErrorInvalidValue;
    *fn = nullptr;
    for (const entry_point &e : entry_points)
        if (strcmp(e.name, symbol) == 0) *fn = e.fn;
    if (status) *status = *fn ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
    return cudaSuccess;
}
