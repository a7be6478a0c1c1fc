/* Token files: the set behind a pattern, their headers checked, tokens
 * read where they lie (token_files.h). */
#include "token_files.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

static const char *const format_names[] = {"auto", "bytes", "uint16", "uint32", "llmc"};

int zt_token_format_parse(const char *name, zt_token_format *out) {
    for (int i = 0; i < (int)(sizeof format_names / sizeof format_names[0]); i++)
        if (strcmp(name, format_names[i]) == 0) {
            *out = (zt_token_format)i;
            return 1;
        }
    return 0;
}

const char *zt_token_format_name(zt_token_format f) { return format_names[f]; }

/* Reads exactly n bytes at offset (0: all there; 1: fewer; -1: an error). */
static int read_at(int fd, void *buf, size_t n, uint64_t offset) {
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(fd, (char *)buf + got, n - got, (off_t)(offset + got));
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        if (k == 0) return 1;
        got += (size_t)k;
    }
    return 0;
}

/* The files a pattern names: itself when a file has that name (even with
 * glob's special characters in it), else glob's matches in sorted order. */
typedef struct {
    char **v;
    size_t n;
    glob_t g;
    int globbed;
    char *one[1];
} path_list;

static zt_status expand(const char *flag, const char *pattern, path_list *l, zt_error *err) {
    memset(l, 0, sizeof *l);
    struct stat sb;
    if (stat(pattern, &sb) == 0) {
        l->one[0] = (char *)pattern;
        l->v = l->one;
        l->n = 1;
        return ZT_OK;
    }
    if (!strpbrk(pattern, "*?[")) /* a path, not a pattern */
        return ZT_FAIL(err, ZT_ERR_IO, "%s %s: cannot open: %s", flag, pattern, strerror(errno));
    int rc = glob(pattern, GLOB_ERR, NULL, &l->g);
    if (rc == GLOB_NOMATCH || (rc == 0 && l->g.gl_pathc == 0)) {
        globfree(&l->g);
        return ZT_FAIL(err, ZT_ERR_IO, "%s %s: no such file (nor a pattern matching one)", flag, pattern);
    }
    if (rc != 0) {
        globfree(&l->g);
        return ZT_FAIL(err, ZT_ERR_IO, "%s %s: cannot list the files it names: %s", flag, pattern, strerror(errno));
    }
    l->globbed = 1;
    l->v = l->g.gl_pathv;
    l->n = l->g.gl_pathc;
    return ZT_OK;
}

static void path_list_free(path_list *l) {
    if (l->globbed) globfree(&l->g);
}

/* int32 at p, little-endian (llm.c writes its header with numpy's int32 on x86). */
static int32_t le32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

static int llmc_header(const int32_t h[3], int *width) {
    if (h[0] == ZT_LLMC_MAGIC_GPT2 && h[1] == 1) *width = 2;
    else if (h[0] == ZT_LLMC_MAGIC_LLAMA3 && h[1] == 7) *width = 4;
    else return 0;
    return 1;
}

int zt_token_pattern_matches(const char *pattern) {
    path_list l;
    zt_error ignore = {0};
    if (expand("", pattern, &l, &ignore) != ZT_OK) return 0;
    int n = (int)l.n;
    path_list_free(&l);
    return n;
}

zt_token_format zt_token_format_resolve(const char *pattern, zt_token_format f) {
    if (f != ZT_TOKENS_AUTO) return f;
    path_list l;
    zt_error ignore = {0};
    if (expand("", pattern, &l, &ignore) != ZT_OK) return ZT_TOKENS_BYTES;
    int fd = open(l.v[0], O_RDONLY | O_CLOEXEC);
    path_list_free(&l);
    unsigned char raw[12];
    int width, llmc = fd >= 0 && read_at(fd, raw, sizeof raw, 0) == 0;
    int32_t h[3] = {le32(raw), le32(raw + 4), le32(raw + 8)};
    llmc = llmc && llmc_header(h, &width);
    if (fd >= 0) close(fd);
    return llmc ? ZT_TOKENS_LLMC : ZT_TOKENS_BYTES;
}

