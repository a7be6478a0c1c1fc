/* zt-train's command line (zt_train_main, for a program built with a list
 * of model families). Only this file decides exit codes:
 * 0 success, 1 runtime failure, 2 bad input (flags, config, checkpoint,
 * ranks that disagree, an option not available), 3 out of memory.
 *
 * The ranks settle every phase together (zt_agree_outcome): when they all
 * fail, rank 0 prints each distinct error once and every rank exits with the
 * same code through MPI_Finalize; a rank failing alone prints its error and
 * aborts the job. Before the first collective of the run they agree on
 * every setting (zt_agree_settings). docs/failure.md has the details. */
#include <errno.h>
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "data.h"
#include "metrics.h"
#include "train_config.h"
#include "train_log.h"
#include "stop_signals.h"
#include "plan_auto.h"
#include "trainer.h"
#include "zt_train.h"
#include "zt_agree.h"
#include "zt_checkpoint.h"
#include "zt_comm.h"
#include "zt_ctx.h"

/* How long a failing rank waits for the others to report before it decides
 * it failed alone and aborts the job (they are then blocked in a collective
 * that waits for it); ZT_FAIL_ALONE_AFTER_S overrides it. */
#define FAIL_ALONE_AFTER_S 10.0

#ifndef ZT_VERSION
#define ZT_VERSION "unknown"
#endif
#ifndef ZT_BUILD_CUDA
#define ZT_BUILD_CUDA "off"
#endif

typedef struct {
    const char *prog;
    int rank, world;
    MPI_Comm ctrl;        /* the agreements' own communicator */
    double alone_after_s; /* FAIL_ALONE_AFTER_S */
    zt_proc_mem startup;  /* the pages MPI's initialisation made (zt_proc_mem.h), until the context takes them */
} job;

static int exit_code_for(zt_status st) {
    switch (st) {
    case ZT_OK: return 0;
    case ZT_ERR_INVALID: case ZT_ERR_UNSUPPORTED: return 2;
    case ZT_ERR_OOM: return 3;
    default: return 1;
    }
}

static void print_error(const char *who, zt_status code, const char *where, const char *msg) {
    char shown[sizeof((zt_error *)0)->msg + 256];
    zt_settings_as_flags(msg, shown, sizeof shown);
    fprintf(stderr, "%s: error: %s\n  (%s at %s)\n", who, shown, zt_status_name(code), where[0] ? where : "?");
}

/* Rank 0: each distinct error once, with the ranks it came from unless
 * every rank had it. */
static void print_failures(const job *j, const zt_outcome *o, const char *what) {
    const zt_rank_outcome *rk = o->ranks;
    for (int r = 0; r < j->world; r++) {
        if (rk[r].exit_code == 0) continue;
        int seen = 0, count = 0;
        for (int q = 0; q < r && !seen; q++) seen = rk[q].exit_code != 0 && strcmp(rk[q].msg, rk[r].msg) == 0;
        if (seen) continue;
        char list[200] = "", who[300];
        for (int q = r; q < j->world; q++) {
            if (rk[q].exit_code == 0 || strcmp(rk[q].msg, rk[r].msg) != 0) continue;
            size_t len = strlen(list);
            snprintf(list + len, sizeof list - len, "%s%d", count++ ? ", " : "", q);
        }
        snprintf(who, sizeof who, "%s [rank%s %s]", j->prog, count > 1 ? "s" : "", list);
        print_error(count == j->world ? j->prog : who, rk[r].status, rk[r].where, rk[r].msg);
    }
    if (o->nfailed < j->world)
        fprintf(stderr, "%s: %d of %d rank(s) failed%s; all of them stop\n", j->prog, o->nfailed, j->world, what);
    fflush(stderr);
}

/* Every rank reports how a phase went. Returns 0 to go on, else the job's
 * exit code, the same on every rank. A rank that failed alone prints its
 * own error and aborts the job. */
static int settle(const job *j, zt_status st, const zt_error *err, const char *what) {
    zt_outcome o;
    int code = exit_code_for(st);
    zt_agree_outcome(j->ctrl, code, err, j->alone_after_s, &o);
    if (!o.agreed) {
        char who[64];
        snprintf(who, sizeof who, "%s [rank %d]", j->prog, j->rank);
        print_error(who, err->code, err->where, err->msg);
        fprintf(stderr, "%s: rank %d failed alone (no other rank reported within %.0f s); aborting the job\n",
                j->prog, j->rank, j->alone_after_s);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, code);
    }
    if (o.nfailed > 0 && j->rank == 0) print_failures(j, &o, what);
    zt_outcome_free(&o);
    return o.exit_code;
}

