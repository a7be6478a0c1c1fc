/* Which step directory a checkpoint directory means: the one `latest` names
 * when it is complete, else the newest complete one (with a warning, since
 * `latest` is only a pointer), else an error listing what was found. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt_internal.h"
#include "zt_fs.h"

int ckpt_complete(const char *step_dir, char *why, size_t cap) {
    char path[1200];
    snprintf(path, sizeof path, "%s/manifest.json", step_dir);
    char *text = NULL;
    size_t n = 0;
    zt_error err = {0};
    zt_ckpt_info info;
    memset(&info, 0, sizeof info);
    int ok = zt_read_file(path, ZT_CKPT_MANIFEST_MAX, &text, &n, &err) == ZT_OK &&
             zt_ckpt_parse_manifest(text, n, "manifest.json", &info, &err) == ZT_OK;
    if (!ok) snprintf(why, cap, "%s", err.msg);
    free(text);
    zt_ckpt_close(&info);
    return ok;
}

/* "step-000010" -> 10 (aside: "step-000010.replaced", *aside = 1); -1 otherwise. */
static long step_of(const char *name, int *aside) {
    char *end;
    if (strncmp(name, "step-", 5) != 0 || name[5] < '0' || name[5] > '9') return -1;
    long step = strtol(name + 5, &end, 10);
    *aside = strcmp(end, ".replaced") == 0;
    return *end == '\0' || *aside ? step : -1;
}

typedef struct {
    char name[256];
    long step;
    int aside;
} candidate;

static int newest_first(const void *a, const void *b) {
    const candidate *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? 1 : -1;
    return x->aside - y->aside; /* the step itself before its aside copy */
}

/* Every step directory of dir, newest first (*n of them; malloc'd). */
static zt_status list_candidates(const char *dir, candidate **out, int *n, zt_error *err) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return ZT_FAIL(err, ZT_ERR_INVALID, "checkpoint directory %s: no complete checkpoint there (%s)", dir,
                       strerror(errno));
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int aside;
        long step = step_of(e->d_name, &aside);
        if (step < 0 || strlen(e->d_name) >= sizeof((candidate *)0)->name) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            candidate *grown = realloc(*out, (size_t)cap * sizeof **out);
            if (!grown) {
                closedir(d);
                return ZT_FAIL(err, ZT_ERR_OOM, "checkpoint: cannot list %s", dir);
            }
            *out = grown;
        }
        candidate *c = &(*out)[(*n)++];
        snprintf(c->name, sizeof c->name, "%s", e->d_name);
        c->step = step;
        c->aside = aside;
    }
    closedir(d);
    if (*n > 0) qsort(*out, (size_t)*n, sizeof **out, newest_first);
    return ZT_OK;
}

/* The step directory `latest` names when it exists (a save renames a step
 * directory into place only once its manifest is written, so from then on
 * damage is refused at load, not skipped); else 0 and why. */
static int from_latest(const char *dir, char *step_dir, size_t cap, char *why, size_t wcap) {
    char path[1100], *text = NULL;
    size_t n = 0;
    zt_error err = {0};
    snprintf(path, sizeof path, "%s/latest", dir);
    if (zt_read_file(path, 255, &text, &n, &err) != ZT_OK) {
        snprintf(why, wcap, "%s/latest is missing or unreadable", dir);
        return 0;
    }
    text[strcspn(text, "\n")] = '\0';
    int aside;
    if (step_of(text, &aside) < 0 || aside || strlen(text) + 1 != n) {
        snprintf(why, wcap, "%s/latest is damaged (it does not hold one step-N name)", dir);
        free(text);
        return 0;
    }
    char target[1400], manifest[1500];
    snprintf(target, sizeof target, "%s/%s", dir, text);
    snprintf(manifest, sizeof manifest, "%s/manifest.json", target);
    struct stat sb;
    int ok = stat(manifest, &sb) == 0;
    if (ok) snprintf(step_dir, cap, "%s", target);
    else snprintf(why, wcap, "%s/latest names %s, which does not exist or has no manifest", dir, text);
    free(text);
    return ok;
}

