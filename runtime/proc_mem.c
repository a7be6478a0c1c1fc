/* The whole bill of this process (zt_proc_mem.h): one pass over
 * /proc/self/smaps gives every mapping's Rss; files are named by their
 * path, anonymous memory page by page (mincore) by the strongest evidence
 * holding it (proc_evidence.c), the rest by its mapping's kind ([heap] and
 * malloc's arenas: heap; the main stack: thread_stacks) or unexplained. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "proc_evidence.h"

static const char *const part_names[ZT_NUM_PARTS] = {
    "allocator_allocated", "allocator_cached", "host_pool_allocated", "host_pool_cached", "lib_cuda", "lib_mpi",
    "lib_blas", "lib_other", "mpi_shm", "heap", "thread_stacks", "files"};

const char *zt_proc_part_name(zt_proc_part p) { return p >= 0 && p < ZT_NUM_PARTS ? part_names[p] : "?"; }

void zt_proc_mem_init(zt_proc_mem *pm) { memset(pm, 0, sizeof *pm); }

void zt_proc_mem_destroy(zt_proc_mem *pm) {
    free(pm->ranges);
    free(pm->before);
    free(pm->before_maps);
    memset(pm, 0, sizeof *pm);
}

static int add_range(zt_proc_mem *pm, uintptr_t lo, uintptr_t hi, zt_proc_part part) {
    if (pm->nranges == pm->ranges_cap) {
        int cap = pm->ranges_cap ? pm->ranges_cap * 2 : 64;
        zt_proc_range *grown = realloc(pm->ranges, (size_t)cap * sizeof *grown);
        if (!grown) return -1;
        pm->ranges = grown;
        pm->ranges_cap = cap;
    }
    pm->ranges[pm->nranges++] = (zt_proc_range){lo, hi, part};
    return 0;
}

zt_status zt_proc_mem_adopt(zt_proc_mem *pm, zt_proc_mem *src, zt_error *err) {
    int rc = 0;
    for (int i = 0; i < src->nranges && rc == 0; i++)
        rc = add_range(pm, src->ranges[i].lo, src->ranges[i].hi, src->ranges[i].part);
    zt_proc_mem_destroy(src);
    return rc ? ZT_FAIL(err, ZT_ERR_OOM, "cannot keep the pages the watches found") : ZT_OK;
}

static size_t page_bytes(void) { return (size_t)sysconf(_SC_PAGESIZE); }

/* Anonymous memory outside malloc's heaps and the main stack: what a
 * watch looks at. */
static int watched_kind(const zt_vma *v) { return v->kind == ZT_VMA_ANON; }

typedef struct {
    uintptr_t *pages; /* resident, in address order */
    size_t npages, pages_cap;
    zt_proc_range *maps;
    size_t nmaps;
} watch_view;

static int push_page(watch_view *w, uintptr_t page) {
    if (w->npages == w->pages_cap) {
        size_t cap = w->pages_cap ? w->pages_cap * 2 : 4096;
        uintptr_t *grown = realloc(w->pages, cap * sizeof *grown);
        if (!grown) return -1;
        w->pages = grown;
        w->pages_cap = cap;
    }
    w->pages[w->npages++] = page;
    return 0;
}

#define WATCH_MAX_MAPPING ((uintptr_t)16 << 30)

/* The anonymous mappings outside malloc's heaps and their resident pages. */
static int take_view(watch_view *w) {
    zt_vma_list vmas = {0};
    memset(w, 0, sizeof *w);
    if (zt_vma_read(&vmas)) return -1;
    size_t page = page_bytes();
    int rc = (w->maps = calloc(vmas.n ? vmas.n : 1, sizeof *w->maps)) ? 0 : -1;
    for (size_t i = 0; i < vmas.n && rc == 0; i++) {
        const zt_vma *v = &vmas.v[i];
        if (!watched_kind(v)) continue;
        w->maps[w->nmaps++] = (zt_proc_range){v->lo, v->hi, ZT_PART_LIB_OTHER};
        /* A mapping of WATCH_MAX_MAPPING or more is address space reserved
         * whole (a sanitizer's shadow): what a watch makes resident there
         * stays unexplained rather than cost a pass over every page. */
        if (!v->writable || v->rss == 0 || v->hi - v->lo >= WATCH_MAX_MAPPING) continue;
        unsigned char vec[4096];
        for (uintptr_t a = v->lo; a < v->hi && rc == 0;) {
            size_t np = (v->hi - a) / page < sizeof vec ? (v->hi - a) / page : sizeof vec;
            if (mincore((void *)a, np * page, vec) == 0)
                for (size_t p = 0; p < np && rc == 0; p++)
                    if (vec[p] & 1) rc = push_page(w, a + p * page);
            a += np * page;
        }
    }
    zt_vma_free(&vmas);
    if (rc) {
        free(w->pages);
        free(w->maps);
    }
    return rc;
}

