/* A timeline in the Chrome trace format (what Perfetto and chrome://tracing
 * open): counter tracks of memory per category, spans for phases, unit
 * gathers, collectives and offload copies. Each rank writes its own events;
 * zt_trace_merge joins the ranks' files into one trace.json, one process
 * track per rank. A zt_trace with no file is a no-op everywhere. */
#ifndef ZT_TRACE_H
#define ZT_TRACE_H

#include <stdio.h>

#include "zt_error.h"
#include "zt_mem.h"

typedef struct {
    FILE *f;
    int rank;
    long events;
    long max_events; /* stop recording past this many (0: no cap) */
} zt_trace;


zt_status zt_trace_open(zt_trace *t, const char *path, int rank, long max_events, zt_error *err);
void zt_trace_close(zt_trace *t);
static inline int zt_trace_on(const zt_trace *t) {
    return t && t->f && (t->max_events == 0 || t->events < t->max_events);
}

/* A counter sample: track `name`, value in bytes. */
void zt_trace_counter(zt_trace *t, const char *name, double value);
/* A span from t_start to now (seconds from zt_now_s), on thread lane tid
 * (0 compute, 1 communication, 2 offload copies). */
void zt_trace_span(zt_trace *t, const char *name, const char *cat, int tid, double t_start);
void zt_trace_instant(zt_trace *t, const char *name, const char *cat, int tid);

/* Makes every allocation and free in m emit a counter sample of its category
 * ("<space>/<category>"). */
void zt_trace_watch_mem(zt_trace *t, zt_mem *m);

/* Joins part files "<dir>/trace.rank<r>.part" for r < nranks into
 * "<dir>/trace.json" and removes the parts; *missing counts the ranks
 * without a part there (each rank chooses to trace, and where). */
zt_status zt_trace_merge(const char *dir, int nranks, int *missing, zt_error *err);

#endif
