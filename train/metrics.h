/* --metrics-file: each rank's memory and progress after every step, in the
 * Prometheus text exposition format (what a node_exporter textfile
 * collector or any scraper reads), replaced atomically each time. */
#ifndef ZT_METRICS_H
#define ZT_METRICS_H

#include <stddef.h>

#include "zt_error.h"
#include "zt_mem.h"
#include "leak_watch.h"
#include "zt_device_bill.h"
#include "zt_proc_mem.h"

typedef struct {
    int step;                    /* steps done (-1: not known, as at an OOM) */
    double tokens_per_s;
    double h2d_bytes, d2h_bytes; /* offload transfers since the start */
    int oom_events;              /* 1 when the rank ran out of memory */
    const zt_proc_sample *process; /* the step's whole bill (NULL: none taken) */
    const zt_leak_watch *leak;     /* the leak watch (NULL: none) */
    const zt_device_sample *device_process; /* the GPU's whole bill at the step's end (NULL: none) */
} zt_metrics_values;

/* Rank r's file: PATH with ".rank<r>" before its extension (zt.prom ->
 * zt.rank0.prom). */
void zt_metrics_path(const char *path, int rank, char *out, size_t cap);
zt_status zt_metrics_write(const char *path, int rank, const zt_mem *device, const zt_mem *host,
                           const zt_metrics_values *v, zt_error *err);

#endif
