/* Loading a checkpoint: each rank reads only the blocks that hold the part
 * of each unit it keeps (its own file when the world size is the saved one,
 * other files' overlapping slices when resharding), and fully verifies the
 * files assigned to it (file f to rank f mod N), so that every byte of the
 * checkpoint is checked by some rank. The ranks agree on the outcome. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_internal.h"

/* A copy of a checkpoint's run.model with what older zerotrains did not
 * record (NULL when nothing is missing): checkpoints written before model
 * families were recorded hold a GPT, and a GPT's ffn_dim and norm_eps, fixed
 * in that family, were recorded later (examples/gpt/gpt_model.c), so this
 * run's values stand for them. */
static json_t *backfilled(const json_t *model, const json_t *expect_model) {
    static const char *const later_gpt_keys[] = {"ffn_dim", "norm_eps"};
    if (!json_is_object(model)) return NULL;
    const char *family = json_string_value(json_object_get(model, "family"));
    if (family && strcmp(family, "gpt") != 0) return NULL;
    json_t *copy = json_deep_copy(model);
    if (!copy) return NULL;
    int changed = !family;
    if (!family) json_object_set_new(copy, "family", json_string("gpt"));
    for (size_t k = 0; k < sizeof later_gpt_keys / sizeof later_gpt_keys[0]; k++) {
        json_t *mine = json_object_get(expect_model, later_gpt_keys[k]);
        if (json_object_get(copy, later_gpt_keys[k]) || !mine) continue;
        json_object_set(copy, later_gpt_keys[k], mine);
        changed = 1;
    }
    if (changed) return copy;
    json_decref(copy);
    return NULL;
}

/* The manifest describes this model: run.model and every unit's size. */
static zt_status check_model(const zt_ckpt_info *info, const zt_model_spec *spec, const json_t *expect_model,
                             zt_error *err) {
    json_t *model = json_object_get(json_object_get(info->manifest, "run"), "model");
    json_t *filled = backfilled(model, expect_model);
    int same = json_equal(filled ? filled : model, (json_t *)expect_model);
    const char *theirs = json_string_value(json_object_get(filled ? filled : model, "family"));
    const char *ours = json_string_value(json_object_get(expect_model, "family"));
    if (!same && theirs && ours && strcmp(theirs, ours) != 0) {
        zt_status st = ZT_FAIL(err, ZT_ERR_INVALID, "%s/manifest.json: the checkpoint holds a %s model; this run's "
                               "`model` is %s", info->dir, theirs, ours);
        json_decref(filled); /* after the message: theirs may point into it */
        return st;
    }
    if (!same) {
        size_t flags = JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(9);
        char *a = json_dumps(model, flags), *b = json_dumps(expect_model, flags);
        zt_status st = ZT_FAIL(err, ZT_ERR_INVALID, "%s/manifest.json: the checkpoint's model %s differs from this run's %s",
                               info->dir, a ? a : "?", b ? b : "?");
        free(a);
        free(b);
        json_decref(filled);
        return st;
    }
    json_decref(filled);
    if (info->nunits != spec->nunits)
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s/manifest.json: %d units, this model has %d", info->dir, info->nunits,
                       spec->nunits);
    for (int u = 0; u < spec->nunits; u++)
        if (zt_ckpt_unit_numel(info, u) != spec->units[u].numel)
            return ZT_FAIL(err, ZT_ERR_INVALID, "%s/manifest.json: unit %d has %zu parameters, this model's has %zu",
                           info->dir, u, zt_ckpt_unit_numel(info, u), spec->units[u].numel);
    return ZT_OK;
}

/* Does the checkpoint hold a delayed update that this run continues: its
 * params block is what the next step computes with, not the master's? */
static int continues_delayed_update(const zt_engine *eng, const zt_ckpt_info *info) {
    return json_is_true(json_object_get(info->manifest, "params_behind")) && zt_engine_settings(eng)->offload_delay &&
           info->dtype == zt_engine_settings(eng)->dtype;
}

/* The checkpoint's optimizer state means something to this run's optimizer
 * only when they are the same one (a checkpoint without the key is AdamW's). */
static zt_status check_optimizer(const zt_ckpt_info *info, const zt_engine *eng, zt_error *err) {
    const char *saved = json_string_value(json_object_get(info->manifest, "optimizer"));
    const char *mine = zt_optim_or_default(zt_engine_settings(eng)->optimizer)->name;
    if (!saved) saved = "adamw";
    if (strcmp(saved, mine) != 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s/manifest.json: saved with `optimizer` %s; this run uses `optimizer` %s "
                       "(their states differ)", info->dir, saved, mine);
    return ZT_OK;
}

/* This rank's part of every unit, read and handed to the engine. A delayed
 * update another run continues without delay is applied here (the params
 * come from the master). */
