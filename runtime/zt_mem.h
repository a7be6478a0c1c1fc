/* The tracked allocator. Every byte the runtime places in a memory space (the
 * compute device, or the host offload pool) goes through one zt_mem, tagged with
 * a category, so per-rank memory is exact to the byte and can be compared with
 * closed-form formulas.
 *
 * It caches freed blocks (like a GPU caching allocator) because fresh pages are
 * slow to first-touch; so "allocated" (bytes the caller asked for and holds) and
 * "reserved" (bytes of blocks obtained from the system, live or cached) differ,
 * and their gap is the fragmentation a user sees. A cap (--mem-limit) applies to
 * reserved bytes: exceeding it fails the way a full GPU does, after the cache has
 * been released once (as PyTorch retries after emptying its cache). */
#ifndef ZT_MEM_H
#define ZT_MEM_H

#include <stddef.h>
#include <stdio.h>

#include "zt_error.h"

typedef enum {
    ZT_CAT_PARAMS = 0,
    ZT_CAT_GRADS,
    ZT_CAT_MASTER_PARAMS,
    ZT_CAT_OPTIMIZER,
    ZT_CAT_ACTIVATIONS,
    ZT_CAT_GATHERED_PARAMS,
    ZT_CAT_COMM_BUFFERS,
    ZT_CAT_WORKSPACE,
    ZT_CAT_CHECKPOINT_STAGING, /* an asynchronous save's copy of the rank's state (host pool) */
    ZT_CAT_OTHER,
    ZT_NUM_CATEGORIES
} zt_category;

typedef enum {
    ZT_PHASE_INIT = 0,
    ZT_PHASE_FORWARD,
    ZT_PHASE_BACKWARD,
    ZT_PHASE_OPTIMIZER,
    ZT_NUM_PHASES
} zt_phase;

const char *zt_category_name(zt_category c);
const char *zt_phase_name(zt_phase p);

/* Where blocks come from: malloc on the CPU, cudaMalloc or cudaHostAlloc later. */
typedef struct {
    void *(*alloc)(void *ctx, size_t bytes); /* NULL when the system refuses */
    void (*free)(void *ctx, void *ptr);
    void *ctx;
    /* Address space without memory, and memory mapped into it, for the
     * EXPANDABLE mode (NULL where the backend has none): reserve `bytes` of
     * addresses (NULL: refused); commit and decommit (0: done) ranges of
     * ZT_MEM_GRANULE-aligned granules in it; give the addresses back. */
    void *(*reserve)(void *ctx, size_t bytes);
    int (*commit)(void *ctx, void *ptr, size_t bytes);
    int (*decommit)(void *ctx, void *ptr, size_t bytes); /* nonzero: still mapped */
    void (*unreserve)(void *ctx, void *ptr, size_t bytes);
    const char *no_reserve_why; /* where reserve is NULL on a backend that may have it: why (or NULL) */
} zt_raw_allocator;

/* EXPANDABLE: memory is mapped into a segment's addresses in granules of
 * this size (a GPU's large page). */
#define ZT_MEM_GRANULE ((size_t)2 << 20)

/* How a space turns requests into system allocations:
 *   SIMPLE   one system block per request (rounded to 512 bytes), freed
 *            blocks cached whole and reused by requests up to twice smaller
 *   CACHING  as GPU caching allocators do: segments from the system, sized
 *            by the request (requests up to 1 MiB from 2 MiB segments of a
 *            small pool; larger ones from 20 MiB segments of a large pool,
 *            or, from 10 MiB, a segment of their own rounded to 2 MiB),
 *            carved best-fit into blocks that are split and, when freed,
 *            coalesced with free neighbours; a refusal releases every
 *            wholly free segment and retries once. Free memory can then be
 *            plentiful and still serve no request: fragmentation.
 *   EXPANDABLE  as CACHING, but each pool is one segment of reserved
 *            addresses that grows in place, with memory mapped in granules
 *            under the blocks in use (PyTorch's expandable_segments); a
 *            refusal unmaps the granules no live block touches and retries
 *            once. "reserved" counts mapped granules, so the holes between
 *            live blocks cost nothing once released: no fragmentation OOM. */
typedef enum { ZT_ALLOC_SIMPLE = 0, ZT_ALLOC_CACHING, ZT_ALLOC_EXPANDABLE } zt_alloc_mode;
const char *zt_alloc_mode_name(zt_alloc_mode m);
/* "simple", "caching" or "expandable" -> *out; 0 for another name. */
int zt_alloc_mode_parse(const char *name, zt_alloc_mode *out);

struct zt_mem_segment;

