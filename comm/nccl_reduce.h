/* The ordered sum that completes NCCL's deterministic reduce-scatter. */
#ifndef ZT_NCCL_REDUCE_H
#define ZT_NCCL_REDUCE_H

#include <cuda_runtime.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out[count] (fp32) = sum over r = 0..world-1 (in that order, in fp32) of
 * staging[r * count + i], whose elements are fp32, bf16 or fp16 (dtype: a
 * zt_dtype), enqueued on stream. */
cudaError_t zt_nccl_ordered_sum(float *out, const void *staging, int dtype, size_t count, int world,
                                cudaStream_t stream);
/* The same over chunks of block-wise codes (zt_wire.h: `bits` 8 or 4,
 * `block` values per scale), each zt_wire_bytes(count) bytes. */
cudaError_t zt_nccl_ordered_sum_coded(float *out, const void *staging, size_t count, int bits, unsigned block,
                                      int world, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
