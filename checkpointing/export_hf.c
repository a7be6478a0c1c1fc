/* zt_export_hf: a checkpoint as a Hugging Face model directory
 * (model.safetensors, or model-0000K-of-0000N.safetensors and
 * model.safetensors.index.json above the shard size, then config.json),
 * the tensors named, split and transposed as hf_layout.h says. Each file is
 * written to NAME.tmp, fsynced and renamed; config.json goes last, so a
 * directory with a config.json holds a complete export. The checkpoint is
 * only read. docs/interop_export.md. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_internal.h"
#include "hf_layout.h"
#include "zt_fs.h"

/* One export in progress: the tensors, which shard each goes to, and the
 * buffers that carry one unit and one tensor at a time. */
typedef struct {
    const zt_ckpt_info *info;
    hf_tensor *tensors; /* [n] in transformers' order */
    int *shard_of;      /* [n] */
    int n, nshards;
    zt_dtype dtype;
    float *unit_vals;   /* [largest unit numel] fp32: the cached unit's master values */
    int cached_unit;    /* -1: none */
    float *tbuf;        /* [largest tensor] fp32, in the written layout */
    uint16_t *half;     /* [largest tensor] bf16 or fp16, or NULL for fp32 */
} hf_export;

static size_t tensor_numel(const hf_tensor *t) { return (size_t)t->rows * (size_t)t->cols; }

static size_t tensor_bytes(const hf_export *x, const hf_tensor *t) {
    return tensor_numel(t) * zt_dtype_size(x->dtype);
}

static void shard_name(const hf_export *x, int s, char *out, size_t cap) {
    if (x->nshards == 1) snprintf(out, cap, "model.safetensors");
    else snprintf(out, cap, "model-%05d-of-%05d.safetensors", s + 1, x->nshards);
}

/* transformers' rule (huggingface_hub's split_torch_state_dict_into_shards):
 * tensors in order, a new shard when the next one would pass the limit; a
 * tensor over the limit alone fills a shard. */
static void plan_shards(hf_export *x, uint64_t max_bytes) {
    uint64_t filled = 0;
    int s = 0;
    for (int i = 0; i < x->n; i++) {
        uint64_t b = tensor_bytes(x, &x->tensors[i]);
        if (filled > 0 && filled + b > max_bytes) s++, filled = 0;
        x->shard_of[i] = s;
        filled += b;
    }
    x->nshards = s + 1;
}

/* The safetensors header of shard s; *data_bytes gets its data's size. */
static json_t *shard_header(const hf_export *x, int s, size_t *data_bytes) {
    static const char *const st_dtype[] = {[ZT_FP32] = "F32", [ZT_BF16] = "BF16", [ZT_FP16] = "F16"};
    json_t *header = json_object();
    char step[32];
    snprintf(step, sizeof step, "%d", x->info->step);
    /* transformers refuses a safetensors file whose metadata has no format "pt" */
    json_object_set_new(header, "__metadata__",
                        json_pack("{s:s,s:s,s:s}", "format", "pt", "producer", "zerotrain zt-export", "step", step));
    size_t offset = 0;
    for (int i = 0; i < x->n; i++) {
        const hf_tensor *t = &x->tensors[i];
        if (x->shard_of[i] != s) continue;
        json_t *shape = t->vector ? json_pack("[I]", (json_int_t)t->rows)
                        : t->transpose ? json_pack("[I,I]", (json_int_t)t->cols, (json_int_t)t->rows)
                                       : json_pack("[I,I]", (json_int_t)t->rows, (json_int_t)t->cols);
        size_t b = tensor_bytes(x, t);
        json_object_set_new(header, t->name,
                            json_pack("{s:s,s:o,s:[I,I]}", "dtype", st_dtype[x->dtype], "shape", shape,
                                      "data_offsets", (json_int_t)offset, (json_int_t)(offset + b)));
        offset += b;
    }
    *data_bytes = offset;
    return header;
}

/* Tensor t's elements in the written layout into x->tbuf. */
static zt_status gather_tensor(hf_export *x, const hf_tensor *t, zt_error *err) {
    if (x->cached_unit != t->unit) {
        x->cached_unit = -1;
        ZT_TRY(zt_ckpt_read_range(x->info, t->unit, 0, 0, zt_ckpt_unit_numel(x->info, t->unit), x->unit_vals, err));
        x->cached_unit = t->unit;
    }
    const float *src = x->unit_vals + t->offset + (size_t)t->row0 * (size_t)t->cols; /* [rows, cols] */
    size_t R = (size_t)t->rows, K = (size_t)t->cols;
    if (!t->transpose) {
        memcpy(x->tbuf, src, R * K * sizeof(float));
        return ZT_OK;
    }
    for (size_t r = 0; r < R; r++) /* tbuf [cols, rows] */
        for (size_t c = 0; c < K; c++) x->tbuf[c * R + r] = src[r * K + c];
    return ZT_OK;
}

