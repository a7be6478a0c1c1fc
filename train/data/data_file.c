/* Any file read as bytes (vocabulary 256). Nothing is downloaded. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "data.h"

zt_status zt_data_file_create(zt_data *d, const char *path, zt_error *err) {
    memset(d, 0, sizeof *d);
    d->kind = ZT_DATA_FILE;
    d->vocab = 256;
    FILE *f = fopen(path, "rb");
    if (!f) return ZT_FAIL(err, ZT_ERR_IO, "--data %s: cannot open: %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return ZT_FAIL(err, ZT_ERR_IO, "--data %s: cannot seek", path);
    }
    long size = ftell(f);
    rewind(f);
    if (size < 0) {
        fclose(f);
        return ZT_FAIL(err, ZT_ERR_IO, "--data %s: cannot tell its size", path);
    }
    d->nbytes = (size_t)size;
    d->bytes = malloc(d->nbytes ? d->nbytes : 1);
    if (!d->bytes) {
        fclose(f);
        return ZT_FAIL(err, ZT_ERR_OOM, "--data %s: cannot hold %zu bytes", path, d->nbytes);
    }
    size_t got = fread(d->bytes, 1, d->nbytes, f);
    fclose(f);
    if (got != d->nbytes) return ZT_FAIL(err, ZT_ERR_IO, "--data %s: short read (%zu of %zu bytes)", path, got, d->nbytes);
    return ZT_OK;
}

zt_status zt_data_file_identity(const char *path, char *out, size_t cap, zt_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return ZT_FAIL(err, ZT_ERR_IO, "--data %s: cannot open: %s", path, strerror(errno));
    XXH3_state_t *h = XXH3_createState();
    if (!h) {
        fclose(f);
        return ZT_FAIL(err, ZT_ERR_OOM, "--data: cannot allocate a hash state");
    }
    XXH3_64bits_reset(h);
    char buf[1 << 16];
    size_t n, total = 0;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
        XXH3_64bits_update(h, buf, n);
        total += n;
    }
    int bad = ferror(f);
    fclose(f);
    unsigned long long d = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    if (bad) return ZT_FAIL(err, ZT_ERR_IO, "--data %s: read error", path);
    snprintf(out, cap, "a file of %zu bytes, xxh3 %016llx", total, d);
    return ZT_OK;
}
