/* The NVMe tier's file: one swap file per rank, read and written in
 * aligned requests, asynchronously through io_uring (liburing) where the
 * kernel allows it, else with plain pread/pwrite at the moment a request is
 * made. The file is opened with O_DIRECT where the file system accepts it,
 * so the state goes to the device and not into the page cache; buffered
 * otherwise. zt_nvme_file.how says which of these ran and why, for the log.
 *
 * A request belongs to a ticket (a buffer's requests in flight); waiting on
 * a ticket completes every request of it and reports the first that failed,
 * naming the file, the operation and the offset. The file knows nothing of
 * what it stores: the engine lays out its regions (shard/nvme_state.c).
 *
 * For tests, fail_read_at / fail_write_at make the N-th read or write
 * request (1-based, counted since open) fail with EIO as the device would. */
#ifndef ZT_NVME_H
#define ZT_NVME_H

#include <stddef.h>

#include "zt_error.h"

/* Buffers, offsets and lengths of requests are multiples of this (the
 * logical block size O_DIRECT needs on every common device). */
#define ZT_NVME_ALIGN ((size_t)4096)

typedef enum { ZT_NVME_IO_AUTO = 0, ZT_NVME_IO_URING, ZT_NVME_IO_PREAD } zt_nvme_io;

/* "auto", "io_uring" or "pread"; 0 for another name. */
int zt_nvme_io_parse(const char *name, zt_nvme_io *io);

/* A buffer's requests in flight, and the first failure among them. */
typedef struct {
    int pending;
    int failed_errno; /* 0: none yet */
    int failed_write;
    size_t failed_off;
} zt_nvme_ticket;

typedef struct {
    char path[1100];
    int fd;
    int direct;   /* opened with O_DIRECT */
    void *ring;   /* struct io_uring *, NULL with pread/pwrite */
    size_t bytes; /* the file's size */
    char how[300]; /* e.g. "io_uring (queue depth 32), O_DIRECT" */
    long fail_read_at, fail_write_at; /* test hook; 0: off */
    long reads, writes;               /* requests made since open */
    int inflight;                     /* requests on the ring not yet completed */
    double read_bytes, write_bytes;   /* bytes requested since open */
} zt_nvme_file;

typedef struct {
    zt_nvme_io io;
    unsigned queue_depth;             /* io_uring's ring size (0: 32) */
    long fail_read_at, fail_write_at; /* the test hook (0: off) */
} zt_nvme_options;

/* Creates DIR/zt-swap-rank<R>.bin of `bytes` (zero-filled, sparse) and
 * opens it. An existing file of that name is replaced; DIR must exist. */
zt_status zt_nvme_open(zt_nvme_file *f, const char *dir, int rank, size_t bytes, const zt_nvme_options *opt,
                       zt_error *err);
/* Completes nothing: waits for no ticket. Closes and removes the file. */
void zt_nvme_close(zt_nvme_file *f);

/* Queues one request on ticket t: `len` bytes at `off` into or out of buf
 * (all multiples of ZT_NVME_ALIGN, within the file). With pread/pwrite it
 * runs at once. A failure to queue is returned; a failed request is
 * reported by zt_nvme_wait. buf must stay valid until then. */
zt_status zt_nvme_submit(zt_nvme_file *f, int write, void *buf, size_t off, size_t len, zt_nvme_ticket *t,
                         zt_error *err);
/* Waits until every request of t has completed; the first failure of them
 * becomes an error naming the file. t is then empty again. */
zt_status zt_nvme_wait(zt_nvme_file *f, zt_nvme_ticket *t, zt_error *err);

/* One request (as zt_nvme_submit's) on a ticket of its own, waited for. */
zt_status zt_nvme_request(zt_nvme_file *f, int write, void *buf, size_t off, size_t len, zt_error *err);

/* Synchronous reads and writes of any range [off, off + len) through an
 * aligned `bounce` buffer of bounce_len bytes (a multiple of
 * ZT_NVME_ALIGN): whole aligned windows, with the partial ones at either
 * end read, patched and written back. */
zt_status zt_nvme_read_any(zt_nvme_file *f, size_t off, void *dst, size_t len, void *bounce, size_t bounce_len,
                           zt_error *err);
zt_status zt_nvme_write_any(zt_nvme_file *f, size_t off, const void *src, size_t len, void *bounce,
                            size_t bounce_len, zt_error *err);

static inline size_t zt_nvme_round(size_t bytes) { return (bytes + ZT_NVME_ALIGN - 1) / ZT_NVME_ALIGN * ZT_NVME_ALIGN; }

#endif