/* The watchdog's timeout: a peer or the network is gone, so no agreement
 * can be reached; this rank names what it waited for and aborts the job.
 * MPI_Abort itself may wait for an unreachable daemon: after 10 s more the
 * alarm ends this process anyway. */
static void abort_on_timeout(const job *j, zt_status st, const zt_error *err, zt_comm *comm) {
    if (st != ZT_ERR_TIMEOUT) return;
    char who[64], pending[400];
    snprintf(who, sizeof who, "%s [rank %d]", j->prog, j->rank);
    print_error(who, err->code, err->where, err->msg);
    zt_comm_pending(comm, pending, sizeof pending); /* a device sync timed out: which collective it waits on */
    if (pending[0]) fprintf(stderr, "%s: rank %d waits on %s\n", j->prog, j->rank, pending);
    fprintf(stderr, "%s: rank %d aborts the job (a collective timed out: no agreement is possible)\n", j->prog,
            j->rank);
    fflush(stderr);
    alarm(10);
    zt_comm_abort(comm); /* NCCL: ncclCommAbort, so the device's queued collectives stop */
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static int finish(job *j, int code) {
    zt_proc_mem_destroy(&j->startup);
    MPI_Comm_free(&j->ctrl);
    MPI_Finalize();
    return code;
}

/* On OOM the failing rank prints the allocator's view and, with a log dir,
 * keeps it in DIR/oom_rank<r>.txt. */
static void report_oom(const zt_ctx *ctx, const zt_train_config *cfg) {
    const char *report = ctx->oom_report ? ctx->oom_report : "(no report captured)\n";
    fprintf(stderr, "[rank %d] out-of-memory report:\n%s", ctx->rank, report);
    fflush(stderr);
    zt_error ignore_metrics = {0};
    zt_metrics_values oom = {-1, 0.0, 0.0, 0.0, 1, NULL, NULL, NULL}; /* the scraper sees the stop */
    if (cfg->metrics_file[0])
        (void)zt_metrics_write(cfg->metrics_file, ctx->rank, &ctx->device_mem, &ctx->host_mem, &oom, &ignore_metrics);
    if (!cfg->log_dir[0]) return;
    zt_error ignore = {0};
    if (zt_mkdir_p(cfg->log_dir, &ignore) != ZT_OK) return;
    char path[1100];
    snprintf(path, sizeof path, "%s/oom_rank%d.txt", cfg->log_dir, ctx->rank);
    FILE *f = fopen(path, "w");
    if (!f) return;
    char shown[sizeof ctx->err.msg + 256];
    zt_settings_as_flags(ctx->err.msg, shown, sizeof shown);
    fprintf(f, "%s\n%s", shown, report);
    fclose(f);
}

static int env_int(const char *name, int fallback) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : fallback;
}

/* "TERM", "SIGTERM" or a number; 0 when none of the four stop signals. */
static int signal_named(const char *name) {
    if (strncmp(name, "SIG", 3) == 0) name += 3;
    for (int i = 0; i < ZT_STOP_SIGNALS; i++) {
        int n = zt_stop_signal_number(i);
        if (strcmp(name, zt_signal_name(n) + 3) == 0 || atoi(name) == n) return n;
    }
    return 0;
}

static int errno_named(const char *name) {
    const int codes[] = {ENOSPC, EIO, EROFS, EDQUOT};
    for (int i = 0; i < 4; i++)
        if (strcmp(name, zt_errno_name(codes[i])) == 0) return codes[i];
    return 0;
}

/* ZT_TEST_FS_FAIL=RANK:N[+|-M]:ERRNO (zt_train_hooks.h). */
static void fs_fail_from_env(zt_train_hooks *h) {
    const char *v = getenv("ZT_TEST_FS_FAIL");
    char range[32] = "", name[16] = "";
    if (!v || sscanf(v, "%d:%31[0-9+-]:%15s", &h->fs_fail_rank, range, name) != 3) {
        h->fs_fail_rank = -2;
        return;
    }
    char *end = NULL;
    h->fs_fail_from = strtol(range, &end, 10);
    h->fs_fail_to = *end == '+' ? LONG_MAX : *end == '-' ? strtol(end + 1, NULL, 10) : h->fs_fail_from;
    h->fs_fail_errno = errno_named(name);
    if (h->fs_fail_from < 1 || !h->fs_fail_errno) h->fs_fail_rank = -2;
}

