/* The checkpoint manifest: its self-checksum, and a parser that checks every
 * field a reader relies on, so that no index or size taken from a damaged or
 * hostile manifest can reach outside a buffer (tests/fuzz/fuzz_manifest.c). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ckpt_internal.h"

#define CHECKSUM_KEY "\"manifest_xxh64\": \""
#define MAX_ELEMENTS ((json_int_t)1 << 40) /* per unit: far beyond any model here, far below overflow */

char *ckpt_manifest_seal(const char *head, size_t n, size_t *len) {
    size_t cap = n + strlen(CHECKSUM_KEY) + 32;
    char *text = malloc(cap);
    if (!text) return NULL;
    memcpy(text, head, n);
    int tail = snprintf(text + n, cap - n, CHECKSUM_KEY "%016llx\"\n}\n", (unsigned long long)XXH64(head, n, 0));
    if (len) *len = n + (size_t)tail;
    return text;
}

char *ckpt_manifest_text(const json_t *m) {
    char *body = json_dumps(m, JSON_INDENT(1));
    if (!body) return NULL;
    size_t n = strlen(body);
    /* body ends in "\n}": the checksum becomes the last key, over every byte before it */
    if (n < 2 || strcmp(body + n - 2, "\n}") != 0) {
        free(body);
        return NULL;
    }
    memcpy(body + n - 2, ",\n ", 3); /* over "\n}" and the NUL: the head is n + 1 bytes */
    char *text = ckpt_manifest_seal(body, n + 1, NULL);
    free(body);
    return text;
}

/* The checksum covers every byte before its key, and the file must end with
 * exactly the key, 16 hex digits and the closing brace. */
static int checksum_ok(const char *text, size_t len) {
    const char *key = NULL;
    for (const char *p = text; (p = memmem(p, len - (size_t)(p - text), CHECKSUM_KEY, strlen(CHECKSUM_KEY)));
         p++)
        key = p;
    if (!key) return 0;
    size_t hashed = (size_t)(key - text);
    char want[64];
    int w = snprintf(want, sizeof want, CHECKSUM_KEY "%016llx\"\n}\n", (unsigned long long)XXH64(text, hashed, 0));
    return len - hashed == (size_t)w && memcmp(key, want, (size_t)w) == 0;
}

static int int_in(const json_t *v, json_int_t lo, json_int_t hi) {
    return json_is_integer(v) && json_integer_value(v) >= lo && json_integer_value(v) <= hi;
}

static int short_string(const json_t *v, size_t cap) {
    return json_is_string(v) && json_string_length(v) > 0 && json_string_length(v) < cap &&
           strlen(json_string_value(v)) == json_string_length(v);
}

