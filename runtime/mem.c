#include "zt_mem.h"
#include "mem_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static const char *const category_names[ZT_NUM_CATEGORIES] = {
    "params", "grads", "master_params", "optimizer", "activations",
    "gathered_params", "comm_buffers", "workspace", "checkpoint_staging", "other",
};
static const char *const phase_names[ZT_NUM_PHASES] = {"init", "forward", "backward", "optimizer"};

const char *zt_category_name(zt_category c) {
    return (c >= 0 && c < ZT_NUM_CATEGORIES) ? category_names[c] : "?";
}
const char *zt_phase_name(zt_phase p) { return (p >= 0 && p < ZT_NUM_PHASES) ? phase_names[p] : "?"; }

static void *cpu_raw_alloc(void *ctx, size_t bytes) {
    (void)ctx;
    return aligned_alloc(64, bytes); /* bytes is a multiple of 64 (round_bytes) */
}
static void cpu_raw_free(void *ctx, void *ptr) {
    (void)ctx;
    free(ptr);
}
/* Addresses without memory: mapped on commit, their pages dropped on decommit. */
static void *cpu_reserve(void *ctx, size_t bytes) {
    (void)ctx;
    void *p = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}
static int cpu_commit(void *ctx, void *ptr, size_t bytes) {
    (void)ctx;
    return mprotect(ptr, bytes, PROT_READ | PROT_WRITE);
}
static int cpu_decommit(void *ctx, void *ptr, size_t bytes) {
    (void)ctx;
    (void)madvise(ptr, bytes, MADV_DONTNEED); /* the pages go back to the system */
    return mprotect(ptr, bytes, PROT_NONE);
}
static void cpu_unreserve(void *ctx, void *ptr, size_t bytes) {
    (void)ctx;
    (void)munmap(ptr, bytes);
}

zt_raw_allocator zt_raw_allocator_cpu(void) {
    zt_raw_allocator r = {.alloc = cpu_raw_alloc, .free = cpu_raw_free, .reserve = cpu_reserve, .commit = cpu_commit,
                          .decommit = cpu_decommit, .unreserve = cpu_unreserve};
    return r;
}

/* The locked allocator remembers each block's size and lock state in a small
 * header in front of it (64 bytes, so the user pointer stays aligned). */
typedef struct {
    size_t bytes;
    int locked;
} lock_header;

static void *locked_alloc(void *ctx, size_t bytes) {
    zt_host_lock_stats *st = ctx;
    char *base = aligned_alloc(64, bytes + 64);
    if (!base) return NULL;
    lock_header *h = (lock_header *)base;
    h->bytes = bytes;
    h->locked = mlock(base, bytes + 64) == 0;
    if (h->locked) st->locked_bytes += bytes;
    else {
        st->unlocked_bytes += bytes;
        st->lock_failures++;
    }
    return base + 64;
}

static void locked_free(void *ctx, void *ptr) {
    zt_host_lock_stats *st = ctx;
    char *base = (char *)ptr - 64;
    lock_header *h = (lock_header *)base;
    if (h->locked) {
        munlock(base, h->bytes + 64);
        st->locked_bytes -= h->bytes;
    } else {
        st->unlocked_bytes -= h->bytes;
    }
    free(base);
}

zt_raw_allocator zt_raw_allocator_host_locked(zt_host_lock_stats *stats) {
    zt_raw_allocator r = {.alloc = locked_alloc, .free = locked_free, .ctx = stats}; /* no address reservation */
    return r;
}

void zt_mem_init(zt_mem *m, const char *space_name, zt_raw_allocator raw, size_t limit_bytes) {
    memset(m, 0, sizeof *m);
    snprintf(m->space_name, sizeof m->space_name, "%s", space_name);
    m->raw = raw;
    m->limit_bytes = limit_bytes;
    m->round_bytes = 512;
}

const char *zt_alloc_mode_name(zt_alloc_mode mode) {
    return mode == ZT_ALLOC_CACHING ? "caching" : mode == ZT_ALLOC_EXPANDABLE ? "expandable" : "simple";
}