zt_train_hooks zt_train_hooks_from_env(void) {
    zt_train_hooks h = zt_train_hooks_none();
    h.exit_rank = env_int("ZT_TEST_EXIT_RANK", -1);
    h.exit_step = env_int("ZT_TEST_EXIT_STEP", -1);
    const char *stall = getenv("ZT_TEST_STALL");
    char where[16] = "";
    int got = stall ? sscanf(stall, "%d:%d:%15s", &h.stall_rank, &h.stall_step, where) : 0;
    if (stall && got < 2) h.stall_step = -1;
    h.stall_forward = got == 3 && strcmp(where, "forward") == 0;
    h.list_points = env_int("ZT_TEST_SAVE_POINTS", 0);
    const char *kill = getenv("ZT_TEST_KILL_SAVE");
    char sig[16] = "";
    int fields = kill ? sscanf(kill, "%d:%d:%d:%15s", &h.kill_step, &h.kill_rank, &h.kill_point, sig) : 0;
    if (kill && fields < 3) h.kill_step = -1;
    if (fields == 4) h.kill_signal = signal_named(sig);
    const char *raise_at = getenv("ZT_TEST_RAISE");
    if (raise_at && sscanf(raise_at, "%d:%d:%15s", &h.raise_rank, &h.raise_step, sig) == 3)
        h.raise_signal = signal_named(sig);
    if (!h.raise_signal) h.raise_step = -1;
    fs_fail_from_env(&h);
    /* read|write:N[:RANK]: the N-th request of that kind fails (every rank without RANK) */
    const char *nvme = getenv("ZT_TEST_NVME_FAIL");
    char kind[8] = "";
    long nth = 0;
    if (nvme && sscanf(nvme, "%7[a-z]:%ld:%d", kind, &nth, &h.nvme_fail_rank) >= 2) {
        if (strcmp(kind, "read") == 0) h.nvme_fail_read = nth;
        if (strcmp(kind, "write") == 0) h.nvme_fail_write = nth;
    }
    const char *leak = getenv("ZT_TEST_LEAK");
    if (leak && (sscanf(leak, "%d:%lld", &h.leak_rank, &h.leak_bytes) != 2 || h.leak_bytes <= 0)) h.leak_rank = -1;
    const char *overflow = getenv("ZT_TEST_OVERFLOW");
    if (overflow && sscanf(overflow, "%d:%d", &h.overflow_step, &h.overflow_rank) != 2) h.overflow_step = -1;
    return h;
}

void zt_train_print_families(FILE *f, const zt_train_model *const *models, int nmodels) {
    fprintf(f, "\nModel families (--model; the first is the default):\n");
    for (int k = 0; k < nmodels; k++) fprintf(f, "  %-28s %s\n", models[k]->family, models[k]->description);
}

/* --model: one of the families this program was built with (default: its first). */
static zt_status find_family(zt_train_config *cfg, const zt_train_model *const *models, int nmodels,
                             const zt_train_model **family, zt_error *err) {
    if (!zt_train_config_given(cfg, "model") && nmodels > 0) /* the program's first family */
        snprintf(cfg->model, sizeof cfg->model, "%s", models[0]->family);
    *family = zt_train_model_find(models, nmodels, cfg->model);
    if (*family) return ZT_OK;
    char names[256] = "";
    for (int k = 0; k < nmodels; k++) {
        size_t n = strlen(names);
        snprintf(names + n, sizeof names - n, "%s%s", k ? ", " : "", models[k]->family);
    }
    return ZT_FAIL(err, ZT_ERR_INVALID, "--model %s: not a model family of this program (it has %s)", cfg->model,
                   names);
}

/* ---- what the ranks agree on ---- */

/* The values of the settings that name files: what they refer to. */
typedef struct {
    char data[ZT_SETTING_VALUE], val_data[ZT_SETTING_VALUE], resume[ZT_SETTING_VALUE], save_dir[ZT_SETTING_VALUE];
    char probe[1200]; /* rank 0's marker file in its --save-dir, removed after the agreement */
} identities;

static const char *identity_of(void *arg, const char *option) {
    const identities *id = arg;
    if (strcmp(option, "data") == 0) return id->data;
    if (strcmp(option, "val-data") == 0) return id->val_data;
    if (strcmp(option, "resume") == 0) return id->resume;
    return id->save_dir;
}

