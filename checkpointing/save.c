/* Saving a checkpoint: every rank writes its world slices, rank 0 the
 * manifest, then publishes the directory and `latest` (the commit point)
 * and only then removes what is superseded (zt_checkpoint.h). */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "ckpt_internal.h"
#include "zt_fs.h"

/* A point where a crash may happen: the tests' hook may end the process here. */
static void point(const ckpt_saver *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void point(const ckpt_saver *s, const char *fmt, ...) {
    if (!s->hooks || !s->hooks->at) return;
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    s->hooks->at(s->hooks->arg, s->comm->rank, s->step, name);
}

/* Writes one block and records its checksum. */
static zt_status put_block(const ckpt_saver *s, int fd, const void *buf, size_t n, const char *path,
                           unsigned long long *hash, zt_error *err) {
    *hash = XXH64(buf, n, 0);
    return zt_fs_write(s->fs, fd, buf, n, path, err);
}

size_t zt_ckpt_rank_file_bytes_for(const zt_model_spec *spec, zt_dtype dtype) {
    size_t bytes = CKPT_HEADER, d = zt_dtype_size(dtype);
    for (int u = 0; u < spec->nunits; u++) bytes += spec->units[u].shard_numel * (12 + d);
    return bytes;
}

size_t ckpt_file_bytes(const zt_engine *eng) {
    return zt_ckpt_rank_file_bytes_for(zt_engine_spec(eng), zt_engine_settings(eng)->dtype);
}

zt_status ckpt_stage_image(zt_engine *eng, int step, unsigned char *image) {
    const zt_model_spec *spec = zt_engine_spec(eng);
    size_t d = zt_dtype_size(zt_engine_settings(eng)->dtype), at = CKPT_HEADER;
    ckpt_header(image, zt_engine_settings(eng)->dtype, step, spec->nunits);
    for (int u = 0; u < spec->nunits; u++) {
        size_t S = spec->units[u].shard_numel;
        for (int k = 0; k < 3; k++, at += S * sizeof(float))
            ZT_TRY(zt_engine_get_slice(eng, u, (zt_state_kind)k, (float *)(void *)(image + at)));
        ZT_TRY(zt_engine_get_params_slice(eng, u, image + at));
        at += S * d;
    }
    return ZT_OK;
}

/* The rank's file: header, then per unit its slices of master, the
 * optimizer's blocks 0 and 1, params (hashes[u * 4 + kind] their
 * checksums), from the staged image or, without one, from the engine one
 * unit at a time. The same writes either way, so the same bytes. */
static zt_status write_blocks(const ckpt_saver *s, int fd, const char *path, unsigned long long *hashes,
                              zt_error *err) {
    zt_engine *eng = s->eng;
    const zt_model_spec *spec = zt_engine_spec(eng);
    size_t d = zt_dtype_size(zt_engine_settings(eng)->dtype), at = CKPT_HEADER;
    unsigned char header[CKPT_HEADER];
    ckpt_header(header, zt_engine_settings(eng)->dtype, s->step, spec->nunits);
    ZT_TRY(zt_fs_write(s->fs, fd, s->image ? s->image : header, CKPT_HEADER, path, err));
    float *buf = s->image ? NULL : malloc(spec->largest_unit_numel * sizeof(float) + 64); /* [S] */
    if (!s->image && !buf) return ZT_FAIL(err, ZT_ERR_OOM, "checkpoint: cannot allocate a staging buffer");
    zt_status st = ZT_OK;
    for (int u = 0; u < spec->nunits && st == ZT_OK; u++) {
        size_t S = spec->units[u].shard_numel;
        for (int k = 0; k < ZT_CKPT_KINDS && st == ZT_OK; k++) {
            size_t n = S * (k < 3 ? sizeof(float) : d);
            const void *src = s->image ? (const void *)(s->image + at) : (const void *)buf;
            if (!s->image && k < 3) st = zt_engine_get_slice(eng, u, (zt_state_kind)k, buf);
            if (!s->image && k == 3 && st == ZT_OK) st = zt_engine_get_params_slice(eng, u, buf);
            if (st == ZT_OK) st = put_block(s, fd, src, n, path, &hashes[u * ZT_CKPT_KINDS + k], err);
            at += n;
        }
    }
    free(buf);
    return st;
}

/* The error names the rank it happened on: the agreement hands the lowest
 * failing rank's message to every rank. */
static zt_status on_rank(zt_status st, int rank, zt_error *err) {
    if (st == ZT_OK || strncmp(err->msg, "rank ", 5) == 0) return st;
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "rank %d: %.1000s", rank, err->msg);
    memcpy(err->msg, msg, sizeof msg);
    return st;
}

