#include "zt_log.h"

#include <stdarg.h>

void zt_log_init(zt_logger *lg, int rank, int world_size, int quiet) {
    lg->rank = rank;
    lg->world_size = world_size;
    lg->quiet = quiet;
    lg->out = stdout;
}

static void vlog(const zt_logger *lg, FILE *f, const char *level, const char *fmt, va_list ap) {
    fprintf(f, "[rank %d/%d]%s ", lg->rank, lg->world_size, level);
    vfprintf(f, fmt, ap);
    fputc('\n', f);
    fflush(f);
}

void zt_log_info(const zt_logger *lg, const char *fmt, ...) {
    if (lg->quiet) return;
    va_list ap;
    va_start(ap, fmt);
    vlog(lg, lg->out, "", fmt, ap);
    va_end(ap);
}

void zt_log_warn(const zt_logger *lg, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vlog(lg, stderr, " warning:", fmt, ap);
    va_end(ap);
}

void zt_log_error(const zt_logger *lg, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vlog(lg, stderr, " error:", fmt, ap);
    va_end(ap);
}

void zt_log_rank0(const zt_logger *lg, const char *fmt, ...) {
    if (lg->rank != 0 || lg->quiet) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(lg->out, fmt, ap);
    fputc('\n', lg->out);
    fflush(lg->out);
    va_end(ap);
}
