/* Device memory that grows in place, for zt_mem's EXPANDABLE mode on CUDA:
 * address ranges reserved with cuMemAddressReserve, and physical memory
 * created (cuMemCreate) and mapped (cuMemMap) into them one ZT_MEM_GRANULE
 * at a time, as PyTorch's expandable segments do. The driver API is reached
 * through cudaGetDriverEntryPointByVersion, so a CUDA build does not link
 * libcuda and still starts on a machine without a driver. */
#ifndef ZT_CUDA_VMM_H
#define ZT_CUDA_VMM_H

#include <stddef.h>

typedef struct zt_cuda_vmm zt_cuda_vmm;

/* VMM on CUDA device `device`; NULL where the driver or the device has none,
 * or its granularity does not divide ZT_MEM_GRANULE, with the reason in
 * why[cap]. */
zt_cuda_vmm *zt_cuda_vmm_create(int device, char *why, size_t cap);
void zt_cuda_vmm_destroy(zt_cuda_vmm *v);

/* zt_raw_allocator's reserve, commit, decommit, unreserve (zt_mem.h).
 * commit maps one handle per granule, so that decommit can unmap any
 * granule alone (a mapping is unmapped whole); decommit waits for the
 * device first, because unmapping is not ordered with the streams. */
void *zt_cuda_vmm_reserve(zt_cuda_vmm *v, size_t bytes);
int zt_cuda_vmm_commit(zt_cuda_vmm *v, void *ptr, size_t bytes);
int zt_cuda_vmm_decommit(zt_cuda_vmm *v, void *ptr, size_t bytes); /* nonzero: not unmapped */
void zt_cuda_vmm_unreserve(zt_cuda_vmm *v, void *ptr, size_t bytes);

#endif