/* What a file of the save holds, written to fd (path: its temporary name). */
typedef zt_status (*file_body)(const ckpt_saver *s, int fd, const char *path, void *arg, zt_error *err);

/* path replaced by what body writes: path.tmp created, written, fsynced,
 * renamed over path, with a crash point after each. The directory is not
 * synced here: the caller decides when that matters. */
static zt_status put_file(const ckpt_saver *s, const char *path, const char *name, file_body body, void *arg,
                          zt_error *err) {
    char tmp[1300];
    int fd;
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    point(s, "%s: before write", name);
    ZT_TRY(zt_fs_create(tmp, &fd, err));
    zt_status st = body(s, fd, tmp, arg, err);
    if (st == ZT_OK) point(s, "%s: after write", name);
    if (st != ZT_OK) close(fd);
    else st = zt_fs_sync_close(fd, tmp, err);
    if (st == ZT_OK) point(s, "%s: after fsync", name);
    if (st == ZT_OK) st = zt_fs_rename(tmp, path, err);
    if (st == ZT_OK) point(s, "%s: after rename", name);
    if (st != ZT_OK) unlink(tmp);
    return st;
}

static zt_status blocks_body(const ckpt_saver *s, int fd, const char *path, void *hashes, zt_error *err) {
    return write_blocks(s, fd, path, hashes, err);
}

static zt_status text_body(const ckpt_saver *s, int fd, const char *path, void *text, zt_error *err) {
    return zt_fs_write(s->fs, fd, text, strlen(text), path, err);
}

