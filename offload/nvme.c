/* The NVMe tier's swap file: open (O_DIRECT and io_uring where possible,
 * with the reason in `how` where not), aligned requests on tickets, and
 * synchronous reads and writes of any range. See zt_nvme.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_DIRECT */
#endif
#include "zt_nvme.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef ZT_HAVE_URING
#include <liburing.h>
#endif

int zt_nvme_io_parse(const char *name, zt_nvme_io *io) {
    static const char *const names[] = {"auto", "io_uring", "pread"};
    for (int i = 0; i < 3; i++)
        if (strcmp(name, names[i]) == 0) return *io = (zt_nvme_io)i, 1;
    return 0;
}

/* One request in flight on the ring: what it was, for its completion. */
typedef struct {
    zt_nvme_ticket *t;
    size_t off, len;
    int write;
} request;

static void note_failure(zt_nvme_ticket *t, int err_no, int write, size_t off) {
    if (t->failed_errno) return; /* the first failure is the one reported */
    t->failed_errno = err_no;
    t->failed_write = write;
    t->failed_off = off;
}

/* Opens f->path with O_DIRECT when asked and a probe write of one aligned
 * block succeeds (some file systems accept the flag and refuse the I/O). */
static int open_direct(zt_nvme_file *f, char *why, size_t cap) {
    int fd = open(f->path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(why, cap, "O_DIRECT refused: %s", strerror(errno));
        return -1;
    }
    void *probe = NULL;
    if (posix_memalign(&probe, ZT_NVME_ALIGN, ZT_NVME_ALIGN) != 0) {
        close(fd);
        snprintf(why, cap, "O_DIRECT not probed: out of memory");
        return -1;
    }
    memset(probe, 0, ZT_NVME_ALIGN);
    ssize_t w = pwrite(fd, probe, ZT_NVME_ALIGN, 0);
    int saved = errno;
    free(probe);
    if (w != (ssize_t)ZT_NVME_ALIGN) {
        close(fd);
        snprintf(why, cap, "O_DIRECT write refused: %s", w < 0 ? strerror(saved) : "short write");
        return -1;
    }
    return fd;
}

static zt_status open_file(zt_nvme_file *f, zt_error *err) {
    char why[160] = "";
    f->fd = open_direct(f, why, sizeof why);
    f->direct = f->fd >= 0;
    if (f->fd < 0) f->fd = open(f->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (f->fd < 0) return ZT_FAIL(err, ZT_ERR_IO, "nvme: cannot create %s: %s", f->path, strerror(errno));
    if (ftruncate(f->fd, (off_t)f->bytes) != 0) {
        int saved = errno;
        close(f->fd);
        unlink(f->path);
        f->fd = -1;
        return ZT_FAIL(err, ZT_ERR_IO, "nvme: cannot size %s to %zu bytes: %s", f->path, f->bytes, strerror(saved));
    }
    if (f->direct) snprintf(f->how, sizeof f->how, "O_DIRECT");
    else snprintf(f->how, sizeof f->how, "buffered (%s)", why);
    return ZT_OK;
}

/* io_uring when available and not declined; else the reason goes to `how`. */
static void start_ring(zt_nvme_file *f, zt_nvme_io io, unsigned depth) {
    char method[160];
    if (io == ZT_NVME_IO_PREAD) {
        snprintf(method, sizeof method, "pread/pwrite (asked for)");
    } else {
#ifdef ZT_HAVE_URING
        struct io_uring *ring = calloc(1, sizeof *ring);
        int rc = ring ? io_uring_queue_init(depth ? depth : 32, ring, 0) : -ENOMEM;
        if (rc == 0) {
            f->ring = ring;
            snprintf(method, sizeof method, "io_uring (queue depth %u)", depth ? depth : 32);
        } else {
            free(ring);
            snprintf(method, sizeof method, "pread/pwrite fallback (io_uring_queue_init: %s)", strerror(-rc));
        }
#else
        (void)depth;
        snprintf(method, sizeof method, "pread/pwrite fallback (built without liburing)");
#endif
    }
    char file_mode[140];
    snprintf(file_mode, sizeof file_mode, "%.139s", f->how);
    snprintf(f->how, sizeof f->how, "%.150s, %s", method, file_mode);
}

zt_status zt_nvme_open(zt_nvme_file *f, const char *dir, int rank, size_t bytes, const zt_nvme_options *opt,
                       zt_error *err) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->fail_read_at = opt->fail_read_at;
    f->fail_write_at = opt->fail_write_at;
    f->bytes = zt_nvme_round(bytes ? bytes : 1);
    int n = snprintf(f->path, sizeof f->path, "%s/zt-swap-rank%d.bin", dir, rank);
    if (n < 0 || (size_t)n >= sizeof f->path) return ZT_FAIL(err, ZT_ERR_INVALID, "nvme: path too long: %s", dir);
    ZT_TRY(open_file(f, err));
    start_ring(f, opt->io, opt->queue_depth);
    return ZT_OK;
}

