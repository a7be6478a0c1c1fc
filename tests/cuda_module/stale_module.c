/* Stand-ins for a CUDA module that is not this build's (tests/cuda_module/
 * zt_cuda_module_test.py): with ZT_STALE_ABI, a table of another ABI;
 * without, a shared object with no entry at all. */
#include "zt_cuda_module.h"

#ifdef ZT_STALE_ABI
const zt_cuda_module *zt_cuda_module_entry(void);

const zt_cuda_module *zt_cuda_module_entry(void) {
    static const zt_cuda_module table = {.abi = ZT_CUDA_MODULE_ABI + 1, .table_size = sizeof(zt_cuda_module)};
    return &table;
}
#else
int zt_not_a_module(void);

int zt_not_a_module(void) { return 0; }
#endif
