/* The whole bill during a run (proc_bill.h). */
#include "proc_bill.h"

#include <string.h>

#include "zt_time.h"

/* Sampling takes at most ZT_BILL_BUDGET of the run's time: the step's end
 * may use all of it, the moments inside a step half, so that the step's
 * end, which the leak watch compares from step to step, comes first. */
static int affordable(const zt_bill *b, double share) {
    double elapsed = zt_now_s() - b->t0;
    return b->spent_s + b->last_cost_s <= share * ZT_BILL_BUDGET * elapsed;
}

/* 1 when a sample was taken. */
static int take(zt_bill *b) {
    zt_ctx *ctx = b->ctx;
    zt_proc_sample s;
    zt_error err = {0};
    double t = zt_now_s();
    /* On a GPU the device's blocks are not this process's pages. */
    const zt_mem *device = ctx->be->device == ZT_DEVICE_CPU ? &ctx->device_mem : NULL;
    zt_status st = zt_proc_sample_take(&ctx->proc, device, &ctx->host_mem, &s, &err);
    b->last_cost_s = zt_now_s() - t;
    b->spent_s += b->last_cost_s;
    if (st != ZT_OK) {
        b->failed = 1;
        zt_log_warn(&ctx->log, "the whole bill is not measured from here on: %s", err.msg);
        return 0;
    }
    b->taken++;
    s.step = b->step + 1; /* 1-based, as the step lines; 0: before the first step */
    b->latest = s;
    if (!b->have_step || s.os_bytes > b->step_best.os_bytes) b->step_best = s;
    if (!b->have_run || s.os_bytes > b->run_best.os_bytes) b->run_best = s;
    b->have_step = b->have_run = 1;
    return 1;
}

static void on_phase_end(void *arg, const zt_mem *m, zt_phase ended) {
    (void)m;
    zt_bill *b = arg;
    /* The optimizer's end is the step's, sampled there. */
    if (b->failed || ended == ZT_PHASE_INIT || ended == ZT_PHASE_OPTIMIZER) return;
    if (affordable(b, 0.5)) take(b);
    else b->declined++;
}

static void on_peak(void *arg, const zt_mem *m) {
    (void)m;
    zt_bill *b = arg;
    if (b->failed) return;
    if (affordable(b, 0.5)) take(b);
    else b->declined++;
}

void zt_bill_start(zt_bill *b, zt_ctx *ctx) {
    memset(b, 0, sizeof *b);
    b->ctx = ctx;
    b->step = -1;
    b->t0 = zt_now_s();
    take(b);
    ctx->device_mem.on_phase_end = on_phase_end;
    ctx->device_mem.on_peak = on_peak;
    ctx->device_mem.moments_arg = b;
}

void zt_bill_step_begin(zt_bill *b, int step) {
    b->step = step;
    b->have_step = b->have_step_end = 0;
}

void zt_bill_step_end(zt_bill *b) {
    if (!b->failed && affordable(b, 1.0)) {
        if (take(b)) {
            b->step_end = b->latest;
            b->have_step_end = 1;
        }
    } else if (!b->failed) {
        b->declined++;
    }
    b->ctx->device_mem.peak_watch_bytes = b->ctx->device_mem.window_allocated_peak;
}

const zt_proc_sample *zt_bill_step_end_sample(const zt_bill *b) { return b->have_step_end ? &b->step_end : NULL; }

const zt_proc_sample *zt_bill_step_sample(const zt_bill *b) { return b->have_step ? &b->step_best : NULL; }

const zt_proc_sample *zt_bill_latest(const zt_bill *b) { return b->have_run ? &b->latest : NULL; }

double zt_bill_overhead(const zt_bill *b) {
    double elapsed = zt_now_s() - b->t0;
    return elapsed > 0 ? b->spent_s / elapsed : 0.0;
}

