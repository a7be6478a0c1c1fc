/* Shared by the whole-bill sampler's files (runtime/proc_*.c), not a public
 * interface: one mapping of /proc/self/smaps and what kind of memory it is. */
#ifndef ZT_PROC_MEM_INTERNAL_H
#define ZT_PROC_MEM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "zt_proc_mem.h"

typedef enum {
    ZT_VMA_ANON = 0, /* anonymous, nothing known of it yet */
    ZT_VMA_HEAP,     /* [heap], or a malloc arena's heap */
    ZT_VMA_STACK,    /* [stack] (the main thread's) */
    ZT_VMA_FILE      /* a file (or a kernel-provided object): `part` says whose */
} zt_vma_kind;

typedef struct {
    uintptr_t lo, hi;
    size_t rss;        /* bytes */
    size_t pss;        /* bytes: Rss with each shared page divided among its sharers */
    zt_vma_kind kind;
    zt_proc_part part; /* ZT_VMA_FILE's part */
    int writable;      /* rw: anonymous memory that can hold data */
} zt_vma;

typedef struct {
    zt_vma *v; /* [n], in address order */
    size_t n, cap;
} zt_vma_list;

/* Reads /proc/self/smaps into *out (each mapping's range, Rss and kind) and
 * marks malloc's arenas. */
int zt_vma_read(zt_vma_list *out);
void zt_vma_free(zt_vma_list *l);
/* The mapping holding addr, or NULL. */
const zt_vma *zt_vma_find(const zt_vma_list *l, uintptr_t addr);
/* Which part a mapped file or shared object belongs to, by its path. */
zt_proc_part zt_proc_part_of_path(const char *path);

#endif