typedef struct zt_block {
    void *ptr;
    size_t block_bytes;     /* its bytes (rounded): a system block's, or its part of a segment */
    size_t requested_bytes; /* size the caller asked for; 0 while free */
    zt_category category;
    char label[40];
    zt_phase phase;               /* the phase it was allocated in (the snapshot's frames) */
    int label_id;                 /* its entry in zt_mem.labels (-1: none) */
    struct zt_block *prev, *next; /* in the live list or the free (cache) list */
    /* CACHING: its segment and its neighbours there, in address order. */
    struct zt_mem_segment *seg;
    struct zt_block *seg_prev, *seg_next;
} zt_block;

/* CACHING: one system allocation, tiled by its blocks in address order.
 * EXPANDABLE: a pool's reserved addresses, tiled up to `bytes` (it grows). */
typedef struct zt_mem_segment {
    void *base;
    size_t bytes;
    int large;                      /* its pool: 0 small, 1 large */
    unsigned long serial;           /* the order it was made in: ties between equal free blocks go to the
                                     * older segment, wherever the system placed it */
    size_t va_bytes;                /* EXPANDABLE: addresses reserved */
    unsigned char *mapped;          /* EXPANDABLE: [va_bytes / ZT_MEM_GRANULE], 1 where memory is mapped */
    zt_block *first;                /* the block at base */
    struct zt_mem_segment *prev, *next; /* in zt_mem.segments */
} zt_mem_segment;

/* What the free memory inside the reserved bytes looks like. */
typedef struct {
    size_t free_bytes;    /* reserved - allocated - rounding of live blocks */
    size_t free_blocks;   /* free (cached) blocks */
    size_t largest_free;  /* the largest free block */
    size_t segments;      /* CACHING: segments held (SIMPLE: system blocks, live or cached) */
} zt_free_stats;

typedef struct {
    size_t current;
    size_t peak;
} zt_counter;

/* Bytes held under one label ("block0 fp32 grad", "engine bucket send"),
 * now and at most: what each category is made of. */
typedef struct {
    char label[40];
    zt_category category;
    zt_counter bytes;
} zt_label_stat;

/* The recent allocator events a memory snapshot shows (mem_snapshot.c):
 * a ring of the last N, allocated only when --memory-snapshot asks. */
typedef enum {
    ZT_MEM_EV_ALLOC = 0,
    ZT_MEM_EV_FREE_REQUESTED,
    ZT_MEM_EV_FREE_COMPLETED,
    ZT_MEM_EV_SEGMENT_ALLOC,
    ZT_MEM_EV_SEGMENT_FREE,
    ZT_MEM_EV_SEGMENT_MAP,   /* EXPANDABLE: a granule mapped */
    ZT_MEM_EV_SEGMENT_UNMAP, /* EXPANDABLE: a granule unmapped */
    ZT_MEM_EV_OOM,
    ZT_MEM_NUM_EVENTS
} zt_mem_action;
struct zt_mem_trace;

typedef struct zt_mem {
    char space_name[16]; /* "device" or "host" */
    zt_raw_allocator raw;
    size_t limit_bytes; /* 0: no cap */
    size_t round_bytes; /* block size granularity */

    zt_phase phase;
    zt_counter by_category[ZT_NUM_CATEGORIES];
    zt_counter allocated; /* sum over categories */
    zt_counter reserved;  /* live + cached blocks */
    size_t phase_peak[ZT_NUM_PHASES];
    size_t alloc_count;  /* successful zt_mem_alloc calls */
    size_t refusals;     /* zt_mem_alloc calls refused (the system's or the cap's ZT_ERR_OOM) */
    size_t system_allocs; /* blocks obtained from raw.alloc */

    /* Peaks since the last zt_mem_window_reset: one training step's view. */
    size_t window_cat_peak[ZT_NUM_CATEGORIES];
    size_t window_allocated_peak;
    size_t window_reserved_peak;
    size_t window_phase_peak[ZT_NUM_PHASES];

    zt_label_stat *labels; /* [nlabels], in order of first use (a label whose
                            * table could not grow is simply not listed) */
    int nlabels, labels_cap;

    zt_block *live;   /* doubly linked, newest first */
    zt_block *cached; /* doubly linked: free blocks (SIMPLE: cached system blocks) */

    zt_alloc_mode mode;        /* set before the first allocation (zt_mem_set_mode) */
    size_t max_split_bytes;    /* CACHING: free blocks this large are not split for smaller requests (0: no cap) */
    zt_mem_segment *segments;      /* CACHING: doubly linked */
    unsigned long segments_made;   /* CACHING: serial of the next segment */

    /* Fault injection for tests: refuse the first allocation made in phase
     * inject_phase - 1 (0: off), as a full device would. */
    int inject_phase;

    /* Called after every allocation and free (the timeline hooks in here). */
    void (*observer)(void *arg, const struct zt_mem *m, zt_category changed);
    void *observer_arg;

    /* The moments the whole-bill sampler (zt_proc_mem.h) samples at:
     * on_phase_end when the phase changes, with the phase that ended;
     * on_peak once per window, just before the first free after allocated
     * has reached peak_watch_bytes (0: off), when the blocks of the peak
     * have been written. */
    void (*on_phase_end)(void *arg, const struct zt_mem *m, zt_phase ended);
    void (*on_peak)(void *arg, const struct zt_mem *m);
    void *moments_arg;
    size_t peak_watch_bytes;
    int peak_watch_state; /* 0: waiting, 1: reached, 2: sampled (this window) */

    struct zt_mem_trace *trace; /* the snapshot's event ring (NULL: not recorded) */
} zt_mem;