/* --resume auto: --save-dir's newest complete checkpoint, or (none there)
 * a fresh start, said once. */
static zt_status resolve_auto(const job *j, zt_train_config *cfg, char *step_dir, size_t cap, char *warning,
                              size_t wcap, zt_error *err) {
    zt_error none = {0};
    zt_status st = zt_ckpt_resolve(cfg->save_dir, step_dir, cap, warning, wcap, &none);
    if (st == ZT_OK) {
        cfg->resume_auto = 1;
        if (j->rank == 0) printf("--resume auto: resuming from %s\n", step_dir);
        return ZT_OK;
    }
    if (st != ZT_ERR_INVALID) {
        zt_error_adopt(err, none.code, none.where, none.msg);
        return st;
    }
    if (j->rank == 0) printf("--resume auto: starting fresh (%s)\n", none.msg);
    cfg->resume[0] = '\0';
    return ZT_OK;
}

/* --resume: each rank resolves its path to one step directory (cfg->resume
 * becomes it) and is compared by that checkpoint's manifest. */
static zt_status resume_identity(const job *j, zt_train_config *cfg, identities *id, zt_error *err) {
    snprintf(id->resume, sizeof id->resume, "none");
    if (!cfg->resume[0]) return ZT_OK;
    char step_dir[1024], warning[2048];
    int automatic = strcmp(cfg->resume, "auto") == 0;
    if (automatic) ZT_TRY(resolve_auto(j, cfg, step_dir, sizeof step_dir, warning, sizeof warning, err));
    else ZT_TRY(zt_ckpt_resolve(cfg->resume, step_dir, sizeof step_dir, warning, sizeof warning, err));
    if (automatic && !cfg->resume[0]) {
        snprintf(id->resume, sizeof id->resume, "auto: no complete checkpoint (a fresh start)");
        return ZT_OK;
    }
    if (warning[0] && j->rank == 0) fprintf(stderr, "%s: warning: --resume: %s\n", j->prog, warning);
    snprintf(cfg->resume, sizeof cfg->resume, "%s", step_dir);
    /* the manifest's bytes, unparsed: a damaged one is refused at load, with advice */
    char path[1100], *text = NULL;
    size_t n = 0;
    snprintf(path, sizeof path, "%s/manifest.json", step_dir);
    ZT_TRY(zt_read_file(path, ZT_CKPT_MANIFEST_MAX, &text, &n, err));
    const char *base = strrchr(step_dir, '/');
    snprintf(id->resume, sizeof id->resume, "%.64s, manifest xxh64 %016llx", base ? base + 1 : step_dir,
             (unsigned long long)XXH64(text, n, 0));
    free(text);
    return ZT_OK;
}

/* Whether this run may write to --save-dir: a cadence, a signal's save, or
 * --resume auto, which reads it. */
static int uses_save_dir(const zt_train_config *cfg) {
    return cfg->save_dir[0] && (cfg->save_every > 0 || cfg->save_every_minutes > 0 ||
                                strcmp(cfg->on_signal, "save-exit") == 0 || strcmp(cfg->resume, "auto") == 0);
}

/* --save-dir: rank 0 leaves a marker file in its directory; a rank sees the
 * same checkpoints when its own --save-dir shows that file. Collective. */
static zt_status save_dir_identity(const job *j, const zt_train_config *cfg, identities *id, zt_error *err) {
    char name[128] = "";
    zt_status st = ZT_OK;
    if (j->rank == 0 && uses_save_dir(cfg)) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        snprintf(name, sizeof name, ".zt-probe-%ld-%ld", (long)getpid(), (long)now.tv_nsec);
        snprintf(id->probe, sizeof id->probe, "%s/%s", cfg->save_dir, name);
        st = zt_mkdir_p(cfg->save_dir, err);
        FILE *f = st == ZT_OK ? fopen(id->probe, "w") : NULL;
        if (st == ZT_OK && !f) st = ZT_FAIL(err, ZT_ERR_IO, "--save-dir %s: cannot write there", cfg->save_dir);
        if (f) fclose(f);
        if (st != ZT_OK) name[0] = id->probe[0] = '\0';
    }
    MPI_Bcast(name, sizeof name, MPI_CHAR, 0, j->ctrl); /* every rank, whatever its own flags */
    if (!uses_save_dir(cfg)) snprintf(id->save_dir, sizeof id->save_dir, "unused (no saves)");
    else {
        char path[1200];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", cfg->save_dir, name);
        int same = name[0] && stat(path, &sb) == 0;
        snprintf(id->save_dir, sizeof id->save_dir, "%s", same ? "rank 0's checkpoint directory" : "");
        if (!same) snprintf(id->save_dir, sizeof id->save_dir, "not rank 0's checkpoint directory (%.150s)", cfg->save_dir);
    }
    return st;
}