json_t *zt_proc_sample_json(const zt_proc_sample *s) {
    json_t *o = json_object(), *parts = json_object(), *missing = json_array();
    json_object_set_new(o, "os_bytes", json_integer((json_int_t)s->os_bytes));
    json_object_set_new(o, "pss_bytes", json_integer((json_int_t)s->pss_bytes));
    for (int p = 0; p < ZT_NUM_PARTS; p++) {
        const char *name = zt_proc_part_name((zt_proc_part)p);
        if (s->measured & (1u << p)) json_object_set_new(parts, name, json_integer((json_int_t)s->parts[p]));
        else json_array_append_new(missing, json_string(name));
    }
    json_object_set_new(o, "parts", parts);
    json_object_set_new(o, "unexplained_bytes", json_integer((json_int_t)s->unexplained_bytes));
    json_object_set_new(o, "not_measured", missing);
    json_object_set_new(o, "allocator_reserved_not_resident",
                        json_integer((json_int_t)s->allocator_reserved_not_resident));
    json_object_set_new(o, "vm_rss", json_integer((json_int_t)s->vm_rss));
    json_object_set_new(o, "vm_hwm", json_integer((json_int_t)s->vm_hwm));
    json_object_set_new(o, "step", json_integer(s->step));
    json_object_set_new(o, "phase", json_string(zt_phase_name(s->phase)));
    return o;
}

enum { ROW_HAVE = 0, ROW_OS, ROW_PSS, ROW_UNEXPLAINED, ROW_MEASURED, ROW_NOT_RESIDENT, ROW_RSS, ROW_HWM, ROW_STEP, ROW_PHASE,
       ROW_PARTS };

void zt_proc_sample_pack(const zt_proc_sample *s, int have, size_t *row) {
    memset(row, 0, ZT_PROC_ROW * sizeof *row);
    if (!have) return;
    row[ROW_HAVE] = 1;
    row[ROW_OS] = s->os_bytes;
    row[ROW_PSS] = s->pss_bytes;
    row[ROW_UNEXPLAINED] = (size_t)s->unexplained_bytes; /* two's complement, undone in unpack */
    row[ROW_MEASURED] = s->measured;
    row[ROW_NOT_RESIDENT] = s->allocator_reserved_not_resident;
    row[ROW_RSS] = s->vm_rss;
    row[ROW_HWM] = s->vm_hwm;
    row[ROW_STEP] = (size_t)(s->step + 1);
    row[ROW_PHASE] = (size_t)s->phase;
    memcpy(row + ROW_PARTS, s->parts, sizeof s->parts);
}

int zt_proc_sample_unpack(const size_t *row, zt_proc_sample *s) {
    memset(s, 0, sizeof *s);
    if (!row[ROW_HAVE]) return 0;
    s->os_bytes = row[ROW_OS];
    s->pss_bytes = row[ROW_PSS];
    s->unexplained_bytes = (long long)row[ROW_UNEXPLAINED];
    s->measured = (unsigned)row[ROW_MEASURED];
    s->allocator_reserved_not_resident = row[ROW_NOT_RESIDENT];
    s->vm_rss = row[ROW_RSS];
    s->vm_hwm = row[ROW_HWM];
    s->step = (int)row[ROW_STEP] - 1;
    s->phase = (zt_phase)row[ROW_PHASE];
    memcpy(s->parts, row + ROW_PARTS, sizeof s->parts);
    return 1;
}

static double mib(double bytes) { return bytes / 1048576.0; }

void zt_proc_print_table(FILE *f, int N, const zt_proc_sample *samples, const int *have) {
    fprintf(f, "process memory by rank (the sample with the most, MiB; docs/memory.md, \"The whole bill\"):\nrank %9s",
            "os");
    for (int p = 0; p < ZT_NUM_PARTS; p++) fprintf(f, " %*s", p < 4 ? 19 : 13, zt_proc_part_name((zt_proc_part)p));
    fprintf(f, " %12s %9s\n", "unexplained", "VmHWM");
    for (int r = 0; r < N; r++) {
        const zt_proc_sample *s = &samples[r];
        if (!have[r]) {
            fprintf(f, "%4d (not measured)\n", r);
            continue;
        }
        fprintf(f, "%4d %9.2f", r, mib((double)s->os_bytes));
        for (int p = 0; p < ZT_NUM_PARTS; p++) {
            int w = p < 4 ? 19 : 13;
            if (s->measured & (1u << p)) fprintf(f, " %*.2f", w, mib((double)s->parts[p]));
            else fprintf(f, " %*s", w, "-");
        }
        fprintf(f, " %12.2f %9.2f\n", mib((double)s->unexplained_bytes), mib((double)s->vm_hwm));
    }
}
