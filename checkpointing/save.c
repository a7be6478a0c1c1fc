/* Saving a checkpoint: every rank writes its world slices, rank 0 the
 * manifest, then publishes the directory and `latest` (the commit point)
 * and only then removes what is superseded (zt_checkpoint.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "ckpt_internal.h"
#include "zt_fs.h"

typedef struct {
    zt_engine *eng;
    zt_comm *comm;
    const char *dir;
    int step;
    const zt_ckpt_hooks *hooks;
    zt_error *err;
} saver;

/* A point where a crash may happen: the tests' hook may end the process here. */
static void point(const saver *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void point(const saver *s, const char *fmt, ...) {
    if (!s->hooks || !s->hooks->at) return;
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    s->hooks->at(s->hooks->arg, s->comm->rank, s->step, name);
}

/* Writes one block and records its checksum. */
static zt_status put_block(int fd, const void *buf, size_t n, const char *path, unsigned long long *hash,
                           zt_error *err) {
    *hash = XXH64(buf, n, 0);
    return zt_write_all(fd, buf, n, path, err);
}

/* The rank's file: header, then per unit its slices of master, the
 * optimizer's blocks 0 and 1, params (hashes[u * 4 + kind] their
 * checksums). */
static zt_status write_blocks(const saver *s, int fd, const char *path, unsigned long long *hashes) {
    zt_engine *eng = s->eng;
    const zt_model_spec *spec = zt_engine_spec(eng);
    size_t d = zt_dtype_size(zt_engine_settings(eng)->dtype);
    unsigned char header[CKPT_HEADER];
    ckpt_header(header, zt_engine_settings(eng)->dtype, s->step, spec->nunits);
    ZT_TRY(zt_write_all(fd, header, sizeof header, path, s->err));
    float *buf = malloc(spec->largest_unit_numel * sizeof(float) + 64); /* [S] */
    if (!buf) return ZT_FAIL(s->err, ZT_ERR_OOM, "checkpoint: cannot allocate a staging buffer");
    zt_status st = ZT_OK;
    for (int u = 0; u < spec->nunits && st == ZT_OK; u++) {
        size_t S = spec->units[u].shard_numel;
        for (int k = 0; k < 3 && st == ZT_OK; k++) {
            st = zt_engine_get_slice(eng, u, (zt_state_kind)k, buf);
            if (st == ZT_OK) st = put_block(fd, buf, S * sizeof(float), path, &hashes[u * ZT_CKPT_KINDS + k], s->err);
        }
        if (st == ZT_OK) st = zt_engine_get_params_slice(eng, u, buf);
        if (st == ZT_OK) st = put_block(fd, buf, S * d, path, &hashes[u * ZT_CKPT_KINDS + 3], s->err);
    }
    free(buf);
    return st;
}

static zt_status write_rank_file(const saver *s, const char *tmpdir, unsigned long long *hashes) {
    char path[1200], tmp[1300];
    snprintf(path, sizeof path, "%s/rank%d.bin", tmpdir, s->comm->rank);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    point(s, "rank%d.bin: before write", s->comm->rank);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return ZT_FAIL(s->err, ZT_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    zt_status st = write_blocks(s, fd, tmp, hashes);
    if (st == ZT_OK) point(s, "rank%d.bin: after write", s->comm->rank);
    if (st == ZT_OK && fsync(fd) != 0) st = ZT_FAIL(s->err, ZT_ERR_IO, "%s: fsync failed: %s", tmp, strerror(errno));
    if (close(fd) != 0 && st == ZT_OK) st = ZT_FAIL(s->err, ZT_ERR_IO, "%s: close failed: %s", tmp, strerror(errno));
    if (st == ZT_OK) point(s, "rank%d.bin: after fsync", s->comm->rank);
    if (st == ZT_OK && rename(tmp, path) != 0)
        st = ZT_FAIL(s->err, ZT_ERR_IO, "rename %s: %s", tmp, strerror(errno));
    if (st == ZT_OK) point(s, "rank%d.bin: after rename", s->comm->rank);
    return st;
}

/* A small file replaced atomically, with a crash point at each step. */
static zt_status write_small(const saver *s, const char *path, const char *name, const char *text) {
    char tmp[1300], dir[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    point(s, "%s: before write", name);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return ZT_FAIL(s->err, ZT_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    zt_status st = zt_write_all(fd, text, strlen(text), tmp, s->err);
    if (st == ZT_OK) point(s, "%s: after write", name);
    if (st == ZT_OK && fsync(fd) != 0) st = ZT_FAIL(s->err, ZT_ERR_IO, "%s: fsync failed: %s", tmp, strerror(errno));
    if (close(fd) != 0 && st == ZT_OK) st = ZT_FAIL(s->err, ZT_ERR_IO, "%s: close failed: %s", tmp, strerror(errno));
    if (st == ZT_OK) point(s, "%s: after fsync", name);
    if (st == ZT_OK && rename(tmp, path) != 0) st = ZT_FAIL(s->err, ZT_ERR_IO, "rename %s: %s", tmp, strerror(errno));
    if (st == ZT_OK) point(s, "%s: after rename", name);
    zt_parent_dir(path, dir, sizeof dir);
    if (st == ZT_OK) st = zt_fsync_path(dir, s->err);
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

/* Every rank file has the same size: the header and S x (12 + dtype) per unit. */
static size_t rank_file_bytes(const zt_engine *eng) {
    size_t bytes = CKPT_HEADER, d = zt_dtype_size(zt_engine_settings(eng)->dtype);
    for (int u = 0; u < zt_engine_spec(eng)->nunits; u++) bytes += zt_engine_spec(eng)->units[u].shard_numel * (12 + d);
    return bytes;
}

static json_t *manifest_json(const saver *s, const json_t *run_info, const unsigned long long *hashes) {
    zt_engine *eng = s->eng;
    int N = s->comm->world_size, nblocks = zt_engine_spec(eng)->nunits * ZT_CKPT_KINDS;
    json_t *m = json_object(), *files = json_array();
    json_object_set_new(m, "format", json_string("zerotrain-checkpoint"));
    json_object_set_new(m, "version", json_integer(ZT_CKPT_VERSION));
    json_object_set_new(m, "step", json_integer(s->step));
    zt_engine_state_counters pr = zt_engine_get_counters(eng);
    json_object_set_new(m, "optimizer_steps", json_integer(pr.steps_taken));
    /* A delayed update's pending part: its master and optimizer state are
     * after the last update, its params block holds what the next step
     * computes with. */
    json_object_set_new(m, "params_behind", json_boolean(pr.params_behind));
    const zt_loss_scaler *ls = &pr.scaler;
    json_object_set_new(m, "loss_scaler",
                        json_pack("{s:f,s:i,s:i,s:I,s:i}", "scale", ls->scale, "good_steps", ls->good_steps,
                                  "hysteresis_left", ls->hysteresis_left, "skipped_steps",
                                  (json_int_t)ls->skipped_steps, "consecutive_skips", ls->consecutive_skips));
    json_object_set_new(m, "world_size", json_integer(N));
    json_object_set_new(m, "stage", json_integer(zt_engine_settings(eng)->stage));
    json_object_set_new(m, "dtype", json_string(zt_dtype_name(zt_engine_settings(eng)->dtype)));
    json_object_set_new(m, "offload", json_boolean(zt_engine_settings(eng)->offload));
    json_object_set_new(m, "optimizer", json_string(zt_optim_or_default(zt_engine_settings(eng)->optimizer)->name));
    json_object_set_new(m, "run", json_deep_copy(run_info));
    json_object_set_new(m, "units", layout_json(zt_engine_spec(eng)));
    for (int r = 0; r < N; r++) {
        json_t *fj = json_object(), *blocks = json_array();
        char name[32], hex[17];
        snprintf(name, sizeof name, "rank%d.bin", r);
        json_object_set_new(fj, "name", json_string(name));
        json_object_set_new(fj, "bytes", json_integer((json_int_t)rank_file_bytes(eng)));
        for (int b = 0; b < nblocks; b++) {
            snprintf(hex, sizeof hex, "%016llx", hashes[(size_t)r * nblocks + b]);
            json_array_append_new(blocks, json_string(hex));
        }
        json_object_set_new(fj, "blocks", blocks);
        json_array_append_new(files, fj);
    }
    json_object_set_new(m, "files", files);
    return m;
}

typedef struct {
    char name[64];
    long step;
} step_entry;

static int by_step_desc(const void *a, const void *b) {
    const step_entry *x = a, *y = b;
    return (x->step < y->step) - (x->step > y->step);
}

/* Removes what the new checkpoint supersedes: other saves' leftovers
 * (.tmp-step-*, *.replaced) and complete checkpoints beyond the newest
 * keep - 1 besides the one just published. */
static zt_status prune(const saver *s, const char *published, int keep) {
    DIR *d = opendir(s->dir);
    if (!d) return ZT_FAIL(s->err, ZT_ERR_IO, "%s: cannot list: %s", s->dir, strerror(errno));
    step_entry *steps = NULL;
    int n = 0, cap = 0;
    zt_status st = ZT_OK;
    struct dirent *e;
    while (st == ZT_OK && (e = readdir(d))) {
        char path[1200], *end;
        snprintf(path, sizeof path, "%s/%s", s->dir, e->d_name);
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, ".tmp-step-", 10) == 0 || (len > 9 && strcmp(e->d_name + len - 9, ".replaced") == 0)) {
            point(s, "remove %s", e->d_name);
            st = zt_remove_tree(path, s->err);
            continue;
        }
        if (strncmp(e->d_name, "step-", 5) != 0 || strcmp(e->d_name, published) == 0 || len >= 64) continue;
        long step = strtol(e->d_name + 5, &end, 10);
        if (*end != '\0' || end == e->d_name + 5) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            step_entry *grown = realloc(steps, (size_t)cap * sizeof *steps);
            if (!grown) {
                st = ZT_FAIL(s->err, ZT_ERR_OOM, "checkpoint: cannot list %s", s->dir);
                break;
            }
            steps = grown;
        }
        snprintf(steps[n].name, sizeof steps[n].name, "%.63s", e->d_name);
        steps[n++].step = step;
    }
    closedir(d);
    if (n > 0) qsort(steps, (size_t)n, sizeof *steps, by_step_desc);
    for (int i = keep - 1; st == ZT_OK && i < n; i++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", s->dir, steps[i].name);
        point(s, "remove %s", steps[i].name);
        st = zt_remove_tree(path, s->err);
    }
    free(steps);
    return st;
}

/* Rank 0: the manifest into tmpdir, then tmpdir becomes step-N (an older
 * step-N set aside first), then `latest`, then the clean-up. */
static zt_status publish(const saver *s, const char *tmpdir, const json_t *manifest, int keep) {
    char path[1200], final[1100], aside[1200], name[64], line[72];
    snprintf(name, sizeof name, "step-%06d", s->step);
    snprintf(final, sizeof final, "%s/%s", s->dir, name);
    snprintf(aside, sizeof aside, "%s.replaced", final);
    char *text = ckpt_manifest_text(manifest);
    if (!text) return ZT_FAIL(s->err, ZT_ERR_OOM, "checkpoint: cannot write the manifest");
    snprintf(path, sizeof path, "%s/manifest.json", tmpdir);
    zt_status st = write_small(s, path, "manifest.json", text);
    free(text);
    ZT_TRY(st);
    ZT_TRY(zt_fsync_path(tmpdir, s->err));
    struct stat sb;
    if (stat(final, &sb) == 0) { /* a re-save: the old copy stays complete beside it until `latest` moves */
        ZT_TRY(zt_remove_tree(aside, s->err));
        if (rename(final, aside) != 0)
            return ZT_FAIL(s->err, ZT_ERR_IO, "rename %s -> %s: %s", final, aside, strerror(errno));
        point(s, "%s set aside", name);
    }
    if (rename(tmpdir, final) != 0)
        return ZT_FAIL(s->err, ZT_ERR_IO, "rename %s -> %s: %s", tmpdir, final, strerror(errno));
    point(s, "%s renamed into place", name);
    ZT_TRY(zt_fsync_path(s->dir, s->err));
    snprintf(path, sizeof path, "%s/latest", s->dir);
    snprintf(line, sizeof line, "%s\n", name);
    ZT_TRY(write_small(s, path, "latest", line));
    return prune(s, name, keep);
}

/* Rank 0 prepares D/.tmp-step-N (emptied if a killed save left it). */
static zt_status prepare(const saver *s, char *tmpdir, size_t cap) {
    snprintf(tmpdir, cap, "%s/.tmp-step-%06d", s->dir, s->step);
    if (s->comm->rank != 0) return ZT_OK;
    ZT_TRY(zt_mkdir_p(s->dir, s->err));
    ZT_TRY(zt_remove_tree(tmpdir, s->err));
    if (mkdir(tmpdir, 0775) != 0) return ZT_FAIL(s->err, ZT_ERR_IO, "cannot create %s: %s", tmpdir, strerror(errno));
    return ZT_OK;
}

zt_status zt_ckpt_save(zt_engine *eng, zt_comm *comm, const char *dir, int step, const json_t *run_info, int keep,
                       const zt_ckpt_hooks *hooks, zt_error *err) {
    saver s = {eng, comm, dir, step, hooks, err};
    int N = comm->world_size, nblocks = zt_engine_spec(eng)->nunits * ZT_CKPT_KINDS;
    char tmpdir[1100];
    ZT_TRY(zt_comm_agree(comm, prepare(&s, tmpdir, sizeof tmpdir), err));
    unsigned long long *hashes = calloc((size_t)N * nblocks, sizeof *hashes); /* [N][nblocks] block checksums */
    zt_status st = hashes ? ZT_OK : ZT_FAIL(err, ZT_ERR_OOM, "checkpoint: cannot allocate");
    if (st == ZT_OK) st = write_rank_file(&s, tmpdir, hashes + (size_t)comm->rank * nblocks);
    st = zt_comm_agree(comm, st, err);
    if (st == ZT_OK) st = zt_comm_all_gather_host(comm, hashes, (size_t)nblocks * sizeof *hashes, err);
    if (st == ZT_OK && comm->rank == 0) {
        json_t *m = manifest_json(&s, run_info, hashes);
        st = m ? publish(&s, tmpdir, m, keep > 0 ? keep : 1) : ZT_FAIL(err, ZT_ERR_OOM, "checkpoint: manifest");
        json_decref(m);
    }
    free(hashes);
    return zt_comm_agree(comm, st, err);
}
