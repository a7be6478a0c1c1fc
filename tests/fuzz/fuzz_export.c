/* libFuzzer harness for the safetensors export's input path,
 * zt_export_safetensors (checkpointing/export.c): resolving the checkpoint
 * directory (resolve.c), reading and checking its manifest (manifest.c),
 * verifying every block of every rank file and reading the consolidated
 * master values (read.c), and writing OUT.tmp and renaming it to OUT.
 *
 * Each input becomes a checkpoint in this process's private directory (made
 * once with mkdtemp, in /dev/shm when there is one, so fsync costs nothing):
 * D/step-000001/manifest.json and rank<r>.bin, then it is exported to
 * OUT = <private>/out.safetensors and everything is removed again. After a
 * success the harness reads OUT back and checks it: a well-formed
 * safetensors file with one tensor per parameter of the manifest, the tensors
 * tiling the data exactly, each holding the master values the rank files
 * hold (bf16: rounded). After a failure neither OUT nor OUT.tmp may exist.
 * Either way no file descriptor may be left open.
 *
 * Input: byte 0 is a flag byte; then the manifest text; then the bytes of
 * rank0.bin, rank1.bin, ... (at most 8), each preceded by the separator
 * line "\n--rank--\n"; then optionally "\n--latest--\n" and the contents of
 * D/latest (which replace what WHERE writes there, and make one for 0x20).
 *   0x40 SIZES  first, when the manifest is JSON: every unit's padded_numel
 *               is set to shard_numel x world_size and every files[r].bytes to
 *               the size the units imply, and the manifest re-written with
 *               ckpt_manifest_text (so a changed shard_numel stays a
 *               consistent layout).
 *   0x01 SEAL   re-seal the manifest's self-checksum (fuzz_reseal).
 *   0x02 FIT    when the manifest (after SEAL) parses: every rank file
 *               r < world_size gets the 32-byte header the manifest implies
 *               and the size it implies (its bytes repeated, zeros when it has
 *               none), when that size is at most 1 MiB.
 *   0x04 HASH   when the manifest parses: the per-block checksums
 *               files[r].blocks are recomputed from the rank files (after
 *               FIT) and the manifest rewritten with ckpt_manifest_text.
 *   0x08 BF16   export in bf16 instead of fp32.
 *   0x30 WHERE  the directory exported: 0x00 the step directory itself;
 *               0x10 D, whose `latest` names step-000001; 0x20 D without
 *               `latest` (the newest complete step is found by listing D);
 *               0x30 D with a `latest` naming a missing step (listing again).
 * Seeds: tests/fuzz/corpus/export/ (from real checkpoints: fp32 and bf16,
 * one and two ranks). */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "fuzz_util.h"
#include "zt_dtype.h"
#include "zt_fs.h"

#define SEP "\n--rank--\n"
#define SEP_LATEST "\n--latest--\n"
#define MAX_FILES 8
#define FIT_MAX ((size_t)1 << 20)

enum { F_SEAL = 0x01, F_FIT = 0x02, F_HASH = 0x04, F_BF16 = 0x08, F_WHERE = 0x30, F_SIZES = 0x40 };

static char base[512];

static void remove_base(void) {
    zt_error err = {0};
    if (base[0]) (void)zt_remove_tree(base, &err);
}

static void make_base(void) {
    if (base[0]) return;
    struct stat sb;
    const char *tmp = getenv("TMPDIR");
    const char *root = stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode) && access("/dev/shm", W_OK) == 0 ? "/dev/shm"
                       : tmp && tmp[0]                                                                  ? tmp
                                                                                                         : "/tmp";
    snprintf(base, sizeof base, "%s/zt-fuzz-export-XXXXXX", root);
    if (!mkdtemp(base)) {
        fprintf(stderr, "fuzz_export: mkdtemp %s: %s\n", base, strerror(errno));
        abort();
    }
    atexit(remove_base);
}

typedef struct {
    unsigned char *data;
    size_t len;
} buffer;

static void write_file(const char *path, const void *data, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    FUZZ_CHECK(fd >= 0);
    FUZZ_CHECK(n == 0 || write(fd, data, n) == (ssize_t)n);
    FUZZ_CHECK(close(fd) == 0);
}

/* The lowest free descriptor: it changes when a call leaves one open. */
static int lowest_free_fd(void) {
    int fd = open("/dev/null", O_RDONLY);
    FUZZ_CHECK(fd >= 0);
    close(fd);
    return fd;
}

