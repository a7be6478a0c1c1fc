/* zt-train: the command-line driver. Only this file decides exit codes:
 * 0 success, 1 runtime failure, 2 bad input (flags, config, unsupported
 * option), 3 out of memory (the tracked allocator or the system refused). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "train_config.h"
#include "train_log.h"
#include "trainer.h"
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

int main(int argc, char **argv) {
    const char *prog = "zt-train";
    zt_train_config cfg;
    zt_train_config_defaults(&cfg);
    zt_error err = {0};
    int want_help = 0;
    if (zt_train_config_parse(&cfg, argc, argv, &want_help, &err) != ZT_OK ||
        (!want_help && zt_train_config_validate(&cfg, &err) != ZT_OK)) {
        report_error(&err, prog);
        return exit_code_for(err.code);
    }
    if (want_help) {
        zt_train_config_print_help(stdout, prog);
        return 0;
    }

    int rank = 0, world = 1, local_size = 1;
    int threads = cfg.threads;
    if (threads == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cores > local_size ? (int)(cores / local_size) : 1;
    }
    zt_device device = strcmp(cfg.device, "cuda") == 0 ? ZT_DEVICE_CUDA : ZT_DEVICE_CPU;
    zt_ctx ctx;
    zt_status st = zt_ctx_init(&ctx, device, threads, cfg.mem_limit, rank, world, cfg.quiet);
    if (st != ZT_OK) {
        report_error(&ctx.err, prog);
        zt_ctx_destroy(&ctx);
        return exit_code_for(st);
    }
    if (rank == 0 && !cfg.quiet) {
        printf("zerotrain: %d rank(s), %d thread(s) per rank, device %s\n", world, threads, ctx.be->name);
        zt_train_config_print(&cfg, stdout);
    }
    st = zt_train_run(&cfg, &ctx);
    if (st != ZT_OK) {
        report_error(&ctx.err, prog);
        if (st == ZT_ERR_OOM) report_oom(&ctx, &cfg);
    }
    zt_ctx_destroy(&ctx);
    return exit_code_for(st);
}
