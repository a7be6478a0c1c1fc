/* The whole-bill sampler's evidence (proc_evidence.c): address ranges, each
 * given to a part with a strength; where two overlap, the stronger names
 * the page. Internal to runtime/proc_*.c. */
#ifndef ZT_PROC_EVIDENCE_H
#define ZT_PROC_EVIDENCE_H

#include "proc_mem_internal.h"

enum {
    ZT_EVIDENCE_WATCH = 1,     /* became resident around a library's initialisation */
    ZT_EVIDENCE_MALLOC = 2,    /* a block malloc mapped on its own (glibc's mmapped chunk) */
    ZT_EVIDENCE_OBJECT = 3,    /* a shared object's zero-filled data */
    ZT_EVIDENCE_STACK = 4,     /* the mapping under a thread's stack pointer */
    ZT_EVIDENCE_ALLOCATOR = 5  /* a tracked allocator's block */
};

typedef struct {
    uintptr_t lo, hi;
    zt_proc_part part;
    int strength;
} zt_evidence;

typedef struct {
    zt_evidence *e; /* [n] */
    size_t n, cap;
} zt_evidence_list;

int zt_evidence_push(zt_evidence_list *l, uintptr_t lo, uintptr_t hi, zt_proc_part part, int strength);
void zt_evidence_free(zt_evidence_list *l);
/* Each returns 0, or -1 when memory ran out. */
int zt_evidence_allocator(zt_evidence_list *l, const zt_mem *m, zt_proc_part live, zt_proc_part cached);
int zt_evidence_objects(zt_evidence_list *l, size_t page);
int zt_evidence_stacks(zt_evidence_list *l, zt_proc_mem *pm, const zt_vma_list *vmas);
int zt_evidence_watched(zt_evidence_list *l, const zt_proc_mem *pm);
int zt_evidence_malloc_chunks(zt_evidence_list *l, const zt_vma_list *vmas, size_t page);

#endif
