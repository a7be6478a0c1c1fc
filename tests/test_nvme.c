/* The NVMe tier's swap file (offload/nvme.c) on a temporary directory, with
 * io_uring where the kernel allows it and with pread/pwrite: aligned
 * requests on tickets round-trip, reads of any range and writes of any range
 * keep the bytes around them, the test hook's failure is reported naming the
 * file and the operation (and the ticket is empty after it), and unaligned
 * requests are refused. The file is removed on close. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"
#include "zt_nvme.h"

static unsigned char *aligned(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, ZT_NVME_ALIGN, bytes) != 0) exit(2);
    return p;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 131u + seed);
}

/* Several buffers in flight on two tickets, then read back. */
static void round_trip(zt_nvme_file *f) {
    const size_t blk = 4 * ZT_NVME_ALIGN;
    unsigned char *a = aligned(blk), *b = aligned(blk), *r = aligned(2 * blk);
    fill(a, blk, 1);
    fill(b, blk, 2);
    zt_nvme_ticket t1 = {0}, t2 = {0};
    zt_error err = {0};
    CHECK(zt_nvme_submit(f, 1, a, 0, blk, &t1, &err) == ZT_OK, "%s", err.msg);
    CHECK(zt_nvme_submit(f, 1, b, blk, blk, &t2, &err) == ZT_OK, "%s", err.msg);
    CHECK(zt_nvme_wait(f, &t1, &err) == ZT_OK && zt_nvme_wait(f, &t2, &err) == ZT_OK, "%s", err.msg);
    CHECK(zt_nvme_submit(f, 0, r, 0, 2 * blk, &t1, &err) == ZT_OK, "%s", err.msg);
    CHECK(zt_nvme_wait(f, &t1, &err) == ZT_OK, "%s", err.msg);
    CHECK(memcmp(r, a, blk) == 0 && memcmp(r + blk, b, blk) == 0, "round trip differs (%s)", f->how);
    free(a);
    free(b);
    free(r);
}

/* An unaligned range is written and read through a small bounce buffer;
 * the bytes on either side keep their values. */
static void any_range(zt_nvme_file *f) {
    const size_t total = 6 * ZT_NVME_ALIGN, off = 1000, len = 3 * ZT_NVME_ALIGN + 77;
    unsigned char *bounce = aligned(2 * ZT_NVME_ALIGN), *before = xmalloc(total), *src = xmalloc(len);
    unsigned char *after = xmalloc(total);
    zt_error err = {0};
    CHECK(zt_nvme_read_any(f, 0, before, total, bounce, 2 * ZT_NVME_ALIGN, &err) == ZT_OK, "%s", err.msg);
    fill(src, len, 7);
    CHECK(zt_nvme_write_any(f, off, src, len, bounce, 2 * ZT_NVME_ALIGN, &err) == ZT_OK, "%s", err.msg);
    CHECK(zt_nvme_read_any(f, 0, after, total, bounce, 2 * ZT_NVME_ALIGN, &err) == ZT_OK, "%s", err.msg);
    CHECK(memcmp(after, before, off) == 0, "bytes before the range changed");
    CHECK(memcmp(after + off, src, len) == 0, "the range did not land");
    CHECK(memcmp(after + off + len, before + off + len, total - off - len) == 0, "bytes after the range changed");
    free(bounce);
    free(before);
    free(src);
    free(after);
}

/* The hook fails the 2nd write: the wait reports it, naming the file. */
static void injected_failure(const char *dir, zt_nvme_io io) {
    zt_nvme_file f;
    zt_nvme_options opt = {io, 8, 0, 2};
    zt_error err = {0};
    CHECK(zt_nvme_open(&f, dir, 9, 8 * ZT_NVME_ALIGN, &opt, &err) == ZT_OK, "%s", err.msg);
    unsigned char *a = aligned(ZT_NVME_ALIGN);
    fill(a, ZT_NVME_ALIGN, 3);
    zt_nvme_ticket t = {0};
    for (int k = 0; k < 3; k++) CHECK(zt_nvme_submit(&f, 1, a, (size_t)k * ZT_NVME_ALIGN, ZT_NVME_ALIGN, &t, &err) == ZT_OK, "%s", err.msg);
    zt_status s = zt_nvme_wait(&f, &t, &err);
    CHECK(s == ZT_ERR_IO, "the injected write failure was not reported (status %d)", (int)s);
    CHECK(strstr(err.msg, f.path) && strstr(err.msg, "write at offset 4096"), "message: %s", err.msg);
    zt_error again = {0};
    CHECK(zt_nvme_wait(&f, &t, &again) == ZT_OK, "a waited ticket should be empty: %s", again.msg);
    /* The negative twin: unaligned requests are refused, not issued. */
    CHECK(zt_nvme_submit(&f, 0, a + 1, 0, ZT_NVME_ALIGN, &t, &again) == ZT_ERR_INTERNAL, "unaligned buffer accepted");
    CHECK(zt_nvme_submit(&f, 0, a, 0, 100 * ZT_NVME_ALIGN, &t, &again) == ZT_ERR_INTERNAL, "a read past the end accepted");
    char path[sizeof f.path];
    snprintf(path, sizeof path, "%s", f.path);
    zt_nvme_close(&f);
    CHECK(access(path, F_OK) != 0, "%s still exists after close", path);
    free(a);
}

static void run(const char *dir, zt_nvme_io io) {
    zt_nvme_file f;
    zt_nvme_options opt = {io, 4, 0, 0};
    zt_error err = {0};
    CHECK(zt_nvme_open(&f, dir, 0, 10 * ZT_NVME_ALIGN, &opt, &err) == ZT_OK, "%s", err.msg);
    printf("%s: %s\n", io == ZT_NVME_IO_PREAD ? "pread" : "auto", f.how);
    CHECK(io != ZT_NVME_IO_PREAD || strstr(f.how, "pread/pwrite (asked for)"), "how: %s", f.how);
    CHECK(f.bytes == 10 * ZT_NVME_ALIGN, "size %zu", f.bytes);
    round_trip(&f);
    any_range(&f);
    zt_nvme_close(&f);
    injected_failure(dir, io);
}

int main(void) {
    char dir[] = "/tmp/zt_test_nvme_XXXXXX";
    if (!mkdtemp(dir)) return 2;
    run(dir, ZT_NVME_IO_AUTO);
    run(dir, ZT_NVME_IO_PREAD);
    rmdir(dir);
    printf("%s: %ld checks, %d failures\n", g_failures ? "FAIL" : "ok", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
