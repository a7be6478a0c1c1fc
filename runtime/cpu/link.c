/* A modelled host-device link for the CPU backend (--link-gbs, --link): on
 * the CPU a "device to host" copy is a memcpy at memory speed, so offload
 * would look free. Here every H2D and D2H copy occupies its direction of a
 * link of the given bandwidth for bytes / bandwidth seconds, in issue
 * order, as a copy engine on PCIe does; the bytes move at once (a legal
 * schedule), but the copy is complete only at its modelled end. A copy
 * stream runs ahead of the host: its work ends when its last copy does,
 * and only waits make the host sleep until then (the exposed transfer
 * time). A copy on the compute stream, or compute waiting for a copy
 * stream, is on the host's path, as on a GPU it is on the kernels' path.
 * No latency term: per-copy overhead (microseconds on PCIe) is left out. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"
#include "zt_time.h"

typedef struct {
    pthread_mutex_t lock;   /* guards the link's state: any thread may wait on an event (each stream is one thread's) */
    double busy_until[2];   /* [ZT_LINK_H2D], [ZT_LINK_D2H]: when the direction is free */
    zt_link_stats stats;
} link_state;

/* A copy stream: its work ends at done_at; dir is the direction of the copy
 * that ends last (-1: none), so a wait on it is charged to that direction. */
typedef struct {
    double done_at;
    int dir;
} link_stream;

/* An event: the point it marks ends at `at`. */
typedef struct {
    double at;
    int dir;
} link_event;

static link_state *state_of(zt_backend *be) { return be->impl; }
static link_stream *stream_of(zt_stream *s) { return s ? (link_stream *)s->handle : NULL; }

static int direction(zt_copy_kind kind) { return kind == ZT_COPY_H2D ? ZT_LINK_H2D : kind == ZT_COPY_D2H ? ZT_LINK_D2H : -1; }

/* The host sleeps until `at`; the time is exposed transfer time in dir. */
static void wait_until(link_state *L, double at, int dir) {
    double now = zt_now_s();
    if (dir < 0 || at <= now) return;
    struct timespec ts = {(time_t)at, (long)((at - (double)(time_t)at) * 1e9)};
    if (ts.tv_nsec > 999999999L) ts.tv_nsec = 999999999L; /* rounding must not make it invalid */
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
    pthread_mutex_lock(&L->lock);
    L->stats.exposed_s[dir] += at - now;
    pthread_mutex_unlock(&L->lock);
}

/* Books a copy of `bytes` in dir, not before `after`; returns its end. */
static double book(link_state *L, int dir, size_t bytes, double after) {
    pthread_mutex_lock(&L->lock);
    double start = L->busy_until[dir] > after ? L->busy_until[dir] : after;
    double t = (double)bytes / (L->stats.gbs[dir] * 1e9);
    L->busy_until[dir] = start + t;
    L->stats.bytes[dir] += (double)bytes;
    L->stats.busy_s[dir] += t;
    pthread_mutex_unlock(&L->lock);
    return start + t;
}

static zt_status link_memcpy(zt_backend *be, void *dst, const void *src, size_t bytes, zt_copy_kind kind,
                             zt_stream *s, zt_error *err) {
    (void)err;
    if (!bytes) return ZT_OK;
    memmove(dst, src, bytes);
    int dir = direction(kind);
    if (dir < 0) return ZT_OK;
    link_state *L = state_of(be);
    link_stream *ls = stream_of(s);
    double now = zt_now_s();
    if (!ls) { /* the compute stream: the host waits for it */
        wait_until(L, book(L, dir, bytes, now), dir);
        return ZT_OK;
    }
    ls->done_at = book(L, dir, bytes, ls->done_at > now ? ls->done_at : now);
    ls->dir = dir;
    return ZT_OK;
}

static zt_status link_memset(zt_backend *be, void *dst, int value, size_t bytes, zt_stream *s, zt_error *err) {
    (void)be, (void)s, (void)err;
    if (bytes) memset(dst, value, bytes);
    return ZT_OK;
}

static zt_status link_sync(zt_backend *be, zt_stream *s, zt_error *err) {
    (void)err;
    link_stream *ls = stream_of(s);
    if (ls) wait_until(state_of(be), ls->done_at, ls->dir);
    return ZT_OK;
}

static zt_status link_event_record(zt_backend *be, zt_stream *s, void **event, zt_error *err) {
    (void)be;
    *event = NULL;
    link_stream *ls = stream_of(s);
    if (!ls) return ZT_OK; /* the compute stream: it has all happened */
    link_event *ev = malloc(sizeof *ev);
    if (!ev) return ZT_FAIL(err, ZT_ERR_OOM, "modelled link: cannot allocate an event");
    ev->at = ls->done_at;
    ev->dir = ls->dir;
    *event = ev;
    return ZT_OK;
}

static zt_status link_wait_event(zt_backend *be, zt_stream *s, void *event, zt_error *err) {
    (void)err;
    link_event *ev = event;
    link_stream *ls = stream_of(s);
    if (!ls) { /* compute runs on the host: it waits here */
        wait_until(state_of(be), ev->at, ev->dir);
        return ZT_OK;
    }
    if (ev->at > ls->done_at) {
        ls->done_at = ev->at;
        ls->dir = ev->dir;
    }
    return ZT_OK;
}

static zt_status link_event_sync(zt_backend *be, void *event, zt_error *err) {
    (void)err;
    link_event *ev = event;
    wait_until(state_of(be), ev->at, ev->dir);
    return ZT_OK;
}

static void link_event_destroy(zt_backend *be, void *event) {
    (void)be;
    free(event);
}

static zt_status link_stream_create(zt_backend *be, zt_stream *out, zt_error *err) {
    link_stream *ls = calloc(1, sizeof *ls);
    if (!ls) return ZT_FAIL(err, ZT_ERR_OOM, "modelled link: cannot allocate a stream");
    ls->dir = -1;
    out->be = be;
    out->handle = ls;
    out->nthreads = be->nthreads;
    return ZT_OK;
}

static void link_stream_destroy(zt_backend *be, zt_stream *s) {
    (void)be;
    free(stream_of(s));
}

void zt_cpu_link_destroy(zt_backend *be) {
    link_state *L = state_of(be);
    if (!L) return;
    pthread_mutex_destroy(&L->lock);
    free(L);
    be->impl = NULL;
    be->link = NULL;
}

zt_status zt_cpu_install_link(zt_backend *be, double h2d_gbs, double d2h_gbs, zt_error *err) {
    link_state *L = calloc(1, sizeof *L);
    if (!L) return ZT_FAIL(err, ZT_ERR_OOM, "modelled link: cannot allocate its state");
    if (pthread_mutex_init(&L->lock, NULL) != 0) {
        free(L);
        return ZT_FAIL(err, ZT_ERR_INTERNAL, "modelled link: cannot initialize its lock");
    }
    L->stats.gbs[ZT_LINK_H2D] = h2d_gbs;
    L->stats.gbs[ZT_LINK_D2H] = d2h_gbs;
    be->impl = L;
    be->link = &L->stats;
    be->memcpy_async = link_memcpy;
    be->memset_async = link_memset;
    be->stream_sync = link_sync;
    be->event_record = link_event_record;
    be->stream_wait_event = link_wait_event;
    be->event_sync = link_event_sync;
    be->event_destroy = link_event_destroy;
    be->stream_create = link_stream_create;
    be->stream_destroy = link_stream_destroy;
    return ZT_OK;
}
