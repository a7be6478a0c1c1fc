/* The whole bill of one rank's process: every resident byte the operating
 * system counts for it (the sum of Rss over /proc/self/smaps), split into
 * named parts, each named only from evidence:
 *   - a known address range: the tracked allocators' blocks (their resident
 *     pages, read with mincore), the [heap], thread stacks (the mapping that
 *     holds each thread's stack pointer);
 *   - a library's own mappings (its file's text and data);
 *   - the anonymous ranges that became resident around a library's
 *     initialisation (MPI_Init, BLAS's first call, a communicator's init),
 *     recorded with zt_proc_watch_begin / zt_proc_watch_end.
 * What nothing accounts for is unexplained, never "other". The parts and
 * unexplained_bytes add up to os_bytes exactly. docs/memory.md ("The whole
 * bill") says how each part is measured. Linux only. */
#ifndef ZT_PROC_MEM_H
#define ZT_PROC_MEM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "zt_error.h"
#include "zt_mem.h"

typedef enum {
    ZT_PART_ALLOCATOR_ALLOCATED = 0, /* the device space's live blocks (a CPU run's device is host memory) */
    ZT_PART_ALLOCATOR_CACHED,        /* the device space's free (cached) blocks */
    ZT_PART_HOST_POOL_ALLOCATED,     /* the host offload pool's live blocks */
    ZT_PART_HOST_POOL_CACHED,        /* the host offload pool's free blocks */
    ZT_PART_LIB_CUDA,                /* cudart, cuBLAS(Lt), NCCL, the driver: files and their init's pages */
    ZT_PART_LIB_MPI,                 /* Open MPI and its components: files and MPI_Init's pages */
    ZT_PART_LIB_BLAS,                /* OpenBLAS: its file and its first call's buffers */
    ZT_PART_LIB_OTHER,               /* the executable and every other shared library's files */
    ZT_PART_MPI_SHM,                 /* MPI's shared-memory segments (/dev/shm and its session files) */
    ZT_PART_HEAP,                    /* malloc's heap and arenas, less the allocators' pages in them */
    ZT_PART_THREAD_STACKS,           /* the main stack and each thread's */
    ZT_PART_FILES,                   /* other files mapped (data, checkpoints) */
    ZT_NUM_PARTS
} zt_proc_part;

const char *zt_proc_part_name(zt_proc_part p);

typedef struct {
    size_t os_bytes;               /* sum of Rss over /proc/self/smaps */
    size_t pss_bytes;              /* sum of Pss: shared pages divided among the processes sharing them, so
                                    * a node's ranks' sums add up to what they hold together */
    size_t parts[ZT_NUM_PARTS];    /* only those with their bit in `measured` */
    unsigned measured;             /* bit p: parts[p] was measured; the others are not_measured */
    long long unexplained_bytes;   /* os_bytes - the measured parts (may be negative) */
    size_t allocator_reserved_not_resident; /* reserved bytes of both spaces with no resident page */
    size_t vm_rss, vm_hwm;         /* /proc/self/status, read in the same pass */
    int step;                      /* the step it was taken in, 1-based (0: before the first; -1: not said) */
    zt_phase phase;
} zt_proc_sample;

/* An anonymous address range [lo, hi) that evidence gives to a part. */
typedef struct {
    uintptr_t lo, hi;
    zt_proc_part part;
} zt_proc_range;

#define ZT_PROC_MAX_STACKS 256

/* The sampler's state (one per process, in zt_ctx or the caller's frame
 * before the context exists). */
typedef struct {
    zt_proc_range *ranges; /* [nranges]: what the watches found */
    int nranges, ranges_cap;
    /* Thread stacks found so far (a thread busy when sampled keeps its
     * stack from before), [nstacks]. */
    zt_proc_range stacks[ZT_PROC_MAX_STACKS];
    int nstacks;
    /* When the open watch began: the anonymous pages resident (sorted page
     * addresses, [nbefore]) and the anonymous mappings ([nbefore_maps]). */
    uintptr_t *before;
    size_t nbefore;
    zt_proc_range *before_maps;
    size_t nbefore_maps;
    int watching;
} zt_proc_mem;

void zt_proc_mem_init(zt_proc_mem *pm);
void zt_proc_mem_destroy(zt_proc_mem *pm);
/* Records which anonymous mappings exist and which of their pages are
 * resident now ... */
zt_status zt_proc_watch_begin(zt_proc_mem *pm, zt_error *err);
/* ... and gives to `part` the anonymous mappings made since (whole: a
 * library's buffer is touched later) and the pages of older ones that
 * became resident since. malloc's heaps are never given: what malloc
 * holds is the heap part's. */
zt_status zt_proc_watch_end(zt_proc_mem *pm, zt_proc_part part, zt_error *err);
/* Adds another sampler's evidence to pm's (the one kept before the
 * context existed); src is left empty. */
zt_status zt_proc_mem_adopt(zt_proc_mem *pm, zt_proc_mem *src, zt_error *err);

/* One pass over /proc/self/smaps and /proc/self/status: the bill now.
 * device and host may be NULL (their parts are then not measured). */
/* A few lines for a person: the total, the allocators' parts and the
 * reserved bytes not resident, every other measured part, unexplained. */
void zt_proc_sample_print(FILE *f, const zt_proc_sample *s);

zt_status zt_proc_sample_take(zt_proc_mem *pm, const zt_mem *device, const zt_mem *host, zt_proc_sample *out,
                              zt_error *err);

#endif