static zt_status load_owned(zt_engine *eng, const zt_ckpt_info *info, zt_error *err) {
    const zt_model_spec *spec = zt_engine_spec(eng);
    float *buf = malloc(3 * spec->largest_unit_numel * sizeof(float) + 64);
    if (!buf) return ZT_FAIL(err, ZT_ERR_OOM, "checkpoint: cannot allocate a load buffer");
    int behind = continues_delayed_update(eng, info);
    zt_status st = ZT_OK;
    for (int u = 0; st == ZT_OK && u < spec->nunits; u++) {
        size_t lo, n, vlo, vn;
        st = zt_engine_owned_range(eng, u, &lo, &n);
        if (st == ZT_OK) st = zt_engine_state_span(eng, u, &vlo, &vn); /* n <= vn <= padded */
        float *master = buf, *b0 = buf + n, *b1 = buf + 2 * n; /* [n], [n], [vn]: the optimizer's blocks 0, 1 */
        if (st == ZT_OK) st = zt_ckpt_read_range(info, u, 0, lo, lo + n, master, err);
        if (st == ZT_OK) st = zt_ckpt_read_range(info, u, 1, lo, lo + n, b0, err);
        if (st == ZT_OK) st = zt_ckpt_read_range(info, u, 2, vlo, vlo + vn, b1, err);
        if (st == ZT_OK) st = zt_engine_set_owned(eng, u, master, b0, b1);
        if (st == ZT_OK && behind) st = zt_ckpt_read_range(info, u, 3, lo, lo + n, buf, err); /* [n] dtype */
        if (st == ZT_OK && behind) st = zt_engine_set_owned_params(eng, u, buf);
    }
    free(buf);
    return st;
}

/* Every rank gets the same failure, rank 0's pointer to an older
 * checkpoint that verifies appended. */
static zt_status fail_together(zt_comm *comm, const char *step_dir, zt_status st, zt_error *err) {
    st = zt_comm_agree(comm, st, err);
    if (st == ZT_OK) return ZT_OK;
    char hint[1400] = "";
    if (comm->rank == 0) ckpt_suggest_older(step_dir, hint, sizeof hint);
    zt_error ignore = {0};
    if (zt_comm_broadcast(comm, hint, sizeof hint, 0, &ignore) == ZT_OK && hint[0]) {
        size_t len = strlen(err->msg);
        snprintf(err->msg + len, sizeof err->msg - len, "; %s", hint);
    }
    return st;
}

/* The loss scaler continues where the checkpoint left it when it was
 * saved by an fp16 run and this run is fp16 too; otherwise the fresh run's
 * scaler stands (another dtype's scale of 1 means nothing to fp16). The
 * count of skipped steps carries over either way. */
static void restore_scaler(zt_loss_scaler *ls, zt_dtype now, zt_dtype saved, const json_t *s) {
    if (!s) return;
    ls->skipped_steps = (long)json_integer_value(json_object_get(s, "skipped_steps"));
    if (now != ZT_FP16 || saved != ZT_FP16) return;
    ls->scale = json_number_value(json_object_get(s, "scale"));
    ls->good_steps = (int)json_integer_value(json_object_get(s, "good_steps"));
    ls->hysteresis_left = (int)json_integer_value(json_object_get(s, "hysteresis_left"));
    ls->consecutive_skips = (int)json_integer_value(json_object_get(s, "consecutive_skips"));
}

/* The engine's counters as the checkpoint left them. */
static void restore_progress(zt_engine *eng, const zt_ckpt_info *info) {
    zt_engine_state_counters p = zt_engine_get_counters(eng);
    p.steps_taken = (int)json_integer_value(json_object_get(info->manifest, "optimizer_steps"));
    restore_scaler(&p.scaler, zt_engine_settings(eng)->dtype, info->dtype, json_object_get(info->manifest, "loss_scaler"));
    p.params_behind = continues_delayed_update(eng, info);
    zt_engine_set_counters(eng, &p);
}

/* Resharding is exact for state kept per element; an optimizer whose
 * state follows the slices (8-bit Adam's blocks, Adafactor's per-slice
 * sums) says what changed in its table's reshard_note. */
static void say_what_resharding_changed(zt_engine *eng, int saved, int now) {
    const char *note = zt_optim_or_default(zt_engine_settings(eng)->optimizer)->reshard_note;
    if (note) zt_log_rank0(&zt_engine_context(eng)->log, "resharded %d -> %d ranks: %s", saved, now, note);
}

zt_status zt_ckpt_load(zt_engine *eng, zt_comm *comm, const char *step_dir, const json_t *expect_model, int *step,
                       zt_error *err) {
    zt_ckpt_info info;
    /* Every rank takes the same branches: each outcome is agreed on. */
    zt_status st = fail_together(comm, step_dir, zt_ckpt_open(step_dir, &info, NULL, 0, err), err);
    if (st == ZT_OK) st = zt_comm_agree(comm, check_model(&info, zt_engine_spec(eng), expect_model, err), err);
    if (st == ZT_OK) st = zt_comm_agree(comm, check_optimizer(&info, eng, err), err);
    if (st == ZT_OK) {
        for (int f = comm->rank; st == ZT_OK && f < info.world_size; f += comm->world_size)
            st = ckpt_verify_file(&info, f, err);
        if (st == ZT_OK) st = load_owned(eng, &info, err);
        st = fail_together(comm, step_dir, st, err);
    }
    if (st == ZT_OK) st = zt_engine_gather_params(eng);
    if (st == ZT_OK) st = ckpt_load_feedback(eng, comm, &info, err);
    if (st == ZT_OK) {
        *step = info.step;
        restore_progress(eng, &info);
        if (info.world_size != comm->world_size) say_what_resharding_changed(eng, info.world_size, comm->world_size);
    }
    zt_ckpt_close(&info);
    return st;
}
