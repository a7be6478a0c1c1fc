/* The GPU's whole bill during a run (device_bill_out.h). */
#include "device_bill_out.h"

#include <string.h>

/* The NCCL communicators' bytes (a zt_device_bill hook). */
static void nccl_bytes(void *arg, size_t *bytes, int *measured) {
    const zt_device_track *t = arg;
    *bytes = 0;
    *measured = 1; /* no NCCL communicator: NCCL holds nothing */
    for (int i = 0; i < t->ncomms; i++) {
        const zt_comm *c = t->comms[i];
        if (!c || !c->ops || strcmp(c->ops->name, "nccl") != 0) continue;
        *bytes += c->device_bytes;
        *measured &= c->device_measured;
    }
}

void zt_device_track_start(zt_device_track *t, zt_ctx *ctx, zt_comm *const *comms, int n) {
    memset(t, 0, sizeof *t);
    for (int i = 0; i < n && i < ZT_DEVICE_TRACK_COMMS; i++) t->comms[t->ncomms++] = comms[i];
    ctx->device_bill.nccl_bytes = nccl_bytes;
    ctx->device_bill.nccl_arg = t;
}

void zt_device_track_stop(zt_ctx *ctx) {
    ctx->device_bill.nccl_bytes = NULL;
    ctx->device_bill.nccl_arg = NULL;
}

void zt_device_track_step(zt_device_track *t, zt_ctx *ctx) {
    if (!ctx->device_bill.active) return;
    zt_device_sample_take(&ctx->device_bill, ctx->be, &ctx->device_mem, &t->latest);
    if (!t->have || t->latest.os_bytes >= t->best.os_bytes) t->best = t->latest;
    t->have = 1;
}

json_t *zt_device_sample_json(const zt_device_sample *s, const char *why) {
    json_t *o = json_object(), *parts = json_object(), *missing = json_array();
    if (s->os_measured) {
        json_object_set_new(o, "os_bytes", json_integer((json_int_t)s->os_bytes));
        json_object_set_new(o, "source", json_string(zt_device_source_name(s->source)));
    } else {
        json_array_append_new(missing, json_string("os_bytes"));
    }
    for (int p = 0; p < ZT_NUM_DPARTS; p++) {
        if (s->measured & (1u << p))
            json_object_set_new(parts, zt_device_part_name((zt_device_part)p), json_integer((json_int_t)s->parts[p]));
        else
            json_array_append_new(missing, json_string(zt_device_part_name((zt_device_part)p)));
    }
    json_object_set_new(o, "parts", parts);
    if (s->os_measured) json_object_set_new(o, "unexplained_bytes", json_integer(s->unexplained_bytes));
    if (s->others_measured)
        json_object_set_new(o, "other_processes", json_pack("{s:i,s:I}", "count", s->other_processes, "bytes",
                                                            (json_int_t)s->other_bytes));
    else
        json_array_append_new(missing, json_string("other_processes"));
    json_object_set_new(o, "not_measured", missing);
    if (why && why[0] && json_array_size(missing)) json_object_set_new(o, "why_not_measured", json_string(why));
    if (s->device_total) {
        json_object_set_new(o, "device_used_bytes", json_integer((json_int_t)s->device_used));
        json_object_set_new(o, "device_total_bytes", json_integer((json_int_t)s->device_total));
    }
    return o;
}

enum { W_HAVE = 0, W_OS_MEASURED, W_OS, W_SOURCE, W_MEASURED, W_UNEXPLAINED, W_OTHERS_MEASURED, W_OTHERS, W_OTHER_BYTES,
       W_USED, W_TOTAL, W_PARTS };

void zt_device_sample_pack(const zt_device_sample *s, int have, size_t *row) {
    memset(row, 0, ZT_DEVICE_ROW * sizeof *row);
    if (!have) return;
    row[W_HAVE] = 1;
    row[W_OS_MEASURED] = (size_t)s->os_measured;
    row[W_OS] = s->os_bytes;
    row[W_SOURCE] = (size_t)s->source;
    row[W_MEASURED] = s->measured;
    row[W_UNEXPLAINED] = (size_t)s->unexplained_bytes; /* two's complement through the u64 gather */
    row[W_OTHERS_MEASURED] = (size_t)s->others_measured;
    row[W_OTHERS] = (size_t)s->other_processes;
    row[W_OTHER_BYTES] = s->other_bytes;
    row[W_USED] = s->device_used;
    row[W_TOTAL] = s->device_total;
    memcpy(row + W_PARTS, s->parts, sizeof s->parts);
}

int zt_device_sample_unpack(const size_t *row, zt_device_sample *s) {
    memset(s, 0, sizeof *s);
    if (!row[W_HAVE]) return 0;
    s->os_measured = (int)row[W_OS_MEASURED];
    s->os_bytes = row[W_OS];
    s->source = (int)row[W_SOURCE];
    s->measured = (unsigned)row[W_MEASURED];
    s->unexplained_bytes = (long long)row[W_UNEXPLAINED];
    s->others_measured = (int)row[W_OTHERS_MEASURED];
    s->other_processes = (int)row[W_OTHERS];
    s->other_bytes = row[W_OTHER_BYTES];
    s->device_used = row[W_USED];
    s->device_total = row[W_TOTAL];
    memcpy(s->parts, row + W_PARTS, sizeof s->parts);
    return 1;
}

static void cell(FILE *f, int measured, double bytes) {
    if (measured) fprintf(f, " %14.2f", bytes / 1048576.0);
    else fprintf(f, " %14s", "-");
}

void zt_device_print_table(FILE *f, int N, const zt_device_sample *samples, const int *have) {
    int any = 0;
    for (int r = 0; r < N; r++) any |= have[r];
    if (!any) return;
    fprintf(f, "device memory by rank (MiB, the step end with the most; -: not measured):\nrank %14s", "process");
    for (int p = 0; p < ZT_NUM_DPARTS; p++) fprintf(f, " %14s", zt_device_part_name((zt_device_part)p));
    fprintf(f, " %14s %14s\n", "unexplained", "other procs");
    for (int r = 0; r < N; r++) {
        if (!have[r]) continue;
        const zt_device_sample *s = &samples[r];
        fprintf(f, "%4d", r);
        cell(f, s->os_measured, (double)s->os_bytes);
        for (int p = 0; p < ZT_NUM_DPARTS; p++) cell(f, (s->measured >> p) & 1u, (double)s->parts[p]);
        cell(f, s->os_measured, (double)s->unexplained_bytes);
        cell(f, s->others_measured, (double)s->other_bytes);
        fprintf(f, "\n");
    }
}
