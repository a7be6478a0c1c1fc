/* Agreement on settings and on outcomes (zt_agree.h). Settings go through one
 * digest per rank; only on a mismatch are the rows themselves gathered, so
 * the common case costs one small all-gather. */
#include "zt_agree.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "zt_time.h"

/* ---- settings ---- */

static unsigned long long settings_digest(const zt_setting *rows, int nrows) {
    XXH64_state_t *h = XXH64_createState();
    if (!h) return 0;
    XXH64_reset(h, 0);
    for (int i = 0; i < nrows; i++) {
        XXH64_update(h, rows[i].name, strlen(rows[i].name) + 1);
        XXH64_update(h, rows[i].value, strlen(rows[i].value) + 1);
    }
    unsigned long long d = XXH64_digest(h);
    XXH64_freeState(h);
    return d;
}

/* Rank r's value of setting `name` in the gathered table, or NULL. */
static const char *value_of(const zt_setting *all, const int *counts, int r, const char *name) {
    const zt_setting *rows = all + (size_t)r * ZT_MAX_SETTINGS;
    for (int i = 0; i < counts[r]; i++)
        if (strcmp(rows[i].name, name) == 0) return rows[i].value;
    return NULL;
}

/* Appends "  name: ranks 0, 2: v; rank 1: w" when the ranks' values differ. */
static void describe_difference(const zt_setting *all, const int *counts, int N, const char *name, char *msg,
                                size_t cap) {
    int same = 1;
    const char *v0 = value_of(all, counts, 0, name);
    for (int r = 1; r < N && same; r++) {
        const char *v = value_of(all, counts, r, name);
        same = (v == NULL) == (v0 == NULL) && (!v || strcmp(v, v0) == 0);
    }
    if (same) return;
    size_t len = strlen(msg);
    snprintf(msg + len, cap - len, "\n  %s:", name);
    unsigned char *done = calloc((size_t)N, 1);
    if (!done) return;
    for (int r = 0; r < N; r++) {
        if (done[r]) continue;
        const char *v = value_of(all, counts, r, name);
        int group = 0;
        for (int q = r; q < N; q++) {
            const char *w = value_of(all, counts, q, name);
            if ((w == NULL) != (v == NULL) || (v && strcmp(v, w) != 0)) continue;
            done[q] = 1;
            group++;
        }
        len = strlen(msg);
        snprintf(msg + len, cap - len, "%s rank%s", r == 0 ? "" : ";", group > 1 ? "s" : "");
        for (int q = r, first = 1; q < N; q++) {
            const char *w = value_of(all, counts, q, name);
            if ((w == NULL) != (v == NULL) || (v && strcmp(v, w) != 0)) continue;
            len = strlen(msg);
            snprintf(msg + len, cap - len, "%s%d", first ? " " : ", ", q);
            first = 0;
        }
        len = strlen(msg);
        snprintf(msg + len, cap - len, " = %s", v ? v : "(not set: another build?)");
    }
    free(done);
}

/* Rank 0: the message naming every setting that differs. */
static void settings_report(const zt_setting *all, const int *counts, int N, char *msg, size_t cap) {
    snprintf(msg, cap, "ranks disagree on settings (every rank needs the same flags, config and build):");
    for (int r = 0; r < N; r++)
        for (int i = 0; i < counts[r]; i++) {
            const char *name = all[(size_t)r * ZT_MAX_SETTINGS + i].name;
            int seen = 0; /* each name once, at its first rank */
            for (int q = 0; q < r && !seen; q++) seen = value_of(all, counts, q, name) != NULL;
            if (!seen) describe_difference(all, counts, N, name, msg, cap);
        }
}

