/* Reading a checkpoint's rank files block by block, each block checked
 * against its checksum in the manifest before any of it is used. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "ckpt_internal.h"

void ckpt_header(unsigned char out[CKPT_HEADER], zt_dtype dtype, int step, int nunits) {
    memset(out, 0, CKPT_HEADER);
    memcpy(out, CKPT_MAGIC, 8);
    unsigned version = ZT_CKPT_VERSION, dt = (unsigned)dtype;
    unsigned long long stepu = (unsigned long long)step, n = (unsigned long long)nunits;
    memcpy(out + 8, &version, 4);
    memcpy(out + 12, &dt, 4);
    memcpy(out + 16, &stepu, 8);
    memcpy(out + 24, &n, 8);
}

size_t ckpt_block_bytes(const zt_ckpt_info *info, int u, int kind) {
    return zt_ckpt_unit_shard(info, u) * (kind < 3 ? sizeof(float) : zt_dtype_size(info->dtype));
}

size_t ckpt_block_offset(const zt_ckpt_info *info, int u, int kind) {
    size_t off = CKPT_HEADER, d = zt_dtype_size(info->dtype);
    for (int v = 0; v < u; v++) off += zt_ckpt_unit_shard(info, v) * (12 + d);
    return off + (size_t)kind * zt_ckpt_unit_shard(info, u) * sizeof(float);
}

static const char *block_hash(const zt_ckpt_info *info, int r, int u, int kind) {
    const json_t *fj = json_array_get(json_object_get(info->manifest, "files"), (size_t)r);
    return json_string_value(json_array_get(json_object_get(fj, "blocks"), (size_t)(u * ZT_CKPT_KINDS + kind)));
}

static const char *kind_name(int kind) {
    /* the optimizer's blocks by position: what each holds is its table's ckpt_blocks */
    static const char *const names[ZT_CKPT_KINDS] = {"master values", "optimizer block 0", "optimizer block 1",
                                                     "params"};
    return names[kind];
}

static zt_status read_at(int fd, void *buf, size_t n, size_t off, const char *path, zt_error *err) {
    ssize_t got = pread(fd, buf, n, (off_t)off);
    if (got < 0) return ZT_FAIL(err, ZT_ERR_IO, "%s: read failed: %s", path, strerror(errno));
    if ((size_t)got != n) return ZT_FAIL(err, ZT_ERR_INVALID, "%s: shorter than the manifest says (truncated)", path);
    return ZT_OK;
}

/* Rank file r has the size the manifest gives, checked before any buffer
 * sized by the manifest is allocated (a manifest may claim any size). */
static zt_status check_file_size(const zt_ckpt_info *info, int r, zt_error *err) {
    char path[1200];
    snprintf(path, sizeof path, "%s/rank%d.bin", info->dir, r);
    struct stat sb;
    if (stat(path, &sb) != 0) return ZT_FAIL(err, ZT_ERR_INVALID, "%s: cannot open: %s", path, strerror(errno));
    if ((size_t)sb.st_size != ckpt_rank_file_bytes(info))
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s: %lld bytes, the manifest says %zu (truncated or replaced)", path,
                       (long long)sb.st_size, ckpt_rank_file_bytes(info));
    return ZT_OK;
}

zt_status ckpt_read_block(const zt_ckpt_info *info, int r, int u, int kind, void *buf, zt_error *err) {
    ZT_TRY(check_file_size(info, r, err));
    char path[1200];
    snprintf(path, sizeof path, "%s/rank%d.bin", info->dir, r);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return ZT_FAIL(err, ZT_ERR_INVALID, "%s: cannot open: %s", path, strerror(errno));
    unsigned char header[CKPT_HEADER], want[CKPT_HEADER];
    ckpt_header(want, info->dtype, info->step, info->nunits);
    size_t n = ckpt_block_bytes(info, u, kind);
    zt_status st = read_at(fd, header, CKPT_HEADER, 0, path, err);
    if (st == ZT_OK && memcmp(header, want, CKPT_HEADER) != 0)
        st = ZT_FAIL(err, ZT_ERR_INVALID, "%s: its header does not match the manifest (damaged)", path);
    if (st == ZT_OK) st = read_at(fd, buf, n, ckpt_block_offset(info, u, kind), path, err);
    close(fd);
    ZT_TRY(st);
    char mine[17];
    snprintf(mine, sizeof mine, "%016llx", (unsigned long long)XXH64(buf, n, 0));
    if (strcmp(mine, block_hash(info, r, u, kind)) != 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s: the %s of unit %d do not match their checksum (corrupted)", path,
                       kind_name(kind), u);
    return ZT_OK;
}

zt_status zt_ckpt_read_range(const zt_ckpt_info *info, int u, int kind, size_t lo, size_t hi, void *dst,
                             zt_error *err) {
    size_t S = zt_ckpt_unit_shard(info, u), numel = zt_ckpt_unit_numel(info, u);
    size_t es = kind < 3 ? sizeof(float) : zt_dtype_size(info->dtype); /* bytes per element */
    char *out = dst;
    memset(out, 0, (hi - lo) * es); /* padding reads as zero */
    if (hi > numel) hi = numel;
    if (lo >= hi || S == 0) return ZT_OK;
    ZT_TRY(check_file_size(info, (int)(lo / S), err));
    char *block = malloc(S * sizeof(float)); /* [S] of the kind's dtype */
    if (!block) return ZT_FAIL(err, ZT_ERR_OOM, "checkpoint: cannot allocate a block of %zu floats", S);
    zt_status st = ZT_OK;
    for (size_t r = lo / S; st == ZT_OK && r * S < hi; r++) {
        st = ckpt_read_block(info, (int)r, u, kind, block, err);
        size_t a = r * S > lo ? r * S : lo, b = (r + 1) * S < hi ? (r + 1) * S : hi;
        if (st == ZT_OK) memcpy(out + (a - lo) * es, block + (a - r * S) * es, (b - a) * es);
    }
    free(block);
    return st;
}

/* Every block of rank file r. */
zt_status ckpt_verify_file(const zt_ckpt_info *info, int r, zt_error *err) {
    ZT_TRY(check_file_size(info, r, err));
    size_t largest = 0;
    for (int u = 0; u < info->nunits; u++)
        if (ckpt_block_bytes(info, u, 0) > largest) largest = ckpt_block_bytes(info, u, 0);
    void *buf = malloc(largest + 1);
    if (!buf) return ZT_FAIL(err, ZT_ERR_OOM, "checkpoint: cannot allocate %zu bytes", largest);
    zt_status st = ZT_OK;
    for (int u = 0; st == ZT_OK && u < info->nunits; u++)
        for (int k = 0; st == ZT_OK && k < ZT_CKPT_KINDS; k++) st = ckpt_read_block(info, r, u, k, buf, err);
    free(buf);
    return st;
}

zt_status zt_ckpt_verify(const zt_ckpt_info *info, zt_error *err) {
    for (int r = 0; r < info->world_size; r++) ZT_TRY(ckpt_verify_file(info, r, err));
    return ZT_OK;
}
