/* Rank-prefixed logging. The logger is plain data owned by the context. */
#ifndef ZT_LOG_H
#define ZT_LOG_H

#include <stdio.h>

typedef struct {
    int rank;
    int world_size;
    int quiet; /* 1: only warnings and errors */
    FILE *out;
} zt_logger;

void zt_log_init(zt_logger *lg, int rank, int world_size, int quiet);
/* Printed by every rank with a "[rank r/N]" prefix. */
void zt_log_info(const zt_logger *lg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void zt_log_warn(const zt_logger *lg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void zt_log_error(const zt_logger *lg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Printed by rank 0 only (configuration tables, progress lines). */
void zt_log_rank0(const zt_logger *lg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
