/* File-system helpers whose errors name the path: mkdir -p, writing every
 * byte, fsync of a file or a directory, whole-file replacement that is
 * atomic on a crash (temporary file, fsync, rename, fsync of the directory),
 * recursive removal, and reading a small file whole. Checkpoints, logs and
 * exports use them, so that every write is checked in one place. */
#ifndef ZT_FS_H
#define ZT_FS_H

#include <stdatomic.h>
#include <stddef.h>

#include "zt_error.h"

/* A process's writes of checkpoints (and anything else written through
 * zt_fs_write with it): their count, and the tests' fault hook, which
 * fails writes number fail_from..fail_to (1-based, inclusive; 0: none)
 * with fail_errno as if the system had, e.g. ENOSPC on a full disk.
 * Thread-safe: an asynchronous save's writer counts here too. */
typedef struct {
    long fail_from, fail_to;
    int fail_errno;
    atomic_long writes;
} zt_fs;

/* "ENOSPC" for ENOSPC, and the like for the errors a file system gives
 * ("errno N" for others): messages name both it and strerror's text. */
const char *zt_errno_name(int e);

zt_status zt_mkdir_p(const char *dir, zt_error *err);
/* Writes every byte of buf[n] to fd, counted in fs (NULL: uncounted). */
zt_status zt_fs_write(zt_fs *fs, int fd, const void *buf, size_t n, const char *path, zt_error *err);
zt_status zt_write_all(int fd, const void *buf, size_t n, const char *path, zt_error *err);
/* A file's life in a save, each step's error naming the path and errno:
 * created (truncated) for writing, then fsynced and closed (fd is closed
 * either way), then renamed into place. */
zt_status zt_fs_create(const char *path, int *fd, zt_error *err);
zt_status zt_fs_sync_close(int fd, const char *path, zt_error *err);
zt_status zt_fs_rename(const char *from, const char *to, zt_error *err);
/* fsync of a file or a directory (a directory: so a rename in it is durable). */
zt_status zt_fsync_path(const char *path, zt_error *err);
/* path's parent directory into dir[cap] ("." for a bare name). */
void zt_parent_dir(const char *path, char *dir, size_t cap);
/* Replaces path with data[n]: path.tmp written, fsynced, renamed over path,
 * the directory fsynced. A crash leaves either the old file or the new one. */
zt_status zt_write_file_atomic(const char *path, const void *data, size_t n, zt_error *err);
/* Removes path and everything under it; a path that does not exist is fine. */
zt_status zt_remove_tree(const char *path, zt_error *err);
/* Reads path whole into *data (malloc'd, NUL-terminated, *n bytes without the
 * NUL); a file over max bytes is refused. */
zt_status zt_read_file(const char *path, size_t max, char **data, size_t *n, zt_error *err);

#endif
