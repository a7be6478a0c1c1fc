/* Shared by the dry backend's files (not a public interface). */
#ifndef ZT_DRY_INTERNAL_H
#define ZT_DRY_INTERNAL_H

#include "zt_backend.h"

extern const zt_ops zt_dry_ops[ZT_NDTYPES];

/* Addresses handed out from reservations without memory (PROT_NONE), never
 * reused, all returned at once by zt_dry_space_destroy. A host space maps
 * every block it hands out, in 1 GiB pieces, onto one shared sparse file
 * instead, so host code that still writes its buffers (the token staging)
 * runs over the same few pages. */
typedef struct zt_dry_chunk {
    char *base;
    size_t bytes, used;
    struct zt_dry_chunk *next;
} zt_dry_chunk;

typedef struct {
    zt_dry_chunk *chunks;
    int alias_fd; /* host: the shared file (-1: a device space) */
    size_t alias_bytes;
} zt_dry_space;

zt_status zt_dry_space_init(zt_dry_space *s, int host, zt_error *err);
void zt_dry_space_destroy(zt_dry_space *s);
/* Is [p, p + bytes) inside addresses this space handed out? */
int zt_dry_space_holds(const zt_dry_space *s, const void *p);
/* The raw allocator over s: alloc and reserve hand out addresses, free,
 * commit, decommit and unreserve keep them (and succeed). */
zt_raw_allocator zt_dry_raw_allocator(zt_dry_space *s);

#endif