int zt_alloc_mode_parse(const char *name, zt_alloc_mode *out) {
    for (int i = ZT_ALLOC_SIMPLE; i <= ZT_ALLOC_EXPANDABLE; i++)
        if (strcmp(name, zt_alloc_mode_name((zt_alloc_mode)i)) == 0) return *out = (zt_alloc_mode)i, 1;
    return 0;
}

zt_status zt_mem_set_mode(zt_mem *m, zt_alloc_mode mode, size_t max_split_bytes, zt_error *err) {
    if (m->alloc_count || m->live || m->cached)
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s memory: the allocator mode is chosen before the first allocation",
                       m->space_name);
    if (mode == ZT_ALLOC_EXPANDABLE && !m->raw.reserve)
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s memory: this backend cannot reserve addresses and map memory into "
                       "them, which `allocator` expandable needs (use caching)%s%s", m->space_name,
                       m->raw.no_reserve_why ? ": " : "", m->raw.no_reserve_why ? m->raw.no_reserve_why : "");
    m->mode = mode;
    m->max_split_bytes = max_split_bytes;
    return ZT_OK;
}

void zt_mem_list_push(zt_block **head, zt_block *b) {
    b->prev = NULL;
    b->next = *head;
    if (*head) (*head)->prev = b;
    *head = b;
}
void zt_mem_list_remove(zt_block **head, zt_block *b) {
    if (b->prev) b->prev->next = b->next;
    else *head = b->next;
    if (b->next) b->next->prev = b->prev;
    b->prev = b->next = NULL;
}

void zt_mem_bump(zt_counter *c, size_t delta) {
    c->current += delta;
    if (c->current > c->peak) c->peak = c->current;
}
static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

static void destroy_block(zt_mem *m, zt_block *b) {
    zt_mem_trace_note(m, ZT_MEM_EV_SEGMENT_FREE, b->ptr, b->block_bytes, 0, ZT_CAT_OTHER, NULL);
    m->raw.free(m->raw.ctx, b->ptr);
    m->reserved.current -= b->block_bytes;
    free(b);
}

void zt_mem_release_cache(zt_mem *m) {
    if (m->mode != ZT_ALLOC_SIMPLE) {
        zt_mem_caching_release(m);
        return;
    }
    while (m->cached) {
        zt_block *b = m->cached;
        zt_mem_list_remove(&m->cached, b);
        destroy_block(m, b);
    }
}

void zt_mem_destroy(zt_mem *m) {
    free(m->labels);
    m->labels = NULL;
    m->nlabels = m->labels_cap = 0;
    zt_mem_trace_free(m); /* teardown is no part of the run's history */
    if (m->mode != ZT_ALLOC_SIMPLE) {
        zt_mem_caching_destroy(m);
        return;
    }
    zt_mem_release_cache(m);
    while (m->live) {
        zt_block *b = m->live;
        zt_mem_list_remove(&m->live, b);
        destroy_block(m, b);
    }
}

void zt_mem_format_breakdown(const zt_mem *m, char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = '\0';
    for (int c = 0; c < ZT_NUM_CATEGORIES && used < cap; c++) {
        int n = snprintf(buf + used, cap - used, "%s%s=%zu", c ? " " : "", category_names[c],
                         m->by_category[c].current);
        if (n < 0) break;
        used += (size_t)n;
    }
}

/* Best fit among cached blocks at least as large as the request and at most
 * twice it: sizes that vary from step to step (sequence-length jitter) reuse
 * the blocks of earlier steps instead of growing the cache, while a tiny
 * request never pins a huge block. */
static zt_block *take_cached(zt_mem *m, size_t block_bytes) {
    zt_block *best = NULL;
    for (zt_block *b = m->cached; b; b = b->next) {
        if (b->block_bytes < block_bytes || b->block_bytes / 2 > block_bytes) continue;
        if (!best || b->block_bytes < best->block_bytes) best = b;
        if (best->block_bytes == block_bytes) break;
    }
    if (best) zt_mem_list_remove(&m->cached, best);
    return best;
}