static int is_hex16(const json_t *v) {
    if (!json_is_string(v) || json_string_length(v) != 16) return 0;
    for (const char *p = json_string_value(v); *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return 0;
    return 1;
}

/* One parameter of a unit of `numel` elements: a shape whose product is its
 * numel, inside the unit. */
static int param_ok(const json_t *pj, json_int_t numel) {
    const json_t *shape = json_object_get(pj, "shape");
    if (!json_is_object(pj) || !short_string(json_object_get(pj, "name"), 32) || !json_is_array(shape) ||
        json_array_size(shape) < 1 || json_array_size(shape) > 4)
        return 0;
    json_int_t product = 1;
    for (size_t i = 0; i < json_array_size(shape); i++) {
        const json_t *d = json_array_get(shape, i);
        if (!int_in(d, 1, MAX_ELEMENTS) || json_integer_value(d) > MAX_ELEMENTS / product) return 0;
        product *= json_integer_value(d);
    }
    const json_t *off = json_object_get(pj, "offset"), *n = json_object_get(pj, "numel");
    return int_in(off, 0, numel) && int_in(n, 0, numel) && json_integer_value(n) == product &&
           json_integer_value(off) + json_integer_value(n) <= numel;
}

static int unit_ok(const json_t *uj, json_int_t world) {
    const json_t *numel = json_object_get(uj, "numel"), *padded = json_object_get(uj, "padded_numel");
    const json_t *shard = json_object_get(uj, "shard_numel"), *params = json_object_get(uj, "params");
    if (!json_is_object(uj) || !short_string(json_object_get(uj, "name"), 32) || !int_in(numel, 0, MAX_ELEMENTS) ||
        !int_in(shard, 0, MAX_ELEMENTS) || !int_in(padded, 0, MAX_ELEMENTS) || !json_is_array(params) ||
        json_array_size(params) > 32)
        return 0;
    if (json_integer_value(shard) * world != json_integer_value(padded) ||
        json_integer_value(numel) > json_integer_value(padded))
        return 0;
    for (size_t p = 0; p < json_array_size(params); p++)
        if (!param_ok(json_array_get(params, p), json_integer_value(numel))) return 0;
    return 1;
}

size_t ckpt_rank_file_bytes(const zt_ckpt_info *info) {
    size_t bytes = CKPT_HEADER, d = zt_dtype_size(info->dtype);
    for (int u = 0; u < info->nunits; u++) bytes += zt_ckpt_unit_shard(info, u) * (12 + d);
    return bytes;
}

static int file_ok(const zt_ckpt_info *info, const json_t *fj, int r) {
    char name[32];
    snprintf(name, sizeof name, "rank%d.bin", r);
    const json_t *blocks = json_object_get(fj, "blocks"), *fname = json_object_get(fj, "name");
    if (!json_is_object(fj) || !json_is_string(fname) || strcmp(json_string_value(fname), name) != 0 ||
        !json_is_array(blocks) ||
        json_array_size(blocks) != (size_t)info->nunits * ZT_CKPT_KINDS)
        return 0;
    for (size_t b = 0; b < json_array_size(blocks); b++)
        if (!is_hex16(json_array_get(blocks, b))) return 0;
    const json_t *bytes = json_object_get(fj, "bytes");
    return json_is_integer(bytes) && (size_t)json_integer_value(bytes) == ckpt_rank_file_bytes(info);
}

/* The loss scaler's state: {scale > 0, good_steps, hysteresis_left >= 1,
 * skipped_steps, consecutive_skips}; absent in checkpoints of runs before
 * mixed precision (their scale was 1). */
static int scaler_ok(const json_t *s) {
    const json_t *scale = json_object_get(s, "scale");
    if (!s) return 1;
    return json_is_object(s) && json_is_number(scale) && json_number_value(scale) > 0 &&
           json_number_value(scale) < 1e300 && int_in(json_object_get(s, "good_steps"), 0, INT_MAX) &&
           int_in(json_object_get(s, "hysteresis_left"), 1, INT_MAX) &&
           int_in(json_object_get(s, "skipped_steps"), 0, INT_MAX) &&
           int_in(json_object_get(s, "consecutive_skips"), 0, INT_MAX);
}

/* The scalar fields; sets world_size, step, dtype. */
static const char *header_problem(const json_t *m, zt_ckpt_info *info) {
    const char *fmt = json_string_value(json_object_get(m, "format"));
    const json_t *version = json_object_get(m, "version");
    if (!fmt || strcmp(fmt, "zerotrain-checkpoint") != 0) return "not a zerotrain checkpoint manifest";
    if (!json_is_integer(version)) return "no format version";
    if (json_integer_value(version) != ZT_CKPT_VERSION) return "a format version this zerotrain does not read";
    const char *dt = json_string_value(json_object_get(m, "dtype"));
    if (!int_in(json_object_get(m, "world_size"), 1, 1 << 20) || !int_in(json_object_get(m, "step"), 0, INT_MAX) ||
        !int_in(json_object_get(m, "optimizer_steps"), 0, INT_MAX) || !int_in(json_object_get(m, "stage"), 0, 3) ||
        !dt || !zt_dtype_parse(dt, &info->dtype) || !json_is_object(json_object_get(m, "run")))
        return "a missing or out-of-range field (world_size, step, optimizer_steps, stage, dtype or run)";
    if (!scaler_ok(json_object_get(m, "loss_scaler"))) return "a missing or out-of-range loss_scaler";
    const char *opt = json_string_value(json_object_get(m, "optimizer")); /* optional: older ones are AdamW's */
    if (json_object_get(m, "optimizer") && (!opt || !zt_optim_find(opt)))
        return "an optimizer this zerotrain does not know (optim/registry.c)";
    const json_t *behind = json_object_get(m, "params_behind"); /* optional: older checkpoints lack it */
    if (behind && !json_is_boolean(behind)) return "a params_behind that is not true or false";
    info->world_size = (int)json_integer_value(json_object_get(m, "world_size"));
    info->step = (int)json_integer_value(json_object_get(m, "step"));
    return NULL;
}

static const char *layout_problem(const json_t *m, zt_ckpt_info *info) {
    const json_t *units = json_object_get(m, "units"), *files = json_object_get(m, "files");
    if (!json_is_array(units) || json_array_size(units) < 1 || json_array_size(units) > ZT_MAX_UNITS)
        return "no valid unit list";
    info->nunits = (int)json_array_size(units);
    for (int u = 0; u < info->nunits; u++)
        if (!unit_ok(json_array_get(units, (size_t)u), info->world_size)) return "an inconsistent unit entry";
    if (!json_is_array(files) || json_array_size(files) != (size_t)info->world_size)
        return "a file list that does not match its world size";
    for (int r = 0; r < info->world_size; r++)
        if (!file_ok(info, json_array_get(files, (size_t)r), r)) return "an inconsistent file entry";
    return NULL;
}

zt_status zt_ckpt_parse_manifest(const char *text, size_t len, const char *path, zt_ckpt_info *info, zt_error *err) {
    info->manifest = NULL;
    if (!checksum_ok(text, len))
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s: damaged (its contents do not match its manifest_xxh64)", path);
    json_error_t jerr;
    json_t *m = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!m) return ZT_FAIL(err, ZT_ERR_INVALID, "%s: unreadable: line %d: %s", path, jerr.line, jerr.text);
    info->manifest = m; /* the layout checks read units through it */
    const char *problem = json_is_object(m) ? header_problem(m, info) : "not a JSON object";
    if (!problem) problem = layout_problem(m, info);
    if (problem) {
        info->manifest = NULL;
        json_decref(m);
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s: %s (format version %d expected)", path, problem, ZT_CKPT_VERSION);
    }
    info->manifest_hash = XXH64(text, len, 0);
    return ZT_OK;
}

size_t zt_ckpt_unit_shard(const zt_ckpt_info *info, int u) {
    const json_t *uj = json_array_get(json_object_get(info->manifest, "units"), (size_t)u);
    return (size_t)json_integer_value(json_object_get(uj, "shard_numel"));
}

size_t zt_ckpt_unit_numel(const zt_ckpt_info *info, int u) {
    const json_t *uj = json_array_get(json_object_get(info->manifest, "units"), (size_t)u);
    return (size_t)json_integer_value(json_object_get(uj, "numel"));
}
