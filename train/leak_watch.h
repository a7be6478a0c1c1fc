/* The leak watch (--leak-window K, --leak-min-rate SIZE): over the last K
 * steps' whole-bill samples, a part that no allocator hands out, or an
 * allocator's cached part while its allocated part stays flat, whose
 * least-squares slope exceeds the rate per step and whose newest value
 * exceeds its oldest by K times the rate, is a leak: one warning per part
 * per onset, in the log, the JSONL and the metrics (the seeds' "a total
 * that grows one way while allocated stays flat"). */
#ifndef ZT_LEAK_WATCH_H
#define ZT_LEAK_WATCH_H

#include <stddef.h>

#include "zt_error.h"
#include "zt_proc_mem.h"

/* The watched series: the parts, then unexplained_bytes (anonymous memory
 * nothing names grows too when a leak is not malloc's). */
#define ZT_LEAK_SERIES (ZT_NUM_PARTS + 1)
#define ZT_LEAK_UNEXPLAINED ZT_NUM_PARTS
/* Fewer samples in the window than this and nothing is judged. */
#define ZT_LEAK_MIN_SAMPLES 4

typedef struct {
    int series;           /* a part, or ZT_LEAK_UNEXPLAINED */
    double bytes_per_step; /* the least-squares slope */
    int step;             /* the step it was named at (1-based) */
    int first_step;       /* the window's oldest sample */
} zt_leak_warning;

typedef struct {
    int window;      /* K steps */
    double min_rate; /* bytes per step */
    int cap, n, head; /* a ring of the last `cap` samples */
    int *steps;      /* [cap] 1-based step of each sample */
    double *values;  /* [cap][ZT_LEAK_SERIES] */
    unsigned *measured; /* [cap] each sample's measured series (bit per series) */
    int leaking[ZT_LEAK_SERIES];      /* warned and still over the rate */
    double rate_now[ZT_LEAK_SERIES];  /* the slope at the last judgement (0: not judged) */
    long warnings;                    /* named so far, every series */
    long samples, judgements;         /* samples added; those with enough others in their window to judge */
    int judged_now;                   /* the last sample was judged */
} zt_leak_watch;

const char *zt_leak_series_name(int series);

/* window >= 1 steps, min_rate > 0 bytes per step. */
zt_status zt_leak_watch_init(zt_leak_watch *w, int window, double min_rate, zt_error *err);
void zt_leak_watch_destroy(zt_leak_watch *w);

/* Adds a step-end sample (s->step, 1-based) and judges the window; the
 * series newly named go to out[0..*nout) (cap ZT_LEAK_SERIES). Samples
 * need not come every step: the slope is over the steps they came at. */
void zt_leak_watch_add(zt_leak_watch *w, const zt_proc_sample *s, zt_leak_warning *out, int *nout);

#endif
