/* The address ranges that evidence gives to a part (proc_mem.c assigns
 * each resident page to the strongest range holding it): the allocators'
 * blocks, each thread's stack, each shared object's zero-filled data
 * (.bss, which the loader maps anonymous) and the ranges recorded by the
 * watches around libraries' initialisation. */
#include <dirent.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "proc_evidence.h"

int zt_evidence_push(zt_evidence_list *l, uintptr_t lo, uintptr_t hi, zt_proc_part part, int strength) {
    if (hi <= lo) return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        zt_evidence *grown = realloc(l->e, cap * sizeof *grown);
        if (!grown) return -1;
        l->e = grown;
        l->cap = cap;
    }
    l->e[l->n++] = (zt_evidence){lo, hi, part, strength};
    return 0;
}

void zt_evidence_free(zt_evidence_list *l) {
    free(l->e);
    memset(l, 0, sizeof *l);
}

/* Every block of one allocator, live or cached: together they tile what it
 * reserved from the system. */
int zt_evidence_allocator(zt_evidence_list *l, const zt_mem *m, zt_proc_part live, zt_proc_part cached) {
    for (const zt_block *b = m->live; b; b = b->next)
        if (zt_evidence_push(l, (uintptr_t)b->ptr, (uintptr_t)b->ptr + b->block_bytes, live, ZT_EVIDENCE_ALLOCATOR))
            return -1;
    for (const zt_block *b = m->cached; b; b = b->next)
        if (zt_evidence_push(l, (uintptr_t)b->ptr, (uintptr_t)b->ptr + b->block_bytes, cached,
                             ZT_EVIDENCE_ALLOCATOR))
            return -1;
    return 0;
}

typedef struct {
    zt_evidence_list *l;
    uintptr_t page;
    int failed;
} bss_walk;

/* Each loaded object's segments whose memory size exceeds their file size:
 * the excess is zero-filled data the loader maps as anonymous memory. */
static int on_object(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    bss_walk *w = arg;
    const char *name = info->dlpi_name && info->dlpi_name[0] ? info->dlpi_name : "";
    zt_proc_part part = name[0] ? zt_proc_part_of_path(name) : ZT_PART_LIB_OTHER;
    if (part == ZT_PART_FILES || part == ZT_PART_MPI_SHM) part = ZT_PART_LIB_OTHER;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || ph->p_memsz <= ph->p_filesz) continue;
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        uintptr_t lo = (start + ph->p_filesz + w->page - 1) / w->page * w->page;
        uintptr_t hi = (start + ph->p_memsz + w->page - 1) / w->page * w->page;
        if (zt_evidence_push(w->l, lo, hi, part, ZT_EVIDENCE_OBJECT)) w->failed = 1;
    }
    return 0;
}

int zt_evidence_objects(zt_evidence_list *l, size_t page) {
    bss_walk w = {l, page, 0};
    dl_iterate_phdr(on_object, &w);
    return w.failed ? -1 : 0;
}

/* A thread's stack pointer from /proc/self/task/TID/syscall ("NR ARGS...
 * SP PC" while it waits in the kernel); 0 while it runs. */
static uintptr_t stack_pointer_of(const char *tid) {
    char path[64], text[512];
    snprintf(path, sizeof path, "/proc/self/task/%s/syscall", tid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    if (strncmp(text, "running", 7) == 0) return 0;
    char *words[16];
    int nw = 0;
    for (char *save = NULL, *w = strtok_r(text, " \n", &save); w && nw < 16; w = strtok_r(NULL, " \n", &save))
        words[nw++] = w;
    return nw >= 3 ? (uintptr_t)strtoull(words[nw - 2], NULL, 16) : 0;
}

static void remember_stack(zt_proc_mem *pm, uintptr_t lo, uintptr_t hi) {
    for (int i = 0; i < pm->nstacks; i++)
        if (pm->stacks[i].lo == lo) return;
    if (pm->nstacks < ZT_PROC_MAX_STACKS) pm->stacks[pm->nstacks++] = (zt_proc_range){lo, hi, ZT_PART_THREAD_STACKS};
}

/* The mapping under each thread's stack pointer (this thread's own: a
 * local's address). A thread seen running keeps the stack found for it
 * before: stacks do not move. */
int zt_evidence_stacks(zt_evidence_list *l, zt_proc_mem *pm, const zt_vma_list *vmas) {
    char here = 0;
    const zt_vma *mine = zt_vma_find(vmas, (uintptr_t)&here);
    if (mine) remember_stack(pm, mine->lo, mine->hi);
    DIR *d = opendir("/proc/self/task");
    if (d) {
        long self = (long)syscall(SYS_gettid);
        for (struct dirent *e = readdir(d); e; e = readdir(d)) {
            if (e->d_name[0] < '0' || e->d_name[0] > '9' || atol(e->d_name) == self) continue;
            const zt_vma *v = zt_vma_find(vmas, stack_pointer_of(e->d_name));
            if (v) remember_stack(pm, v->lo, v->hi);
        }
        closedir(d);
    }
    for (int i = 0; i < pm->nstacks; i++)
        if (zt_evidence_push(l, pm->stacks[i].lo, pm->stacks[i].hi, ZT_PART_THREAD_STACKS, ZT_EVIDENCE_STACK))
            return -1;
    return 0;
}

int zt_evidence_watched(zt_evidence_list *l, const zt_proc_mem *pm) {
    for (int i = 0; i < pm->nranges; i++)
        if (zt_evidence_push(l, pm->ranges[i].lo, pm->ranges[i].hi, pm->ranges[i].part, ZT_EVIDENCE_WATCH)) return -1;
    return 0;
}

/* glibc maps a large request on its own (unless MALLOC_MMAP_MAX_=0, as
 * launch/zt-run sets): the chunk starts the mapping with a zero prev_size
 * and a size word holding the page-multiple length with IS_MMAPPED (2)
 * set. Such chunks are malloc's, so the heap part's; neighbours may share
 * one mapping, so the walk goes chunk by chunk. */
#if defined(__SANITIZE_ADDRESS__)
#define ZT_READS_FOREIGN_MEMORY __attribute__((no_sanitize_address))
#else
#define ZT_READS_FOREIGN_MEMORY
#endif

/* Reads the first words of mappings it did not make (under ASan: memory
 * the sanitizer never saw allocated). */
ZT_READS_FOREIGN_MEMORY
int zt_evidence_malloc_chunks(zt_evidence_list *l, const zt_vma_list *vmas, size_t page) {
    for (size_t i = 0; i < vmas->n; i++) {
        const zt_vma *v = &vmas->v[i];
        if (v->kind != ZT_VMA_ANON || !v->writable || v->rss == 0) continue;
        for (uintptr_t at = v->lo; at + 2 * sizeof(size_t) <= v->hi;) {
            const volatile size_t *head = (const volatile size_t *)at;
            size_t prev = head[0], word = head[1], len = word & ~(size_t)7;
            if (prev != 0 || (word & 7) != 2 || len == 0 || len % page || len > v->hi - at) break;
            if (zt_evidence_push(l, at, at + len, ZT_PART_HEAP, ZT_EVIDENCE_MALLOC)) return -1;
            at += len;
        }
    }
    return 0;
}
