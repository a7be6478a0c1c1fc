/* zt-train: the command-line driver. Only this file decides exit codes:
 * 0 success, 1 runtime failure, 2 bad input (flags, config, unsupported
 * option), 3 out of memory (the tracked allocator or the system refused). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train_config.h"
#include "train_log.h"
#include "trainer.h"
#include "zt_comm.h"
#include "zt_ctx.h"

static int exit_code_for(zt_status st) {
    switch (st) {
    case ZT_OK: return 0;
    case ZT_ERR_INVALID: case ZT_ERR_UNSUPPORTED: return 2;
    case ZT_ERR_OOM: return 3;
    default: return 1;
    }
}

static void report_error(const zt_error *err, const char *prog) {
    fprintf(stderr, "%s: error: %s\n  (%s at %s:%d)\n", prog, err->msg, zt_status_name(err->code),
            err->file ? err->file : "?", err->line);
}

/* On OOM the failing rank prints the allocator's view and, with a log dir,
 * keeps it in DIR/oom_rank<r>.txt. */
static void report_oom(const zt_ctx *ctx, const zt_train_config *cfg) {
    const char *report = ctx->oom_report ? ctx->oom_report : "(no report captured)\n";
    fprintf(stderr, "[rank %d] out-of-memory report:\n%s", ctx->rank, report);
    if (!cfg->log_dir[0]) return;
    zt_error ignore = {0};
    if (zt_mkdir_p(cfg->log_dir, &ignore) != ZT_OK) return;
    char path[1100];
    snprintf(path, sizeof path, "%s/oom_rank%d.txt", cfg->log_dir, ctx->rank);
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "%s\n%s", ctx->err.msg, report);
    fclose(f);
}

/* Start-up (the communicator, then the device) can fail on some ranks only:
 * a GPU in exclusive-process mode admits one process, one rank's device is
 * already full. The ranks agree here, so that those that started do not wait
 * forever in their next collective for one that has left. Each failing rank
 * reports its own error, or rank 0 alone when every rank failed (the same
 * message, once). Returns the job's exit code: 0 when every rank started. */
static int agree_on_startup(zt_status st, const zt_error *err, const char *prog, int rank, int world) {
    int failed = st != ZT_OK, nfailed = 0, code = exit_code_for(st), worst = 0;
    MPI_Allreduce(&failed, &nfailed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&code, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (failed && nfailed == world && rank == 0) {
        report_error(err, prog);
    } else if (failed && nfailed < world) {
        char prefixed[64];
        snprintf(prefixed, sizeof prefixed, "%s [rank %d]", prog, rank);
        report_error(err, prefixed);
    }
    if (nfailed > 0 && nfailed < world && rank == 0)
        fprintf(stderr, "%s: %d of %d rank(s) failed to start; all of them stop\n", prog, nfailed, world);
    return worst;
}

/* Ends the whole job: with several ranks, the others may be blocked in a
 * collective, so MPI_Abort takes them down too (within seconds, no hang). */
static int finish(int code, int world) {
    if (code != 0 && world > 1) MPI_Abort(MPI_COMM_WORLD, code);
    MPI_Finalize();
    return code;
}

static int env_int(const char *name, int fallback) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : fallback;
}

