/* zt_import_hf: a Hugging Face directory as a zt_param_init_fn
 * (zt_import_hf.h). Opening reads config.json and the safetensors headers
 * only; values are read later, one whole tensor at a time, when the engine
 * asks for elements that come from it. docs/interop_export.md, "Import". */
#include "zt_import_hf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hf_import_internal.h"
#include "zt_dtype.h"
#include "zt_fs.h"

#define HF_HEADER_MAX ((uint64_t)100 << 20) /* safetensors' own limit on a header */
#define HF_FILES_MAX 4096

/* One tensor of a safetensors file, as its header says. */
typedef struct {
    char name[96];
    int file;            /* index into files */
    int dtype;           /* zt_dtype, or -1: a dtype zerotrain does not read */
    char dtype_name[12]; /* as the header spells it: "F32" */
    int ndim;
    int64_t shape[2];
    uint64_t begin, end; /* byte offsets of the data in the file */
    int used;            /* an expected tensor matched it */
} hf_entry;

struct zt_hf_import {
    char dir[1024];
    char (*files)[256]; /* [nfiles] names in dir */
    int nfiles;
    hf_entry *entries; /* [nentries] every tensor of every file */
    int nentries, cap_entries;
    hf_tensor *tensors; /* [ntensors] what the layout expects, in transformers' order */
    int *entry_of;      /* [ntensors] its entry */
    int ntensors;
    int cached;         /* the tensor in vals (-1: none) */
    float *vals;        /* [largest tensor] fp32 in zerotrain's layout [rows, cols] */
    void *raw;          /* [largest tensor's bytes] as stored in the file */
    size_t vals_cap, raw_cap;
    zt_status st;       /* the first failed read of an init call */
    zt_error err;
    int reads;
    size_t bytes_read;
};

static size_t numel_of(const hf_tensor *t) { return (size_t)t->rows * (size_t)t->cols; }

/* The layout wants a manifest's unit list: the spec's, in that shape. */
static json_t *spec_units(const zt_model_spec *spec) {
    json_t *units = json_array();
    for (int u = 0; u < spec->nunits; u++) {
        const zt_unit_spec *usp = &spec->units[u];
        json_t *params = json_array();
        for (int p = 0; p < usp->nparams; p++) {
            const zt_param_spec *ps = &usp->params[p];
            json_t *shape = json_array();
            for (int i = 0; i < ps->ndim; i++) json_array_append_new(shape, json_integer(ps->shape[i]));
            json_array_append_new(params, json_pack("{s:s,s:o,s:I}", "name", ps->name, "shape", shape, "offset",
                                                    (json_int_t)ps->offset));
        }
        json_array_append_new(units, json_pack("{s:s,s:o}", "name", usp->name, "params", params));
    }
    return units;
}

/* A missing file is the user's input (ZT_ERR_INVALID: exit 2), an
 * unreadable one the file system's. */
static zt_status read_json(const char *path, json_t **out, zt_error *err) {
    json_error_t je;
    *out = NULL;
    if (access(path, F_OK) != 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--init-from: %s does not exist (a Hugging Face model directory has a "
                       "config.json and model.safetensors or model.safetensors.index.json)", path);
    *out = json_load_file(path, 0, &je);
    if (!*out)
        return ZT_FAIL(err, access(path, R_OK) == 0 ? ZT_ERR_INVALID : ZT_ERR_IO, "--init-from: %s: %s (line %d)",
                       path, je.text, je.line);
    return ZT_OK;
}

static zt_status add_file(zt_hf_import *imp, const char *name, zt_error *err) {
    for (int f = 0; f < imp->nfiles; f++)
        if (strcmp(imp->files[f], name) == 0) return ZT_OK;
    if (strchr(name, '/') || strlen(name) >= sizeof imp->files[0] || imp->nfiles >= HF_FILES_MAX)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--init-from %s: model.safetensors.index.json names file \"%s\" (a name "
                       "in the directory is needed)", imp->dir, name);
    snprintf(imp->files[imp->nfiles++], sizeof imp->files[0], "%s", name);
    return ZT_OK;
}

