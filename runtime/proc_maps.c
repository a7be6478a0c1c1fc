/* /proc/self/smaps read into mappings, each with its Rss and what kind of
 * memory it is (proc_mem_internal.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proc_mem_internal.h"

/* glibc's secondary malloc arenas live in heaps of this size, each at an
 * address aligned to it (64-bit builds); one grows in place by changing
 * the protection of the reservation's PROT_NONE tail. */
#define ARENA_HEAP_BYTES ((uintptr_t)64 << 20)

static int path_has(const char *path, const char *const *needles) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    for (int i = 0; needles[i]; i++)
        if (strncmp(base, needles[i], strlen(needles[i])) == 0) return 1;
    return 0;
}

zt_proc_part zt_proc_part_of_path(const char *path) {
    static const char *const cuda[] = {"libcuda", "libcudart", "libcublas", "libnccl", "libnvidia", "libnvrtc",
                                       "libnvJitLink", "libzt_cuda", "libcufile", NULL};
    static const char *const mpi[] = {"libmpi", "libopen-pal", "libopen-rte", "libpmix", "libhwloc", "libevent",
                                      "libucp", "libucs", "libuct", "libucm", "libfabric", "libprrte", "mca_",
                                      "libmunge", "libibverbs", "librdmacm", "libpsm", NULL};
    static const char *const blas[] = {"libopenblas", "libblas", "liblapack", "libgfortran", "libquadmath", NULL};
    /* Open MPI's shared-memory transport and PMIx's store: files in
     * /dev/shm or in the session directory under the temporary folder. */
    if (strncmp(path, "/dev/shm/", 9) == 0 || strstr(path, "/ompi.") || strstr(path, "vader_segment") ||
        strstr(path, "sm_segment") || strstr(path, "pmix_dstor"))
        return ZT_PART_MPI_SHM;
    if (path_has(path, cuda)) return ZT_PART_LIB_CUDA;
    if (path_has(path, mpi)) return ZT_PART_LIB_MPI;
    if (path_has(path, blas)) return ZT_PART_LIB_BLAS;
    /* Shared objects and the executable; the kernel's [vdso] and [vvar]. */
    if (strstr(path, ".so") || path[0] == '[' || access(path, X_OK) == 0) return ZT_PART_LIB_OTHER;
    return ZT_PART_FILES;
}

/* "lo-hi perms offset dev inode   path": fills v's range, kind and part. */
static int parse_header(const char *line, zt_vma *v) {
    unsigned long lo, hi;
    char perms[8];
    int used = 0;
    if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %n", &lo, &hi, perms, &used) != 3) return -1;
    const char *path = line + used;
    char name[4096];
    snprintf(name, sizeof name, "%s", path);
    name[strcspn(name, "\n")] = '\0';
    memset(v, 0, sizeof *v);
    v->lo = lo;
    v->hi = hi;
    v->writable = perms[0] == 'r' && perms[1] == 'w';
    if (name[0] == '\0') v->kind = ZT_VMA_ANON;
    else if (strcmp(name, "[heap]") == 0) v->kind = ZT_VMA_HEAP;
    else if (strcmp(name, "[stack]") == 0) v->kind = ZT_VMA_STACK;
    else if (strncmp(name, "[anon", 5) == 0) v->kind = ZT_VMA_ANON; /* named anonymous memory */
    else {
        v->kind = ZT_VMA_FILE;
        v->part = zt_proc_part_of_path(name);
    }
    return 0;
}

static int push(zt_vma_list *l, const zt_vma *v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 512;
        zt_vma *grown = realloc(l->v, cap * sizeof *grown);
        if (!grown) return -1;
        l->v = grown;
        l->cap = cap;
    }
    l->v[l->n++] = *v;
    return 0;
}

/* A secondary arena's heap: anonymous, at an aligned address, reaching the
 * next boundary alone or with its PROT_NONE tail. */
static void mark_arenas(zt_vma_list *l) {
    for (size_t i = 0; i < l->n; i++) {
        zt_vma *v = &l->v[i];
        if (v->kind != ZT_VMA_ANON || !v->writable || v->lo % ARENA_HEAP_BYTES) continue;
        uintptr_t end = v->hi;
        if (i + 1 < l->n && l->v[i + 1].kind == ZT_VMA_ANON && !l->v[i + 1].writable && l->v[i + 1].lo == v->hi)
            end = l->v[i + 1].hi;
        if (end % ARENA_HEAP_BYTES == 0 && end - v->lo <= ARENA_HEAP_BYTES * 2) v->kind = ZT_VMA_HEAP;
    }
}

int zt_vma_read(zt_vma_list *out) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[4352];
    zt_vma cur;
    int have = 0, rc = 0;
    out->n = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        char c = line[0];
        if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) {
            if (have) rc = push(out, &cur);
            have = parse_header(line, &cur) == 0;
            continue;
        }
        unsigned long long kb;
        if (have && strncmp(line, "Rss:", 4) == 0 && sscanf(line + 4, "%llu", &kb) == 1) cur.rss = (size_t)kb * 1024;
        else if (have && strncmp(line, "Pss:", 4) == 0 && sscanf(line + 4, "%llu", &kb) == 1)
            cur.pss = (size_t)kb * 1024;
    }
    if (have && rc == 0) rc = push(out, &cur);
    fclose(f);
    if (rc == 0) mark_arenas(out);
    return rc;
}

void zt_vma_free(zt_vma_list *l) {
    free(l->v);
    memset(l, 0, sizeof *l);
}

const zt_vma *zt_vma_find(const zt_vma_list *l, uintptr_t addr) {
    size_t lo = 0, hi = l->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (l->v[mid].hi <= addr) lo = mid + 1;
        else hi = mid;
    }
    return lo < l->n && l->v[lo].lo <= addr ? &l->v[lo] : NULL;
}