static zt_status collect_identities(const job *j, zt_train_config *cfg, identities *id, zt_error *err) {
    zt_status st = ZT_OK;
    zt_token_format f = ZT_TOKENS_AUTO;
    zt_token_format_parse(cfg->data_dtype, &f); /* the options table allows no other */
    st = zt_data_identity("--data", cfg->data, f, id->data, sizeof id->data, err);
    snprintf(id->val_data, sizeof id->val_data, "none");
    if (st == ZT_OK && cfg->val_data[0])
        st = zt_data_identity("--val-data", cfg->val_data, f, id->val_data, sizeof id->val_data, err);
    if (st == ZT_OK) st = resume_identity(j, cfg, id, err);
    zt_status sst = save_dir_identity(j, cfg, id, err); /* collective: always */
    return st != ZT_OK ? st : sst;
}

/* Build, device, world, data rule, then every shared option. */
static int settings_rows(const job *j, const zt_train_config *cfg, identities *id, zt_setting *rows) {
    int n = 0;
    snprintf(rows[n].name, ZT_SETTING_NAME, "build");
    snprintf(rows[n++].value, ZT_SETTING_VALUE, "zerotrain %s, CUDA %s, compiler %s", ZT_VERSION, ZT_BUILD_CUDA,
             __VERSION__);
    snprintf(rows[n].name, ZT_SETTING_NAME, "device (resolved)");
    snprintf(rows[n++].value, ZT_SETTING_VALUE, "%s", cfg->device);
    snprintf(rows[n].name, ZT_SETTING_NAME, "world size");
    snprintf(rows[n++].value, ZT_SETTING_VALUE, "%d", j->world);
    snprintf(rows[n].name, ZT_SETTING_NAME, "data rule");
    snprintf(rows[n++].value, ZT_SETTING_VALUE, "%s", ZT_DATA_RULE);
    return n + zt_train_config_settings(cfg, identity_of, id, rows + n, ZT_MAX_SETTINGS - n);
}

/* Returns 0 when every rank has the same settings, else the exit code. */
static int agree_on_settings(const job *j, zt_train_config *cfg) {
    identities id;
    memset(&id, 0, sizeof id);
    zt_error err = {0};
    zt_status st = collect_identities(j, cfg, &id, &err);
    int code = settle(j, st, &err, "");
    if (code == 0) {
        zt_setting *rows = calloc(ZT_MAX_SETTINGS, sizeof *rows);
        int n = rows ? settings_rows(j, cfg, &id, rows) : 0;
        st = zt_agree_settings(j->ctrl, rows, n, &err); /* every rank, even short of memory */
        free(rows);
        if (st != ZT_OK && j->rank == 0) print_error(j->prog, err.code, err.where, err.msg);
        code = exit_code_for(st);
    }
    if (id.probe[0]) unlink(id.probe);
    return code;
}

/* ---- start-up ---- */

/* CPU: MPI on host buffers. CUDA: NCCL with one GPU per rank; when the node
 * has fewer GPUs than ranks, or NCCL cannot start, MPI with host staging. */
static zt_status create_comm(const zt_train_config *cfg, zt_comm *comm, char *note, size_t cap, zt_error *err) {
    if (strcmp(cfg->device, "cuda") != 0) return zt_comm_create_mpi(comm, err);
    zt_status st = zt_comm_create_nccl(comm, err);
    if (st != ZT_ERR_UNSUPPORTED) return st;
    char why[1024];
    snprintf(why, sizeof why, "%s", err->msg);
    zt_comm_destroy(comm);
    zt_error_clear(err);
    st = zt_comm_create_staged(comm, 0, err);
    if (st == ZT_OK) snprintf(note, cap, "NCCL not used (%s); using MPI with host staging", why);
    return st;
}

/* Tests: ZT_TEST_OOM_PHASE=init|forward|backward|optimizer makes rank
 * ZT_TEST_OOM_RANK (default 0) refuse its first allocation in that phase. */
