/* One sample of the whole bill (zt_proc_sample_take, zt_proc_mem.h). */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "proc_evidence.h"

/* Evidence as page-aligned boundaries for a sweep in address order: a page
 * any evidence touches belongs to the strongest evidence touching it. Only
 * the ranges evidence covers are read with mincore, so a mapping of
 * terabytes (a sanitizer's shadow, reserved address space) costs what its
 * named pages cost. */
typedef struct {
    uintptr_t addr;
    int delta; /* +1 where the range starts, -1 where it ends */
    int strength;
    zt_proc_part part;
} boundary;

static int cmp_boundary(const void *a, const void *b) {
    const boundary *x = a, *y = b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* The ranges evidence covers at one moment of the sweep, per strength and part. */
typedef struct {
    int count[ZT_EVIDENCE_ALLOCATOR + 1][ZT_NUM_PARTS];
} coverage;

/* The strongest part covering now (strength >= min_strength), or ZT_NUM_PARTS. */
static zt_proc_part strongest(const coverage *c, int min_strength) {
    for (int s = ZT_EVIDENCE_ALLOCATOR; s >= min_strength; s--)
        for (int p = 0; p < ZT_NUM_PARTS; p++)
            if (c->count[s][p] > 0) return (zt_proc_part)p;
    return ZT_NUM_PARTS;
}

/* Resident bytes in [lo, hi) (page-aligned, inside one mapping). */
static size_t resident_bytes(uintptr_t lo, uintptr_t hi, size_t page) {
    unsigned char vec[4096];
    size_t n = 0;
    for (uintptr_t a = lo; a < hi;) {
        size_t pages = (hi - a) / page < sizeof vec ? (hi - a) / page : sizeof vec;
        if (mincore((void *)a, pages * page, vec) == 0)
            for (size_t p = 0; p < pages; p++) n += vec[p] & 1;
        a += pages * page;
    }
    return n * page;
}

/* The named pages of [lo, hi) in every mapping it crosses from *vi on:
 * into parts and each mapping's claimed bytes. */
static void name_segment(const zt_vma_list *vmas, size_t *vi, uintptr_t lo, uintptr_t hi, const coverage *c,
                         size_t page, long long *parts, long long *claimed) {
    while (*vi < vmas->n && vmas->v[*vi].hi <= lo) (*vi)++;
    zt_proc_part any = strongest(c, 1), allocator = strongest(c, ZT_EVIDENCE_ALLOCATOR);
    for (size_t i = *vi; i < vmas->n && vmas->v[i].lo < hi; i++) {
        const zt_vma *w = &vmas->v[i];
        if (w->kind == ZT_VMA_FILE || !w->writable || w->rss == 0) continue;
        /* What malloc holds is the heap part's, whoever asked for it; only
         * the tracked allocators' blocks are named inside it. */
        zt_proc_part part = w->kind == ZT_VMA_HEAP ? allocator : any;
        if (part == ZT_NUM_PARTS) continue;
        size_t bytes = resident_bytes(lo > w->lo ? lo : w->lo, hi < w->hi ? hi : w->hi, page);
        parts[part] += (long long)bytes;
        claimed[i] += (long long)bytes;
    }
}

static int name_evidence(const zt_vma_list *vmas, const zt_evidence_list *ev, size_t page, long long *parts,
                         long long *claimed) {
    boundary *b = malloc((2 * ev->n + 1) * sizeof *b);
    coverage *c = calloc(1, sizeof *c);
    if (!b || !c) {
        free(b);
        free(c);
        return -1;
    }
    size_t nb = 0;
    for (size_t k = 0; k < ev->n; k++) {
        const zt_evidence *e = &ev->e[k];
        if (e->hi <= e->lo) continue;
        uintptr_t lo = e->lo / page * page, hi = (e->hi + page - 1) / page * page;
        b[nb++] = (boundary){lo, +1, e->strength, e->part};
        b[nb++] = (boundary){hi, -1, e->strength, e->part};
    }
    qsort(b, nb, sizeof *b, cmp_boundary);
    size_t vi = 0;
    for (size_t k = 0; k < nb;) {
        uintptr_t at = b[k].addr;
        for (; k < nb && b[k].addr == at; k++) c->count[b[k].strength][b[k].part] += b[k].delta;
        if (k < nb) name_segment(vmas, &vi, at, b[k].addr, c, page, parts, claimed);
    }
    free(b);
    free(c);
    return 0;
}

static zt_proc_part default_part(const zt_vma *v, int *named) {
    *named = 1;
    if (v->kind == ZT_VMA_FILE) return v->part;
    if (v->kind == ZT_VMA_HEAP) return ZT_PART_HEAP;
    if (v->kind == ZT_VMA_STACK) return ZT_PART_THREAD_STACKS;
    *named = 0;
    return ZT_NUM_PARTS;
}

/* Every mapping's Rss into parts: what evidence named in it, and the rest
 * to its default part (signed: evidence may count a page mincore sees that
 * Rss does not, such as the shared zero page). */
static void split(const zt_vma_list *vmas, const long long *claimed, long long *parts, zt_proc_sample *out) {
    for (size_t i = 0; i < vmas->n; i++) {
        const zt_vma *v = &vmas->v[i];
        out->os_bytes += v->rss;
        out->pss_bytes += v->pss;
        int named;
        zt_proc_part d = default_part(v, &named);
        if (named) parts[d] += (long long)v->rss - claimed[i]; /* else: unexplained */
    }
}

static int gather_evidence(zt_proc_mem *pm, const zt_mem *device, const zt_mem *host, const zt_vma_list *vmas,
                           zt_evidence_list *ev, size_t page) {
    if (device && zt_evidence_allocator(ev, device, ZT_PART_ALLOCATOR_ALLOCATED, ZT_PART_ALLOCATOR_CACHED)) return -1;
    if (host && zt_evidence_allocator(ev, host, ZT_PART_HOST_POOL_ALLOCATED, ZT_PART_HOST_POOL_CACHED)) return -1;
    if (zt_evidence_objects(ev, page) || zt_evidence_stacks(ev, pm, vmas) || zt_evidence_watched(ev, pm) ||
        zt_evidence_malloc_chunks(ev, vmas, page))
        return -1;
    return 0;
}

/* Signed sums into the sample: a part below zero gives its deficit to
 * unexplained, so that the parts and unexplained still add up. */
static void settle(zt_proc_sample *out, const long long *parts, const zt_mem *device, const zt_mem *host) {
    unsigned all = (1u << ZT_NUM_PARTS) - 1;
    if (!device) all &= ~((1u << ZT_PART_ALLOCATOR_ALLOCATED) | (1u << ZT_PART_ALLOCATOR_CACHED));
    if (!host) all &= ~((1u << ZT_PART_HOST_POOL_ALLOCATED) | (1u << ZT_PART_HOST_POOL_CACHED));
    out->measured = all;
    long long sum = 0;
    for (int p = 0; p < ZT_NUM_PARTS; p++) {
        if (!(all & (1u << p))) continue;
        long long v = parts[p] > 0 ? parts[p] : 0;
        out->parts[p] = (size_t)v;
        sum += v;
    }
    out->unexplained_bytes = (long long)out->os_bytes - sum;
    size_t reserved = 0, resident_blocks = 0;
    if (device) {
        reserved += device->reserved.current;
        resident_blocks += out->parts[ZT_PART_ALLOCATOR_ALLOCATED] + out->parts[ZT_PART_ALLOCATOR_CACHED];
    }
    if (host) {
        reserved += host->reserved.current;
        resident_blocks += out->parts[ZT_PART_HOST_POOL_ALLOCATED] + out->parts[ZT_PART_HOST_POOL_CACHED];
    }
    out->allocator_reserved_not_resident = reserved > resident_blocks ? reserved - resident_blocks : 0;
}

zt_status zt_proc_sample_take(zt_proc_mem *pm, const zt_mem *device, const zt_mem *host, zt_proc_sample *out,
                              zt_error *err) {
    memset(out, 0, sizeof *out);
    out->step = -1;
    out->phase = device ? device->phase : ZT_PHASE_INIT;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    zt_vma_list vmas = {0};
    zt_evidence_list ev = {0};
    long long *claimed = NULL; /* [vmas.n] bytes evidence named in each mapping */
    long long parts[ZT_NUM_PARTS] = {0};
    int rc = zt_vma_read(&vmas);
    if (rc) {
        zt_vma_free(&vmas);
        return ZT_FAIL(err, ZT_ERR_IO, "cannot read this process's mappings (/proc/self/smaps)");
    }
    claimed = calloc(vmas.n ? vmas.n : 1, sizeof *claimed);
    rc = !claimed || gather_evidence(pm, device, host, &vmas, &ev, page) ||
         name_evidence(&vmas, &ev, page, parts, claimed);
    if (!rc) split(&vmas, claimed, parts, out);
    free(claimed);
    zt_evidence_free(&ev);
    zt_vma_free(&vmas);
    if (rc) return ZT_FAIL(err, ZT_ERR_OOM, "cannot allocate while sampling this process's memory");
    settle(out, parts, device, host);
    zt_os_mem os;
    ZT_TRY(zt_os_mem_read(&os, err));
    out->vm_rss = os.vm_rss;
    out->vm_hwm = os.vm_hwm;
    return ZT_OK;
}