void zt_mem_init(zt_mem *m, const char *space_name, zt_raw_allocator raw, size_t limit_bytes);
/* Chooses the mode (and CACHING's max_split_size, 0: none); only before the
 * first allocation. */
zt_status zt_mem_set_mode(zt_mem *m, zt_alloc_mode mode, size_t max_split_bytes, zt_error *err);
/* The free memory inside the reserved bytes (a walk of the free list). */
zt_free_stats zt_mem_free_stats(const zt_mem *m);
/* CACHING: every segment tiled exactly by its blocks, in address order,
 * no two free neighbours, the free list exactly the free blocks, and the
 * counters their sums. Returns 0 when consistent, else writes why. */
int zt_mem_check(const zt_mem *m, char *why, size_t cap);
/* Frees every block, live or cached; live ones are a leak the caller made. */
void zt_mem_destroy(zt_mem *m);

/* Allocates bytes (> 0) with 64-byte alignment, tagged with category and label.
 * On refusal returns ZT_ERR_OOM with the phase, the request and the
 * per-category breakdown in err. */
zt_status zt_mem_alloc(zt_mem *m, size_t bytes, zt_category cat, const char *label,
                       zt_block **out, zt_error *err);
void zt_mem_free(zt_mem *m, zt_block *b); /* NULL is a no-op */
void zt_mem_release_cache(zt_mem *m);     /* return cached blocks to the system */

void zt_mem_set_phase(zt_mem *m, zt_phase p);
void zt_mem_window_reset(zt_mem *m);

/* Writes the per-category breakdown as "params=... grads=... ..." into buf. */
void zt_mem_format_breakdown(const zt_mem *m, char *buf, size_t cap);
/* Prints phase, categories and the `top` largest live allocations. */
void zt_mem_report(const zt_mem *m, FILE *f, int top);

/* PyTorch memory_viz snapshots (mem_snapshot.c, docs/interop_memory_viz.md).
 * Records the last `entries` (>= 1) events from now on; frees with zt_mem_destroy. */
zt_status zt_mem_trace_enable(zt_mem *m, size_t entries, zt_error *err);
/* Writes the blocks held now and the recorded events as a pickle in the
 * format of torch.cuda.memory._snapshot() to path (through path.tmp and a
 * rename, so a failed write leaves any earlier file as it was). */
zt_status zt_mem_snapshot_write(const zt_mem *m, int device, const char *path, zt_error *err);

/* The CPU raw allocator (aligned malloc). */
zt_raw_allocator zt_raw_allocator_cpu(void);

/* Page-locked host memory for the offload pool: aligned malloc + mlock, so
 * the pages stay resident as pinned memory does for a GPU's DMA. Where
 * RLIMIT_MEMLOCK refuses, the block is kept unlocked and counted. */
typedef struct {
    size_t locked_bytes;   /* currently locked */
    size_t unlocked_bytes; /* currently held without a lock */
    size_t lock_failures;
} zt_host_lock_stats;
zt_raw_allocator zt_raw_allocator_host_locked(zt_host_lock_stats *stats);

/* Parses "512MiB", "4GiB", "1.5GB", "123" into bytes. */
zt_status zt_parse_size(const char *s, size_t *out, zt_error *err);
/* Formats bytes as "12.3 MiB". */
void zt_format_bytes(size_t bytes, char *buf, size_t cap);

/* The OS view of this process: VmRSS and VmHWM from /proc/self/status, bytes. */
typedef struct {
    size_t vm_rss;
    size_t vm_hwm;
} zt_os_mem;
zt_status zt_os_mem_read(zt_os_mem *out, zt_error *err);

/* What this node lets its processes hold: MemTotal (/proc/meminfo), or the
 * process's memory cgroup's limit (v2 memory.max, v1 memory.limit_in_bytes)
 * where one is set and smaller. source: "MemTotal" or "the cgroup's memory
 * limit". */
typedef struct {
    size_t bytes;
    const char *source;
} zt_node_mem_limit;
zt_status zt_node_mem_limit_read(zt_node_mem_limit *out, zt_error *err);

#endif
