/* The whole bill during a run (runtime/zt_proc_mem.h): samples at the end
 * of each phase, just after the step's allocator peak (the first free
 * after it) and at the end of each step, within a share of the run's time;
 * keeps the step's sample and the run's with the most os_bytes. Its JSON,
 * its row in the rank table and its printed table. */
#ifndef ZT_PROC_BILL_H
#define ZT_PROC_BILL_H

#include <jansson.h>
#include <stdio.h>

#include "zt_ctx.h"
#include "zt_proc_mem.h"

/* The share of the run's time sampling may take (the bound). */
#define ZT_BILL_BUDGET 0.01

typedef struct {
    zt_ctx *ctx;
    double t0;          /* when the bill started */
    double spent_s;     /* time spent sampling */
    double last_cost_s; /* the last sample's */
    long taken, declined;
    zt_proc_sample step_best, run_best; /* the most os_bytes */
    zt_proc_sample latest;
    zt_proc_sample step_end; /* taken at this step's end (the leak watch's) */
    int have_step, have_run, have_step_end;
    int step;
    int failed; /* a sample failed: sampling stopped (warned once) */
} zt_bill;

/* The first sample (always taken), then the allocator's moments hooked
 * (the caller unhooks them, ctx->device_mem.on_phase_end and on_peak,
 * before b goes). */
void zt_bill_start(zt_bill *b, zt_ctx *ctx);
void zt_bill_step_begin(zt_bill *b, int step);
/* The step's end: a sample when the budget allows; arms the next step's
 * peak moment at this step's allocated peak. */
void zt_bill_step_end(zt_bill *b);
/* The sample taken at this step's end, or NULL (the budget declined it). */
const zt_proc_sample *zt_bill_step_end_sample(const zt_bill *b);
/* This step's sample with the most os_bytes, or NULL. */
const zt_proc_sample *zt_bill_step_sample(const zt_bill *b);
/* The last sample taken, or NULL (the metrics file's: a scraper wants
 * the newest). */
const zt_proc_sample *zt_bill_latest(const zt_bill *b);
/* The time sampling took, as a share of the run's. */
double zt_bill_overhead(const zt_bill *b);

json_t *zt_proc_sample_json(const zt_proc_sample *s);

/* A sample as a row of the rank table (every rank's row to every rank):
 * ZT_PROC_ROW words; have 0 fills a row that says "none". */
#define ZT_PROC_ROW (ZT_NUM_PARTS + 10)
void zt_proc_sample_pack(const zt_proc_sample *s, int have, size_t *row);
/* 0 when the row says "none". */
int zt_proc_sample_unpack(const size_t *row, zt_proc_sample *s);

/* Rank 0's table of every rank's parts (MiB), samples[N], have[N]. */
void zt_proc_print_table(FILE *f, int N, const zt_proc_sample *samples, const int *have);

#endif