/* The safetensors files: those model.safetensors.index.json's weight_map
 * names (a sharded save), else model.safetensors (what transformers
 * loads: it, too, takes the index first). */
static zt_status list_files(zt_hf_import *imp, zt_error *err) {
    char path[1200];
    imp->files = calloc(HF_FILES_MAX, sizeof *imp->files);
    if (!imp->files) return ZT_FAIL(err, ZT_ERR_OOM, "--init-from: cannot allocate the file list");
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", imp->dir);
    if (access(path, F_OK) != 0) return add_file(imp, "model.safetensors", err);
    json_t *index;
    ZT_TRY(read_json(path, &index, err));
    const json_t *map = json_object_get(index, "weight_map"), *file;
    const char *key;
    zt_status st = json_is_object(map) ? ZT_OK
                   : ZT_FAIL(err, ZT_ERR_INVALID, "--init-from %s: no weight_map object", path);
    json_object_foreach((json_t *)map, key, file) {
        if (st != ZT_OK) break;
        if (!json_is_string(file)) st = ZT_FAIL(err, ZT_ERR_INVALID, "--init-from %s: %s's file is not a string", path, key);
        else st = add_file(imp, json_string_value(file), err);
    }
    json_decref(index);
    return st;
}

static int dtype_of(const char *name) {
    return strcmp(name, "F32") == 0 ? ZT_FP32 : strcmp(name, "BF16") == 0 ? ZT_BF16 : strcmp(name, "F16") == 0 ? ZT_FP16 : -1;
}

/* One header entry into e; data offsets checked against the file's size. */
static zt_status parse_entry(const char *path, const char *name, const json_t *v, uint64_t base, uint64_t size,
                             hf_entry *e, zt_error *err) {
    const json_t *shape = json_object_get(v, "shape"), *offs = json_object_get(v, "data_offsets");
    const char *dtype = json_string_value(json_object_get(v, "dtype"));
    if (strlen(name) >= sizeof e->name || !dtype || !json_is_array(shape) || json_array_size(shape) > 2 ||
        json_array_size(offs) != 2)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--init-from %s: tensor %.100s: a header entry with a dtype, a shape of "
                       "at most 2 dimensions and data_offsets is needed", path, name);
    snprintf(e->name, sizeof e->name, "%s", name);
    snprintf(e->dtype_name, sizeof e->dtype_name, "%s", dtype);
    e->dtype = dtype_of(dtype);
    e->ndim = (int)json_array_size(shape);
    for (int i = 0; i < e->ndim; i++) e->shape[i] = json_integer_value(json_array_get(shape, (size_t)i));
    json_int_t lo = json_integer_value(json_array_get(offs, 0)), hi = json_integer_value(json_array_get(offs, 1));
    if (lo < 0 || hi < lo || base + (uint64_t)hi > size)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--init-from %s: tensor %s: data_offsets [%lld, %lld] pass the file's "
                       "%llu data bytes", path, name, (long long)lo, (long long)hi,
                       (unsigned long long)(size - base));
    e->begin = base + (uint64_t)lo, e->end = base + (uint64_t)hi;
    return ZT_OK;
}

static zt_status add_entries(zt_hf_import *imp, int f, const char *path, const json_t *header, uint64_t base,
                             uint64_t size, zt_error *err) {
    const char *name;
    const json_t *v;
    json_object_foreach((json_t *)header, name, v) {
        if (strcmp(name, "__metadata__") == 0) continue;
        if (imp->nentries == imp->cap_entries) {
            int cap = imp->cap_entries ? 2 * imp->cap_entries : 256;
            hf_entry *grown = realloc(imp->entries, (size_t)cap * sizeof *grown);
            if (!grown) return ZT_FAIL(err, ZT_ERR_OOM, "--init-from: cannot allocate %d tensor entries", cap);
            imp->entries = grown, imp->cap_entries = cap;
        }
        hf_entry *e = &imp->entries[imp->nentries];
        memset(e, 0, sizeof *e);
        ZT_TRY(parse_entry(path, name, v, base, size, e, err));
        e->file = f;
        imp->nentries++;
    }
    return ZT_OK;
}