#ifdef ZT_HAVE_URING
/* Takes one completion off the ring (waiting for it) and settles its request. */
static zt_status reap_one(zt_nvme_file *f, zt_error *err) {
    struct io_uring *ring = f->ring;
    struct io_uring_cqe *cqe = NULL;
    int rc;
    do rc = io_uring_wait_cqe(ring, &cqe);
    while (rc == -EINTR);
    if (rc < 0) return ZT_FAIL(err, ZT_ERR_IO, "nvme: waiting for I/O on %s: %s", f->path, strerror(-rc));
    request *r = io_uring_cqe_get_data(cqe);
    int res = cqe->res;
    io_uring_cqe_seen(ring, cqe);
    if (res < 0) note_failure(r->t, -res, r->write, r->off);
    else if ((size_t)res != r->len) note_failure(r->t, EIO, r->write, r->off); /* short: the file is sized */
    r->t->pending--;
    f->inflight--;
    free(r);
    return ZT_OK;
}

static zt_status submit_ring(zt_nvme_file *f, int write, void *buf, size_t off, size_t len, zt_nvme_ticket *t,
                             zt_error *err) {
    struct io_uring *ring = f->ring;
    request *r = malloc(sizeof *r);
    if (!r) return ZT_FAIL(err, ZT_ERR_OOM, "nvme: cannot allocate a request");
    *r = (request){t, off, len, write};
    struct io_uring_sqe *sqe;
    while ((sqe = io_uring_get_sqe(ring)) == NULL) { /* the ring is full: make room */
        io_uring_submit(ring);
        zt_status s = reap_one(f, err);
        if (s != ZT_OK) return free(r), s;
    }
    if (write) io_uring_prep_write(sqe, f->fd, buf, (unsigned)len, (unsigned long long)off);
    else io_uring_prep_read(sqe, f->fd, buf, (unsigned)len, (unsigned long long)off);
    io_uring_sqe_set_data(sqe, r);
    t->pending++;
    f->inflight++;
    int rc = io_uring_submit(ring);
    if (rc < 0) return ZT_FAIL(err, ZT_ERR_IO, "nvme: cannot submit I/O on %s: %s", f->path, strerror(-rc));
    return ZT_OK;
}
#endif

/* pread/pwrite until the whole length has moved. */
static void run_sync(zt_nvme_file *f, int write, void *buf, size_t off, size_t len, zt_nvme_ticket *t) {
    size_t done = 0;
    while (done < len) {
        ssize_t k = write ? pwrite(f->fd, (char *)buf + done, len - done, (off_t)(off + done))
                          : pread(f->fd, (char *)buf + done, len - done, (off_t)(off + done));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            note_failure(t, k < 0 ? errno : EIO, write, off);
            return;
        }
        done += (size_t)k;
    }
}