static zt_status write_tensor(hf_export *x, const hf_tensor *t, int fd, const char *path, zt_error *err) {
    ZT_TRY(gather_tensor(x, t, err));
    size_t n = tensor_numel(t);
    if (x->dtype == ZT_FP32) return zt_write_all(fd, x->tbuf, n * sizeof(float), path, err);
    for (size_t i = 0; i < n; i++) zt_dtype_store(x->half, x->dtype, i, x->tbuf[i]); /* round to nearest even */
    return zt_write_all(fd, x->half, n * sizeof(uint16_t), path, err);
}

static zt_status write_shard_contents(hf_export *x, int s, int fd, const char *path, zt_error *err) {
    size_t data_bytes;
    zt_status st = ckpt_write_safetensors_header(fd, path, shard_header(x, s, &data_bytes), err);
    for (int i = 0; st == ZT_OK && i < x->n; i++)
        if (x->shard_of[i] == s) st = write_tensor(x, &x->tensors[i], fd, path, err);
    return st;
}

/* Shard s as out_dir/NAME: NAME.tmp written, fsynced, renamed. */
static zt_status write_shard(hf_export *x, int s, const char *out_dir, zt_error *err) {
    char name[64], path[1200], tmp[1300];
    shard_name(x, s, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", out_dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd;
    ZT_TRY(zt_fs_create(tmp, &fd, err));
    zt_status st = write_shard_contents(x, s, fd, tmp, err);
    if (st != ZT_OK) close(fd);
    else st = zt_fs_sync_close(fd, tmp, err);
    if (st == ZT_OK) st = zt_fs_rename(tmp, path, err);
    if (st != ZT_OK) unlink(tmp);
    return st;
}

/* json written whole to out_dir/name, atomically. */
static zt_status write_json(const char *out_dir, const char *name, json_t *j, zt_error *err) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", out_dir, name);
    /* 15 digits: a decimal eps or theta as typed, 1e-05 rather than 1.0000000000000001e-05 */
    char *text = j ? json_dumps(j, JSON_INDENT(2) | JSON_REAL_PRECISION(15)) : NULL;
    json_decref(j);
    if (!text) return ZT_FAIL(err, ZT_ERR_OOM, "export: cannot build %s", path);
    size_t len = strlen(text);
    text[len] = '\n'; /* over the NUL: the file ends in a newline */
    zt_status st = zt_write_file_atomic(path, text, len + 1, err);
    free(text);
    return st;
}

/* model.safetensors.index.json: every tensor's shard, and the bytes of all. */
static json_t *shard_index(const hf_export *x) {
    json_t *map = json_object();
    uint64_t total = 0;
    for (int i = 0; i < x->n; i++) {
        char name[64];
        shard_name(x, x->shard_of[i], name, sizeof name);
        json_object_set_new(map, x->tensors[i].name, json_string(name));
        total += tensor_bytes(x, &x->tensors[i]);
    }
    return json_pack("{s:{s:I},s:o}", "metadata", "total_size", (json_int_t)total, "weight_map", map);
}

/* out_dir exists afterwards, and is neither the checkpoint nor a directory
 * holding one: an export never writes among a checkpoint's files. */
static zt_status prepare_out_dir(const char *out_dir, const zt_ckpt_info *info, zt_error *err) {
    struct stat sb;
    if (stat(out_dir, &sb) == 0 && !S_ISDIR(sb.st_mode))
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s exists and is not a directory (--format hf writes a directory)",
                       out_dir);
    if (stat(out_dir, &sb) != 0) ZT_TRY(zt_mkdir_p(out_dir, err));
    char probe[1200], mine[PATH_MAX], ckpt[PATH_MAX], ckpt_parent[1100], parent[PATH_MAX];
    static const char *const markers[] = {"manifest.json", "latest"};
    for (int k = 0; k < 2; k++) {
        snprintf(probe, sizeof probe, "%s/%s", out_dir, markers[k]);
        if (stat(probe, &sb) == 0)
            return ZT_FAIL(err, ZT_ERR_INVALID, "%s holds a zerotrain checkpoint (%s): refusing to write there",
                           out_dir, markers[k]);
    }
    zt_parent_dir(info->dir, ckpt_parent, sizeof ckpt_parent);
    if (realpath(out_dir, mine) && ((realpath(info->dir, ckpt) && strcmp(mine, ckpt) == 0) ||
                                    (realpath(ckpt_parent, parent) && strcmp(mine, parent) == 0)))
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s is the checkpoint's directory: refusing to write there", out_dir);
    return ZT_OK;
}