/* File f's header: u64 little-endian length, then that much JSON. */
static zt_status read_header(zt_hf_import *imp, int f, zt_error *err) {
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", imp->dir, imp->files[f]);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return ZT_FAIL(err, errno == ENOENT ? ZT_ERR_INVALID : ZT_ERR_IO, "--init-from: cannot open %s: %s", path,
                       strerror(errno));
    struct stat sb;
    uint64_t hlen = 0;
    char *text = NULL;
    zt_status st = ZT_OK;
    if (fstat(fd, &sb) != 0 || pread(fd, &hlen, 8, 0) != 8 || hlen == 0 || hlen > HF_HEADER_MAX ||
        8 + hlen > (uint64_t)sb.st_size)
        st = ZT_FAIL(err, ZT_ERR_INVALID, "--init-from %s: not a safetensors file (a header length of %llu bytes "
                     "in a file of %lld)", path, (unsigned long long)hlen, (long long)sb.st_size);
    if (st == ZT_OK && !(text = malloc(hlen)))
        st = ZT_FAIL(err, ZT_ERR_OOM, "--init-from: cannot allocate %s's header", path);
    if (st == ZT_OK && pread(fd, text, hlen, 8) != (ssize_t)hlen)
        st = ZT_FAIL(err, ZT_ERR_IO, "--init-from: cannot read %s's header", path);
    close(fd);
    json_error_t je;
    json_t *header = st == ZT_OK ? json_loadb(text, hlen, 0, &je) : NULL;
    if (st == ZT_OK && !json_is_object(header))
        st = ZT_FAIL(err, ZT_ERR_INVALID, "--init-from %s: its header is not a JSON object (%s)", path,
                     header ? "another value" : je.text);
    if (st == ZT_OK) st = add_entries(imp, f, path, header, 8 + hlen, (uint64_t)sb.st_size, err);
    json_decref(header);
    free(text);
    return st;
}

/* "[3, 4]", "[7]", "[]" */
static void shape_text(const int64_t *shape, int ndim, char *out, size_t cap) {
    if (ndim == 2) snprintf(out, cap, "[%lld, %lld]", (long long)shape[0], (long long)shape[1]);
    else if (ndim == 1) snprintf(out, cap, "[%lld]", (long long)shape[0]);
    else snprintf(out, cap, "[]");
}

/* Expected tensor i against its entry: name, shape, dtype, size. */
static void check_entry(zt_hf_import *imp, int i, hf_notes *n) {
    const hf_tensor *t = &imp->tensors[i];
    int e = -1;
    for (int k = 0; k < imp->nentries; k++)
        if (strcmp(imp->entries[k].name, t->name) == 0) {
            if (e >= 0) hf_note(n, "%s is in both %s and %s", t->name, imp->files[imp->entries[e].file],
                                imp->files[imp->entries[k].file]);
            e = k;
            imp->entries[k].used = 1;
        }
    imp->entry_of[i] = e;
    if (e < 0) return hf_note(n, "missing %s", t->name);
    const hf_entry *h = &imp->entries[e];
    int64_t want[2] = {t->transpose ? t->cols : t->rows, t->transpose ? t->rows : t->cols};
    int want_ndim = t->vector ? 1 : 2;
    if (h->ndim != want_ndim || h->shape[0] != want[0] || (want_ndim == 2 && h->shape[1] != want[1])) {
        char have_s[48], want_s[48];
        shape_text(h->shape, h->ndim, have_s, sizeof have_s);
        shape_text(want, want_ndim, want_s, sizeof want_s);
        hf_note(n, "%s has shape %s, the model needs %s", t->name, have_s, want_s);
    }
    else if (h->dtype < 0) hf_note(n, "%s has dtype %s (F32, BF16 and F16 are read)", t->name, h->dtype_name);
    else if (h->end - h->begin != numel_of(t) * zt_dtype_size((zt_dtype)h->dtype))
        hf_note(n, "%s has %llu data bytes for its shape's %zu", t->name, (unsigned long long)(h->end - h->begin),
                numel_of(t) * zt_dtype_size((zt_dtype)h->dtype));
}

