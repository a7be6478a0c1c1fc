/* The device's used bytes as the driver counts them (cudaMemGetInfo: total
 * - free, every process's), for measuring what a setup step allocates
 * outside the tracked allocator: the backend's cuBLAS and buffers, an
 * NCCL communicator's. Shared by the CUDA module's files. */
#ifndef ZT_CUDA_DEVICE_USED_H
#define ZT_CUDA_DEVICE_USED_H

#include <cuda_runtime.h>
#include <stddef.h>

/* *used now; 0 when the driver will not say (its error is cleared). */
static inline int zt_cuda_device_used(size_t *used) {
    size_t free_b = 0, total = 0;
    *used = 0;
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess || total < free_b) {
        (void)cudaGetLastError();
        return 0;
    }
    *used = total - free_b;
    return 1;
}

#endif
