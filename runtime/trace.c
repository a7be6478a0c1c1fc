#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

void zt_trace_close(zt_trace *t) {
    if (t->f) fclose(t->f);
    t->f = NULL;
}

static double us(double s) { return s * 1e6; }

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