zt_status ckpt_write_rank_file(const ckpt_saver *s, unsigned long long *hashes, zt_error *err) {
    char path[1200], name[32];
    snprintf(name, sizeof name, "rank%d.bin", s->comm->rank);
    snprintf(path, sizeof path, "%s/%s", s->tmpdir, name);
    return on_rank(put_file(s, path, name, blocks_body, hashes, err), s->comm->rank, err);
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

static json_t *manifest_json(const ckpt_saver *s, const json_t *run_info, const unsigned long long *hashes) {
    zt_engine *eng = s->eng;
    int N = s->comm->world_size, nblocks = zt_engine_spec(eng)->nunits * ZT_CKPT_KINDS;
    json_t *m = json_object(), *files = json_array();
    json_object_set_new(m, "format", json_string("zerotrain-checkpoint"));
    json_object_set_new(m, "version", json_integer(ZT_CKPT_VERSION));
    json_object_set_new(m, "step", json_integer(s->step));
    const zt_engine_state_counters pr = s->counters; /* as they were at the save's step */
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
    json_t *feedback = ckpt_feedback_json(eng, N);
    if (feedback) json_object_set_new(m, "error_feedback", feedback);
    for (int r = 0; r < N; r++) {
        json_t *fj = json_object(), *blocks = json_array();
        char name[32], hex[17];
        snprintf(name, sizeof name, "rank%d.bin", r);
        json_object_set_new(fj, "name", json_string(name));
        json_object_set_new(fj, "bytes", json_integer((json_int_t)ckpt_file_bytes(eng)));
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
static zt_status prune(const ckpt_saver *s, const char *published, int keep, zt_error *err) {
    DIR *d = opendir(s->dir);
    if (!d) return ZT_FAIL(err, ZT_ERR_IO, "%s: cannot list: %s", s->dir, strerror(errno));
    step_entry *steps = NULL;
    int n = 0, cap = 0;
    zt_status st = ZT_OK;
    struct dirent *e;
    while (st == ZT_OK && (e = readdir(d))) {
        char path[1400], *end;
        snprintf(path, sizeof path, "%s/%s", s->dir, e->d_name);
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, ".tmp-step-", 10) == 0 || (len > 9 && strcmp(e->d_name + len - 9, ".replaced") == 0)) {
            point(s, "remove %s", e->d_name);
            st = zt_remove_tree(path, err);
            continue;
        }
        if (strncmp(e->d_name, "step-", 5) != 0 || strcmp(e->d_name, published) == 0 || len >= 64) continue;
        long step = strtol(e->d_name + 5, &end, 10);
        if (*end != '\0' || end == e->d_name + 5) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            step_entry *grown = realloc(steps, (size_t)cap * sizeof *steps);
            if (!grown) {
                st = ZT_FAIL(err, ZT_ERR_OOM, "checkpoint: cannot list %s", s->dir);
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
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", s->dir, steps[i].name);
        point(s, "remove %s", steps[i].name);
        st = zt_remove_tree(path, err);
    }
    free(steps);
    return st;
}

/* Rank 0: the manifest into tmpdir, then tmpdir becomes step-N (an older
 * step-N set aside first), then `latest`. A failure before `latest` moved
 * puts back what was there: the new step-N goes, the aside copy returns. */
static zt_status publish(const ckpt_saver *s, const json_t *manifest, char *name, zt_error *err) {
    char path[1200], final[1100], aside[1200], line[72];
    snprintf(name, 64, "step-%06d", s->step);
    snprintf(final, sizeof final, "%s/%s", s->dir, name);
    snprintf(aside, sizeof aside, "%s.replaced", final);
    char *text = ckpt_manifest_text(manifest);
    if (!text) return ZT_FAIL(err, ZT_ERR_OOM, "checkpoint: cannot write the manifest");
    snprintf(path, sizeof path, "%s/manifest.json", s->tmpdir);
    zt_status st = put_file(s, path, "manifest.json", text_body, text, err);
    free(text);
    ZT_TRY(st);
    ZT_TRY(zt_fsync_path(s->tmpdir, err));
    struct stat sb;
    int set_aside = 0;
    if (stat(final, &sb) == 0) { /* a re-save: the old copy stays complete beside it until `latest` moves */
        ZT_TRY(zt_remove_tree(aside, err));
        ZT_TRY(zt_fs_rename(final, aside, err));
        set_aside = 1;
        point(s, "%s set aside", name);
    }
    st = zt_fs_rename(s->tmpdir, final, err);
    int placed = st == ZT_OK;
    if (placed) point(s, "%s renamed into place", name);
    if (st == ZT_OK) st = zt_fsync_path(s->dir, err);
    snprintf(path, sizeof path, "%s/latest", s->dir);
    snprintf(line, sizeof line, "%s\n", name);
    if (st == ZT_OK) st = put_file(s, path, "latest", text_body, line, err);
    if (st != ZT_OK) {
        zt_error ignore = {0};
        if (placed) (void)zt_remove_tree(final, &ignore);
        if (set_aside && rename(aside, final) == 0) (void)zt_fsync_path(s->dir, &ignore);
        return st;
    }
    /* `latest` names the new checkpoint: committed. A directory sync that
     * fails now is only said (undoing the commit could lose both). */
    zt_error unsynced = {0};
    if (zt_fsync_path(s->dir, &unsynced) != ZT_OK)
        zt_log_warn(&zt_engine_context(s->eng)->log, "checkpoint %s is committed, but syncing %s failed: %s; a crash "
                    "before the system writes it back may leave `latest` at the previous checkpoint", name, s->dir,
                    unsynced.msg);
    return ZT_OK;
}

/* Rank 0 prepares D/.tmp-step-N (emptied if a killed save left it). */
static zt_status prepare(const ckpt_saver *s, zt_error *err) {
    if (s->comm->rank != 0) return ZT_OK;
    ZT_TRY(zt_mkdir_p(s->dir, err));
    ZT_TRY(zt_remove_tree(s->tmpdir, err));
    if (mkdir(s->tmpdir, 0775) != 0)
        return ZT_FAIL(err, ZT_ERR_IO, "cannot create %s: %s (%s)", s->tmpdir, strerror(errno), zt_errno_name(errno));
    return ZT_OK;
}

zt_status ckpt_save_start(ckpt_saver *s, zt_engine *eng, zt_comm *comm, const char *dir, int step,
                          const zt_ckpt_hooks *hooks, zt_error *err) {
    memset(s, 0, sizeof *s);
    s->eng = eng, s->comm = comm, s->step = step, s->hooks = hooks;
    s->fs = &zt_engine_context(eng)->fs;
    s->counters = zt_engine_get_counters(eng);
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    snprintf(s->tmpdir, sizeof s->tmpdir, "%s/.tmp-step-%06d", dir, step);
    int nblocks = zt_engine_spec(eng)->nunits * ZT_CKPT_KINDS;
    s->hashes = calloc((size_t)comm->world_size * nblocks, sizeof *s->hashes);
    zt_status st = s->hashes ? prepare(s, err) : ZT_FAIL(err, ZT_ERR_OOM, "checkpoint: cannot allocate");
    st = zt_comm_agree(comm, st, err);
    if (st != ZT_OK) ckpt_save_free(s);
    return st;
}

unsigned long long *ckpt_own_hashes(const ckpt_saver *s) {
    return s->hashes + (size_t)s->comm->rank * zt_engine_spec(s->eng)->nunits * ZT_CKPT_KINDS;
}

/* The clean-up after a failed save, once every rank has stopped writing:
 * the partial directory goes; the previous checkpoint is as it was. */
static void remove_partial(const ckpt_saver *s) {
    zt_error ignore = {0};
    if (s->comm->rank == 0) (void)zt_remove_tree(s->tmpdir, &ignore);
}

zt_status ckpt_save_commit(ckpt_saver *s, zt_status written, const json_t *run_info, int keep, zt_error *err) {
    zt_comm *comm = s->comm;
    int nblocks = zt_engine_spec(s->eng)->nunits * ZT_CKPT_KINDS;
    zt_status st = zt_comm_agree(comm, written, err);
    if (st == ZT_OK) st = zt_comm_all_gather_host(comm, s->hashes, (size_t)nblocks * sizeof *s->hashes, err);
    char name[64] = "";
    if (st == ZT_OK && comm->rank == 0) {
        json_t *m = manifest_json(s, run_info, s->hashes);
        st = m ? publish(s, m, name, err) : ZT_FAIL(err, ZT_ERR_OOM, "checkpoint: manifest");
        json_decref(m);
    }
    st = zt_comm_agree(comm, st, err);
    if (st != ZT_OK) {
        remove_partial(s);
        ckpt_save_free(s);
        return st;
    }
    /* Committed: what it supersedes goes; a failure to remove is only said. */
    zt_error pruned = {0};
    if (comm->rank == 0 && prune(s, name, keep > 0 ? keep : 1, &pruned) != ZT_OK)
        zt_log_warn(&zt_engine_context(s->eng)->log, "checkpoint step %d is saved, but older ones were not all "
                    "removed: %s", s->step, pruned.msg);
    ckpt_save_free(s);
    return ZT_OK;
}

void ckpt_save_free(ckpt_saver *s) {
    free(s->hashes);
    s->hashes = NULL;
}

zt_status zt_ckpt_save(zt_engine *eng, zt_comm *comm, const char *dir, int step, const json_t *run_info, int keep,
                       const zt_ckpt_hooks *hooks, zt_error *err) {
    ckpt_saver s;
    ZT_TRY(ckpt_save_start(&s, eng, comm, dir, step, hooks, err));
    zt_status written = ckpt_write_rank_file(&s, ckpt_own_hashes(&s), err);
    if (written == ZT_OK) written = ckpt_write_feedback(&s, err);
    return ckpt_save_commit(&s, written, run_info, keep, err);
}
