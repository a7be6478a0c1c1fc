#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "zt_time.h"
#include "zt_trace.h"

zt_status zt_trace_open(zt_trace *t, const char *path, int rank, long max_events, zt_error *err) {
    memset(t, 0, sizeof *t);
    t->rank = rank;
    t->max_events = max_events;
    t->f = fopen(path, "w");
    if (!t->f) return ZT_FAIL(err, ZT_ERR_IO, "cannot write trace %s: %s", path, strerror(errno));
    /* Name this rank's process track. */
    fprintf(t->f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}},\n"
                  "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"compute\"}},\n"
                  "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":1,\"args\":{\"name\":\"communication\"}},\n"
                  "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":2,\"args\":{\"name\":\"offload copies\"}}",
            rank, rank, rank, rank, rank);
    return ZT_OK;
}

static double us(double s) { return s * 1e6; }

/* The streams of the per-rank trace: the lanes of the merged one, with
 * offload copies split by direction as the backend's h2d and d2h streams
 * are. The ids are what a PyTorch trace shows (7: the default stream). */
enum { LANE_COMPUTE, LANE_COMM, LANE_H2D, LANE_D2H, LANE_HOST };
static const int lane_stream[LANE_HOST] = {7, 20, 21, 22};
static const char *const lane_label[LANE_HOST] = {"compute stream", "communication stream", "h2d copy stream",
                                                  "d2h copy stream"};
/* The host thread's tid in the per-rank trace (its pid is the process's). */
enum { HOST_TID = 1 };

static void rank_metadata(zt_trace_rank_file *h, int rank) {
    int pid = h->host_pid;
    fprintf(h->f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d host\"}},\n"
                  "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"training thread\"}},\n"
                  "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d device %d\"}}",
            pid, rank, pid, HOST_TID, h->device, rank, h->device);
    for (int l = 0; l < LANE_HOST; l++)
        fprintf(h->f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s %d\"}}",
                h->device, lane_stream[l], lane_label[l], lane_stream[l]);
}

zt_status zt_trace_open_rank(zt_trace *t, const char *path, int world_size, const char *backend, int device,
                             zt_error *err) {
    zt_trace_rank_file *h = &t->hta;
    memset(h, 0, sizeof *h);
    h->device = device;
    h->host_pid = (int)getpid();
    h->next_correlation = 1;
    h->f = fopen(path, "w");
    if (!h->f) return ZT_FAIL(err, ZT_ERR_IO, "cannot write trace %s: %s", path, strerror(errno));
    /* HTA takes a file's rank from the first line matching "rank":\s+N, so
     * distributedInfo comes first, on one line, a space after each colon. */
    fprintf(h->f, "{\"schemaVersion\": 1,\n\"distributedInfo\": {\"backend\": \"%s\", \"rank\": %d, \"world_size\": %d},\n"
                  "\"displayTimeUnit\": \"ms\",\n\"traceEvents\": [\n",
            backend, t->rank, world_size);
    rank_metadata(h, t->rank);
    return ZT_OK;
}

void zt_trace_close(zt_trace *t) {
    if (t->f) fclose(t->f);
    t->f = NULL;
    if (t->hta.f) {
        fputs("\n]}\n", t->hta.f);
        fclose(t->hta.f);
    }
    t->hta.f = NULL;
}

/* A host-side complete event of the per-rank trace. */
static void rank_host_op(zt_trace_rank_file *h, const char *name, const char *cat, double t0, double t1,
                         long long correlation) {
    fprintf(h->f, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d",
            name, cat, us(t0), us(t1 - t0), h->host_pid, HOST_TID);
    if (correlation > 0) fprintf(h->f, ",\"args\":{\"correlation\":%lld}", correlation);
    fputs("}", h->f);
}

/* Which stream a span of the merged trace ran on, or LANE_HOST for host
 * work (checkpoint I/O, waits on the delayed update), or -1 for spans the
 * per-rank trace writes otherwise (steps, as ProfilerStep#N). */