zt_status zt_ckpt_resolve(const char *dir, char *step_dir, size_t cap, char *warning, size_t wcap, zt_error *err) {
    char path[1100], latest_why[1000] = "";
    if (wcap) warning[0] = '\0';
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    struct stat sb;
    if (stat(path, &sb) == 0) { /* one step directory, named on purpose */
        snprintf(step_dir, cap, "%s", dir);
        return ZT_OK;
    }
    if (from_latest(dir, step_dir, cap, latest_why, sizeof latest_why)) return ZT_OK;
    candidate *list;
    int n;
    ZT_TRY(list_candidates(dir, &list, &n, err));
    char refused[900] = "";
    for (int i = 0; i < n; i++) {
        char target[1400], reason[600];
        snprintf(target, sizeof target, "%s/%s", dir, list[i].name);
        if (ckpt_complete(target, reason, sizeof reason)) {
            snprintf(step_dir, cap, "%s", target);
            snprintf(warning, wcap, "%s; using the newest complete checkpoint, %s", latest_why, target);
            free(list);
            return ZT_OK;
        }
        size_t len = strlen(refused);
        snprintf(refused + len, sizeof refused - len, "; %s: %s", list[i].name, reason);
    }
    free(list);
    return ZT_FAIL(err, ZT_ERR_INVALID, "checkpoint directory %s: no complete checkpoint there (%s%s%s)", dir,
                   latest_why, n ? "" : "; no step-N directories", refused);
}

zt_status zt_ckpt_open(const char *dir, zt_ckpt_info *info, char *warning, size_t wcap, zt_error *err) {
    memset(info, 0, sizeof *info);
    ZT_TRY(zt_ckpt_resolve(dir, info->dir, sizeof info->dir, warning, wcap, err));
    char path[1100], *text = NULL;
    size_t n = 0;
    snprintf(path, sizeof path, "%s/manifest.json", info->dir);
    ZT_TRY(zt_read_file(path, ZT_CKPT_MANIFEST_MAX, &text, &n, err));
    zt_status st = zt_ckpt_parse_manifest(text, n, path, info, err);
    free(text);
    return st;
}

void zt_ckpt_close(zt_ckpt_info *info) {
    if (info->manifest) json_decref(info->manifest);
    info->manifest = NULL;
}

void ckpt_suggest_older(const char *step_dir, char *out, size_t cap) {
    char dir[1100];
    zt_parent_dir(step_dir, dir, sizeof dir);
    const char *base = strrchr(step_dir, '/') ? strrchr(step_dir, '/') + 1 : step_dir;
    int aside;
    long failed = step_of(base, &aside);
    candidate *list;
    int n;
    zt_error ignore = {0};
    snprintf(out, cap, "no older checkpoint in %s verifies", dir);
    if (failed < 0 || list_candidates(dir, &list, &n, &ignore) != ZT_OK) return;
    for (int i = 0; i < n; i++) {
        if (list[i].step >= failed) continue;
        char target[1400], why[600];
        snprintf(target, sizeof target, "%s/%s", dir, list[i].name);
        if (!ckpt_complete(target, why, sizeof why)) continue;
        zt_ckpt_info info;
        zt_error err = {0};
        int ok = zt_ckpt_open(target, &info, NULL, 0, &err) == ZT_OK && zt_ckpt_verify(&info, &err) == ZT_OK;
        zt_ckpt_close(&info);
        if (ok) {
            snprintf(out, cap, "the newest older checkpoint that verifies is %s (`resume` %s takes it)", target, target);
            break;
        }
    }
    free(list);
}

int zt_ckpt_older_complete(const char *step_dir, char *older, size_t cap) {
    char dir[1100];
    zt_parent_dir(step_dir, dir, sizeof dir);
    const char *base = strrchr(step_dir, '/') ? strrchr(step_dir, '/') + 1 : step_dir;
    int aside, found = 0;
    long newer = step_of(base, &aside);
    candidate *list;
    int n;
    zt_error ignore = {0};
    if (newer < 0 || list_candidates(dir, &list, &n, &ignore) != ZT_OK) return 0;
    for (int i = 0; i < n && !found; i++) {
        char target[1400], why[600];
        snprintf(target, sizeof target, "%s/%s", dir, list[i].name);
        if (list[i].step >= newer || list[i].aside || !ckpt_complete(target, why, sizeof why)) continue;
        snprintf(older, cap, "%s", target);
        found = 1;
    }
    free(list);
    return found;
}
