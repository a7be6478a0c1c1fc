/* The engine's allocator front (shard/unit_mem.c): labelled, zeroed 1-d
 * tensors on the device or in the host pool, and each unit's persistent
 * buffers (params, grads, master, optimizer state) placed by stage and
 * offload tier. */
#ifndef ZT_UNIT_MEM_H
#define ZT_UNIT_MEM_H

#include "zt_engine.h"

/* Allocates a zeroed 1-d tensor labelled "<unit> <what>" (unit -1:
 * "engine <what>"), on the device or (zt_engine_alloc_host) in the host
 * pool. */
zt_status zt_engine_alloc(const zt_engine *e, zt_tensor *t, zt_dtype dtype, size_t numel, zt_category cat,
                          const char *what, int unit);
zt_status zt_engine_alloc_host(const zt_engine *e, zt_tensor *t, zt_dtype dtype, size_t numel, zt_category cat,
                               const char *what, int unit);
/* A device buffer of `bytes` raw bytes (wire codes), as fp32 words. */
zt_status zt_engine_alloc_bytes(const zt_engine *e, zt_tensor *t, size_t bytes, zt_category cat, const char *what,
                                int unit);
/* Unit u's persistent buffers, as the stage and offload place them, zeroed. */
zt_status zt_unit_mem_alloc(zt_engine *e, int u);
/* Frees every buffer unit u holds (teardown; collectives already waited). */
void zt_unit_mem_free(zt_engine *e, int u);

#endif