/* SIZES: padded_numel and files[].bytes made to agree with shard_numel;
 * NULL when the text is not a JSON object with that much structure. */
static char *fix_sizes(const char *text, size_t len, size_t *out_len) {
    json_error_t jerr;
    json_t *m = json_loadb(text, len, 0, &jerr);
    json_t *units = json_object_get(m, "units"), *files = json_object_get(m, "files");
    json_t *world = json_object_get(m, "world_size");
    const char *dtype = json_string_value(json_object_get(m, "dtype"));
    char *fixed = NULL;
    if (json_is_object(m) && json_is_array(units) && json_is_array(files) && json_is_integer(world) && dtype &&
        json_integer_value(world) >= 1 && json_integer_value(world) <= 1 << 20) {
        json_int_t w = json_integer_value(world), bytes = CKPT_HEADER, d = strcmp(dtype, "bf16") == 0 ? 2 : 4;
        int ok = 1;
        for (size_t u = 0; u < json_array_size(units); u++) {
            json_t *uj = json_array_get(units, u), *shard = json_object_get(uj, "shard_numel");
            json_int_t S = json_integer_value(shard);
            if (!json_is_integer(shard) || S < 0 || S > (json_int_t)1 << 40) {
                ok = 0;
                break;
            }
            json_object_set_new(uj, "padded_numel", json_integer(S * w));
            bytes += S * (12 + d);
        }
        for (size_t r = 0; ok && r < json_array_size(files); r++)
            if (json_is_object(json_array_get(files, r)))
                json_object_set_new(json_array_get(files, r), "bytes", json_integer(bytes));
        json_object_del(m, "manifest_xxh64");
        if (ok) fixed = ckpt_manifest_text(m);
    }
    json_decref(m);
    if (fixed) *out_len = strlen(fixed);
    return fixed;
}

/* Rank file r as the manifest implies it: header, size (bytes repeated). */
static void fit_file(const zt_ckpt_info *info, buffer *f) {
    size_t want = ckpt_rank_file_bytes(info);
    if (want > FIT_MAX) return;
    unsigned char *d = calloc(want, 1);
    FUZZ_CHECK(d != NULL);
    for (size_t i = 0; f->len && i < want; i++) d[i] = f->data[i % f->len];
    ckpt_header(d, info->dtype, info->step, info->nunits);
    free(f->data);
    f->data = d;
    f->len = want;
}

/* files[r].blocks from the rank files' bytes; the manifest re-sealed. */
static char *rehash(zt_ckpt_info *info, const buffer *files, int nfiles, size_t *len) {
    json_t *fl = json_object_get(info->manifest, "files");
    for (int r = 0; r < info->world_size && r < nfiles; r++) {
        json_t *blocks = json_object_get(json_array_get(fl, (size_t)r), "blocks");
        for (int u = 0; u < info->nunits; u++)
            for (int k = 0; k < ZT_CKPT_KINDS; k++) {
                size_t off = ckpt_block_offset(info, u, k), n = ckpt_block_bytes(info, u, k);
                if (off > files[r].len || n > files[r].len - off) continue;
                char hex[17];
                snprintf(hex, sizeof hex, "%016llx", (unsigned long long)XXH64(files[r].data + off, n, 0));
                json_array_set_new(blocks, (size_t)(u * ZT_CKPT_KINDS + k), json_string(hex));
            }
    }
    json_object_del(info->manifest, "manifest_xxh64");
    char *text = ckpt_manifest_text(info->manifest);
    FUZZ_CHECK(text != NULL);
    *len = strlen(text);
    return text;
}

/* The value export must have written for element i of unit u (fp32 bytes,
 * or the bf16 rounding of them), from the master block of its rank file. */
static void expected_value(const zt_ckpt_info *info, const buffer *files, int u, size_t i, int bf16,
                           unsigned char *out) {
    size_t S = zt_ckpt_unit_shard(info, u), r = i / S;
    FUZZ_CHECK(r < (size_t)info->world_size);
    size_t off = ckpt_block_offset(info, u, 0) + (i % S) * sizeof(float);
    FUZZ_CHECK(off + sizeof(float) <= files[r].len);
    float v;
    memcpy(&v, files[r].data + off, sizeof v);
    if (bf16) {
        zt_bf16 h = zt_f32_to_bf16(v);
        memcpy(out, &h, sizeof h);
    } else memcpy(out, &v, sizeof v);
}

