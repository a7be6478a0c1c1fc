/* The CUDA driver's virtual memory management under zt_mem's EXPANDABLE
 * mode (vmm.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "vmm.h"
#include "zt_mem.h"

typedef CUresult (*fn_device_get)(CUdevice *, int);
typedef CUresult (*fn_device_get_attribute)(int *, CUdevice_attribute, CUdevice);
typedef CUresult (*fn_get_granularity)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
typedef CUresult (*fn_address_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*fn_address_free)(CUdeviceptr, size_t);
typedef CUresult (*fn_create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                              unsigned long long);
typedef CUresult (*fn_release)(CUmemGenericAllocationHandle);
typedef CUresult (*fn_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
typedef CUresult (*fn_unmap)(CUdeviceptr, size_t);
typedef CUresult (*fn_set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);

struct zt_cuda_vmm {
    int device;
    CUmemAllocationProp prop; /* pinned device memory on `device` */
    CUmemAccessDesc access;   /* read-write from `device` */
    fn_address_reserve address_reserve;
    fn_address_free address_free;
    fn_create create;
    fn_release release;
    fn_map map;
    fn_unmap unmap;
    fn_set_access set_access;
};

/* The driver's `name` at the 12.0 ABI into *fn; 0 when found. The lookup
 * by version came with CUDA 12.5; older toolkits build without VMM. */
static int entry(const char *name, void **fn) {
#if CUDART_VERSION >= 12050
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    cudaError_t rc = cudaGetDriverEntryPointByVersion(name, fn, 12000, cudaEnableDefault, &q);
    if (rc != cudaSuccess) (void)cudaGetLastError();
    return rc == cudaSuccess && q == cudaDriverEntryPointSuccess && *fn ? 0 : -1;
#else
    (void)name;
    *fn = NULL;
    return -1;
#endif
}

#define ENTRY(name, field)                                                                             \
    do {                                                                                               \
        void *fn_ = NULL;                                                                              \
        if (entry(name, &fn_) != 0) {                                                                  \
            snprintf(why, cap, "the CUDA driver has no %s", name);                                     \
            goto fail;                                                                                 \
        }                                                                                              \
        field = fn_;                                                                                   \
    } while (0)

/* 0 when the device supports VMM and its granularity divides ZT_MEM_GRANULE. */
static int check_device(zt_cuda_vmm *v, char *why, size_t cap) {
    fn_device_get device_get = NULL;
    fn_device_get_attribute get_attribute = NULL;
    fn_get_granularity get_granularity = NULL;
    void *fn = NULL;
    if (entry("cuDeviceGet", &fn) != 0)
        return snprintf(why, cap, "no driver entry points (a CUDA driver or toolkit before 12.5)"), -1;
    device_get = (fn_device_get)fn;
    if (entry("cuDeviceGetAttribute", &fn) != 0) return snprintf(why, cap, "the CUDA driver has no cuDeviceGetAttribute"), -1;
    get_attribute = (fn_device_get_attribute)fn;
    if (entry("cuMemGetAllocationGranularity", &fn) != 0)
        return snprintf(why, cap, "the CUDA driver has no cuMemGetAllocationGranularity"), -1;
    get_granularity = (fn_get_granularity)fn;
    int supported = 0;
    CUdevice dev;
    if (device_get(&dev, v->device) != CUDA_SUCCESS ||
        get_attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) != CUDA_SUCCESS ||
        !supported)
        return snprintf(why, cap, "CUDA device %d does not support virtual memory management", v->device), -1;
    size_t granularity = 0;
    if (get_granularity(&granularity, &v->prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || !granularity ||
        ZT_MEM_GRANULE % granularity)
        return snprintf(why, cap, "CUDA device %d maps memory in granules of %zu bytes, which do not divide %zu",
                        v->device, granularity, ZT_MEM_GRANULE), -1;
    return 0;
}

zt_cuda_vmm *zt_cuda_vmm_create(int device, char *why, size_t cap) {
    zt_cuda_vmm *v = calloc(1, sizeof *v);
    if (!v) return snprintf(why, cap, "out of host memory"), NULL;
    v->device = device;
    v->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    v->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    v->prop.location.id = device;
    v->access.location = v->prop.location;
    v->access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (check_device(v, why, cap) != 0) goto fail;
    ENTRY("cuMemAddressReserve", v->address_reserve);
    ENTRY("cuMemAddressFree", v->address_free);
    ENTRY("cuMemCreate", v->create);
    ENTRY("cuMemRelease", v->release);
    ENTRY("cuMemMap", v->map);
    ENTRY("cuMemUnmap", v->unmap);
    ENTRY("cuMemSetAccess", v->set_access);
    return v;
fail:
    free(v);
    return NULL;
}

void zt_cuda_vmm_destroy(zt_cuda_vmm *v) { free(v); }

void *zt_cuda_vmm_reserve(zt_cuda_vmm *v, size_t bytes) {
    CUdeviceptr p = 0;
    if (cudaSetDevice(v->device) != cudaSuccess) return (void)cudaGetLastError(), NULL;
    if (v->address_reserve(&p, bytes, ZT_MEM_GRANULE, 0, 0) != CUDA_SUCCESS) return NULL;
    return (void *)(uintptr_t)p;
}

/* One granule at p mapped to a handle of its own. The handle is released at
 * once: its memory lives until the granule is unmapped. */
static int map_granule(zt_cuda_vmm *v, CUdeviceptr p) {
    CUmemGenericAllocationHandle h;
    if (v->create(&h, ZT_MEM_GRANULE, &v->prop, 0) != CUDA_SUCCESS) return -1;
    int ok = v->map(p, ZT_MEM_GRANULE, 0, h, 0) == CUDA_SUCCESS;
    (void)v->release(h);
    if (!ok) return -1;
    if (v->set_access(p, ZT_MEM_GRANULE, &v->access, 1) != CUDA_SUCCESS) {
        (void)v->unmap(p, ZT_MEM_GRANULE);
        return -1;
    }
    return 0;
}

int zt_cuda_vmm_commit(zt_cuda_vmm *v, void *ptr, size_t bytes) {
    CUdeviceptr base = (CUdeviceptr)(uintptr_t)ptr;
    if (cudaSetDevice(v->device) != cudaSuccess) return (void)cudaGetLastError(), -1;
    for (size_t at = 0; at < bytes; at += ZT_MEM_GRANULE)
        if (map_granule(v, base + at) != 0) {
            for (size_t back = 0; back < at; back += ZT_MEM_GRANULE) (void)v->unmap(base + back, ZT_MEM_GRANULE);
            return -1;
        }
    return 0;
}

int zt_cuda_vmm_decommit(zt_cuda_vmm *v, void *ptr, size_t bytes) {
    /* Not knowing the device idle, the memory stays mapped: unmapping it
     * under a kernel would fault, keeping it only costs the bytes. The
     * error stays the runtime's last one, for the next launch check. */
    if (cudaSetDevice(v->device) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) return -1;
    CUdeviceptr base = (CUdeviceptr)(uintptr_t)ptr;
    int failed = 0;
    for (size_t at = 0; at < bytes; at += ZT_MEM_GRANULE) failed |= v->unmap(base + at, ZT_MEM_GRANULE) != CUDA_SUCCESS;
    return failed ? -1 : 0;
}

void zt_cuda_vmm_unreserve(zt_cuda_vmm *v, void *ptr, size_t bytes) {
    (void)v->address_free((CUdeviceptr)(uintptr_t)ptr, bytes);
}