static void inject_oom(zt_ctx *ctx, int rank) {
    const char *phase = getenv("ZT_TEST_OOM_PHASE");
    if (!phase || !*phase || env_int("ZT_TEST_OOM_RANK", 0) != rank) return;
    for (int p = 0; p < ZT_NUM_PHASES; p++)
        if (strcmp(phase, zt_phase_name((zt_phase)p)) == 0) ctx->device_mem.inject_phase = p + 1;
}

static int threads_for(const zt_train_config *cfg, const zt_comm *comm) {
    if (cfg->threads > 0) return cfg->threads;
    long cores = sysconf(_SC_NPROCESSORS_ONLN); /* cores / ranks on this node: no oversubscription */
    return cores > comm->local_size ? (int)(cores / comm->local_size) : 1;
}

/* Communicator, then context; both settled by every rank. 0: started.
 * startup holds the pages MPI_Init made; the communicator's are added, and
 * the context keeps both (the whole bill names them). */
static int start(const job *j, const zt_train_config *cfg, zt_comm *comm, zt_ctx *ctx, zt_proc_mem *startup) {
    char note[1100] = "";
    zt_error err = {0};
    memset(ctx, 0, sizeof *ctx);
    int cuda = strcmp(cfg->device, "cuda") == 0;
    zt_status st = zt_proc_watch_begin(startup, &err);
    if (st == ZT_OK) st = create_comm(cfg, comm, note, sizeof note, &err);
    if (st == ZT_OK) st = zt_proc_watch_end(startup, cuda ? ZT_PART_LIB_CUDA : ZT_PART_LIB_MPI, &err);
    int code = settle(j, st, &err, " to start");
    if (code) return code;
    zt_comm_set_timeout(comm, cfg->collective_timeout);
    zt_device device = strcmp(cfg->device, "cuda") == 0 ? ZT_DEVICE_CUDA : ZT_DEVICE_CPU;
    int threads = threads_for(cfg, comm);
    /* The GPU is the one NCCL uses: this rank's index on its node. */
    st = zt_ctx_init_on(ctx, device, comm->local_rank, threads, cfg->mem_limit, j->rank, j->world, cfg->quiet);
    if (st == ZT_OK) st = zt_proc_mem_adopt(&ctx->proc, startup, &ctx->err);
    /* The world's NCCL communicator was made before the context's reading:
     * its init is the nccl part's, not the context's. */
    if (st == ZT_OK && comm->ops && strcmp(comm->ops->name, "nccl") == 0)
        zt_device_bill_exclude(&ctx->device_bill, comm->device_bytes);
    if (st == ZT_OK) ctx->be->sync_timeout_s = cfg->collective_timeout; /* the device's half of the watchdog */
    zt_alloc_mode mode = ZT_ALLOC_SIMPLE;
    (void)zt_alloc_mode_parse(cfg->allocator, &mode); /* the options table allows no other */
    if (st == ZT_OK) st = zt_mem_set_mode(&ctx->device_mem, mode, cfg->max_split_size, &ctx->err);
    double link[2];
    if (st == ZT_OK) st = zt_train_config_link(cfg, link, &ctx->err);
    if (st == ZT_OK && link[0] > 0) st = zt_ctx_set_link(ctx, link[0], link[1]);
    /* bf16 on a backend without bf16 kernels (CUDA, for now): its fp32
     * GEMMs round their operands to bf16 (tensor cores). */
    zt_dtype dt = ZT_FP32;
    (void)zt_dtype_parse(cfg->dtype, &dt);
    if (st == ZT_OK && dt == ZT_BF16 && !ctx->be->ops_for[ZT_BF16]) ctx->be->matmul_bf16 = 1;
    code = settle(j, st, &ctx->err, " to start");
    if (code) return code;
    inject_oom(ctx, j->rank);
    if (j->rank == 0 && note[0]) zt_log_warn(&ctx->log, "%s", note);
    if (j->rank == 0 && !cfg->quiet) {
        printf("zerotrain: %d rank(s) on %d node(s) (%d on %s, node 0), %d thread(s) per rank, device %s\n", j->world,
               comm->nnodes, comm->local_size, comm->host, threads, ctx->be->name);
        zt_train_config_print(cfg, stdout);
        fflush(stdout);
    }
    return 0;
}

/* --on-signal: the watcher (or the signals ignored), settled by every
 * rank; save-exit without --save-dir says at start that it cannot save. */