typedef struct {
    size_t lo, hi;
} span;

static int by_lo(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* OUT after a successful export, against the manifest it came from. */
static void check_output(const char *out, const zt_ckpt_info *info, const buffer *files, int bf16) {
    /* read by its size (zt_read_file's buffer of its maximum costs ASan a
     * shadow fill per call) */
    struct stat sb;
    FUZZ_CHECK(stat(out, &sb) == 0 && sb.st_size >= 0);
    size_t size = (size_t)sb.st_size;
    char *file = malloc(size ? size : 1);
    FUZZ_CHECK(file != NULL);
    int fd = open(out, O_RDONLY);
    FUZZ_CHECK(fd >= 0 && read(fd, file, size) == (ssize_t)size);
    close(fd);
    FUZZ_CHECK(size >= 8);
    uint64_t hlen;
    memcpy(&hlen, file, 8);
    FUZZ_CHECK(hlen % 8 == 0 && hlen <= size - 8);
    json_error_t jerr;
    json_t *header = json_loadb(file + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    FUZZ_CHECK(json_is_object(header));
    const unsigned char *data = (const unsigned char *)file + 8 + hlen;
    size_t data_bytes = size - 8 - (size_t)hlen, esize = bf16 ? 2 : 4;
    const json_t *units = json_object_get(info->manifest, "units");
    size_t nparams = 0;
    for (int u = 0; u < info->nunits; u++)
        nparams += json_array_size(json_object_get(json_array_get(units, (size_t)u), "params"));
    FUZZ_CHECK(json_object_size(header) == nparams + 1); /* one tensor per parameter, and __metadata__ */
    FUZZ_CHECK(json_is_object(json_object_get(header, "__metadata__")));
    span *spans = malloc((nparams + 1) * sizeof *spans);
    FUZZ_CHECK(spans != NULL);
    size_t ns = 0;
    for (int u = 0; u < info->nunits; u++) {
        const json_t *uj = json_array_get(units, (size_t)u), *params = json_object_get(uj, "params");
        for (size_t p = 0; p < json_array_size(params); p++) {
            const json_t *pj = json_array_get(params, p);
            char name[96];
            snprintf(name, sizeof name, "%s.%s", json_string_value(json_object_get(uj, "name")),
                     json_string_value(json_object_get(pj, "name")));
            const json_t *t = json_object_get(header, name), *range = json_object_get(t, "data_offsets");
            FUZZ_CHECK(json_is_object(t) && json_array_size(range) == 2);
            FUZZ_CHECK(json_equal(json_object_get(t, "shape"), json_object_get(pj, "shape")));
            FUZZ_CHECK(strcmp(json_string_value(json_object_get(t, "dtype")), bf16 ? "BF16" : "F32") == 0);
            json_int_t a = json_integer_value(json_array_get(range, 0));
            json_int_t b = json_integer_value(json_array_get(range, 1));
            size_t off = (size_t)json_integer_value(json_object_get(pj, "offset"));
            size_t n = (size_t)json_integer_value(json_object_get(pj, "numel"));
            FUZZ_CHECK(a >= 0 && b >= a && (size_t)b <= data_bytes && (size_t)(b - a) == n * esize);
            spans[ns++] = (span){(size_t)a, (size_t)b};
            for (size_t i = 0; i < n; i++) {
                unsigned char want[4];
                expected_value(info, files, u, off + i, bf16, want);
                FUZZ_CHECK(memcmp(data + (size_t)a + i * esize, want, esize) == 0);
            }
        }
    }
    qsort(spans, ns, sizeof *spans, by_lo);
    size_t at = 0;
    for (size_t s = 0; s < ns; s++) {
        FUZZ_CHECK(spans[s].lo == at); /* no gap, no overlap */
        at = spans[s].hi;
    }
    FUZZ_CHECK(at == data_bytes);
    free(spans);
    json_decref(header);
    free(file);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    make_base();
    int flags = data[0];
    const char *in = (const char *)data + 1, *end = (const char *)data + size;
    const char *latest = memmem(in, (size_t)(end - in), SEP_LATEST, strlen(SEP_LATEST));
    size_t latest_len = 0;
    if (latest) {
        end = latest;
        latest += strlen(SEP_LATEST);
        latest_len = (size_t)((const char *)data + size - latest);
    }
    /* split: the manifest, then the rank files */
    buffer files[MAX_FILES];
    int nfiles = 0;
    const char *sep = memmem(in, (size_t)(end - in), SEP, strlen(SEP));
    size_t mlen = sep ? (size_t)(sep - in) : (size_t)(end - in);
    while (sep && nfiles < MAX_FILES) {
        const char *start = sep + strlen(SEP);
        sep = memmem(start, (size_t)(end - start), SEP, strlen(SEP));
        size_t n = (size_t)((sep ? sep : end) - start);
        files[nfiles].data = malloc(n ? n : 1);
        FUZZ_CHECK(files[nfiles].data != NULL);
        if (n) memcpy(files[nfiles].data, start, n);
        files[nfiles++].len = n;
    }
    char *manifest = malloc(mlen ? mlen : 1);
    FUZZ_CHECK(manifest != NULL);
    if (mlen) memcpy(manifest, in, mlen);
    if (flags & F_SIZES) {
        size_t n;
        char *fixed = fix_sizes(manifest, mlen, &n);
        if (fixed) {
            free(manifest);
            manifest = fixed;
            mlen = n;
        }
    }
    if (flags & F_SEAL) {
        char *sealed = fuzz_reseal(manifest, mlen, &mlen);
        free(manifest);
        manifest = sealed;
    }
    zt_ckpt_info info;
    memset(&info, 0, sizeof info);
    zt_error perr = {0};
    if ((flags & (F_FIT | F_HASH)) && zt_ckpt_parse_manifest(manifest, mlen, "manifest.json", &info, &perr) == ZT_OK) {
        if (flags & F_FIT) {
            /* rank files the input left out are made from nothing */
            for (; nfiles < info.world_size && nfiles < MAX_FILES; nfiles++) files[nfiles] = (buffer){calloc(1, 1), 0};
            for (int r = 0; r < info.world_size && r < nfiles; r++) fit_file(&info, &files[r]);
        }
        if (flags & F_HASH) {
            free(manifest);
            manifest = rehash(&info, files, nfiles, &mlen);
        }
    }
    zt_ckpt_close(&info);

    /* the checkpoint on disk */
    char dir[600], step[700], path[800], out[600], tmp[700];
    snprintf(dir, sizeof dir, "%s/ckpt", base);
    snprintf(step, sizeof step, "%s/step-000001", dir);
    snprintf(out, sizeof out, "%s/out.safetensors", base);
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    FUZZ_CHECK(mkdir(dir, 0755) == 0 && mkdir(step, 0755) == 0);
    snprintf(path, sizeof path, "%s/manifest.json", step);
    write_file(path, manifest, mlen);
    for (int r = 0; r < nfiles; r++) {
        snprintf(path, sizeof path, "%s/rank%d.bin", step, r);
        write_file(path, files[r].data, files[r].len);
    }
    int where = flags & F_WHERE;
    snprintf(path, sizeof path, "%s/latest", dir);
    if (latest) write_file(path, latest, latest_len);
    else if (where == 0x10 || where == 0x30) write_file(path, where == 0x10 ? "step-000001\n" : "step-000007\n", 12);

    int fd_before = lowest_free_fd();
    zt_error err = {0};
    int bf16 = (flags & F_BF16) != 0;
    zt_status st = zt_export_safetensors(where ? dir : step, out, bf16, &err);
    FUZZ_CHECK(lowest_free_fd() == fd_before); /* nothing left open */
    FUZZ_CHECK(access(tmp, F_OK) != 0);
    if (fuzz_verbose()) fprintf(stderr, "fuzz_export: %s\n", st == ZT_OK ? "exported" : err.msg);
    if (st == ZT_OK) {
        /* what was exported: the manifest as written must parse */
        memset(&info, 0, sizeof info);
        FUZZ_CHECK(zt_ckpt_parse_manifest(manifest, mlen, "manifest.json", &info, &perr) == ZT_OK);
        check_output(out, &info, files, bf16);
        zt_ckpt_close(&info);
        FUZZ_CHECK(unlink(out) == 0);
    } else {
        FUZZ_CHECK(err.msg[0] != '\0');
        FUZZ_CHECK(access(out, F_OK) != 0);
    }
    FUZZ_CHECK(zt_remove_tree(dir, &err) == ZT_OK);
    for (int r = 0; r < nfiles; r++) free(files[r].data);
    free(manifest);
    return 0;
}
