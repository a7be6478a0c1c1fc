#include "zt_checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define CKPT_MAGIC "ZTCKPT01"
#define CKPT_HEADER 32 /* magic 8, version u32, dtype u32, step u64, nunits u64 */

/* ---- small file helpers ---- */

static zt_status write_all(int fd, const void *buf, size_t n, const char *path, zt_error *err) {
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return ZT_FAIL(err, ZT_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        }
        p += w;
        n -= (size_t)w;
    }
    return ZT_OK;
}

static zt_status fsync_path(const char *path, zt_error *err) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return ZT_FAIL(err, ZT_ERR_IO, "%s: cannot open to sync: %s", path, strerror(errno));
    int rc = fsync(fd);
    close(fd);
    if (rc != 0) return ZT_FAIL(err, ZT_ERR_IO, "%s: fsync failed: %s", path, strerror(errno));
    return ZT_OK;
}

/* Writes text to path atomically: path.tmp, fsync, rename. */
static zt_status write_file_atomic(const char *path, const char *text, zt_error *err) {
    char tmp[1300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return ZT_FAIL(err, ZT_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    zt_status st = write_all(fd, text, strlen(text), tmp, err);
    if (st == ZT_OK && fsync(fd) != 0) st = ZT_FAIL(err, ZT_ERR_IO, "%s: fsync failed: %s", tmp, strerror(errno));
    close(fd);
    if (st == ZT_OK && rename(tmp, path) != 0) st = ZT_FAIL(err, ZT_ERR_IO, "rename %s: %s", tmp, strerror(errno));
    return st;
}

static zt_status remove_tree(const char *path, zt_error *err) {
    DIR *d = opendir(path);
    if (!d) return errno == ENOENT ? ZT_OK : ZT_FAIL(err, ZT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct dirent *e;
    zt_status st = ZT_OK;
    while ((e = readdir(d)) && st == ZT_OK) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char child[1200];
        snprintf(child, sizeof child, "%s/%s", path, e->d_name);
        if (unlink(child) != 0) st = ZT_FAIL(err, ZT_ERR_IO, "%s: cannot remove: %s", child, strerror(errno));
    }
    closedir(d);
    if (st == ZT_OK && rmdir(path) != 0) st = ZT_FAIL(err, ZT_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
    return st;
}

static zt_status mkdirs(const char *dir, zt_error *err) {
    char path[1024];
    snprintf(path, sizeof path, "%s", dir);
    for (char *p = path + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char saved = *p;
            *p = '\0';
            if (mkdir(path, 0775) != 0 && errno != EEXIST)
                return ZT_FAIL(err, ZT_ERR_IO, "cannot create directory %s: %s", path, strerror(errno));
            *p = saved;
            if (!saved) break;
        }
    }
    return ZT_OK;
}

static zt_status file_xxh64(const char *path, unsigned long long *hash, size_t *bytes, zt_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return ZT_FAIL(err, ZT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    XXH64_state_t *h = XXH64_createState();
    XXH64_reset(h, 0);
    char buf[1 << 16];
    size_t n, total = 0;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
        XXH64_update(h, buf, n);
        total += n;
    }
    int bad = ferror(f);
    fclose(f);
    *hash = XXH64_digest(h);
    XXH64_freeState(h);
    *bytes = total;
    if (bad) return ZT_FAIL(err, ZT_ERR_IO, "%s: read error", path);
    return ZT_OK;
}

/* ---- save ---- */

static size_t unit_block_bytes(size_t S, size_t d) { return S * (12 + d); }

static zt_status write_rank_file(zt_engine *eng, const char *path, int step, zt_error *err) {
    const zt_model_spec *spec = eng->spec;
    size_t d = zt_dtype_size(eng->cfg.dtype);
    char tmp[1300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return ZT_FAIL(err, ZT_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    unsigned char header[CKPT_HEADER];
    memset(header, 0, sizeof header);
    memcpy(header, CKPT_MAGIC, 8);
    unsigned version = 1, dtype = (unsigned)eng->cfg.dtype;
    unsigned long long stepu = (unsigned long long)step, nunits = (unsigned long long)spec->nunits;
    memcpy(header + 8, &version, 4);
    memcpy(header + 12, &dtype, 4);
    memcpy(header + 16, &stepu, 8);
    memcpy(header + 24, &nunits, 8);
    zt_status st = write_all(fd, header, sizeof header, tmp, err);
    float *buf = malloc(spec->largest_unit_numel * sizeof(float) + 64);
    if (!buf && st == ZT_OK) st = ZT_FAIL(err, ZT_ERR_OOM, "checkpoint: cannot allocate a staging buffer");
    for (int u = 0; u < spec->nunits && st == ZT_OK; u++) {
        size_t S = spec->units[u].shard_numel;
        for (int k = 0; k < 3 && st == ZT_OK; k++) {
            st = zt_engine_get_slice(eng, u, (zt_state_kind)k, buf);
            if (st == ZT_OK) st = write_all(fd, buf, S * sizeof(float), tmp, err);
        }
        if (st == ZT_OK) st = zt_engine_get_params_slice(eng, u, buf);
        if (st == ZT_OK) st = write_all(fd, buf, S * d, tmp, err);
    }
    free(buf);
    if (st == ZT_OK && fsync(fd) != 0) st = ZT_FAIL(err, ZT_ERR_IO, "%s: fsync failed: %s", tmp, strerror(errno));
    close(fd);
    if (st == ZT_OK && rename(tmp, path) != 0) st = ZT_FAIL(err, ZT_ERR_IO, "rename %s: %s", tmp, strerror(errno));
    return st;
}

static json_t *layout_json(const zt_model_spec *spec) {
    json_t *units = json_array();
    for (int u = 0; u < spec->nunits; u++) {
        const zt_unit_spec *us = &spec->units[u];
        json_t *uj = json_object(), *params = json_array();
        json_object_set_new(uj, "name", json_string(us->name));
        json_object_set_new(uj, "numel", json_integer((json_int_t)us->numel));
        json_object_set_new(uj, "padded_numel", json_integer((json_int_t)us->padded_numel));
        json_object_set_new(uj, "shard_numel", json_integer((json_int_t)us->shard_numel));
        for (int p = 0; p < us->nparams; p++) {
            const zt_param_spec *ps = &us->params[p];
            json_t *pj = json_object(), *shape = json_array();
            for (int i = 0; i < ps->ndim; i++) json_array_append_new(shape, json_integer(ps->shape[i]));
            json_object_set_new(pj, "name", json_string(ps->name));
            json_object_set_new(pj, "shape", shape);
            json_object_set_new(pj, "offset", json_integer((json_int_t)ps->offset));
            json_object_set_new(pj, "numel", json_integer((json_int_t)ps->numel));
            json_array_append_new(params, pj);
        }
        json_object_set_new(uj, "params", params);
        json_array_append_new(units, uj);
    }
    return units;
}

zt_status zt_ckpt_save(zt_engine *eng, zt_comm *comm, const char *dir, int step, const json_t *run_info,
                       zt_ckpt_after_shards_fn after_shards, void *hook_arg, zt_error *err) {
    int rank = comm->rank, N = comm->world_size;
    char tmpdir[1100], final[1100], path[1200];
    snprintf(tmpdir, sizeof tmpdir, "%s/.tmp-step-%06d", dir, step);
    snprintf(final, sizeof final, "%s/step-%06d", dir, step);
    zt_status st = ZT_OK;
    if (rank == 0) {
        st = mkdirs(dir, err);
        if (st == ZT_OK) st = remove_tree(tmpdir, err); /* a save that was killed earlier */
        if (st == ZT_OK && mkdir(tmpdir, 0775) != 0)
            st = ZT_FAIL(err, ZT_ERR_IO, "cannot create %s: %s", tmpdir, strerror(errno));
    }
    /* Agree on success before anyone writes into the directory. */
    double ok = st == ZT_OK, all_ok = 0;
    ZT_TRY(zt_comm_sum_f64(comm, ok, &all_ok, err));
    if (st != ZT_OK) return st;
    if (all_ok != N) return ZT_FAIL(err, ZT_ERR_IO, "checkpoint: rank 0 could not prepare %s", tmpdir);

    snprintf(path, sizeof path, "%s/rank%d.bin", tmpdir, rank);
    st = write_rank_file(eng, path, step, err);
    unsigned long long hash = 0;
    size_t bytes = 0;
    if (st == ZT_OK) st = file_xxh64(path, &hash, &bytes, err);
    ok = st == ZT_OK;
    zt_status cst = zt_comm_sum_f64(comm, ok, &all_ok, err);
    if (st != ZT_OK) return st;
    ZT_TRY(cst);
    if (all_ok != N) return ZT_FAIL(err, ZT_ERR_IO, "checkpoint: another rank failed to write its file");
    unsigned long long *hashes = calloc((size_t)N, sizeof *hashes), *sizes = calloc((size_t)N, sizeof *sizes);
    if (!hashes || !sizes) {
        free(hashes);
        free(sizes);
        return ZT_FAIL(err, ZT_ERR_OOM, "checkpoint: cannot allocate");
    }
    st = zt_comm_all_gather_u64(comm, hash, hashes, err);
    if (st == ZT_OK) st = zt_comm_all_gather_u64(comm, (unsigned long long)bytes, sizes, err);

    if (after_shards) after_shards(hook_arg, rank, step);

    if (st == ZT_OK && rank == 0) {
        json_t *m = json_object(), *files = json_array();
        json_object_set_new(m, "format", json_string("zerotrain-checkpoint"));
        json_object_set_new(m, "version", json_integer(1));
        json_object_set_new(m, "step", json_integer(step));
        json_object_set_new(m, "optimizer_steps", json_integer(eng->steps_taken));
        json_object_set_new(m, "world_size", json_integer(N));
        json_object_set_new(m, "stage", json_integer(eng->cfg.stage));
        json_object_set_new(m, "dtype", json_string(zt_dtype_name(eng->cfg.dtype)));
        json_object_set_new(m, "offload", json_boolean(eng->cfg.offload));
        json_object_set_new(m, "run", json_deep_copy(run_info));
        json_object_set_new(m, "units", layout_json(eng->spec));
        for (int r = 0; r < N; r++) {
            json_t *fj = json_object();
            char name[32], hex[17];
            snprintf(name, sizeof name, "rank%d.bin", r);
            snprintf(hex, sizeof hex, "%016llx", hashes[r]);
            json_object_set_new(fj, "name", json_string(name));
            json_object_set_new(fj, "bytes", json_integer((json_int_t)sizes[r]));
            json_object_set_new(fj, "xxh64", json_string(hex));
            json_array_append_new(files, fj);
        }
        json_object_set_new(m, "files", files);
        char *text = json_dumps(m, JSON_INDENT(1));
        json_decref(m);
        snprintf(path, sizeof path, "%s/manifest.json", tmpdir);
        st = text ? write_file_atomic(path, text, err) : ZT_FAIL(err, ZT_ERR_OOM, "checkpoint: manifest");
        free(text);
        if (st == ZT_OK) st = fsync_path(tmpdir, err);
        /* The new checkpoint becomes visible whole: directory rename, then `latest`. */
        if (st == ZT_OK) st = remove_tree(final, err);
        if (st == ZT_OK && rename(tmpdir, final) != 0)
            st = ZT_FAIL(err, ZT_ERR_IO, "rename %s -> %s: %s", tmpdir, final, strerror(errno));
        if (st == ZT_OK) st = fsync_path(dir, err);
        char latest[1100], name[64], line[72];
        snprintf(latest, sizeof latest, "%s/latest", dir);
        snprintf(name, sizeof name, "step-%06d", step);
        snprintf(line, sizeof line, "%s\n", name);
        if (st == ZT_OK) st = write_file_atomic(latest, line, err);
        if (st == ZT_OK) st = fsync_path(dir, err);
        /* Only now may older checkpoints go. */
        DIR *dd = st == ZT_OK ? opendir(dir) : NULL;
        struct dirent *e;
        while (dd && (e = readdir(dd)) && st == ZT_OK) {
            if (strncmp(e->d_name, "step-", 5) != 0 || strcmp(e->d_name, name) == 0) continue;
            char old[1200];
            snprintf(old, sizeof old, "%s/%s", dir, e->d_name);
            st = remove_tree(old, err);
        }
        if (dd) closedir(dd);
    }
    free(hashes);
    free(sizes);
    ok = st == ZT_OK;
    cst = zt_comm_sum_f64(comm, ok, &all_ok, err);
    if (st != ZT_OK) return st;
    ZT_TRY(cst);
    if (all_ok != N) return ZT_FAIL(err, ZT_ERR_IO, "checkpoint: rank 0 failed to finish the save of step %d", step);
    return ZT_OK;
}

/* ---- open, verify, read ---- */

void zt_ckpt_close(zt_ckpt_info *info) {
    if (info->manifest) json_decref(info->manifest);
    info->manifest = NULL;
}

zt_status zt_ckpt_open(const char *dir, zt_ckpt_info *info, zt_error *err) {
    memset(info, 0, sizeof *info);
    char path[1200];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    struct stat sb;
    if (stat(path, &sb) == 0) {
        snprintf(info->dir, sizeof info->dir, "%s", dir);
    } else {
        snprintf(path, sizeof path, "%s/latest", dir);
        FILE *f = fopen(path, "r");
        if (!f)
            return ZT_FAIL(err, ZT_ERR_INVALID, "checkpoint directory %s: no complete checkpoint there (no 'latest' file and no manifest.json)", dir);
        char name[128] = "";
        if (!fgets(name, sizeof name, f)) name[0] = '\0';
        fclose(f);
        name[strcspn(name, "\r\n")] = '\0';
        if (!name[0] || strchr(name, '/'))
            return ZT_FAIL(err, ZT_ERR_INVALID, "%s: does not name a checkpoint ('%s')", path, name);
        snprintf(info->dir, sizeof info->dir, "%s/%s", dir, name);
    }
    snprintf(path, sizeof path, "%s/manifest.json", info->dir);
    json_error_t jerr;
    info->manifest = json_load_file(path, 0, &jerr);
    if (!info->manifest)
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s: unreadable manifest: line %d: %s", path, jerr.line, jerr.text);
    json_t *m = info->manifest;
    const char *fmt = json_string_value(json_object_get(m, "format"));
    json_t *ws = json_object_get(m, "world_size"), *stp = json_object_get(m, "step");
    const char *dt = json_string_value(json_object_get(m, "dtype"));
    if (!fmt || strcmp(fmt, "zerotrain-checkpoint") != 0 || json_integer_value(json_object_get(m, "version")) != 1 ||
        !json_is_integer(ws) || json_integer_value(ws) < 1 || !json_is_integer(stp) || !dt ||
        !json_is_array(json_object_get(m, "units")) || !json_is_array(json_object_get(m, "files")) ||
        (int)json_array_size(json_object_get(m, "files")) != json_integer_value(ws))
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s: not a zerotrain checkpoint manifest (version 1)", path);
    info->world_size = (int)json_integer_value(ws);
    info->step = (int)json_integer_value(stp);
    info->dtype = strcmp(dt, "bf16") == 0 ? ZT_BF16 : ZT_FP32;
    return ZT_OK;
}

zt_status zt_ckpt_verify(const zt_ckpt_info *info, zt_error *err) {
    json_t *files = json_object_get(info->manifest, "files");
    size_t d = zt_dtype_size(info->dtype), want_bytes = CKPT_HEADER;
    json_t *units = json_object_get(info->manifest, "units");
    for (size_t u = 0; u < json_array_size(units); u++)
        want_bytes += unit_block_bytes((size_t)json_integer_value(json_object_get(json_array_get(units, u), "shard_numel")), d);
    for (size_t r = 0; r < json_array_size(files); r++) {
        json_t *fj = json_array_get(files, r);
        const char *name = json_string_value(json_object_get(fj, "name"));
        const char *hex = json_string_value(json_object_get(fj, "xxh64"));
        size_t bytes = (size_t)json_integer_value(json_object_get(fj, "bytes"));
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", info->dir, name ? name : "?");
        if (!name || !hex) return ZT_FAIL(err, ZT_ERR_INVALID, "%s/manifest.json: file entry %zu is incomplete", info->dir, r);
        if (bytes != want_bytes)
            return ZT_FAIL(err, ZT_ERR_INVALID, "%s: the manifest records %zu bytes but the layout needs %zu", path, bytes, want_bytes);
        unsigned long long h;
        size_t got;
        ZT_TRY(file_xxh64(path, &h, &got, err));
        if (got != bytes)
            return ZT_FAIL(err, ZT_ERR_INVALID, "%s: %zu bytes, the manifest says %zu (truncated or replaced)", path, got, bytes);
        char mine[17];
        snprintf(mine, sizeof mine, "%016llx", h);
        if (strcmp(mine, hex) != 0)
            return ZT_FAIL(err, ZT_ERR_INVALID, "%s: checksum %s does not match the manifest's %s (corrupted)", path, mine, hex);
    }
    return ZT_OK;
}

zt_status zt_ckpt_read_unit(const zt_ckpt_info *info, int u, int kind, float *dst, zt_error *err) {
    json_t *units = json_object_get(info->manifest, "units");
    size_t d = zt_dtype_size(info->dtype), offset = CKPT_HEADER;
    for (int v = 0; v < u; v++)
        offset += unit_block_bytes((size_t)json_integer_value(json_object_get(json_array_get(units, (size_t)v), "shard_numel")), d);
    json_t *uj = json_array_get(units, (size_t)u);
    size_t numel = (size_t)json_integer_value(json_object_get(uj, "numel"));
    size_t S = (size_t)json_integer_value(json_object_get(uj, "shard_numel"));
    offset += (size_t)kind * S * sizeof(float);
    for (int r = 0; r < info->world_size; r++) {
        size_t lo = (size_t)r * S;
        if (lo >= numel) break;
        size_t n = numel - lo < S ? numel - lo : S;
        char path[1200];
        snprintf(path, sizeof path, "%s/rank%d.bin", info->dir, r);
        int fd = open(path, O_RDONLY);
        if (fd < 0) return ZT_FAIL(err, ZT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        ssize_t got = pread(fd, dst + lo, n * sizeof(float), (off_t)offset);
        close(fd);
        if (got != (ssize_t)(n * sizeof(float)))
            return ZT_FAIL(err, ZT_ERR_INVALID, "%s: short read of unit %d (truncated?)", path, u);
    }
    return ZT_OK;
}

/* ---- load ---- */

zt_status zt_ckpt_load(zt_engine *eng, zt_comm *comm, const char *dir, const json_t *expect_model, int *step,
                       zt_error *err) {
    (void)comm;
    zt_ckpt_info info;
    zt_status st = zt_ckpt_open(dir, &info, err);
    char mpath[1200];
    snprintf(mpath, sizeof mpath, "%s/manifest.json", info.dir);
    json_t *units = st == ZT_OK ? json_object_get(info.manifest, "units") : NULL;
    const zt_model_spec *spec = eng->spec;
    if (st == ZT_OK) {
        json_t *model = json_object_get(json_object_get(info.manifest, "run"), "model");
        if (!json_equal(model, (json_t *)expect_model)) {
            char *a = json_dumps(model, JSON_COMPACT | JSON_SORT_KEYS), *b = json_dumps(expect_model, JSON_COMPACT | JSON_SORT_KEYS);
            st = ZT_FAIL(err, ZT_ERR_INVALID, "%s: the checkpoint's model %s differs from this run's %s", mpath,
                         a ? a : "?", b ? b : "?");
            free(a);
            free(b);
        } else if ((int)json_array_size(units) != spec->nunits) {
            st = ZT_FAIL(err, ZT_ERR_INVALID, "%s: %zu units, this model has %d", mpath, json_array_size(units), spec->nunits);
        }
        for (int u = 0; st == ZT_OK && u < spec->nunits; u++) {
            size_t numel = (size_t)json_integer_value(json_object_get(json_array_get(units, (size_t)u), "numel"));
            if (numel != spec->units[u].numel)
                st = ZT_FAIL(err, ZT_ERR_INVALID, "%s: unit %d has %zu parameters, this model's has %zu", mpath, u,
                             numel, spec->units[u].numel);
        }
    }
    if (st == ZT_OK) st = zt_ckpt_verify(&info, err);
    float *buf = NULL;
    if (st == ZT_OK) {
        buf = calloc(3 * spec->largest_unit_numel, sizeof(float));
        if (!buf) st = ZT_FAIL(err, ZT_ERR_OOM, "checkpoint: cannot allocate a load buffer");
    }
    for (int u = 0; st == ZT_OK && u < spec->nunits; u++) {
        size_t P = spec->units[u].padded_numel;
        float *master = buf, *m = buf + P, *v = buf + 2 * P; /* each [P], padding zero */
        memset(buf, 0, 3 * P * sizeof(float));
        st = zt_ckpt_read_unit(&info, u, 0, master, err);
        if (st == ZT_OK) st = zt_ckpt_read_unit(&info, u, 1, m, err);
        if (st == ZT_OK) st = zt_ckpt_read_unit(&info, u, 2, v, err);
        if (st == ZT_OK) st = zt_engine_set_state(eng, u, master, m, v);
    }
    free(buf);
    if (st == ZT_OK) {
        *step = info.step;
        eng->steps_taken = (int)json_integer_value(json_object_get(info.manifest, "optimizer_steps"));
    }
    zt_ckpt_close(&info);
    return st;
}
