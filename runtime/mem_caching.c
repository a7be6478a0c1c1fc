/* The CACHING and EXPANDABLE modes of zt_mem (zt_mem.h): segments carved
 * best-fit into blocks, split on allocation and coalesced on free, in two
 * pools so that small requests do not split the large segments. CACHING
 * takes segments from the system in the sizes PyTorch's CUDA caching
 * allocator uses, whose fragmentation it is here to reproduce and measure;
 * EXPANDABLE keeps one segment of reserved addresses per pool, grows it in
 * place and maps memory in granules under the blocks in use. */
#include <stdlib.h>
#include <string.h>

#include "mem_internal.h"

#define MIB ((size_t)1 << 20)
#define SMALL_REQUEST MIB       /* requests up to this come from the small pool */
#define SMALL_SEGMENT (2 * MIB) /* the small pool's segments */
#define LARGE_SEGMENT (20 * MIB) /* the large pool's segments for requests under MIN_OWN_SEGMENT */
#define MIN_OWN_SEGMENT (10 * MIB) /* from here, a segment of the request's own size */
#define OWN_ROUND (2 * MIB)
#define SMALL_SPLIT 512 /* the smallest remainder a split leaves (small pool) */
#define LARGE_SPLIT MIB /* the smallest remainder a split leaves (large pool): smaller ones stay in the block */

static int is_large(size_t bytes) { return bytes > SMALL_REQUEST; }

static size_t segment_bytes(size_t bytes) {
    if (!is_large(bytes)) return SMALL_SEGMENT;
    if (bytes < MIN_OWN_SEGMENT) return LARGE_SEGMENT;
    return (bytes + OWN_ROUND - 1) / OWN_ROUND * OWN_ROUND;
}

/* May free block b serve a request of `bytes` from its pool? */
static int fits(const zt_mem *m, const zt_block *b, size_t bytes) {
    if (b->block_bytes < bytes || b->seg->large != is_large(bytes)) return 0;
    size_t cap = m->max_split_bytes;
    /* A block at or above max_split_size is kept for requests as large, and
     * not spent on one far smaller (PyTorch's rule, with its 20 MiB slack). */
    if (cap && bytes < cap && b->block_bytes >= cap) return 0;
    if (cap && bytes >= cap && b->block_bytes >= bytes + LARGE_SEGMENT) return 0;
    return 1;
}

/* Between free blocks of one size: the older segment's, then the lower
 * address in it. Never the system's addresses across segments, so the
 * same requests give the same blocks on every machine, and in zt-plan's
 * replay over addresses of its own. */
static int before(const zt_block *a, const zt_block *b) {
    if (a->seg != b->seg) return a->seg->serial < b->seg->serial;
    return a->ptr < b->ptr;
}

static zt_block *best_free(zt_mem *m, size_t bytes) {
    zt_block *best = NULL;
    for (zt_block *b = m->cached; b; b = b->next)
        if (fits(m, b, bytes) && (!best || b->block_bytes < best->block_bytes ||
                                  (b->block_bytes == best->block_bytes && before(b, best))))
            best = b;
    return best;
}

/* EXPANDABLE: addresses reserved per pool (no memory until mapped). */
#define POOL_ADDRESSES ((size_t)256 << 30)

static int expandable(const zt_mem *m) { return m->mode == ZT_ALLOC_EXPANDABLE; }

static void segment_unlink(zt_mem *m, zt_mem_segment *s) {
    if (s->prev) s->prev->next = s->next;
    else m->segments = s->next;
    if (s->next) s->next->prev = s->prev;
}

/* A new segment for a request of `bytes`, as one free block (on the free
 * list); NULL when the limit or the system refuses. */
static zt_block *new_segment(zt_mem *m, size_t bytes) {
    size_t sb = segment_bytes(bytes);
    /* Compared as "request > room left" so a huge request cannot wrap around. */
    if (m->limit_bytes && sb > m->limit_bytes - m->reserved.current) return NULL;
    void *p = m->raw.alloc(m->raw.ctx, sb);
    if (!p) return NULL;
    zt_mem_segment *s = calloc(1, sizeof *s);
    zt_block *b = calloc(1, sizeof *b);
    if (!s || !b) {
        free(s);
        free(b);
        m->raw.free(m->raw.ctx, p);
        return NULL;
    }
    s->base = p;
    s->bytes = sb;
    s->large = is_large(bytes);
    s->serial = m->segments_made++;
    s->first = b;
    s->next = m->segments;
    if (m->segments) m->segments->prev = s;
    m->segments = s;
    b->ptr = p;
    b->block_bytes = sb;
    b->seg = s;
    b->label_id = -1;
    zt_mem_list_push(&m->cached, b);
    zt_mem_trace_note(m, ZT_MEM_EV_SEGMENT_ALLOC, p, sb, 0, ZT_CAT_OTHER, NULL);
    zt_mem_bump(&m->reserved, sb);
    m->system_allocs++;
    return b;
}

