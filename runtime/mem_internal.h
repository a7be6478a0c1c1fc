/* Shared by the allocator's source files (not a public interface). */
#ifndef ZT_MEM_INTERNAL_H
#define ZT_MEM_INTERNAL_H

#include "zt_mem.h"

void zt_mem_list_push(zt_block **head, zt_block *b);
void zt_mem_list_remove(zt_block **head, zt_block *b);
void zt_mem_bump(zt_counter *c, size_t delta);

/* CACHING (mem_caching.c): a free block of at least `bytes` (rounded),
 * split off a free block or a new segment, off the free list (NULL when
 * the limit or the system refuses, after releasing free segments once). */
zt_block *zt_mem_caching_take(zt_mem *m, size_t bytes);
/* Back to the free list, merged with free neighbours in its segment. */
void zt_mem_caching_put(zt_mem *m, zt_block *b);
/* Returns every wholly free segment to the system. */
void zt_mem_caching_release(zt_mem *m);
/* Returns every segment, live blocks included (teardown). */
void zt_mem_caching_destroy(zt_mem *m);

/* Records one event in m->trace (a no-op without one); label may be NULL. */
void zt_mem_trace_note(zt_mem *m, zt_mem_action a, const void *addr, size_t size, size_t requested,
                       zt_category cat, const char *label);
/* Frees m->trace. */
void zt_mem_trace_free(zt_mem *m);

#endif
