/* zt_export_safetensors: a checkpoint's consolidated master values as one
 * safetensors file (an 8-byte little-endian header length, a JSON header
 * naming each tensor's dtype, shape and byte range, then the raw
 * little-endian data), written to OUT.tmp with every write checked, fsynced
 * and renamed over OUT. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt_internal.h"
#include "zt_fs.h"

/* The header: every parameter of every unit, in order; *data_bytes gets the
 * size of the data after it. NULL when two parameters would get the same
 * tensor name (dup[] says which): one of them would be left out of the
 * header while its data was still written. */
static json_t *header_json(const zt_ckpt_info *info, zt_dtype dtype, size_t *data_bytes, char *dup, size_t dcap) {
    json_t *units = json_object_get(info->manifest, "units");
    size_t esize = zt_dtype_size(dtype), offset = 0;
    json_t *header = json_object(), *meta = json_object();
    char text[64];
    snprintf(text, sizeof text, "%d", info->step);
    json_object_set_new(meta, "step", json_string(text));
    json_object_set_new(meta, "producer", json_string("zerotrain zt-export"));
    json_object_set_new(header, "__metadata__", meta);
    for (size_t u = 0; u < json_array_size(units); u++) {
        json_t *uj = json_array_get(units, u), *params = json_object_get(uj, "params");
        for (size_t p = 0; p < json_array_size(params); p++) {
            json_t *pj = json_array_get(params, p), *t = json_object(), *range = json_array();
            size_t n = (size_t)json_integer_value(json_object_get(pj, "numel"));
            char name[96];
            snprintf(name, sizeof name, "%s.%s", json_string_value(json_object_get(uj, "name")),
                     json_string_value(json_object_get(pj, "name")));
            if (json_object_get(header, name)) {
                snprintf(dup, dcap, "%s", name);
                json_decref(t);
                json_decref(range);
                json_decref(header);
                return NULL;
            }
            json_object_set_new(t, "dtype", json_string(dtype == ZT_BF16 ? "BF16" : dtype == ZT_FP16 ? "F16" : "F32"));
            json_object_set(t, "shape", json_object_get(pj, "shape"));
            json_array_append_new(range, json_integer((json_int_t)offset));
            json_array_append_new(range, json_integer((json_int_t)(offset + n * esize)));
            json_object_set_new(t, "data_offsets", range);
            json_object_set_new(header, name, t);
            offset += n * esize;
        }
    }
    *data_bytes = offset;
    return header;
}

/* One unit's parameters, from its fp32 master values vals[numel]. */
static zt_status write_unit(int fd, const char *path, const json_t *uj, const float *vals, zt_dtype dtype,
                            uint16_t *half, zt_error *err) {
    json_t *params = json_object_get(uj, "params");
    for (size_t p = 0; p < json_array_size(params); p++) {
        json_t *pj = json_array_get(params, p);
        size_t off = (size_t)json_integer_value(json_object_get(pj, "offset"));
        size_t n = (size_t)json_integer_value(json_object_get(pj, "numel"));
        if (dtype == ZT_FP32) {
            ZT_TRY(zt_write_all(fd, vals + off, n * sizeof(float), path, err));
            continue;
        }
        for (size_t i = 0; i < n; i++) zt_dtype_store(half, dtype, i, vals[off + i]);
        ZT_TRY(zt_write_all(fd, half, n * sizeof(uint16_t), path, err));
    }
    return ZT_OK;
}

zt_status ckpt_write_safetensors_header(int fd, const char *path, json_t *header, zt_error *err) {
    char *htext = header ? json_dumps(header, JSON_COMPACT) : NULL;
    json_decref(header);
    if (!htext) return ZT_FAIL(err, ZT_ERR_OOM, "export: cannot build the header of %s", path);
    size_t hlen = strlen(htext), padded = (hlen + 7) / 8 * 8; /* data starts 8-byte aligned */
    uint64_t le = (uint64_t)padded; /* x86-64 and aarch64 are little-endian */
    zt_status st = zt_write_all(fd, &le, 8, path, err);
    if (st == ZT_OK) st = zt_write_all(fd, htext, hlen, path, err);
    if (st == ZT_OK) st = zt_write_all(fd, "        ", padded - hlen, path, err);
    free(htext);
    return st;
}

static zt_status write_contents(int fd, const char *path, const zt_ckpt_info *info, zt_dtype dtype, zt_error *err) {
    size_t data_bytes;
    char dup[96] = "";
    json_t *header = header_json(info, dtype, &data_bytes, dup, sizeof dup);
    if (dup[0])
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s/manifest.json: two parameters are both named %s (inconsistent)",
                       info->dir, dup);
    zt_status st = ckpt_write_safetensors_header(fd, path, header, err);
    size_t largest = 0;
    for (int u = 0; u < info->nunits; u++)
        if (zt_ckpt_unit_numel(info, u) > largest) largest = zt_ckpt_unit_numel(info, u);
    float *vals = malloc(largest * sizeof(float) + 4);
    uint16_t *half = dtype != ZT_FP32 ? malloc(largest * sizeof(uint16_t) + 2) : NULL; /* [largest] dtype */
    if (st == ZT_OK && (!vals || (dtype != ZT_FP32 && !half))) st = ZT_FAIL(err, ZT_ERR_OOM, "export: cannot allocate");
    json_t *units = json_object_get(info->manifest, "units");
    for (int u = 0; st == ZT_OK && u < info->nunits; u++) {
        st = zt_ckpt_read_range(info, u, 0, 0, zt_ckpt_unit_numel(info, u), vals, err);
        if (st == ZT_OK) st = write_unit(fd, path, json_array_get(units, (size_t)u), vals, dtype, half, err);
    }
    free(vals);
    free(half);
    return st;
}

zt_status zt_export_safetensors(const char *dir, const char *out, zt_dtype dtype, zt_error *err) {
    char tmp[1100], parent[1100];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", out) >= (int)sizeof tmp)
        return ZT_FAIL(err, ZT_ERR_INVALID, "output path too long: %s", out);
    zt_ckpt_info info;
    zt_status st = zt_ckpt_open(dir, &info, NULL, 0, err);
    if (st == ZT_OK) st = zt_ckpt_verify(&info, err);
    int fd = st == ZT_OK ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644) : -1;
    if (st == ZT_OK && fd < 0) st = ZT_FAIL(err, ZT_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    if (st == ZT_OK) st = write_contents(fd, tmp, &info, dtype, err);
    if (st == ZT_OK && fsync(fd) != 0) st = ZT_FAIL(err, ZT_ERR_IO, "%s: fsync failed: %s", tmp, strerror(errno));
    if (fd >= 0 && close(fd) != 0 && st == ZT_OK) st = ZT_FAIL(err, ZT_ERR_IO, "%s: close failed: %s", tmp, strerror(errno));
    if (st == ZT_OK && rename(tmp, out) != 0) st = ZT_FAIL(err, ZT_ERR_IO, "rename %s -> %s: %s", tmp, out, strerror(errno));
    zt_parent_dir(out, parent, sizeof parent);
    if (st == ZT_OK) st = zt_fsync_path(parent, err);
    if (st != ZT_OK && fd >= 0) unlink(tmp);
    zt_ckpt_close(&info);
    return st;
}
