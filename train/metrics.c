#include "metrics.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

void zt_metrics_path(const char *path, int rank, char *out, size_t cap) {
    const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
    if (!dot || (slash && dot < slash)) dot = path + strlen(path); /* no extension */
    snprintf(out, cap, "%.*s.rank%d%s", (int)(dot - path), path, rank, dot);
}

/* A metric's HELP and TYPE lines, before its samples. */
static void family(FILE *f, const char *name, const char *type, const char *help) {
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One gauge or counter with its HELP and TYPE lines. */
static void metric(FILE *f, const char *name, const char *type, const char *help, int rank, double value) {
    family(f, name, type, help);
    fprintf(f, "%s{rank=\"%d\"} %.17g\n", name, rank, value);
}

/* The whole bill: the OS's total and each measured part. */
static void write_process(FILE *f, int rank, const zt_proc_sample *s) {
    metric(f, "zt_process_os_bytes", "gauge", "Resident bytes of this rank's process (Rss over smaps).", rank,
           (double)s->os_bytes);
    family(f, "zt_process_part_bytes", "gauge", "Resident bytes per part of the whole bill (docs/memory.md).");
    for (int p = 0; p < ZT_NUM_PARTS; p++)
        if (s->measured & (1u << p))
            fprintf(f, "zt_process_part_bytes{rank=\"%d\",part=\"%s\"} %zu\n", rank,
                    zt_proc_part_name((zt_proc_part)p), s->parts[p]);
    metric(f, "zt_process_unexplained_bytes", "gauge", "Resident bytes no evidence names.", rank,
           (double)s->unexplained_bytes);
}

/* The GPU's whole bill: NVML's total, each measured part, the rest and
 * the other processes on the GPU, where measured. */
static void write_device_process(FILE *f, int rank, const zt_device_sample *s) {
    if (s->os_measured)
        metric(f, "zt_device_process_bytes", "gauge", "This rank's device memory as NVML counts it.", rank,
               (double)s->os_bytes);
    family(f, "zt_device_part_bytes", "gauge", "Device bytes per part of the GPU's whole bill (docs/memory.md).");
    for (int p = 0; p < ZT_NUM_DPARTS; p++)
        if (s->measured & (1u << p))
            fprintf(f, "zt_device_part_bytes{rank=\"%d\",part=\"%s\"} %zu\n", rank,
                    zt_device_part_name((zt_device_part)p), s->parts[p]);
    if (s->os_measured)
        metric(f, "zt_device_unexplained_bytes", "gauge", "Device bytes of this process no part names.", rank,
               (double)s->unexplained_bytes);
    if (s->others_measured)
        metric(f, "zt_device_other_processes_bytes", "gauge", "Device bytes of the other processes on this GPU.",
               rank, (double)s->other_bytes);
}

/* The leak watch: what it named so far, and each series' rate while named. */
static void write_leaks(FILE *f, int rank, const zt_leak_watch *w) {
    metric(f, "zt_leak_warnings_total", "counter", "Parts the leak watch has named (docs/memory.md).", rank,
           (double)w->warnings);
    family(f, "zt_leak_bytes_per_step", "gauge", "Growth per step of a part the leak watch names now.");
    for (int k = 0; k < ZT_LEAK_SERIES; k++)
        if (w->leaking[k])
            fprintf(f, "zt_leak_bytes_per_step{rank=\"%d\",part=\"%s\"} %.17g\n", rank, zt_leak_series_name(k),
                    w->rate_now[k]);
}

static void write_all(FILE *f, int rank, const zt_mem *dev, const zt_mem *host, const zt_metrics_values *v) {
    zt_free_stats fs = zt_mem_free_stats(dev);
    double reserved = (double)dev->reserved.current, allocated = (double)dev->allocated.current;
    metric(f, "zt_device_allocated_bytes", "gauge", "Bytes the device allocator's callers hold.", rank, allocated);
    metric(f, "zt_device_reserved_bytes", "gauge", "Bytes the device allocator holds from the system.", rank,
           reserved);
    metric(f, "zt_device_largest_free_block_bytes", "gauge",
           "The largest request the device allocator can serve from what it holds.", rank, (double)fs.largest_free);
    metric(f, "zt_device_fragmentation_ratio", "gauge", "(reserved - allocated) / reserved on the device.", rank,
           reserved > 0 ? (reserved - allocated) / reserved : 0.0);
    fprintf(f, "# HELP zt_device_category_bytes Device bytes held per category.\n"
               "# TYPE zt_device_category_bytes gauge\n");
    for (int c = 0; c < ZT_NUM_CATEGORIES; c++)
        fprintf(f, "zt_device_category_bytes{rank=\"%d\",category=\"%s\"} %zu\n", rank,
                zt_category_name((zt_category)c), dev->by_category[c].current);
    metric(f, "zt_host_pool_bytes", "gauge", "Bytes held in the host (offload) pool.", rank,
           (double)host->allocated.current);
    fprintf(f, "# HELP zt_transfer_bytes_total Offload bytes copied between host and device.\n"
               "# TYPE zt_transfer_bytes_total counter\n"
               "zt_transfer_bytes_total{rank=\"%d\",direction=\"h2d\"} %.17g\n"
               "zt_transfer_bytes_total{rank=\"%d\",direction=\"d2h\"} %.17g\n",
            rank, v->h2d_bytes, rank, v->d2h_bytes);
    metric(f, "zt_oom_events_total", "counter", "Out-of-memory stops of this rank.", rank, v->oom_events);
    metric(f, "zt_tokens_per_second", "gauge", "Tokens per second of the last step, over all ranks.", rank,
           v->tokens_per_s);
    if (v->step >= 0) metric(f, "zt_step", "gauge", "Optimizer steps done.", rank, v->step);
    if (v->process) write_process(f, rank, v->process);
    if (v->leak) write_leaks(f, rank, v->leak);
    if (v->device_process) write_device_process(f, rank, v->device_process);
}

zt_status zt_metrics_write(const char *path, int rank, const zt_mem *device, const zt_mem *host,
                           const zt_metrics_values *v, zt_error *err) {
    char file[1100], tmp[1110];
    zt_metrics_path(path, rank, file, sizeof file);
    snprintf(tmp, sizeof tmp, "%s.tmp", file);
    FILE *f = fopen(tmp, "w");
    if (!f) return ZT_FAIL(err, ZT_ERR_IO, "--metrics-file: cannot write %s: %s", tmp, strerror(errno));
    write_all(f, rank, device, host, v);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) return ZT_FAIL(err, ZT_ERR_IO, "--metrics-file: cannot write %s", tmp);
    /* A scraper reads the whole previous file or the whole new one. */
    if (rename(tmp, file) != 0) return ZT_FAIL(err, ZT_ERR_IO, "--metrics-file: rename %s: %s", tmp, strerror(errno));
    return ZT_OK;
}