/* An llm.c shard's header: magic, version and count, against the size. */
static zt_status check_llmc(const zt_token_files *s, zt_token_file *f, int fd, uint64_t size, int *width,
                            zt_error *err) {
    unsigned char raw[12];
    if (size < ZT_LLMC_HEADER_BYTES)
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s %s: truncated header: the file has %llu bytes, an llm.c header %d",
                       s->flag, f->path, (unsigned long long)size, ZT_LLMC_HEADER_BYTES);
    if (read_at(fd, raw, sizeof raw, 0) != 0)
        return ZT_FAIL(err, ZT_ERR_IO, "%s %s: cannot read its header at offset 0: %s", s->flag, f->path,
                       strerror(errno));
    int32_t h[3] = {le32(raw), le32(raw + 4), le32(raw + 8)};
    if (h[0] != ZT_LLMC_MAGIC_GPT2 && h[0] != ZT_LLMC_MAGIC_LLAMA3)
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s %s: wrong magic %d at offset 0 (llm.c shards have %d or %d)", s->flag,
                       f->path, h[0], ZT_LLMC_MAGIC_GPT2, ZT_LLMC_MAGIC_LLAMA3);
    if (!llmc_header(h, width))
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s %s: version %d at offset 4 does not go with magic %d (%d: version 1, "
                       "%d: version 7)", s->flag, f->path, h[1], h[0], ZT_LLMC_MAGIC_GPT2, ZT_LLMC_MAGIC_LLAMA3);
    if (h[2] < 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s %s: token count %d at offset 8 is negative", s->flag, f->path, h[2]);
    uint64_t need = ZT_LLMC_HEADER_BYTES + (uint64_t)h[2] * (uint64_t)*width;
    if (size < need)
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s %s: truncated: its header (offset 8) counts %d tokens, %llu bytes with "
                       "the header, but the file has %llu", s->flag, f->path, h[2], (unsigned long long)need,
                       (unsigned long long)size);
    f->header_bytes = ZT_LLMC_HEADER_BYTES;
    f->ntokens = (uint64_t)h[2];
    return ZT_OK;
}

/* File i of the set: its header checked, its tokens counted (then closed). */
static zt_status check_one(zt_token_files *s, int i, int fd, uint64_t size, zt_error *err) {
    zt_token_file *f = &s->files[i];
    if (s->format == ZT_TOKENS_LLMC) {
        int width = 0;
        ZT_TRY(check_llmc(s, f, fd, size, &width, err));
        if (i > 0 && width != s->width)
            return ZT_FAIL(err, ZT_ERR_INVALID, "%s %s: %d-byte tokens, but %s has %d-byte ones: one set, one format",
                           s->flag, f->path, width, s->files[0].path, s->width);
        s->width = width;
    } else {
        if (size % (uint64_t)s->width != 0)
            return ZT_FAIL(err, ZT_ERR_INVALID, "%s %s: %llu bytes is not a whole number of %s tokens (%d bytes each; "
                           "--data-dtype names the width)", s->flag, f->path, (unsigned long long)size,
                           zt_token_format_name(s->format), s->width);
        f->ntokens = size / (uint64_t)s->width;
    }
    f->first = s->ntokens;
    s->ntokens += f->ntokens;
    return ZT_OK;
}

static zt_status open_one(zt_token_files *s, int i, const char *path, zt_error *err) {
    zt_token_file *f = &s->files[i];
    if (!(f->path = strdup(path))) return ZT_FAIL(err, ZT_ERR_OOM, "%s: out of memory", s->flag);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        zt_status st = ZT_FAIL(err, ZT_ERR_IO, "%s %s: cannot open: %s", s->flag, path, strerror(errno));
        if (fd >= 0) close(fd);
        return st;
    }
    zt_status st = S_ISREG(sb.st_mode) ? check_one(s, i, fd, (uint64_t)sb.st_size, err)
                                       : ZT_FAIL(err, ZT_ERR_INVALID, "%s %s: not a regular file", s->flag, path);
    close(fd);
    return st;
}

zt_status zt_token_files_open(zt_token_files *s, const char *flag, const char *pattern, zt_token_format fmt,
                              zt_error *err) {
    memset(s, 0, sizeof *s);
    s->flag = flag;
    s->open_index = s->open_fd = -1;
    s->format = zt_token_format_resolve(pattern, fmt);
    s->width = s->format == ZT_TOKENS_UINT16 ? 2 : s->format == ZT_TOKENS_UINT32 ? 4 : 1;
    path_list l;
    ZT_TRY(expand(flag, pattern, &l, err));
    s->files = calloc(l.n, sizeof *s->files);
    zt_status st = s->files ? ZT_OK : ZT_FAIL(err, ZT_ERR_OOM, "%s: out of memory", flag);
    for (size_t i = 0; st == ZT_OK && i < l.n; i++) {
        s->nfiles = (int)i + 1;
        st = open_one(s, (int)i, l.v[i], err);
    }
    path_list_free(&l);
    if (st == ZT_OK && s->ntokens < 2)
        st = ZT_FAIL(err, ZT_ERR_INVALID, "%s %s: %llu token(s); training needs at least 2", flag, pattern,
                     (unsigned long long)s->ntokens);
    if (st != ZT_OK) zt_token_files_close(s);
    return st;
}

void zt_token_files_close(zt_token_files *s) {
    if (s->files && s->open_fd >= 0) close(s->open_fd);
    s->open_fd = s->open_index = -1;
    for (int i = 0; s->files && i < s->nfiles; i++) free(s->files[i].path);
    free(s->files);
    s->files = NULL;
    s->nfiles = 0;
}

/* The file holding the epoch's token k (binary search over first). */
static int file_of(const zt_token_files *s, uint64_t k) {
    int lo = 0, hi = s->nfiles - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (s->files[mid].first <= k) lo = mid;
        else hi = mid - 1;
    }
    while (s->files[lo].ntokens == 0 || k >= s->files[lo].first + s->files[lo].ntokens) lo++; /* empty files */
    return lo;
}