int main(int argc, char **argv) {
    const char *prog = "zt-train";
    MPI_Init(&argc, &argv);
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);

    zt_train_config cfg;
    zt_train_config_defaults(&cfg);
    cfg.test_exit_rank = env_int("ZT_TEST_EXIT_RANK", -1);
    cfg.test_exit_step = env_int("ZT_TEST_EXIT_STEP", -1);
    cfg.test_kill_in_save = env_int("ZT_TEST_KILL_IN_SAVE", 0);
    zt_error err = {0};
    int want_help = 0;
    int bad = zt_train_config_parse(&cfg, argc, argv, &want_help, &err) != ZT_OK ||
              (!want_help && zt_train_config_validate(&cfg, &err) != ZT_OK);
    /* Ranks may have been given different flags (MPMD): agree before going on. */
    int any_bad = bad;
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any_bad) {
        if (bad && (rank == 0 || err.code != ZT_OK)) report_error(&err, prog);
        MPI_Finalize();
        return bad ? exit_code_for(err.code) : 2;
    }
    if (want_help) {
        if (rank == 0) zt_train_config_print_help(stdout, prog);
        MPI_Finalize();
        return 0;
    }

    /* auto: the GPU when this process sees one. Every rank decides alike on
     * a homogeneous node; the summary records the device that ran. */
    if (strcmp(cfg.device, "auto") == 0) {
        int gpus = zt_cuda_devices_visible();
        snprintf(cfg.device, sizeof cfg.device, "%s", gpus > 0 ? "cuda" : "cpu");
        if (rank == 0 && !cfg.quiet)
            printf("device auto: %s (%d CUDA device(s) visible)\n", cfg.device, gpus);
    }

    /* CPU: MPI on host buffers. CUDA: NCCL with one GPU per rank; when the
     * node has fewer GPUs than ranks, MPI with host staging instead. */
    zt_comm comm;
    zt_status cst;
    char staging_note[1100] = "";
    if (strcmp(cfg.device, "cuda") != 0) {
        cst = zt_comm_create_mpi(&comm, &err);
    } else {
        cst = zt_comm_create_nccl(&comm, &err);
        if (cst == ZT_ERR_UNSUPPORTED) {
            char why[1024];
            snprintf(why, sizeof why, "%s", err.msg);
            zt_comm_destroy(&comm);
            zt_error_clear(&err);
            cst = zt_comm_create_staged(&comm, 0, &err);
            if (cst == ZT_OK) snprintf(staging_note, sizeof staging_note, "NCCL not used (%s); using MPI with host staging", why);
        }
    }
    int start_code = agree_on_startup(cst, &err, prog, rank, world);
    if (start_code != 0) {
        zt_comm_destroy(&comm);
        MPI_Finalize();
        return start_code;
    }
    int threads = cfg.threads;
    if (threads == 0) { /* cores / ranks on this node, so ranks do not oversubscribe it */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cores > comm.local_size ? (int)(cores / comm.local_size) : 1;
    }
    zt_device device = strcmp(cfg.device, "cuda") == 0 ? ZT_DEVICE_CUDA : ZT_DEVICE_CPU;
    zt_ctx ctx;
    /* The GPU is the one NCCL uses: this rank's index on its node. */
    zt_status st = zt_ctx_init_on(&ctx, device, comm.local_rank, threads, cfg.mem_limit, rank, world, cfg.quiet);
    /* bf16 storage on a GPU: its GEMMs run on the bf16 tensor cores too. */
    if (st == ZT_OK && device == ZT_DEVICE_CUDA && strcmp(cfg.dtype, "bf16") == 0) ctx.be->matmul_bf16 = 1;
    start_code = agree_on_startup(st, &ctx.err, prog, rank, world);
    if (start_code != 0) {
        zt_ctx_destroy(&ctx);
        zt_comm_destroy(&comm);
        MPI_Finalize();
        return start_code;
    }
    /* Tests: ZT_TEST_OOM_PHASE=init|forward|backward|optimizer makes rank
     * ZT_TEST_OOM_RANK (default 0) refuse its first allocation in that phase. */
    const char *oom_phase = getenv("ZT_TEST_OOM_PHASE");
    if (oom_phase && *oom_phase && env_int("ZT_TEST_OOM_RANK", 0) == rank)
        for (int p = 0; p < ZT_NUM_PHASES; p++)
            if (strcmp(oom_phase, zt_phase_name((zt_phase)p)) == 0) ctx.device_mem.inject_phase = p + 1;
    if (rank == 0 && staging_note[0]) zt_log_warn(&ctx.log, "%s", staging_note);
    if (rank == 0 && !cfg.quiet) {
        printf("zerotrain: %d rank(s) (%d on this node), %d thread(s) per rank, device %s\n", world,
               comm.local_size, threads, ctx.be->name);
        zt_train_config_print(&cfg, stdout);
        fflush(stdout);
    }
    st = zt_train_run(&cfg, &ctx, &comm);
    if (st != ZT_OK) {
        char prefixed[64];
        snprintf(prefixed, sizeof prefixed, "%s [rank %d]", prog, rank);
        report_error(&ctx.err, prefixed);
        if (st == ZT_ERR_OOM) report_oom(&ctx, &cfg);
        fflush(stderr);
    }
    zt_ctx_destroy(&ctx);
    zt_comm_destroy(&comm);
    return finish(exit_code_for(st), world);
}