/* Splits free block b (off the free list) to `bytes` when the remainder is
 * worth a block of its own; the remainder goes to the free list. */
static void split(zt_mem *m, zt_block *b, size_t bytes) {
    size_t rest = b->block_bytes - bytes;
    if (rest < (b->seg->large ? LARGE_SPLIT : SMALL_SPLIT)) return;
    zt_block *r = calloc(1, sizeof *r);
    if (!r) return; /* the block stays whole: correct, only less economical */
    r->ptr = (char *)b->ptr + bytes;
    r->block_bytes = rest;
    r->seg = b->seg;
    r->label_id = -1;
    r->seg_prev = b;
    r->seg_next = b->seg_next;
    if (b->seg_next) b->seg_next->seg_prev = r;
    b->seg_next = r;
    b->block_bytes = bytes;
    zt_mem_list_push(&m->cached, r);
}

/* EXPANDABLE: the pool's segment, made (addresses reserved) when first needed. */
static zt_mem_segment *pool_segment(zt_mem *m, int large) {
    for (zt_mem_segment *s = m->segments; s; s = s->next)
        if (s->large == large) return s;
    void *base = m->raw.reserve(m->raw.ctx, POOL_ADDRESSES);
    zt_mem_segment *s = base ? calloc(1, sizeof *s) : NULL;
    unsigned char *mapped = s ? calloc(POOL_ADDRESSES / ZT_MEM_GRANULE, 1) : NULL;
    if (!mapped) {
        free(s);
        if (base) m->raw.unreserve(m->raw.ctx, base, POOL_ADDRESSES);
        return NULL;
    }
    s->base = base;
    s->serial = m->segments_made++;
    s->va_bytes = POOL_ADDRESSES;
    s->large = large;
    s->mapped = mapped;
    s->next = m->segments;
    if (m->segments) m->segments->prev = s;
    m->segments = s;
    return s;
}

/* EXPANDABLE: a free block of at least `bytes` at the end of the pool's
 * segment (its last block extended when free, else a new one), on the free
 * list; NULL when the addresses run out. */
static zt_block *grow(zt_mem *m, size_t bytes) {
    zt_mem_segment *s = pool_segment(m, is_large(bytes));
    if (!s) return NULL;
    zt_block *last = s->first;
    while (last && last->seg_next) last = last->seg_next;
    size_t add = last && !last->requested_bytes ? bytes - last->block_bytes : bytes;
    if (add > s->va_bytes - s->bytes) return NULL;
    s->bytes += add;
    if (last && !last->requested_bytes) {
        last->block_bytes += add;
        return last;
    }
    zt_block *b = calloc(1, sizeof *b);
    if (!b) {
        s->bytes -= add;
        return NULL;
    }
    b->ptr = (char *)s->base + (s->bytes - add);
    b->block_bytes = add;
    b->seg = s;
    b->label_id = -1;
    b->seg_prev = last;
    if (last) last->seg_next = b;
    else s->first = b;
    zt_mem_list_push(&m->cached, b);
    return b;
}

/* Granules [g0, g1) of segment s that a block [ptr, ptr + bytes) overlaps. */
static void granules(const zt_mem_segment *s, const void *ptr, size_t bytes, size_t *g0, size_t *g1) {
    size_t at = (size_t)((const char *)ptr - (const char *)s->base);
    *g0 = at / ZT_MEM_GRANULE;
    *g1 = (at + bytes + ZT_MEM_GRANULE - 1) / ZT_MEM_GRANULE;
}

/* EXPANDABLE: memory mapped under block b; -1 when the limit or the system refuses. */
static int map_block(zt_mem *m, zt_block *b) {
    zt_mem_segment *s = b->seg;
    size_t g0, g1, need = 0;
    granules(s, b->ptr, b->block_bytes, &g0, &g1);
    for (size_t g = g0; g < g1; g++) need += !s->mapped[g];
    if (m->limit_bytes && need * ZT_MEM_GRANULE > m->limit_bytes - m->reserved.current) return -1;
    for (size_t g = g0; g < g1; g++) {
        if (s->mapped[g]) continue;
        if (m->raw.commit(m->raw.ctx, (char *)s->base + g * ZT_MEM_GRANULE, ZT_MEM_GRANULE) != 0) return -1;
        s->mapped[g] = 1;
        zt_mem_trace_note(m, ZT_MEM_EV_SEGMENT_MAP, (char *)s->base + g * ZT_MEM_GRANULE, ZT_MEM_GRANULE, 0,
                          ZT_CAT_OTHER, NULL);
        zt_mem_bump(&m->reserved, ZT_MEM_GRANULE);
        m->system_allocs++;
    }
    return 0;
}

static zt_block *expandable_take(zt_mem *m, size_t bytes) {
    zt_block *b = best_free(m, bytes);
    if (!b) b = grow(m, bytes);
    if (!b) return NULL;
    zt_mem_list_remove(&m->cached, b);
    split(m, b, bytes);
    if (map_block(m, b) == 0) return b;
    zt_mem_caching_release(m); /* as PyTorch: unmap what no live block uses, then try once more */
    if (map_block(m, b) == 0) return b;
    zt_mem_caching_put(m, b);
    return NULL;
}