static int span_lane(const char *name, const char *cat, int tid) {
    if (strcmp(cat, "step") == 0) return -1;
    if (strcmp(cat, "phase") == 0) return LANE_COMPUTE;
    if (strcmp(cat, "comm") == 0) return LANE_COMM;
    if (tid == 2 && strncmp(name, "h2d", 3) == 0) return LANE_H2D;
    if (tid == 2 && strncmp(name, "d2h", 3) == 0) return LANE_D2H;
    return LANE_HOST;
}

/* The kernel's name: NCCL's for collectives ("all_gather" ->
 * "ncclDevKernel_AllGather"), which HTA's communication pattern (^nccl)
 * matches; CUDA's "Memcpy HtoD/DtoH" for copies (its memory pattern);
 * "zt::<phase>" for compute, which matches neither. */
static void kernel_name(char *out, size_t n, const char *name, int lane) {
    if (lane == LANE_COMM) {
        size_t o = (size_t)snprintf(out, n, "ncclDevKernel_");
        for (int up = 1; *name && o + 1 < n; name++) {
            if (*name == '_') {
                up = 1;
                continue;
            }
            out[o++] = up && *name >= 'a' && *name <= 'z' ? (char)(*name - 'a' + 'A') : *name;
            up = 0;
        }
        out[o < n ? o : n - 1] = '\0';
    } else if (lane == LANE_H2D || lane == LANE_D2H) {
        snprintf(out, n, "Memcpy %s (%s)", lane == LANE_H2D ? "HtoD" : "DtoH", name);
    } else {
        snprintf(out, n, "zt::%s", name);
    }
}

/* A span of stream work: the host's launch at t0, then the kernel on its
 * stream once the stream is free, both carrying one correlation id. */
static void rank_kernel(zt_trace_rank_file *h, const char *name, int lane, double t0, double t1) {
    long long corr = h->next_correlation++;
    double launch_end = t0 + (t1 - t0 < 1e-6 ? t1 - t0 : 1e-6);
    int copy = lane == LANE_H2D || lane == LANE_D2H;
    rank_host_op(h, copy ? "cudaMemcpyAsync" : "cudaLaunchKernel", "cuda_runtime", t0, launch_end, corr);
    double start = t0 > h->stream_free[lane] ? t0 : h->stream_free[lane];
    double end = t1 > start ? t1 : start;
    h->stream_free[lane] = end;
    char kname[128];
    kernel_name(kname, sizeof kname, name, lane);
    fprintf(h->f,
            ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d,"
            "\"args\":{\"device\":%d,\"stream\":%d,\"correlation\":%lld",
            kname, copy ? "gpu_memcpy" : "kernel", us(start), us(end - start), h->device, lane_stream[lane], h->device,
            lane_stream[lane], corr);
    if (lane == LANE_COMM) fprintf(h->f, ",\"Collective name\":\"%s\"", name);
    fputs("}}", h->f);
}

/* A phase's compute: one kernel per stretch of [t0, t1] between the
 * host's waits for collectives, which the phase's span includes but its
 * compute stream did not spend computing. */
static void rank_compute(zt_trace_rank_file *h, const char *name, double t0, double t1) {
    double from = t0;
    for (int i = 0; i < h->nwaits; i++) {
        double w0 = h->waits[i][0], w1 = h->waits[i][1];
        if (w1 <= from || w0 >= t1) continue;
        if (w0 > from) rank_kernel(h, name, LANE_COMPUTE, from, w0);
        from = w1;
    }
    if (from < t1) rank_kernel(h, name, LANE_COMPUTE, from, t1);
    h->nwaits = 0;
}

void zt_trace_wait(zt_trace *t, double t_start) {
    if (!zt_trace_on(t) || !t->hta.f) return;
    zt_trace_rank_file *h = &t->hta;
    double now = zt_now_s();
    /* Full: the newest wait absorbs this one, losing only compute between
     * them (a phase with more than 32 waits). */
    if (h->nwaits == (int)(sizeof h->waits / sizeof h->waits[0])) h->nwaits--;
    else h->waits[h->nwaits][0] = t_start;
    h->waits[h->nwaits][1] = now;
    h->nwaits++;
}