/* The previous export's other form goes (transformers would take a stale
 * model.safetensors over a new index). */
static void remove_stale(const hf_export *x, const char *out_dir) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", out_dir, x->nshards == 1 ? "model.safetensors.index.json" : "model.safetensors");
    unlink(path);
}

/* Buffers for the largest unit and the largest tensor. */
static zt_status alloc_buffers(hf_export *x, zt_error *err) {
    size_t unit = 0, tensor = 0;
    for (int u = 0; u < x->info->nunits; u++)
        if (zt_ckpt_unit_numel(x->info, u) > unit) unit = zt_ckpt_unit_numel(x->info, u);
    for (int i = 0; i < x->n; i++)
        if (tensor_numel(&x->tensors[i]) > tensor) tensor = tensor_numel(&x->tensors[i]);
    x->unit_vals = malloc(unit * sizeof(float) + 4);
    x->tbuf = malloc(tensor * sizeof(float) + 4);
    x->half = x->dtype != ZT_FP32 ? malloc(tensor * sizeof(uint16_t) + 2) : NULL;
    if (!x->unit_vals || !x->tbuf || (x->dtype != ZT_FP32 && !x->half))
        return ZT_FAIL(err, ZT_ERR_OOM, "export: cannot allocate %zu + %zu floats", unit, tensor);
    return ZT_OK;
}

static zt_status export_files(hf_export *x, const hf_model *m, const char *out_dir, uint64_t max_bytes,
                              zt_error *err) {
    int cap = hf_tensor_count_max(m);
    x->tensors = calloc((size_t)cap, sizeof *x->tensors);
    x->shard_of = calloc((size_t)cap, sizeof *x->shard_of);
    if (!x->tensors || !x->shard_of) return ZT_FAIL(err, ZT_ERR_OOM, "export: cannot allocate %d tensors", cap);
    ZT_TRY(hf_tensors(x->info, m, x->tensors, cap, &x->n, err));
    ZT_TRY(prepare_out_dir(out_dir, x->info, err));
    plan_shards(x, max_bytes);
    ZT_TRY(alloc_buffers(x, err));
    for (int s = 0; s < x->nshards; s++) ZT_TRY(write_shard(x, s, out_dir, err));
    ZT_TRY(zt_fsync_path(out_dir, err)); /* the shards' renames are durable before config.json's */
    if (x->nshards > 1) ZT_TRY(write_json(out_dir, "model.safetensors.index.json", shard_index(x), err));
    ZT_TRY(write_json(out_dir, "config.json", hf_config(m, x->dtype), err));
    remove_stale(x, out_dir);
    return zt_fsync_path(out_dir, err);
}

zt_status zt_export_hf(const char *dir, const char *out_dir, const zt_export_hf_options *o, int *nshards,
                       zt_error *err) {
    if (strlen(out_dir) > 1000) return ZT_FAIL(err, ZT_ERR_INVALID, "output path too long: %s", out_dir);
    if (o->max_shard_bytes == 0) return ZT_FAIL(err, ZT_ERR_INVALID, "export: a maximum shard size of 0 bytes");
    zt_ckpt_info info;
    hf_model m;
    hf_export x = {.info = &info, .dtype = o->dtype, .cached_unit = -1};
    zt_status st = zt_ckpt_open(dir, &info, NULL, 0, err);
    if (st == ZT_OK) st = zt_ckpt_verify(&info, err);
    if (st == ZT_OK) st = hf_model_read(&info, &m, err);
    if (st == ZT_OK) st = export_files(&x, &m, out_dir, o->max_shard_bytes, err);
    if (st == ZT_OK && nshards) *nshards = x.nshards;
    free(x.tensors);
    free(x.shard_of);
    free(x.unit_vals);
    free(x.tbuf);
    free(x.half);
    zt_ckpt_close(&info);
    return st;
}

int zt_parse_byte_size(const char *text, uint64_t *bytes) {
    static const struct {
        const char *suffix;
        double factor;
    } units[] = {{"", 1},        {"B", 1},          {"KB", 1e3},        {"MB", 1e6},          {"GB", 1e9},
                 {"TB", 1e12},   {"KIB", 1024.0},   {"MIB", 1048576.0}, {"GIB", 1073741824.0}, {"TIB", 1099511627776.0}};
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || errno != 0 || !(v > 0) || !isfinite(v)) return 0;
    for (size_t k = 0; k < sizeof units / sizeof units[0]; k++) {
        if (strcasecmp(end, units[k].suffix) != 0) continue;
        double b = v * units[k].factor;
        if (b < 1 || b > 9e18) return 0;
        *bytes = (uint64_t)b;
        return 1;
    }
    return 0;
}