/* Every expected tensor matched, nothing left over; all problems in one error. */
static zt_status match_entries(zt_hf_import *imp, zt_error *err) {
    hf_notes n = {.text = ""};
    for (int i = 0; i < imp->ntensors; i++) check_entry(imp, i, &n);
    for (int k = 0; k < imp->nentries; k++)
        if (!imp->entries[k].used) hf_note(&n, "unknown %s (in %s)", imp->entries[k].name, imp->files[imp->entries[k].file]);
    if (n.count == 0) return ZT_OK;
    hf_notes_finish(&n);
    return ZT_FAIL(err, ZT_ERR_INVALID, "--init-from %s: %d tensor problem(s) for this model: %s", imp->dir, n.count,
                   n.text);
}

/* Every element of every parameter comes from some tensor (a guard on the
 * layout's tables: an uncovered one would silently start at zero). */
static zt_status check_coverage(const zt_hf_import *imp, const zt_model_spec *spec, zt_error *err) {
    for (int u = 0; u < spec->nunits; u++)
        for (int p = 0; p < spec->units[u].nparams; p++) {
            size_t covered = 0;
            for (int i = 0; i < imp->ntensors; i++)
                if (imp->tensors[i].unit == u && imp->tensors[i].param == p) covered += numel_of(&imp->tensors[i]);
            if (covered != spec->units[u].params[p].numel)
                return ZT_FAIL(err, ZT_ERR_INTERNAL, "--init-from: %zu of %s.%s's %zu elements have a Hugging Face "
                               "tensor", covered, spec->units[u].name, spec->units[u].params[p].name,
                               spec->units[u].params[p].numel);
        }
    return ZT_OK;
}

/* The expected tensors of the model `model` describes, over spec's units. */
static zt_status expect_tensors(zt_hf_import *imp, const hf_model *m, const zt_model_spec *spec, zt_error *err) {
    int cap = hf_tensor_count_max(m);
    imp->tensors = calloc((size_t)cap, sizeof *imp->tensors);
    imp->entry_of = calloc((size_t)cap, sizeof *imp->entry_of);
    json_t *units = spec_units(spec);
    if (!imp->tensors || !imp->entry_of || !units) {
        json_decref(units);
        return ZT_FAIL(err, ZT_ERR_OOM, "--init-from: cannot allocate %d tensors", cap);
    }
    zt_status st = hf_tensors_of(units, "the run's model", m, imp->tensors, cap, &imp->ntensors, err);
    json_decref(units);
    return st != ZT_OK ? st : check_coverage(imp, spec, err);
}

/* The cache: one tensor, fp32 and as stored (O(largest tensor)). */
static zt_status alloc_cache(zt_hf_import *imp, zt_error *err) {
    for (int i = 0; i < imp->ntensors; i++) {
        const hf_entry *h = &imp->entries[imp->entry_of[i]];
        if (numel_of(&imp->tensors[i]) > imp->vals_cap) imp->vals_cap = numel_of(&imp->tensors[i]);
        if (h->end - h->begin > imp->raw_cap) imp->raw_cap = h->end - h->begin;
    }
    imp->vals = malloc(imp->vals_cap * sizeof(float) + 4);
    imp->raw = malloc(imp->raw_cap + 4);
    if (!imp->vals || !imp->raw)
        return ZT_FAIL(err, ZT_ERR_OOM, "--init-from: cannot allocate a tensor cache of %zu bytes",
                       imp->vals_cap * sizeof(float) + imp->raw_cap);
    return ZT_OK;
}

static zt_status open_checked(zt_hf_import *imp, const json_t *model, const zt_model_spec *spec, zt_error *err) {
    hf_model m;
    char path[1200];
    ZT_TRY(hf_model_parse(model, "the run's model", &m, err));
    snprintf(path, sizeof path, "%s/config.json", imp->dir);
    json_t *cfg;
    ZT_TRY(read_json(path, &cfg, err));
    zt_status st = hf_config_check(cfg, &m, path, err);
    json_decref(cfg);
    ZT_TRY(st);
    ZT_TRY(expect_tensors(imp, &m, spec, err));
    ZT_TRY(list_files(imp, err));
    for (int f = 0; f < imp->nfiles; f++) ZT_TRY(read_header(imp, f, err));
    ZT_TRY(match_entries(imp, err));
    return alloc_cache(imp, err);
}

