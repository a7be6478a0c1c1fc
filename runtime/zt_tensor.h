/* A tensor: a view of a tracked block with a dtype and a shape (row-major,
 * contiguous). The block belongs to the memory space it came from. */
#ifndef ZT_TENSOR_H
#define ZT_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "zt_backend.h"
#include "zt_dtype.h"
#include "zt_mem.h"

#define ZT_MAX_DIMS 4

typedef struct {
    zt_block *block; /* NULL for a view that does not own memory */
    void *data;
    zt_dtype dtype;
    zt_device device;
    int ndim;
    int64_t shape[ZT_MAX_DIMS];
    size_t numel;
} zt_tensor;

/* Allocates a tensor of the given shape from mem (ndim 1..4). */
zt_status zt_tensor_alloc(zt_tensor *t, zt_mem *mem, zt_device device, zt_dtype dtype, int ndim,
                          const int64_t *shape, zt_category cat, const char *label, zt_error *err);
void zt_tensor_free(zt_tensor *t, zt_mem *mem);
size_t zt_tensor_bytes(const zt_tensor *t);
static inline float *zt_f32(const zt_tensor *t) { return (float *)t->data; }

#endif