static zt_block *new_block(zt_mem *m, size_t block_bytes) {
    /* Compared as "request > room left" so a huge request cannot wrap around. */
    if (m->limit_bytes && block_bytes > m->limit_bytes - m->reserved.current) {
        zt_mem_release_cache(m);
        if (block_bytes > m->limit_bytes - m->reserved.current) return NULL;
    }
    void *p = m->raw.alloc(m->raw.ctx, block_bytes);
    if (!p) {
        zt_mem_release_cache(m);
        p = m->raw.alloc(m->raw.ctx, block_bytes);
        if (!p) return NULL;
    }
    zt_block *b = calloc(1, sizeof *b);
    if (!b) {
        m->raw.free(m->raw.ctx, p);
        return NULL;
    }
    b->ptr = p;
    b->block_bytes = block_bytes;
    zt_mem_trace_note(m, ZT_MEM_EV_SEGMENT_ALLOC, p, block_bytes, 0, ZT_CAT_OTHER, NULL);
    zt_mem_bump(&m->reserved, block_bytes);
    m->system_allocs++;
    return b;
}

/* The entry of (label, category) in m->labels, added if new; -1 when the
 * table cannot grow. */
static int label_entry(zt_mem *m, const char *label, zt_category cat) {
    for (int i = m->nlabels - 1; i >= 0; i--)
        if (m->labels[i].category == cat && strcmp(m->labels[i].label, label) == 0) return i;
    if (m->nlabels == m->labels_cap) {
        int cap = m->labels_cap ? 2 * m->labels_cap : 64;
        zt_label_stat *t = realloc(m->labels, (size_t)cap * sizeof *t);
        if (!t) return -1;
        m->labels = t;
        m->labels_cap = cap;
    }
    zt_label_stat *e = &m->labels[m->nlabels];
    memset(e, 0, sizeof *e);
    snprintf(e->label, sizeof e->label, "%s", label);
    e->category = cat;
    return m->nlabels++;
}

/* The OOM error: what was asked, what is held, and whether free memory
 * inside the reserved bytes would have served it had it been in one piece
 * (a fragmentation OOM). */
static zt_status refusal(const zt_mem *m, size_t bytes, size_t block_bytes, zt_category cat, const char *label,
                         int injected, zt_error *err) {
    char breakdown[512], req[32], lim[32], fb[32], lf[32];
    zt_mem_format_breakdown(m, breakdown, sizeof breakdown);
    zt_format_bytes(bytes, req, sizeof req);
    zt_format_bytes(m->limit_bytes, lim, sizeof lim);
    zt_free_stats fs = zt_mem_free_stats(m);
    zt_format_bytes(fs.free_bytes, fb, sizeof fb);
    zt_format_bytes(fs.largest_free, lf, sizeof lf);
    int fragmented = !injected && fs.free_bytes >= block_bytes && fs.largest_free < block_bytes;
    return ZT_FAIL(err, ZT_ERR_OOM,
                   "out of %s memory in phase '%s'%s: requested %zu bytes (%s) for %s '%s'; "
                   "allocated %zu, reserved %zu, limit %s; free inside reserved %s in %zu blocks, the largest %s "
                   "(%s allocator); by category: %s",
                   m->space_name, zt_phase_name(m->phase), fragmented ? " (a fragmentation OOM)" : "", bytes, req,
                   zt_category_name(cat), label ? label : "", m->allocated.current, m->reserved.current,
                   injected ? "none (refusal injected by a test)" : m->limit_bytes ? lim : "none (system refused)",
                   fb, fs.free_blocks, lf, zt_alloc_mode_name(m->mode), breakdown);
}