zt_status zt_proc_watch_begin(zt_proc_mem *pm, zt_error *err) {
    free(pm->before);
    free(pm->before_maps);
    watch_view w;
    pm->watching = 0;
    if (take_view(&w)) return ZT_FAIL(err, ZT_ERR_IO, "cannot read this process's mappings (/proc/self/smaps)");
    pm->before = w.pages;
    pm->nbefore = w.npages;
    pm->before_maps = w.maps;
    pm->nbefore_maps = w.nmaps;
    pm->watching = 1;
    return ZT_OK;
}

static int was_resident(const zt_proc_mem *pm, uintptr_t page) {
    size_t lo = 0, hi = pm->nbefore;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (pm->before[mid] < page) lo = mid + 1;
        else hi = mid;
    }
    return lo < pm->nbefore && pm->before[lo] == page;
}

static int existed(const zt_proc_mem *pm, const zt_proc_range *m) {
    for (size_t i = 0; i < pm->nbefore_maps; i++)
        if (pm->before_maps[i].lo < m->hi && m->lo < pm->before_maps[i].hi) return 1;
    return 0;
}

/* The pages of w inside [lo, hi) that were not resident before, joined
 * into ranges where adjacent. */
static int new_pages(zt_proc_mem *pm, const watch_view *w, uintptr_t lo, uintptr_t hi, zt_proc_part part) {
    size_t page = page_bytes();
    for (size_t i = 0; i < w->npages;) {
        uintptr_t a = w->pages[i];
        if (a < lo || a >= hi || was_resident(pm, a)) {
            i++;
            continue;
        }
        size_t j = i + 1;
        while (j < w->npages && w->pages[j] == w->pages[j - 1] + page && w->pages[j] < hi &&
               !was_resident(pm, w->pages[j]))
            j++;
        if (add_range(pm, a, w->pages[j - 1] + page, part)) return -1;
        i = j;
    }
    return 0;
}

zt_status zt_proc_watch_end(zt_proc_mem *pm, zt_proc_part part, zt_error *err) {
    if (!pm->watching) return ZT_FAIL(err, ZT_ERR_INVALID, "zt_proc_watch_end without zt_proc_watch_begin");
    pm->watching = 0;
    watch_view w;
    if (take_view(&w)) return ZT_FAIL(err, ZT_ERR_IO, "cannot read this process's mappings (/proc/self/smaps)");
    int rc = 0;
    for (size_t i = 0; i < w.nmaps && rc == 0; i++) {
        const zt_proc_range *m = &w.maps[i];
        rc = existed(pm, m) ? new_pages(pm, &w, m->lo, m->hi, part) : add_range(pm, m->lo, m->hi, part);
    }
    free(w.pages);
    free(w.maps);
    free(pm->before);
    free(pm->before_maps);
    pm->before = NULL;
    pm->before_maps = NULL;
    pm->nbefore = pm->nbefore_maps = 0;
    return rc ? ZT_FAIL(err, ZT_ERR_OOM, "cannot record the pages a watch found") : ZT_OK;
}

void zt_proc_sample_print(FILE *f, const zt_proc_sample *s) {
    const double mib = 1048576.0;
    fprintf(f, "process (the OS's view, Rss over /proc/self/smaps): %.2f MiB, VmHWM %.2f MiB\n", (double)s->os_bytes / mib,
            (double)s->vm_hwm / mib);
    for (int p = 0; p < ZT_NUM_PARTS; p++) {
        if (!(s->measured & (1u << p))) {
            fprintf(f, "  %-20s not measured\n", zt_proc_part_name((zt_proc_part)p));
            continue;
        }
        fprintf(f, "  %-20s %10.2f MiB\n", zt_proc_part_name((zt_proc_part)p), (double)s->parts[p] / mib);
    }
    fprintf(f, "  %-20s %10.2f MiB\n", "unexplained", (double)s->unexplained_bytes / mib);
    fprintf(f, "  reserved by the allocators but not resident: %.2f MiB\n",
            (double)s->allocator_reserved_not_resident / mib);
}