zt_status zt_nvme_submit(zt_nvme_file *f, int write, void *buf, size_t off, size_t len, zt_nvme_ticket *t,
                         zt_error *err) {
    if ((uintptr_t)buf % ZT_NVME_ALIGN || off % ZT_NVME_ALIGN || len % ZT_NVME_ALIGN || off + len > f->bytes)
        return ZT_FAIL(err, ZT_ERR_INTERNAL, "nvme: unaligned or out-of-range request (%zu bytes at %zu of %zu) on %s",
                       len, off, f->bytes, f->path);
    if (len == 0) return ZT_OK;
    long nth = write ? ++f->writes : ++f->reads;
    if (write) f->write_bytes += (double)len;
    else f->read_bytes += (double)len;
    if (nth == (write ? f->fail_write_at : f->fail_read_at)) { /* the test hook: as the device failing it */
        note_failure(t, EIO, write, off);
        return ZT_OK;
    }
#ifdef ZT_HAVE_URING
    if (f->ring) return submit_ring(f, write, buf, off, len, t, err);
#endif
    run_sync(f, write, buf, off, len, t);
    return ZT_OK;
}

zt_status zt_nvme_wait(zt_nvme_file *f, zt_nvme_ticket *t, zt_error *err) {
#ifdef ZT_HAVE_URING
    while (t->pending > 0) ZT_TRY(reap_one(f, err));
#endif
    zt_nvme_ticket done = *t;
    memset(t, 0, sizeof *t);
    if (!done.failed_errno) return ZT_OK;
    return ZT_FAIL(err, ZT_ERR_IO, "nvme: %s at offset %zu of %s failed: %s", done.failed_write ? "write" : "read",
                   done.failed_off, f->path, strerror(done.failed_errno));
}

zt_status zt_nvme_request(zt_nvme_file *f, int write, void *buf, size_t off, size_t len, zt_error *err) {
    zt_nvme_ticket t = {0};
    zt_status s = zt_nvme_submit(f, write, buf, off, len, &t, err);
    zt_status w = zt_nvme_wait(f, &t, err); /* even after a failed submit: nothing may stay in flight */
    return s != ZT_OK ? s : w;
}

zt_status zt_nvme_read_any(zt_nvme_file *f, size_t off, void *dst, size_t len, void *bounce, size_t bounce_len,
                           zt_error *err) {
    size_t end = off + len;
    for (size_t w = off / ZT_NVME_ALIGN * ZT_NVME_ALIGN; w < end; w += bounce_len) {
        size_t wl = zt_nvme_round(end - w) < bounce_len ? zt_nvme_round(end - w) : bounce_len;
        ZT_TRY(zt_nvme_request(f, 0, bounce, w, wl, err));
        size_t a = off > w ? off : w, b = end < w + wl ? end : w + wl;
        memcpy((char *)dst + (a - off), (char *)bounce + (a - w), b - a);
    }
    return ZT_OK;
}

zt_status zt_nvme_write_any(zt_nvme_file *f, size_t off, const void *src, size_t len, void *bounce,
                            size_t bounce_len, zt_error *err) {
    size_t end = off + len;
    for (size_t w = off / ZT_NVME_ALIGN * ZT_NVME_ALIGN; w < end; w += bounce_len) {
        size_t wl = zt_nvme_round(end - w) < bounce_len ? zt_nvme_round(end - w) : bounce_len;
        size_t a = off > w ? off : w, b = end < w + wl ? end : w + wl;
        if (a > w || b < w + wl) ZT_TRY(zt_nvme_request(f, 0, bounce, w, wl, err)); /* keep the bytes around it */
        memcpy((char *)bounce + (a - w), (const char *)src + (a - off), b - a);
        ZT_TRY(zt_nvme_request(f, 1, bounce, w, wl, err));
    }
    return ZT_OK;
}

void zt_nvme_close(zt_nvme_file *f) {
#ifdef ZT_HAVE_URING
    if (f->ring) {
        /* Requests of a failed step may still be in flight: let them land
         * before their buffers and the ring go. */
        struct io_uring *ring = f->ring;
        struct io_uring_cqe *cqe;
        while (f->inflight > 0) {
            int rc = io_uring_wait_cqe(ring, &cqe);
            if (rc == -EINTR) continue;
            if (rc != 0) break;
            free(io_uring_cqe_get_data(cqe));
            io_uring_cqe_seen(ring, cqe);
            f->inflight--;
        }
        io_uring_queue_exit(ring);
        free(ring);
        f->ring = NULL;
    }
#endif
    if (f->fd >= 0) {
        close(f->fd);
        unlink(f->path);
    }
    f->fd = -1;
}
