/* File-system helpers (zt_fs.h). */
#define _XOPEN_SOURCE 700
#include "zt_fs.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

zt_status zt_mkdir_p(const char *dir, zt_error *err) {
    char path[1024];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return ZT_FAIL(err, ZT_ERR_INVALID, "directory name too long: %s", dir);
    for (char *p = path + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char saved = *p;
            *p = '\0';
            if (mkdir(path, 0775) != 0 && errno != EEXIST)
                return ZT_FAIL(err, ZT_ERR_IO, "cannot create directory %s: %s", path, strerror(errno));
            *p = saved;
            if (saved == '\0') break;
        }
    }
    return ZT_OK;
}

const char *zt_errno_name(int e) {
    switch (e) {
    case ENOSPC: return "ENOSPC";
    case EIO: return "EIO";
    case EROFS: return "EROFS";
    case EDQUOT: return "EDQUOT";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    case ENOENT: return "ENOENT";
    case EEXIST: return "EEXIST";
    case EFBIG: return "EFBIG";
    case EBADF: return "EBADF";
    case EINVAL: return "EINVAL";
    case ENOTDIR: return "ENOTDIR";
    case EISDIR: return "EISDIR";
    case ENAMETOOLONG: return "ENAMETOOLONG";
    case EMFILE: return "EMFILE";
    case ENOMEM: return "ENOMEM";
    default: return "errno";
    }
}

/* The hook's verdict on the next write: 0, or the errno it fails with. */
static int injected_fault(zt_fs *fs) {
    if (!fs) return 0;
    long k = atomic_fetch_add(&fs->writes, 1) + 1;
    return fs->fail_from > 0 && k >= fs->fail_from && k <= fs->fail_to ? fs->fail_errno : 0;
}

zt_status zt_fs_write(zt_fs *fs, int fd, const void *buf, size_t n, const char *path, zt_error *err) {
    const char *p = buf;
    int injected = injected_fault(fs);
    if (injected)
        return ZT_FAIL(err, ZT_ERR_IO, "%s: write failed: %s (%s, injected by ZT_TEST_FS_FAIL)", path,
                       strerror(injected), zt_errno_name(injected));
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return ZT_FAIL(err, ZT_ERR_IO, "%s: write failed: %s (%s)", path, strerror(errno), zt_errno_name(errno));
        }
        p += w;
        n -= (size_t)w;
    }
    return ZT_OK;
}

zt_status zt_write_all(int fd, const void *buf, size_t n, const char *path, zt_error *err) {
    return zt_fs_write(NULL, fd, buf, n, path, err);
}

zt_status zt_fs_create(const char *path, int *fd, zt_error *err) {
    *fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (*fd < 0)
        return ZT_FAIL(err, ZT_ERR_IO, "%s: cannot create: %s (%s)", path, strerror(errno), zt_errno_name(errno));
    return ZT_OK;
}

zt_status zt_fs_sync_close(int fd, const char *path, zt_error *err) {
    zt_status st = ZT_OK;
    if (fsync(fd) != 0)
        st = ZT_FAIL(err, ZT_ERR_IO, "%s: fsync failed: %s (%s)", path, strerror(errno), zt_errno_name(errno));
    if (close(fd) != 0 && st == ZT_OK)
        st = ZT_FAIL(err, ZT_ERR_IO, "%s: close failed: %s (%s)", path, strerror(errno), zt_errno_name(errno));
    return st;
}

zt_status zt_fs_rename(const char *from, const char *to, zt_error *err) {
    if (rename(from, to) != 0)
        return ZT_FAIL(err, ZT_ERR_IO, "rename %s -> %s: %s (%s)", from, to, strerror(errno), zt_errno_name(errno));
    return ZT_OK;
}

zt_status zt_fsync_path(const char *path, zt_error *err) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return ZT_FAIL(err, ZT_ERR_IO, "%s: cannot open to sync: %s", path, strerror(errno));
    int rc = fsync(fd);
    int saved = errno;
    close(fd);
    if (rc != 0) return ZT_FAIL(err, ZT_ERR_IO, "%s: fsync failed: %s", path, strerror(saved));
    return ZT_OK;
}

void zt_parent_dir(const char *path, char *dir, size_t cap) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, cap, ".");
    else if (slash == path) snprintf(dir, cap, "/");
    else snprintf(dir, cap, "%.*s", (int)(slash - path), path);
}

zt_status zt_write_file_atomic(const char *path, const void *data, size_t n, zt_error *err) {
    char tmp[1100], dir[1100];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return ZT_FAIL(err, ZT_ERR_INVALID, "path too long: %s", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return ZT_FAIL(err, ZT_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    zt_status st = zt_write_all(fd, data, n, tmp, err);
    if (st == ZT_OK && fsync(fd) != 0) st = ZT_FAIL(err, ZT_ERR_IO, "%s: fsync failed: %s", tmp, strerror(errno));
    if (close(fd) != 0 && st == ZT_OK) st = ZT_FAIL(err, ZT_ERR_IO, "%s: close failed: %s", tmp, strerror(errno));
    if (st == ZT_OK && rename(tmp, path) != 0)
        st = ZT_FAIL(err, ZT_ERR_IO, "rename %s -> %s: %s", tmp, path, strerror(errno));
    if (st != ZT_OK) {
        unlink(tmp);
        return st;
    }
    zt_parent_dir(path, dir, sizeof dir);
    return zt_fsync_path(dir, err);
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path) != 0 ? -1 : 0;
}

zt_status zt_remove_tree(const char *path, zt_error *err) {
    struct stat sb;
    if (lstat(path, &sb) != 0 && errno == ENOENT) return ZT_OK;
    if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return ZT_FAIL(err, ZT_ERR_IO, "cannot remove %s (or something in it): %s", path, strerror(errno));
    return ZT_OK;
}

zt_status zt_read_file(const char *path, size_t max, char **data, size_t *n, zt_error *err) {
    *data = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return ZT_FAIL(err, errno == ENOENT ? ZT_ERR_INVALID : ZT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || sb.st_size < 0 || (size_t)sb.st_size > max) {
        fclose(f);
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s: larger than %zu bytes (or unreadable)", path, max);
    }
    size_t size = (size_t)sb.st_size;
    char *buf = malloc(size + 1);
    if (!buf) {
        fclose(f);
        return ZT_FAIL(err, ZT_ERR_OOM, "%s: cannot allocate %zu bytes to read it", path, size + 1);
    }
    size_t got = fread(buf, 1, size, f);
    int bad = ferror(f) || (got == size && fgetc(f) != EOF); /* it changed while read */
    fclose(f);
    if (bad) {
        free(buf);
        return ZT_FAIL(err, ZT_ERR_IO, "%s: read error", path);
    }
    buf[got] = '\0';
    *data = buf;
    *n = got;
    return ZT_OK;
}