static int watch_signals(const job *j, const zt_train_config *cfg, zt_stop_signals *signals) {
    zt_error err = {0};
    int code = settle(j, zt_stop_signals_start(signals, cfg->on_signal, j->rank, &err), &err, " to start");
    if (code == 0 && j->rank == 0 && !cfg->quiet && strcmp(cfg->on_signal, "save-exit") == 0 && !cfg->save_dir[0])
        printf("signals: without --save-dir, --on-signal save-exit cannot save: SIGTERM, SIGINT, SIGUSR1 and SIGUSR2 "
               "stop every rank at a step boundary without a save (as --on-signal exit)\n");
    return code;
}

/* auto: the GPU when this process sees one (the ranks then agree on it). */
static void resolve_device(const job *j, zt_train_config *cfg) {
    if (strcmp(cfg->device, "auto") != 0) return;
    int gpus = zt_cuda_devices_visible();
    snprintf(cfg->device, sizeof cfg->device, "%s", gpus > 0 ? "cuda" : "cpu");
    if (j->rank == 0 && !cfg->quiet) printf("device auto: %s (%d CUDA device(s) visible)\n", cfg->device, gpus);
}

/* The world's nodes: the ranks sharing memory with rank 0 make one node's
 * count (equal nodes, as zt-train's groups assume). */
static int nodes_of(const job *j) {
    MPI_Comm local;
    int here = 1;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
        MPI_Comm_size(local, &here);
        MPI_Comm_free(&local);
    }
    MPI_Bcast(&here, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return here > 0 && j->world % here == 0 ? j->world / here : 1;
}

/* --auto: every rank runs the same search (the same options and profile give
 * the same choice) and takes the fastest configuration predicted to fit
 * --mem-limit; rank 0 prints it as explicit flags, with the reasons. A bad
 * --profile is refused with or without --auto. */
static int choose_config(job *j, zt_train_config *cfg, const zt_train_model *family) {
    zt_error err = {0};
    zt_time_profile prof;
    zt_auto_result r;
    memset(&r, 0, sizeof r);
    zt_status st = zt_auto_profile(cfg, &prof, &err);
    if (st == ZT_OK && cfg->auto_config && !cfg->mem_limit)
        st = ZT_FAIL(&err, ZT_ERR_INVALID, "--auto needs --mem-limit: the device budget it chooses under");
    zt_auto_setup s = {.mem_limit = cfg->mem_limit, .world = j->world, .nodes = cfg->auto_config ? nodes_of(j) : 1,
                       .global_batch = cfg->global_batch, .top = 3, .replay = 1, .nvme_path = cfg->nvme_path,
                       .axes = cfg->auto_axes};
    if (st == ZT_OK) st = zt_auto_axes_check(cfg->auto_axes, &err);
    if (st == ZT_OK && cfg->auto_config) st = zt_auto_search(cfg, family, &s, &prof, &r, &err);
    if (st == ZT_OK && cfg->auto_config && !r.nbest) st = ZT_FAIL(&err, ZT_ERR_OOM, "--auto: %s", r.none_fits);
    int code = settle(j, st, &err, "");
    if (!code && cfg->auto_config) {
        zt_auto_apply(&r.best[0], cfg);
        cfg->auto_config = 0; /* what --print-config shows reproduces the run without --auto */
        if (j->rank == 0) { /* beside a --print-config file on stdout, on stderr */
            FILE *f = cfg->print_config ? stderr : stdout;
            fprintf(f, "auto: chosen: %s\n", r.best[0].flags);
            if (!cfg->quiet) {
                fprintf(f, "auto: predicted %.3f ms a step, %.0f tokens/s (rates from %s); %d configurations, %d replayed\n",
                        1e3 * r.best[0].time.step_s, r.best[0].time.tokens_per_s, prof.source, r.evaluated,
                        r.replays);
                for (int i = 0; i < r.nreasons; i++) fprintf(f, "auto:   %s\n", r.reasons[i]);
            }
            fflush(f);
        }
        code = settle(j, zt_train_config_validate(cfg, &err), &err, "");
    }
    zt_auto_result_free(&r);
    return code;
}

/* --print-config: rank 0 prints the resolved configuration as JSON. */
static int print_config(const job *j, const zt_train_config *cfg) {
    if (j->rank != 0) return 0;
    char *text = zt_train_config_json(cfg);
    if (!text) {
        fprintf(stderr, "%s: error: out of memory printing the configuration\n", j->prog);
        return 3;
    }
    printf("%s\n", text);
    free(text);
    return 0;
}

