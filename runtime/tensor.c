#include "zt_tensor.h"

#include <string.h>

zt_status zt_tensor_alloc(zt_tensor *t, zt_mem *mem, zt_device device, zt_dtype dtype, int ndim,
                          const int64_t *shape, zt_category cat, const char *label, zt_error *err) {
    memset(t, 0, sizeof *t);
    if (ndim < 1 || ndim > ZT_MAX_DIMS)
        return ZT_FAIL(err, ZT_ERR_INVALID, "tensor '%s': %d dims (1..%d allowed)", label, ndim, ZT_MAX_DIMS);
    size_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 0)
            return ZT_FAIL(err, ZT_ERR_INVALID, "tensor '%s': dim %d is %lld", label, i, (long long)shape[i]);
        numel *= (size_t)shape[i];
        t->shape[i] = shape[i];
    }
    t->ndim = ndim;
    t->numel = numel;
    t->dtype = dtype;
    t->device = device;
    ZT_TRY(zt_mem_alloc(mem, numel * zt_dtype_size(dtype), cat, label, &t->block, err));
    t->data = t->block->ptr;
    return ZT_OK;
}

void zt_tensor_free(zt_tensor *t, zt_mem *mem) {
    if (t->block) zt_mem_free(mem, t->block);
    memset(t, 0, sizeof *t);
}

size_t zt_tensor_bytes(const zt_tensor *t) { return t->numel * zt_dtype_size(t->dtype); }
