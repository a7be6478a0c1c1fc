/* The leak watch (leak_watch.h). */
#include "leak_watch.h"

#include <stdlib.h>
#include <string.h>

const char *zt_leak_series_name(int series) {
    return series == ZT_LEAK_UNEXPLAINED ? "unexplained" : zt_proc_part_name((zt_proc_part)series);
}

zt_status zt_leak_watch_init(zt_leak_watch *w, int window, double min_rate, zt_error *err) {
    memset(w, 0, sizeof *w);
    if (window < 1) return ZT_FAIL(err, ZT_ERR_INVALID, "the leak window must be >= 1 step (got %d)", window);
    if (!(min_rate > 0))
        return ZT_FAIL(err, ZT_ERR_INVALID, "the leak watch's rate must be > 0 bytes per step (got %g)", min_rate);
    w->window = window;
    w->min_rate = min_rate;
    w->cap = window; /* at most one sample per step */
    w->steps = calloc((size_t)w->cap, sizeof *w->steps);
    w->values = calloc((size_t)w->cap * ZT_LEAK_SERIES, sizeof *w->values);
    w->measured = calloc((size_t)w->cap, sizeof *w->measured);
    if (!w->steps || !w->values || !w->measured) {
        zt_leak_watch_destroy(w);
        return ZT_FAIL(err, ZT_ERR_OOM, "out of host memory for a leak window of %d steps", window);
    }
    return ZT_OK;
}

void zt_leak_watch_destroy(zt_leak_watch *w) {
    free(w->steps);
    free(w->values);
    free(w->measured);
    w->steps = NULL;
    w->values = NULL;
    w->measured = NULL;
}

/* The i-th oldest sample held. */
static int slot(const zt_leak_watch *w, int i) { return (w->head - w->n + i + w->cap) % w->cap; }

/* Least-squares slope of series k over the samples from `from` on (bytes
 * per step), with the oldest and newest values. */
static double slope_of(const zt_leak_watch *w, int from, int k, double *first, double *last) {
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    int m = w->n - from;
    for (int i = from; i < w->n; i++) {
        int j = slot(w, i);
        double x = w->steps[j], y = w->values[(size_t)j * ZT_LEAK_SERIES + (size_t)k];
        sx += x;
        sy += y;
        sxx += x * x;
        sxy += x * y;
    }
    *first = w->values[(size_t)slot(w, from) * ZT_LEAK_SERIES + (size_t)k];
    *last = w->values[(size_t)slot(w, w->n - 1) * ZT_LEAK_SERIES + (size_t)k];
    double den = m * sxx - sx * sx;
    return den > 0 ? (m * sxy - sx * sy) / den : 0.0;
}

/* Whether series k may be judged: the allocators' allocated parts are what
 * the program asked for, not a leak; their cached parts only while the
 * matching allocated part stays flat. */
static int judged(const zt_leak_watch *w, int from, int k) {
    if (k == ZT_PART_ALLOCATOR_ALLOCATED || k == ZT_PART_HOST_POOL_ALLOCATED) return 0;
    for (int i = from; i < w->n; i++)
        if (!(w->measured[slot(w, i)] & (1u << k))) return 0; /* a series judged only where always measured */
    int owner = k == ZT_PART_ALLOCATOR_CACHED ? ZT_PART_ALLOCATOR_ALLOCATED
                : k == ZT_PART_HOST_POOL_CACHED ? ZT_PART_HOST_POOL_ALLOCATED
                : -1;
    if (owner < 0) return 1;
    double first, last, s = slope_of(w, from, owner, &first, &last);
    return s < w->min_rate && s > -w->min_rate;
}

static void record(zt_leak_watch *w, const zt_proc_sample *s) {
    int j = w->head;
    w->steps[j] = s->step;
    double *v = w->values + (size_t)j * ZT_LEAK_SERIES;
    for (int p = 0; p < ZT_NUM_PARTS; p++) v[p] = (double)s->parts[p];
    v[ZT_LEAK_UNEXPLAINED] = (double)s->unexplained_bytes;
    w->measured[j] = s->measured | (1u << ZT_LEAK_UNEXPLAINED);
    w->head = (w->head + 1) % w->cap;
    if (w->n < w->cap) w->n++;
}

void zt_leak_watch_add(zt_leak_watch *w, const zt_proc_sample *s, zt_leak_warning *out, int *nout) {
    *nout = 0;
    w->judged_now = 0;
    w->samples++;
    record(w, s);
    int from = 0; /* the samples within the last `window` steps */
    while (from < w->n && w->steps[slot(w, from)] <= s->step - w->window) from++;
    if (w->n - from < ZT_LEAK_MIN_SAMPLES) return;
    int oldest = w->steps[slot(w, from)];
    w->judged_now = 1;
    w->judgements++;
    for (int k = 0; k < ZT_LEAK_SERIES; k++) {
        w->rate_now[k] = 0;
        if (!judged(w, from, k)) {
            w->leaking[k] = 0;
            continue;
        }
        double first, last, rate = slope_of(w, from, k, &first, &last);
        w->rate_now[k] = rate;
        int leaking = rate > w->min_rate && last - first > w->window * w->min_rate;
        if (leaking && !w->leaking[k]) {
            out[(*nout)++] = (zt_leak_warning){k, rate, s->step, oldest};
            w->warnings++;
        }
        w->leaking[k] = leaking;
    }
}
