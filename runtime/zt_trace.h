/* A timeline in the Chrome trace format (what Perfetto and chrome://tracing
 * open): counter tracks of memory per category, spans for phases, unit
 * gathers, collectives and offload copies. Each rank writes its own events;
 * zt_trace_merge joins the ranks' files into one trace.json, one process
 * track per rank. A zt_trace with no file is a no-op everywhere.
 *
 * Beside it, zt_trace_open_rank adds a second, self-contained file per rank
 * in the shape of a PyTorch profiler (Kineto) trace, which Holistic Trace
 * Analysis reads from a folder of them: distributedInfo, ProfilerStep#N
 * spans, and each span of stream work as a launch on the host plus a
 * kernel on its stream, joined by a correlation id. Collectives get NCCL's
 * kernel names, by which HTA tells communication from computation.
 * docs/interop_traces.md gives the mapping and its limits. */
#ifndef ZT_TRACE_H
#define ZT_TRACE_H

#include <stdio.h>

#include "zt_error.h"
#include "zt_mem.h"

/* The per-rank HTA trace (zt_trace_open_rank); f NULL: off. */
typedef struct {
    FILE *f;
    int device;                 /* args.device of every kernel */
    int host_pid;               /* the pid of host events, as a PyTorch trace's */
    long long next_correlation; /* launch <-> kernel ids, from 1 */
    /* When the last kernel on each stream ends (seconds, zt_now_s): a
     * stream runs one kernel at a time, so a kernel whose span starts
     * earlier (an overlapping collective) starts when its stream frees. */
    double stream_free[4];
    /* Intervals the host blocked on a collective since the last phase
     * ended: on the CPU backend the compute stream is the host thread, so
     * a phase's compute kernel leaves them out (zt_trace_wait). */
    double waits[32][2];
    int nwaits;
} zt_trace_rank_file;

typedef struct {
    FILE *f;
    zt_trace_rank_file hta;
    int rank;
    long events;
    long max_events; /* stop recording past this many (0: no cap) */
} zt_trace;


zt_status zt_trace_open(zt_trace *t, const char *path, int rank, long max_events, zt_error *err);
/* After zt_trace_open: also write the per-rank HTA trace at path, with
 * distributedInfo {rank, world_size, backend} ("nccl", "mpi", ...) and
 * kernels on device `device`. Shares the event cap of t. */
zt_status zt_trace_open_rank(zt_trace *t, const char *path, int world_size, const char *backend, int device,
                             zt_error *err);
/* Closes both files; the per-rank one is finished into a whole JSON
 * document (the merged file's parts are finished by zt_trace_merge). */
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
/* The host blocked from t_start to now waiting for a collective: idle
 * time on the compute stream of the per-rank trace. */
void zt_trace_wait(zt_trace *t, double t_start);
/* Training step `step` from t_start to now: HTA's iteration, a
 * "ProfilerStep#<step>" user annotation in the per-rank trace (nothing in
 * the merged one, whose "step N" span the caller writes). */
void zt_trace_profiler_step(zt_trace *t, int step, double t_start);

/* Makes every allocation and free in m emit a counter sample of its category
 * ("<space>/<category>"). */
void zt_trace_watch_mem(zt_trace *t, zt_mem *m);

/* Joins part files "<dir>/trace.rank<r>.part" for r < nranks into
 * "<dir>/trace.json" and removes the parts; *missing counts the ranks
 * without a part there (each rank chooses to trace, and where). */
zt_status zt_trace_merge(const char *dir, int nranks, int *missing, zt_error *err);

#endif