zt_status zt_mem_alloc(zt_mem *m, size_t bytes, zt_category cat, const char *label,
                       zt_block **out, zt_error *err) {
    *out = NULL;
    if (bytes == 0 || cat < 0 || cat >= ZT_NUM_CATEGORIES)
        return ZT_FAIL(err, ZT_ERR_INVALID, "zt_mem_alloc: bad request (%zu bytes, category %d)",
                       bytes, (int)cat);
    if (bytes > SIZE_MAX - m->round_bytes)
        return ZT_FAIL(err, ZT_ERR_OOM, "zt_mem_alloc: request of %zu bytes overflows", bytes);
    size_t block_bytes = (bytes + m->round_bytes - 1) / m->round_bytes * m->round_bytes;
    int injected = m->inject_phase == (int)m->phase + 1;
    if (injected) m->inject_phase = 0;
    zt_block *b = NULL;
    if (!injected && m->mode != ZT_ALLOC_SIMPLE) b = zt_mem_caching_take(m, block_bytes);
    else if (!injected) {
        b = take_cached(m, block_bytes);
        if (!b) b = new_block(m, block_bytes);
    }
    if (!b) {
        m->refusals++;
        zt_mem_trace_note(m, ZT_MEM_EV_OOM, NULL, block_bytes, bytes, cat, label);
        return refusal(m, bytes, block_bytes, cat, label, injected, err);
    }
    b->requested_bytes = bytes;
    b->category = cat;
    b->phase = m->phase;
    snprintf(b->label, sizeof b->label, "%s", label ? label : "");
    zt_mem_trace_note(m, ZT_MEM_EV_ALLOC, b->ptr, b->block_bytes, bytes, cat, b->label);
    zt_mem_list_push(&m->live, b);
    b->label_id = label_entry(m, b->label, cat);
    if (b->label_id >= 0) zt_mem_bump(&m->labels[b->label_id].bytes, bytes);

    zt_mem_bump(&m->by_category[cat], bytes);
    zt_mem_bump(&m->allocated, bytes);
    m->alloc_count++;
    m->phase_peak[m->phase] = max_sz(m->phase_peak[m->phase], m->allocated.current);
    m->window_cat_peak[cat] = max_sz(m->window_cat_peak[cat], m->by_category[cat].current);
    m->window_allocated_peak = max_sz(m->window_allocated_peak, m->allocated.current);
    m->window_reserved_peak = max_sz(m->window_reserved_peak, m->reserved.current);
    m->window_phase_peak[m->phase] = max_sz(m->window_phase_peak[m->phase], m->allocated.current);
    *out = b;
    if (m->peak_watch_bytes && !m->peak_watch_state && m->allocated.current >= m->peak_watch_bytes)
        m->peak_watch_state = 1;
    if (m->observer) m->observer(m->observer_arg, m, cat);
    return ZT_OK;
}

void zt_mem_free(zt_mem *m, zt_block *b) {
    if (!b) return;
    if (m->peak_watch_state == 1) {
        m->peak_watch_state = 2;
        if (m->on_peak) m->on_peak(m->moments_arg, m);
    }
    /* The CPU frees at once: the request and its completion are one moment. */
    zt_mem_trace_note(m, ZT_MEM_EV_FREE_REQUESTED, b->ptr, b->block_bytes, b->requested_bytes, b->category, b->label);
    zt_mem_trace_note(m, ZT_MEM_EV_FREE_COMPLETED, b->ptr, b->block_bytes, b->requested_bytes, b->category, b->label);
    zt_mem_list_remove(&m->live, b);
    m->by_category[b->category].current -= b->requested_bytes;
    m->allocated.current -= b->requested_bytes;
    if (b->label_id >= 0) m->labels[b->label_id].bytes.current -= b->requested_bytes;
    b->requested_bytes = 0;
    zt_category cat = b->category;
    if (m->mode != ZT_ALLOC_SIMPLE) zt_mem_caching_put(m, b); /* may merge b away */
    else zt_mem_list_push(&m->cached, b);
    if (m->observer) m->observer(m->observer_arg, m, cat);
}

void zt_mem_set_phase(zt_mem *m, zt_phase p) {
    if (p != m->phase && m->on_phase_end) m->on_phase_end(m->moments_arg, m, m->phase);
    m->phase = p;
    /* Memory already held when a phase starts counts toward that phase's peak. */
    m->phase_peak[p] = max_sz(m->phase_peak[p], m->allocated.current);
    m->window_phase_peak[p] = max_sz(m->window_phase_peak[p], m->allocated.current);
}

void zt_mem_window_reset(zt_mem *m) {
    for (int c = 0; c < ZT_NUM_CATEGORIES; c++) m->window_cat_peak[c] = m->by_category[c].current;
    m->window_allocated_peak = m->allocated.current;
    m->window_reserved_peak = m->reserved.current;
    for (int p = 0; p < ZT_NUM_PHASES; p++) m->window_phase_peak[p] = 0;
    m->window_phase_peak[m->phase] = m->allocated.current;
    m->peak_watch_state = 0;
}

/* Free blocks by size, in powers of two: what a request larger than the
 * largest of them runs into. */
