/* File-system helpers whose errors name the path: mkdir -p, writing every
 * byte, fsync of a file or a directory, whole-file replacement that is
 * atomic on a crash (temporary file, fsync, rename, fsync of the directory),
 * recursive removal, and reading a small file whole. Checkpoints, logs and
 * exports use them, so that every write is checked in one place. */
#ifndef ZT_FS_H
#define ZT_FS_H

#include <stddef.h>

#include "zt_error.h"

zt_status zt_mkdir_p(const char *dir, zt_error *err);
zt_status zt_write_all(int fd, const void *buf, size_t n, const char *path, zt_error *err);
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