int zt_train_main(int argc, char **argv, const zt_train_model *const *models, int nmodels) {
    /* The pages MPI_Init makes are lib_mpi's in the whole bill. A watch that
     * cannot read /proc only leaves them unexplained: the sampler reports
     * the same failure when it runs. */
    const char *alone = getenv("ZT_FAIL_ALONE_AFTER_S");
    job j = {"zt-train", 0, 1, MPI_COMM_NULL, alone && atof(alone) > 0 ? atof(alone) : FAIL_ALONE_AFTER_S, {0}};
    zt_stop_signals_block(); /* before MPI_Init starts any thread: every thread inherits the mask */
    zt_proc_mem_init(&j.startup);
    zt_error watch_err = {0};
    int watched = zt_proc_watch_begin(&j.startup, &watch_err) == ZT_OK;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &j.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &j.world);
    MPI_Comm_dup(MPI_COMM_WORLD, &j.ctrl);
    if (watched) (void)zt_proc_watch_end(&j.startup, ZT_PART_LIB_MPI, &watch_err);

    zt_train_config cfg;
    zt_train_config_defaults(&cfg);
    zt_train_hooks hooks = zt_train_hooks_from_env();
    zt_error err = {0};
    int want_help = 0;
    const zt_train_model *family = NULL;
    zt_status st = zt_train_config_parse(&cfg, argc, argv, &want_help, &err);
    if (st == ZT_OK && !want_help) st = zt_train_config_validate(&cfg, &err);
    if (st == ZT_OK && !want_help) st = find_family(&cfg, models, nmodels, &family, &err);
    long long batch = (long long)cfg.micro_batch * cfg.grad_accum * j.world;
    if (st == ZT_OK && cfg.train_batch_size > 0 && cfg.train_batch_size != batch)
        st = ZT_FAIL(&err, ZT_ERR_INVALID,
                     "--config %s: train_batch_size %lld is not micro-batch %d x grad-accum %d x %d rank(s) = %lld",
                     cfg.config, cfg.train_batch_size, cfg.micro_batch, cfg.grad_accum, j.world, batch);
    int code = settle(&j, st, &err, "");
    if (code) return finish(&j, code);
    if (j.rank == 0 && cfg.config_warning[0])
        fprintf(stderr, "%s: warning: --config %s: accepted without effect in zerotrain: %s\n", j.prog, cfg.config,
                cfg.config_warning);
    if (j.rank == 0 && cfg.config_note[0])
        fprintf(stderr, "%s: note: --config %s: %s\n", j.prog, cfg.config, cfg.config_note);
    if (want_help) {
        if (j.rank == 0) zt_train_config_print_help(stdout, j.prog);
        if (j.rank == 0) zt_train_print_families(stdout, models, nmodels);
        return finish(&j, 0);
    }
    if (cfg.print_config && !cfg.auto_config) return finish(&j, print_config(&j, &cfg));
    resolve_device(&j, &cfg);
    if ((code = choose_config(&j, &cfg, family)) != 0) return finish(&j, code);
    if (cfg.print_config) return finish(&j, print_config(&j, &cfg));
    if ((code = agree_on_settings(&j, &cfg)) != 0) return finish(&j, code);

    zt_comm comm;
    zt_ctx ctx;
    memset(&comm, 0, sizeof comm);
    code = start(&j, &cfg, &comm, &ctx, &j.startup);
    zt_stop_signals signals;
    if (code == 0) code = watch_signals(&j, &cfg, &signals);
    if (code == 0) {
        if (hooks.fs_fail_rank == -1 || hooks.fs_fail_rank == j.rank)
            ctx.fs.fail_from = hooks.fs_fail_from, ctx.fs.fail_to = hooks.fs_fail_to, ctx.fs.fail_errno = hooks.fs_fail_errno;
        int stop_signo = 0;
        st = zt_train_run(&cfg, family, &hooks, &signals, &ctx, &comm, &stop_signo);
        abort_on_timeout(&j, st, &ctx.err, &comm);
        if (st == ZT_ERR_OOM) report_oom(&ctx, &cfg);
        code = settle(&j, st, &ctx.err, "");
        /* a stop without a save (exit, or save-exit without --save-dir): the run did not finish */
        if (code == 0 && stop_signo && (strcmp(cfg.on_signal, "exit") == 0 || !cfg.save_dir[0])) code = 128 + stop_signo;
        zt_stop_signals_end(&signals);
    }
    zt_ctx_destroy(&ctx);
    zt_comm_destroy(&comm);
    return finish(&j, code);
}