static void report_free_histogram(const zt_mem *m, FILE *f) {
    size_t count[64] = {0}, bytes[64] = {0};
    for (const zt_block *b = m->cached; b; b = b->next) {
        int k = 0;
        while (k < 63 && ((size_t)2 << k) <= b->block_bytes) k++; /* 2^k <= size < 2^(k+1) */
        count[k]++;
        bytes[k] += b->block_bytes;
    }
    zt_free_stats fs = zt_mem_free_stats(m);
    char fb[32], lf[32];
    zt_format_bytes(fs.free_bytes, fb, sizeof fb);
    zt_format_bytes(fs.largest_free, lf, sizeof lf);
    fprintf(f, "  free inside reserved: %s in %zu blocks, the largest %s (%s allocator)\n", fb, fs.free_blocks, lf,
            zt_alloc_mode_name(m->mode));
    for (int k = 0; k < 64; k++) {
        if (!count[k]) continue;
        char lo[32], hi[32], sum[32];
        zt_format_bytes((size_t)1 << k, lo, sizeof lo);
        zt_format_bytes((size_t)2 << k, hi, sizeof hi);
        zt_format_bytes(bytes[k], sum, sizeof sum);
        fprintf(f, "    free blocks in [%s, %s): %zu, %s\n", lo, hi, count[k], sum);
    }
}

/* CACHING, EXPANDABLE: each segment's blocks in address order, live ones
 * with their category and label (at most `cap` segments). */
static void report_segments(const zt_mem *m, FILE *f, int cap) {
    int n = 0;
    for (const zt_mem_segment *s = m->segments; s && n < cap; s = s->next, n++) {
        char sz[32];
        zt_format_bytes(s->bytes, sz, sizeof sz);
        fprintf(f, "  segment %d (%s pool, %s%s):", n, s->large ? "large" : "small", sz,
                s->mapped ? " of addresses in use" : "");
        for (const zt_block *b = s->first; b; b = b->seg_next) {
            char bs[32];
            zt_format_bytes(b->block_bytes, bs, sizeof bs);
            if (b->requested_bytes) fprintf(f, " [%s %s %s]", bs, zt_category_name(b->category), b->label);
            else fprintf(f, " [%s free]", bs);
        }
        fprintf(f, "\n");
    }
    if (n == cap && m->segments) fprintf(f, "  (first %d segments shown)\n", cap);
}

void zt_mem_report(const zt_mem *m, FILE *f, int top) {
    char a[32], r[32], l[32];
    zt_format_bytes(m->allocated.current, a, sizeof a);
    zt_format_bytes(m->reserved.current, r, sizeof r);
    zt_format_bytes(m->limit_bytes, l, sizeof l);
    fprintf(f, "%s memory in phase '%s': allocated %s, reserved %s, limit %s\n", m->space_name,
            zt_phase_name(m->phase), a, r, m->limit_bytes ? l : "none");
    for (int c = 0; c < ZT_NUM_CATEGORIES; c++) {
        char cur[32], pk[32];
        zt_format_bytes(m->by_category[c].current, cur, sizeof cur);
        zt_format_bytes(m->by_category[c].peak, pk, sizeof pk);
        fprintf(f, "  %-16s current %12zu (%s)  peak %12zu (%s)\n", category_names[c],
                m->by_category[c].current, cur, m->by_category[c].peak, pk);
    }
    /* Selection of the largest live blocks without sorting the whole list. */
    const zt_block *shown[64];
    int nshown = 0;
    if (top > 64) top = 64;
    for (int i = 0; i < top; i++) {
        const zt_block *best = NULL;
        for (const zt_block *b = m->live; b; b = b->next) {
            int taken = 0;
            for (int j = 0; j < nshown; j++) taken |= (shown[j] == b);
            if (!taken && (!best || b->requested_bytes > best->requested_bytes)) best = b;
        }
        if (!best) break;
        shown[nshown++] = best;
    }
    if (nshown) fprintf(f, "  largest live allocations:\n");
    for (int i = 0; i < nshown; i++) {
        char s[32];
        zt_format_bytes(shown[i]->requested_bytes, s, sizeof s);
        fprintf(f, "    %12zu (%s)  %-16s %s\n", shown[i]->requested_bytes, s,
                category_names[shown[i]->category], shown[i]->label);
    }
    report_free_histogram(m, f);
    if (m->mode != ZT_ALLOC_SIMPLE) report_segments(m, f, 32);
}

