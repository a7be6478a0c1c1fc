/* The entry of libzt_cuda.so (runtime/zt_cuda_module.h): the only symbol
 * the module exports (cmake/zt_cuda_module.map). */
#include "comm_cuda.h"
#include "zt_backend.h"
#include "zt_cuda_module.h"

const zt_cuda_module *zt_cuda_module_entry(void);

#ifndef ZT_HAVE_NCCL
static zt_status zt_comm_nccl_create(zt_comm *c, zt_error *err) {
    (void)c;
    return ZT_FAIL(err, ZT_ERR_UNSUPPORTED, "`device` cuda: this build found no NCCL (set NCCL_ROOT and rebuild)");
}
#endif

const zt_cuda_module *zt_cuda_module_entry(void) {
    static const zt_cuda_module table = {
        .abi = ZT_CUDA_MODULE_ABI,
        .table_size = sizeof(zt_cuda_module),
#ifdef ZT_CUDA_EMULATED
        .flavour = "emulated",
#else
        .flavour = "on",
#endif
        .backend_create = zt_backend_cuda_create,
        .device_count = zt_backend_cuda_device_count,
        .comm_create_nccl = zt_comm_nccl_create,
        .comm_create_staged = zt_comm_staged_create,
    };
    return &table;
}
