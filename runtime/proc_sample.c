/* One sample of the whole bill (zt_proc_sample_take, zt_proc_mem.h). */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "proc_evidence.h"

#define NO_OWNER 0xFF

/* Per mapping that some evidence touches: each page's owner and the
 * strength that named it. */
typedef struct {
    unsigned char *owner, *strength; /* [pages of the mapping] */
} page_owners;

static int cmp_evidence(const void *a, const void *b) {
    const zt_evidence *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Gives e's pages inside mapping v (index i) to e's part where e is
 * stronger than what named them before. */
static int claim(const zt_vma_list *vmas, size_t i, page_owners *po, const zt_evidence *e, size_t page) {
    const zt_vma *v = &vmas->v[i];
    size_t np = (v->hi - v->lo) / page;
    if (!po[i].owner) {
        po[i].owner = malloc(np);
        po[i].strength = calloc(np, 1);
        if (!po[i].owner || !po[i].strength) return -1;
        memset(po[i].owner, NO_OWNER, np);
    }
    uintptr_t lo = e->lo > v->lo ? e->lo : v->lo, hi = e->hi < v->hi ? e->hi : v->hi;
    for (size_t p = (lo - v->lo) / page; p < np && v->lo + p * page < hi; p++) {
        if (po[i].strength[p] >= e->strength) continue;
        po[i].owner[p] = (unsigned char)e->part;
        po[i].strength[p] = (unsigned char)e->strength;
    }
    return 0;
}

static int assign_evidence(const zt_vma_list *vmas, const zt_evidence_list *ev, page_owners *po, size_t page) {
    for (size_t k = 0; k < ev->n; k++) {
        const zt_evidence *e = &ev->e[k];
        const zt_vma *v = zt_vma_find(vmas, e->lo);
        size_t i = v ? (size_t)(v - vmas->v) : 0;
        if (!v) /* starts in a hole: the first mapping after it */
            while (i < vmas->n && vmas->v[i].hi <= e->lo) i++;
        for (; i < vmas->n && vmas->v[i].lo < e->hi; i++) {
            const zt_vma *w = &vmas->v[i];
            if (w->kind == ZT_VMA_FILE || !w->writable || w->rss == 0) continue;
            /* What malloc holds is the heap part's, whoever asked for it;
             * only the tracked allocators' blocks are named inside it. */
            if (w->kind == ZT_VMA_HEAP && e->strength != ZT_EVIDENCE_ALLOCATOR) continue;
            if (claim(vmas, i, po, e, page)) return -1;
        }
    }
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

/* Every mapping's Rss into parts (signed: a mapping's evidence may count a
 * page mincore sees that Rss does not, such as the shared zero page). */
static int split(const zt_vma_list *vmas, page_owners *po, size_t page, long long *parts, zt_proc_sample *out) {
    for (size_t i = 0; i < vmas->n; i++) {
        const zt_vma *v = &vmas->v[i];
        out->os_bytes += v->rss;
        out->pss_bytes += v->pss;
        long long rest = (long long)v->rss;
        if (po[i].owner) {
            size_t np = (v->hi - v->lo) / page;
            unsigned char *vec = malloc(np);
            if (!vec) return -1;
            if (mincore((void *)v->lo, v->hi - v->lo, vec) == 0)
                for (size_t p = 0; p < np; p++)
                    if ((vec[p] & 1) && po[i].owner[p] != NO_OWNER) {
                        parts[po[i].owner[p]] += (long long)page;
                        rest -= (long long)page;
                    }
            free(vec);
        }
        int named;
        zt_proc_part d = default_part(v, &named);
        if (named) parts[d] += rest; /* else: unexplained, what os_bytes holds beyond the parts */
    }
    return 0;
}

static int gather_evidence(zt_proc_mem *pm, const zt_mem *device, const zt_mem *host, const zt_vma_list *vmas,
                           zt_evidence_list *ev, size_t page) {
    if (device && zt_evidence_allocator(ev, device, ZT_PART_ALLOCATOR_ALLOCATED, ZT_PART_ALLOCATOR_CACHED)) return -1;
    if (host && zt_evidence_allocator(ev, host, ZT_PART_HOST_POOL_ALLOCATED, ZT_PART_HOST_POOL_CACHED)) return -1;
    if (zt_evidence_objects(ev, page) || zt_evidence_stacks(ev, pm, vmas) || zt_evidence_watched(ev, pm) ||
        zt_evidence_malloc_chunks(ev, vmas, page))
        return -1;
    qsort(ev->e, ev->n, sizeof *ev->e, cmp_evidence);
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
    page_owners *po = NULL;
    long long parts[ZT_NUM_PARTS] = {0};
    int rc = zt_vma_read(&vmas);
    if (rc) {
        zt_vma_free(&vmas);
        return ZT_FAIL(err, ZT_ERR_IO, "cannot read this process's mappings (/proc/self/smaps)");
    }
    po = calloc(vmas.n ? vmas.n : 1, sizeof *po);
    rc = !po || gather_evidence(pm, device, host, &vmas, &ev, page) || assign_evidence(&vmas, &ev, po, page) ||
         split(&vmas, po, page, parts, out);
    for (size_t i = 0; po && i < vmas.n; i++) {
        free(po[i].owner);
        free(po[i].strength);
    }
    free(po);
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