static void rank_span(zt_trace *t, const char *name, const char *cat, int tid, double t0, double t1) {
    zt_trace_rank_file *h = &t->hta;
    if (!h->f) return;
    int lane = span_lane(name, cat, tid);
    if (lane < 0) return;
    /* Phases are host spans too: the launches nest in them. */
    if (lane == LANE_HOST || lane == LANE_COMPUTE) rank_host_op(h, name, "cpu_op", t0, t1, 0);
    if (lane == LANE_COMPUTE) rank_compute(h, name, t0, t1);
    else if (lane != LANE_HOST) rank_kernel(h, name, lane, t0, t1);
}

void zt_trace_profiler_step(zt_trace *t, int step, double t_start) {
    if (!zt_trace_on(t) || !t->hta.f) return;
    char name[40];
    snprintf(name, sizeof name, "ProfilerStep#%d", step);
    rank_host_op(&t->hta, name, "user_annotation", t_start, zt_now_s(), 0);
}

void zt_trace_counter(zt_trace *t, const char *name, double value) {
    if (!zt_trace_on(t)) return;
    fprintf(t->f, ",\n{\"name\":\"%s\",\"ph\":\"C\",\"ts\":%.3f,\"pid\":%d,\"args\":{\"bytes\":%.0f}}", name,
            us(zt_now_s()), t->rank, value);
    t->events++;
}

void zt_trace_span(zt_trace *t, const char *name, const char *cat, int tid, double t_start) {
    if (!zt_trace_on(t)) return;
    double now = zt_now_s();
    fprintf(t->f, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d}",
            name, cat, us(t_start), us(now - t_start), t->rank, tid);
    t->events++;
    rank_span(t, name, cat, tid, t_start, now);
}

void zt_trace_instant(zt_trace *t, const char *name, const char *cat, int tid) {
    if (!zt_trace_on(t)) return;
    fprintf(t->f, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"i\",\"s\":\"t\",\"ts\":%.3f,\"pid\":%d,\"tid\":%d}",
            name, cat, us(zt_now_s()), t->rank, tid);
    t->events++;
}

static void on_mem_change(void *arg, const zt_mem *m, zt_category c) {
    zt_trace *t = arg;
    char name[64];
    snprintf(name, sizeof name, "%s/%s", m->space_name, zt_category_name(c));
    zt_trace_counter(t, name, (double)m->by_category[c].current);
    /* The allocator's view beside the categories': what it holds, and the
     * largest request it could serve without asking the system. */
    snprintf(name, sizeof name, "%s allocated", m->space_name);
    zt_trace_counter(t, name, (double)m->allocated.current);
    snprintf(name, sizeof name, "%s reserved", m->space_name);
    zt_trace_counter(t, name, (double)m->reserved.current);
    snprintf(name, sizeof name, "%s largest free block", m->space_name);
    zt_trace_counter(t, name, (double)zt_mem_free_stats(m).largest_free);
}

void zt_trace_watch_mem(zt_trace *t, zt_mem *m) {
    m->observer = on_mem_change;
    m->observer_arg = t;
    /* Start every track at its current value so the counters begin at t0. */
    for (int c = 0; c < ZT_NUM_CATEGORIES; c++) on_mem_change(t, m, (zt_category)c);
}

zt_status zt_trace_merge(const char *dir, int nranks, int *missing, zt_error *err) {
    *missing = 0;
    int written = 0;
    char path[1100], tmp[1110];
    snprintf(path, sizeof path, "%s/trace.json", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *out = fopen(tmp, "w");
    if (!out) return ZT_FAIL(err, ZT_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", out);
    char buf[1 << 16];
    for (int r = 0; r < nranks; r++) {
        char part[1100];
        snprintf(part, sizeof part, "%s/trace.rank%d.part", dir, r);
        FILE *in = fopen(part, "r");
        if (!in) {
            ++*missing;
            continue;
        }
        if (written++ > 0) fputs(",\n", out);
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, out);
        fclose(in);
        remove(part);
    }
    fputs("\n]}\n", out);
    if (fclose(out) != 0) return ZT_FAIL(err, ZT_ERR_IO, "cannot finish %s", tmp);
    if (rename(tmp, path) != 0) return ZT_FAIL(err, ZT_ERR_IO, "cannot rename %s: %s", tmp, strerror(errno));
    return ZT_OK;
}