/* File i's descriptor, opened in place of the one open before. */
static zt_status file_fd(zt_token_files *s, int i, int *fd, zt_error *err) {
    if (s->open_index != i) {
        if (s->open_fd >= 0) close(s->open_fd);
        s->open_index = -1;
        s->open_fd = open(s->files[i].path, O_RDONLY | O_CLOEXEC);
        if (s->open_fd < 0)
            return ZT_FAIL(err, ZT_ERR_IO, "%s %s: cannot open: %s", s->flag, s->files[i].path, strerror(errno));
        s->open_index = i;
    }
    *fd = s->open_fd;
    return ZT_OK;
}

/* Tokens [k, k + n) of file i, widened into out and checked. */
static zt_status read_run(zt_token_files *s, int file, uint64_t k, size_t n, int vocab, int32_t *out,
                          zt_error *err) {
    const zt_token_file *f = &s->files[file];
    int fd;
    ZT_TRY(file_fd(s, file, &fd, err));
    uint64_t offset = f->header_bytes + (k - f->first) * (uint64_t)s->width;
    /* read into out's tail, then widened in place from the front */
    unsigned char *raw = (unsigned char *)out + n * (sizeof *out - (size_t)s->width);
    int rc = read_at(fd, raw, n * (size_t)s->width, offset);
    if (rc != 0)
        return ZT_FAIL(err, ZT_ERR_IO, "%s %s: %s at byte offset %llu", s->flag, f->path,
                       rc < 0 ? strerror(errno) : "the file ended early (changed while training?)",
                       (unsigned long long)offset);
    for (size_t i = 0; i < n; i++) {
        const unsigned char *p = raw + i * (size_t)s->width;
        uint32_t v = s->width == 1 ? p[0] : s->width == 2 ? (uint32_t)(p[0] | p[1] << 8)
                                                           : (uint32_t)p[0] | (uint32_t)p[1] << 8 |
                                                                 (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        if (v >= (uint32_t)vocab)
            return ZT_FAIL(err, ZT_ERR_INVALID, "%s %s: token %u at byte offset %llu is not below --vocab %d", s->flag,
                           f->path, v, (unsigned long long)(offset + i * (uint64_t)s->width), vocab);
        out[i] = (int32_t)v;
    }
    return ZT_OK;
}

zt_status zt_token_files_read(zt_token_files *s, uint64_t index, size_t n, int vocab, int32_t *out,
                              zt_error *err) {
    while (n > 0) {
        uint64_t k = index % s->ntokens;
        int i = file_of(s, k);
        const zt_token_file *f = &s->files[i];
        uint64_t left = f->first + f->ntokens - k;
        size_t run = left < n ? (size_t)left : n;
        ZT_TRY(read_run(s, i, k, run, vocab, out, err));
        out += run;
        index += run;
        n -= run;
    }
    return ZT_OK;
}

#define SAMPLE_CHUNK 4096
#define SAMPLES 17

/* One file into the set's hash: size, header, sampled chunks. */
static zt_status hash_file(zt_token_files *s, int file, XXH3_state_t *h, zt_error *err) {
    const zt_token_file *f = &s->files[file];
    int fd;
    ZT_TRY(file_fd(s, file, &fd, err));
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return ZT_FAIL(err, ZT_ERR_IO, "%s %s: cannot stat: %s", s->flag, f->path, strerror(errno));
    uint64_t size = (uint64_t)sb.st_size;
    XXH3_64bits_update(h, &size, sizeof size);
    unsigned char buf[SAMPLE_CHUNK];
    for (int i = 0; i < SAMPLES; i++) {
        uint64_t span = size > SAMPLE_CHUNK ? size - SAMPLE_CHUNK : 0;
        uint64_t at = span * (uint64_t)i / (SAMPLES - 1);
        size_t n = size < SAMPLE_CHUNK ? (size_t)size : SAMPLE_CHUNK;
        int rc = read_at(fd, buf, n, at);
        if (rc != 0)
            return ZT_FAIL(err, ZT_ERR_IO, "%s %s: cannot read at byte offset %llu: %s", s->flag, f->path,
                           (unsigned long long)at, rc < 0 ? strerror(errno) : "the file ended early");
        XXH3_64bits_update(h, buf, n);
    }
    return ZT_OK;
}

zt_status zt_token_files_identity(zt_token_files *s, char *out, size_t cap, zt_error *err) {
    XXH3_state_t *h = XXH3_createState();
    if (!h) return ZT_FAIL(err, ZT_ERR_OOM, "%s: cannot allocate a hash state", s->flag);
    XXH3_64bits_reset(h);
    zt_status st = ZT_OK;
    for (int i = 0; st == ZT_OK && i < s->nfiles; i++) st = hash_file(s, i, h, err);
    unsigned long long d = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    static const char *const widths[] = {"", "uint8", "uint16", "", "uint32"};
    if (st == ZT_OK)
        snprintf(out, cap, "%d file(s), %llu %s tokens (%s), sampled xxh3 %016llx", s->nfiles,
                 (unsigned long long)s->ntokens, widths[s->width], zt_token_format_name(s->format), d);
    return st;
}