zt_status zt_agree_settings(MPI_Comm comm, const zt_setting *rows, int nrows, zt_error *err) {
    if (nrows < 0 || nrows > ZT_MAX_SETTINGS)
        return ZT_FAIL(err, ZT_ERR_INTERNAL, "agree: %d settings (at most %d)", nrows, ZT_MAX_SETTINGS);
    int rank, N;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &N);
    unsigned long long mine = settings_digest(rows, nrows);
    unsigned long long *digests = calloc((size_t)N, sizeof *digests);
    if (!digests) return ZT_FAIL(err, ZT_ERR_OOM, "agree: cannot allocate");
    MPI_Allgather(&mine, 1, MPI_UNSIGNED_LONG_LONG, digests, 1, MPI_UNSIGNED_LONG_LONG, comm);
    int differ = 0;
    for (int r = 0; r < N; r++) differ |= digests[r] != digests[0];
    free(digests);
    if (!differ) return ZT_OK;

    zt_setting *mine_rows = calloc(ZT_MAX_SETTINGS, sizeof *mine_rows);
    zt_setting *all = rank == 0 ? calloc((size_t)N * ZT_MAX_SETTINGS, sizeof *all) : NULL;
    int *counts = rank == 0 ? calloc((size_t)N, sizeof *counts) : NULL;
    int fail = !mine_rows || (rank == 0 && (!all || !counts));
    if (mine_rows) memcpy(mine_rows, rows, (size_t)nrows * sizeof *rows);
    /* Every rank takes part in both gathers even when short of memory. */
    MPI_Gather(&nrows, 1, MPI_INT, counts, 1, MPI_INT, 0, comm);
    MPI_Gather(mine_rows ? (void *)mine_rows : (void *)rows, (int)(ZT_MAX_SETTINGS * sizeof(zt_setting)), MPI_BYTE, all,
               (int)(ZT_MAX_SETTINGS * sizeof(zt_setting)), MPI_BYTE, 0, comm);
    char msg[sizeof err->msg];
    if (rank == 0 && !fail) settings_report(all, counts, N, msg, sizeof msg);
    else snprintf(msg, sizeof msg, "ranks disagree on settings (rank 0 lists them)");
    free(mine_rows);
    free(all);
    free(counts);
    return ZT_FAIL(err, ZT_ERR_INVALID, "%s", msg);
}

/* ---- outcomes ---- */

/* Waits for req; a failing rank gives up after timeout_s. */
static int wait_until(MPI_Request *req, int failing, double timeout_s) {
    double deadline = zt_now_s() + timeout_s;
    for (;;) {
        int done = 0;
        MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (done) return 1;
        if (failing && zt_now_s() > deadline) return 0;
        struct timespec pause = {0, 1000000}; /* 1 ms */
        nanosleep(&pause, NULL);
    }
}

void zt_outcome_free(zt_outcome *out) {
    free(out->ranks);
    out->ranks = NULL;
}

void zt_agree_outcome(MPI_Comm comm, int exit_code, const zt_error *err, double timeout_s, zt_outcome *out) {
    memset(out, 0, sizeof *out);
    int rank, N;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &N);
    int *all = calloc((size_t)N + 1, sizeof *all); /* [N] received, then what this rank sends */
    if (!all) return; /* agreed = 0: the caller aborts */
    all[N] = exit_code;
    MPI_Request req;
    MPI_Iallgather(&all[N], 1, MPI_INT, all, 1, MPI_INT, comm, &req);
    if (!wait_until(&req, exit_code != 0, timeout_s)) return; /* `all` stays with the request: the caller aborts */
    out->agreed = 1;
    for (int r = 0; r < N; r++) {
        int code = all[r];
        out->nfailed += code != 0;
        if (code > out->exit_code) out->exit_code = code;
    }
    free(all);
    if (out->nfailed == 0) return;
    zt_rank_outcome *recs = rank == 0 ? calloc((size_t)N, sizeof *recs) : NULL;
    zt_rank_outcome me;
    memset(&me, 0, sizeof me);
    me.exit_code = exit_code;
    if (exit_code != 0 && err) {
        me.status = err->code;
        snprintf(me.where, sizeof me.where, "%s", err->where[0] ? err->where : "?");
        snprintf(me.msg, sizeof me.msg, "%s", err->msg);
    }
    if (rank == 0 && !recs) MPI_Abort(comm, exit_code ? exit_code : 1); /* no memory left to report with */
    MPI_Gather(&me, (int)sizeof me, MPI_BYTE, recs, (int)sizeof me, MPI_BYTE, 0, comm);
    out->ranks = recs;
}
