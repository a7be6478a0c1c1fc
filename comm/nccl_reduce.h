/* The ordered sum that completes NCCL's deterministic reduce-scatter. */
#ifndef ZT_NCCL_REDUCE_H
#define ZT_NCCL_REDUCE_H

#include <cuda_runtime.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out[count] = sum over r = 0..world-1 (in that order) of staging[r * count + i],
 * enqueued on stream. */
cudaError_t zt_nccl_ordered_sum(float *out, const float *staging, size_t count, int world, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
