/* The dry backend's memory (dry_internal.h): addresses without pages for
 * the device, one shared file under every host block. A replay allocates
 * what the run would, in the same order, and reads the allocator's
 * counters; the addresses only have to be distinct and stay unused. */
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dry_internal.h"

#define GIB ((size_t)1 << 30)
#define CHUNK_BYTES (64 * GIB)   /* addresses reserved at a time; an EXPANDABLE pool's 256 GiB gets its own */
#define ALIAS_BYTES ((size_t)1 << 30) /* sparse: pages only where host code writes (staging) */
#define ALIGN ((size_t)4096)     /* page-aligned, so host blocks can be mapped */

zt_status zt_dry_space_init(zt_dry_space *s, int host, zt_error *err) {
    s->chunks = NULL;
    s->alias_fd = -1;
    s->alias_bytes = 0;
    if (!host) return ZT_OK;
    s->alias_fd = memfd_create("zt-dry-host", MFD_CLOEXEC);
    if (s->alias_fd < 0 || ftruncate(s->alias_fd, (off_t)ALIAS_BYTES) != 0) {
        if (s->alias_fd >= 0) close(s->alias_fd);
        s->alias_fd = -1;
        return ZT_FAIL(err, ZT_ERR_OOM, "dry backend: cannot make the %zu-byte file its host blocks share",
                       ALIAS_BYTES);
    }
    s->alias_bytes = ALIAS_BYTES;
    return ZT_OK;
}

void zt_dry_space_destroy(zt_dry_space *s) {
    while (s->chunks) {
        zt_dry_chunk *c = s->chunks;
        s->chunks = c->next;
        munmap(c->base, c->bytes); /* the aliases mapped inside go with it */
        free(c);
    }
    if (s->alias_fd >= 0) close(s->alias_fd);
    s->alias_fd = -1;
}

int zt_dry_space_holds(const zt_dry_space *s, const void *p) {
    for (const zt_dry_chunk *c = s->chunks; c; c = c->next)
        if ((const char *)p >= c->base && (const char *)p < c->base + c->used) return 1;
    return 0;
}

/* A new chunk of at least `bytes` addresses (PROT_NONE, nothing reserved
 * with the system): 64 GiB where the address space allows, else the need. */
static zt_dry_chunk *new_chunk(zt_dry_space *s, size_t bytes) {
    size_t want[2] = {bytes > CHUNK_BYTES ? bytes : CHUNK_BYTES, bytes};
    for (int i = 0; i < 2; i++) {
        void *p = mmap(NULL, want[i], PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) continue;
        zt_dry_chunk *c = malloc(sizeof *c);
        if (!c) {
            munmap(p, want[i]);
            return NULL;
        }
        *c = (zt_dry_chunk){p, want[i], 0, s->chunks};
        s->chunks = c;
        return c;
    }
    return NULL;
}

/* Host: the block's pages are the shared file's, piece by piece. */
static int alias(const zt_dry_space *s, char *p, size_t bytes) {
    for (size_t at = 0; at < bytes; at += s->alias_bytes) {
        size_t n = bytes - at < s->alias_bytes ? bytes - at : s->alias_bytes;
        if (mmap(p + at, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, s->alias_fd, 0) == MAP_FAILED) return -1;
    }
    return 0;
}

static void *take(void *ctx, size_t bytes) {
    zt_dry_space *s = ctx;
    if (bytes == 0 || bytes > SIZE_MAX - ALIGN) return NULL;
    size_t n = (bytes + ALIGN - 1) / ALIGN * ALIGN;
    zt_dry_chunk *c = s->chunks;
    if (!c || c->bytes - c->used < n) c = new_chunk(s, n);
    if (!c) return NULL;
    char *p = c->base + c->used;
    if (s->alias_fd >= 0 && alias(s, p, n) != 0) return NULL;
    c->used += n;
    return p;
}

static void keep(void *ctx, void *ptr) { (void)ctx, (void)ptr; }
static int keep_range(void *ctx, void *ptr, size_t bytes) { return (void)ctx, (void)ptr, (void)bytes, 0; }
static void keep_reserved(void *ctx, void *ptr, size_t bytes) { (void)ctx, (void)ptr, (void)bytes; }

zt_raw_allocator zt_dry_raw_allocator(zt_dry_space *s) {
    zt_raw_allocator r = {.alloc = take, .free = keep, .ctx = s};
    if (s->alias_fd < 0) { /* EXPANDABLE's reservations: device only, as on a GPU */
        r.reserve = take;
        r.commit = keep_range;
        r.decommit = keep_range;
        r.unreserve = keep_reserved;
    }
    return r;
}