zt_block *zt_mem_caching_take(zt_mem *m, size_t bytes) {
    if (expandable(m)) return expandable_take(m, bytes);
    zt_block *b = best_free(m, bytes);
    if (!b) b = new_segment(m, bytes);
    if (!b) { /* as PyTorch: give the free segments back, then try once more */
        zt_mem_caching_release(m);
        b = new_segment(m, bytes);
    }
    if (!b) return NULL;
    zt_mem_list_remove(&m->cached, b);
    split(m, b, bytes);
    return b;
}

/* Merges n (the block after b in their segment) into b; n leaves the
 * segment (the caller has taken it off any list). */
static void absorb(zt_block *b, zt_block *n) {
    b->block_bytes += n->block_bytes;
    b->seg_next = n->seg_next;
    if (n->seg_next) n->seg_next->seg_prev = b;
    free(n);
}

void zt_mem_caching_put(zt_mem *m, zt_block *b) {
    b->label[0] = '\0';
    b->label_id = -1;
    zt_block *n = b->seg_next, *p = b->seg_prev;
    if (n && n->requested_bytes == 0) { /* a free neighbour after: it leaves the free list */
        zt_mem_list_remove(&m->cached, n);
        absorb(b, n);
    }
    if (p && p->requested_bytes == 0) { /* a free neighbour before: b joins it, which stays listed */
        absorb(p, b);
        return;
    }
    zt_mem_list_push(&m->cached, b);
}

static void drop_segment(zt_mem *m, zt_mem_segment *s) {
    for (zt_block *b = s->first, *n; b; b = n) {
        n = b->seg_next;
        free(b);
    }
    segment_unlink(m, s);
    if (s->mapped) { /* EXPANDABLE: its mapped granules, then its addresses */
        for (size_t g = 0; g < s->va_bytes / ZT_MEM_GRANULE; g++)
            if (s->mapped[g]) { /* the segment goes whatever a failed unmap left: its addresses are given up */
                (void)m->raw.decommit(m->raw.ctx, (char *)s->base + g * ZT_MEM_GRANULE, ZT_MEM_GRANULE);
                zt_mem_trace_note(m, ZT_MEM_EV_SEGMENT_UNMAP, (char *)s->base + g * ZT_MEM_GRANULE, ZT_MEM_GRANULE, 0,
                                  ZT_CAT_OTHER, NULL);
                m->reserved.current -= ZT_MEM_GRANULE;
            }
        m->raw.unreserve(m->raw.ctx, s->base, s->va_bytes);
        free(s->mapped);
    } else {
        zt_mem_trace_note(m, ZT_MEM_EV_SEGMENT_FREE, s->base, s->bytes, 0, ZT_CAT_OTHER, NULL);
        m->raw.free(m->raw.ctx, s->base);
        m->reserved.current -= s->bytes;
    }
    free(s);
}

/* EXPANDABLE: unmaps the granules wholly inside free block b. */
static void unmap_free(zt_mem *m, zt_block *b) {
    zt_mem_segment *s = b->seg;
    size_t at = (size_t)((char *)b->ptr - (char *)s->base);
    size_t end = at + b->block_bytes;
    if (!b->seg_next) end = (end + ZT_MEM_GRANULE - 1) / ZT_MEM_GRANULE * ZT_MEM_GRANULE; /* nothing lives after it */
    size_t g0 = (at + ZT_MEM_GRANULE - 1) / ZT_MEM_GRANULE, g1 = end / ZT_MEM_GRANULE;
    for (size_t g = g0; g < g1; g++)
        if (s->mapped[g] && m->raw.decommit(m->raw.ctx, (char *)s->base + g * ZT_MEM_GRANULE, ZT_MEM_GRANULE) == 0) {
            s->mapped[g] = 0; /* a granule that failed to unmap stays mapped and counted */
            zt_mem_trace_note(m, ZT_MEM_EV_SEGMENT_UNMAP, (char *)s->base + g * ZT_MEM_GRANULE, ZT_MEM_GRANULE, 0,
                              ZT_CAT_OTHER, NULL);
            m->reserved.current -= ZT_MEM_GRANULE;
        }
}

void zt_mem_caching_release(zt_mem *m) {
    if (expandable(m)) {
        for (zt_block *b = m->cached; b; b = b->next) unmap_free(m, b);
        return;
    }
    for (zt_mem_segment *s = m->segments, *n; s; s = n) {
        n = s->next;
        zt_block *b = s->first;
        if (b->requested_bytes || b->block_bytes != s->bytes) continue; /* something lives in it */
        zt_mem_list_remove(&m->cached, b);
        drop_segment(m, s);
    }
}

void zt_mem_caching_destroy(zt_mem *m) {
    m->live = m->cached = NULL; /* every block belongs to a segment */
    while (m->segments) drop_segment(m, m->segments);
}