zt_free_stats zt_mem_free_stats(const zt_mem *m) {
    zt_free_stats fs = {0, 0, 0, 0};
    for (const zt_block *b = m->cached; b; b = b->next) {
        fs.free_blocks++;
        fs.free_bytes += b->block_bytes;
        if (b->block_bytes > fs.largest_free) fs.largest_free = b->block_bytes;
    }
    if (m->mode != ZT_ALLOC_SIMPLE)
        for (const zt_mem_segment *s = m->segments; s; s = s->next) fs.segments++;
    else {
        for (const zt_block *b = m->live; b; b = b->next) fs.segments++;
        fs.segments += fs.free_blocks;
    }
    return fs;
}

/* One segment's blocks: tiling, neighbour links, no two free in a row. */
static int check_segment(const zt_mem_segment *s, size_t *live_bytes, size_t *nfree, char *why, size_t cap) {
    char *at = s->base;
    const zt_block *prev = NULL;
    for (const zt_block *b = s->first; b; prev = b, b = b->seg_next) {
        if (b->seg != s || b->ptr != at || b->seg_prev != prev || b->block_bytes == 0)
            return snprintf(why, cap, "segment %p: block %p misplaced or mislinked", s->base, b->ptr), 1;
        if (prev && !prev->requested_bytes && !b->requested_bytes)
            return snprintf(why, cap, "segment %p: two free neighbours at %p", s->base, b->ptr), 1;
        if (b->requested_bytes > b->block_bytes)
            return snprintf(why, cap, "block %p holds more than its size", b->ptr), 1;
        *live_bytes += b->requested_bytes;
        *nfree += !b->requested_bytes;
        at += b->block_bytes;
    }
    if (at != (char *)s->base + s->bytes)
        return snprintf(why, cap, "segment %p: its blocks cover %zu of %zu bytes", s->base,
                        (size_t)(at - (char *)s->base), s->bytes), 1;
    return 0;
}

/* EXPANDABLE: granules mapped in s, and whether every live block's are. */
static size_t mapped_bytes(const zt_mem_segment *s, int *unmapped_live) {
    size_t n = 0;
    for (size_t g = 0; g < s->va_bytes / ZT_MEM_GRANULE; g++) n += s->mapped[g];
    for (const zt_block *b = s->first; b; b = b->seg_next) {
        size_t at = (size_t)((const char *)b->ptr - (const char *)s->base);
        for (size_t g = at / ZT_MEM_GRANULE; b->requested_bytes && g * ZT_MEM_GRANULE < at + b->block_bytes; g++)
            *unmapped_live |= !s->mapped[g];
    }
    return n * ZT_MEM_GRANULE;
}

int zt_mem_check(const zt_mem *m, char *why, size_t cap) {
    if (m->mode == ZT_ALLOC_SIMPLE) return 0;
    size_t reserved = 0, live_bytes = 0, nfree = 0, listed = 0;
    int unmapped_live = 0;
    for (const zt_mem_segment *s = m->segments; s; s = s->next) {
        reserved += s->mapped ? mapped_bytes(s, &unmapped_live) : s->bytes;
        if (check_segment(s, &live_bytes, &nfree, why, cap)) return 1;
    }
    if (unmapped_live) return snprintf(why, cap, "a live block lies on unmapped granules"), 1;
    for (const zt_block *b = m->cached; b; b = b->next) {
        if (b->requested_bytes) return snprintf(why, cap, "live block %p on the free list", b->ptr), 1;
        listed++;
    }
    if (listed != nfree) return snprintf(why, cap, "%zu free blocks, %zu on the free list", nfree, listed), 1;
    size_t cats = 0;
    for (int c = 0; c < ZT_NUM_CATEGORIES; c++) cats += m->by_category[c].current;
    if (reserved != m->reserved.current || live_bytes != m->allocated.current || cats != live_bytes)
        return snprintf(why, cap, "counters: reserved %zu vs %zu segments, allocated %zu vs %zu live, categories %zu",
                        m->reserved.current, reserved, m->allocated.current, live_bytes, cats), 1;
    return 0;
}