zt_status zt_hf_import_open(const char *dir, const json_t *model, const zt_model_spec *spec, zt_hf_import **out,
                            zt_error *err) {
    *out = NULL;
    if (strlen(dir) >= 1000) return ZT_FAIL(err, ZT_ERR_INVALID, "--init-from: path too long: %.64s...", dir);
    zt_hf_import *imp = calloc(1, sizeof *imp);
    if (!imp) return ZT_FAIL(err, ZT_ERR_OOM, "--init-from: cannot allocate");
    snprintf(imp->dir, sizeof imp->dir, "%s", dir);
    imp->cached = -1;
    zt_status st = open_checked(imp, model, spec, err);
    if (st != ZT_OK) zt_hf_import_close(imp);
    else *out = imp;
    return st;
}

/* Tensor i read whole into vals in zerotrain's layout: [rows, cols], from
 * the file's [rows, cols] or, transposed (Conv1D), [cols, rows]. */
static zt_status load_tensor(zt_hf_import *imp, int i, zt_error *err) {
    const hf_tensor *t = &imp->tensors[i];
    const hf_entry *h = &imp->entries[imp->entry_of[i]];
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", imp->dir, imp->files[h->file]);
    size_t bytes = h->end - h->begin, R = (size_t)t->rows, K = (size_t)t->cols;
    imp->cached = -1;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return ZT_FAIL(err, ZT_ERR_IO, "--init-from: cannot open %s: %s", path, strerror(errno));
    size_t got = 0;
    while (got < bytes) {
        ssize_t k = pread(fd, (char *)imp->raw + got, bytes - got, (off_t)(h->begin + got));
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(fd);
    if (got < bytes) return ZT_FAIL(err, ZT_ERR_IO, "--init-from: %s: short read of %s", path, t->name);
    for (size_t r = 0; r < R; r++)
        for (size_t c = 0; c < K; c++)
            imp->vals[r * K + c] = zt_dtype_load(imp->raw, (zt_dtype)h->dtype, t->transpose ? c * R + r : r * K + c);
    imp->cached = i, imp->reads++, imp->bytes_read += bytes;
    return ZT_OK;
}

void zt_hf_import_init(void *arg, int unit, int param, size_t first, size_t count, float *dst) {
    zt_hf_import *imp = arg;
    for (int i = 0; i < imp->ntensors; i++) {
        const hf_tensor *t = &imp->tensors[i];
        if (t->unit != unit || t->param != param) continue;
        /* the tensor's elements in the parameter: rows [row0, row0 + rows) */
        size_t lo = (size_t)t->row0 * (size_t)t->cols, hi = lo + numel_of(t);
        size_t a = first > lo ? first : lo, b = first + count < hi ? first + count : hi;
        if (a >= b || imp->st != ZT_OK) continue; /* after a failed read the rest stays zero; reported once */
        if (imp->cached != i && (imp->st = load_tensor(imp, i, &imp->err)) != ZT_OK) continue;
        memcpy(dst + (a - first), imp->vals + (a - lo), (b - a) * sizeof(float));
    }
}

zt_status zt_hf_import_result(const zt_hf_import *imp, zt_error *err) {
    if (imp->st == ZT_OK) return ZT_OK;
    zt_error_adopt(err, imp->st, imp->err.where, imp->err.msg);
    return imp->st;
}

void zt_hf_import_counts(const zt_hf_import *imp, int *tensors, size_t *bytes_read, size_t *peak_cache) {
    *tensors = imp->reads;
    *bytes_read = imp->bytes_read;
    *peak_cache = imp->vals_cap * sizeof(float) + imp->raw_cap;
}

const char *zt_hf_import_dir(const zt_hf_import *imp) { return imp->dir; }

void zt_hf_import_close(zt_hf_import *imp) {
    if (!imp) return;
    free(imp->files);
    free(imp->entries);
    free(imp->tensors);
    free(imp->entry_of);
    free(imp->vals);
    free(imp->raw);
    free(imp);
}
