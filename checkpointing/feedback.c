/* Quantized gradients' error feedback in a checkpoint. It is what this
 * rank's codes lost, over the whole of every unit: not sharded and not
 * resharded, so each rank writes its own file, feedback_rank<r>.bin (a
 * header with the payload's checksum, then every unit's feedback in unit
 * order), and a run at the same world size and feedback dtype reads it
 * back; any other run starts from zero feedback and says so. The file is
 * written beside the rank file, before the commit, on the caller's thread
 * (an asynchronous save stages only its rank file). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "ckpt_internal.h"
#include "zt_fs.h"

#define FEEDBACK_MAGIC "ztfeedbk"

typedef struct {
    char magic[8];
    unsigned long long bytes, hash; /* the payload's */
} feedback_header;

static void feedback_path(const char *dir, int rank, char *path, size_t cap) {
    snprintf(path, cap, "%s/feedback_rank%d.bin", dir, rank);
}

zt_status ckpt_write_feedback(const ckpt_saver *s, zt_error *err) {
    size_t n = zt_engine_feedback_bytes(s->eng);
    if (!n) return ZT_OK;
    char path[1200], tmp[1210];
    feedback_path(s->tmpdir, s->comm->rank, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    void *buf = malloc(n);
    if (!buf) return ZT_FAIL(err, ZT_ERR_OOM, "checkpoint: cannot stage %zu bytes of error feedback", n);
    zt_status st = zt_engine_get_feedback(s->eng, buf);
    if (st != ZT_OK) *err = zt_engine_context(s->eng)->err;
    feedback_header h = {FEEDBACK_MAGIC, n, XXH64(buf, n, 0)};
    int fd = -1;
    if (st == ZT_OK) st = zt_fs_create(tmp, &fd, err);
    if (st == ZT_OK) st = zt_fs_write(s->fs, fd, &h, sizeof h, tmp, err);
    if (st == ZT_OK) st = zt_fs_write(s->fs, fd, buf, n, tmp, err);
    if (fd >= 0 && st != ZT_OK) close(fd);
    else if (fd >= 0) st = zt_fs_sync_close(fd, tmp, err);
    if (st == ZT_OK) st = zt_fs_rename(tmp, path, err);
    if (st != ZT_OK) unlink(tmp);
    free(buf);
    return st;
}

json_t *ckpt_feedback_json(const zt_engine *eng, int world_size) {
    size_t n = zt_engine_feedback_bytes(eng);
    if (!n) return NULL;
    return json_pack("{s:i,s:s,s:I}", "ranks", world_size, "dtype",
                     zt_dtype_name(zt_engine_settings(eng)->feedback_dtype), "bytes_per_rank", (json_int_t)n);
}

/* Why the saved feedback does not fit this run ("" when it does). */
static void mismatch(const zt_engine *eng, const zt_comm *comm, const json_t *saved, char *why, size_t cap) {
    why[0] = '\0';
    size_t n = zt_engine_feedback_bytes(eng);
    json_int_t ranks = json_integer_value(json_object_get(saved, "ranks"));
    const char *dtype = json_string_value(json_object_get(saved, "dtype"));
    if (!saved) snprintf(why, cap, "the checkpoint has none");
    else if (ranks != comm->world_size)
        snprintf(why, cap, "it was saved at %d ranks, this run has %d (it is per rank, not sharded)", (int)ranks,
                 comm->world_size);
    else if (!dtype || strcmp(dtype, zt_dtype_name(zt_engine_settings(eng)->feedback_dtype)) != 0)
        snprintf(why, cap, "it was saved in %s", dtype ? dtype : "?");
    else if ((size_t)json_integer_value(json_object_get(saved, "bytes_per_rank")) != n)
        snprintf(why, cap, "its layout differs (another --quant-block?)");
}

/* Rank `rank`'s file, checked against its own header: *payload points
 * into *file (malloc'd), n bytes. */
static zt_status read_feedback(const zt_ckpt_info *info, int rank, size_t n, char **file, const char **payload,
                               zt_error *err) {
    char path[1200];
    feedback_path(info->dir, rank, path, sizeof path);
    size_t got;
    ZT_TRY(zt_read_file(path, n + sizeof(feedback_header), file, &got, err));
    feedback_header h;
    if (got == sizeof h + n) memcpy(&h, *file, sizeof h);
    *payload = *file + sizeof h;
    if (got != sizeof h + n || memcmp(h.magic, FEEDBACK_MAGIC, 8) != 0 || h.bytes != n ||
        h.hash != XXH64(*payload, n, 0))
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s: truncated or damaged (checksum)", path);
    return ZT_OK;
}

zt_status ckpt_load_feedback(zt_engine *eng, zt_comm *comm, const zt_ckpt_info *info, zt_error *err) {
    size_t n = zt_engine_feedback_bytes(eng);
    const json_t *saved = json_object_get(info->manifest, "error_feedback");
    char why[160];
    if (!n) {
        if (saved) zt_log_rank0(&zt_engine_context(eng)->log, "checkpoint: its error feedback is not used (this run "
                                "has no --quantize-grads-feedback)");
        return ZT_OK;
    }
    mismatch(eng, comm, saved, why, sizeof why);
    char *file = NULL;
    const char *payload = NULL;
    zt_status st = why[0] ? ZT_OK : read_feedback(info, comm->rank, n, &file, &payload, err);
    st = zt_comm_agree(comm, st, err);
    if (st == ZT_OK && !why[0]) st = zt_engine_set_feedback(eng, payload);
    free(file);
    if (st != ZT_OK) return st;
    if (why[0] && comm->rank == 0)
        zt_log_warn(&zt_engine_context(eng)->log, "checkpoint: error feedback dropped, starting from zero: %s", why);
    return ZT_OK;
}
