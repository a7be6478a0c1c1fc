/* Deferred copy streams: a test mode of the CPU backend (ZT_CPU_DEFER_COPIES=1)
 * that gives streams other than the default one the one property of a GPU
 * copy engine the CPU otherwise hides: a copy enqueued on them happens LATER,
 * at the first point where something waits for it (an event wait or sync on a
 * later event, or a stream sync), and reads its source only then.
 *
 * So code that reads a copy's destination before waiting for its event, or
 * overwrites or frees its source too early, computes with stale or freed
 * data here, and the bitwise tests (or AddressSanitizer) see it, with no GPU.
 * Kernels and the default (compute) stream still run at once, which a GPU
 * would allow too: it is one legal schedule among many, chosen to be the
 * one that exposes missing waits on the copy streams. */
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"

typedef struct {
    void *dst;
    const void *src; /* NULL: a fill with `value` */
    int value;
    size_t bytes;
} queued_copy;

/* Operations [base, base + n) in order; `executed` of them have happened. */
typedef struct {
    queued_copy *ops;
    size_t n, cap, executed;
    unsigned long long base;
} copy_queue;

typedef struct {
    copy_queue *q;
    unsigned long long pos; /* everything before this absolute index */
} queue_event;

static copy_queue *queue_of(zt_stream *s) { return s ? (copy_queue *)s->handle : NULL; }

/* Runs the queue's operations up to absolute index pos. */
static void run_until(copy_queue *q, unsigned long long pos) {
    while (q->executed < q->n && q->base + q->executed < pos) {
        queued_copy *c = &q->ops[q->executed++];
        if (c->src) memmove(c->dst, c->src, c->bytes);
        else memset(c->dst, c->value, c->bytes);
    }
    if (q->executed == q->n) { /* all done: start the array over */
        q->base += q->n;
        q->n = q->executed = 0;
    }
}

static zt_status enqueue(copy_queue *q, void *dst, const void *src, int value, size_t bytes, zt_error *err) {
    if (q->n == q->cap) {
        size_t cap = q->cap ? 2 * q->cap : 16;
        queued_copy *ops = realloc(q->ops, cap * sizeof *ops);
        if (!ops) return ZT_FAIL(err, ZT_ERR_OOM, "deferred copies: cannot queue %zu operations", cap);
        q->ops = ops;
        q->cap = cap;
    }
    q->ops[q->n++] = (queued_copy){dst, src, value, bytes};
    return ZT_OK;
}

static zt_status defer_memcpy(zt_backend *be, void *dst, const void *src, size_t bytes, zt_copy_kind kind,
                              zt_stream *s, zt_error *err) {
    (void)be, (void)kind;
    copy_queue *q = queue_of(s);
    if (!bytes) return ZT_OK;
    if (q) return enqueue(q, dst, src, 0, bytes, err);
    memmove(dst, src, bytes);
    return ZT_OK;
}

static zt_status defer_memset(zt_backend *be, void *dst, int value, size_t bytes, zt_stream *s, zt_error *err) {
    (void)be;
    copy_queue *q = queue_of(s);
    if (!bytes) return ZT_OK;
    if (q) return enqueue(q, dst, NULL, value, bytes, err);
    memset(dst, value, bytes);
    return ZT_OK;
}

static zt_status defer_sync(zt_backend *be, zt_stream *s, zt_error *err) {
    (void)be, (void)err;
    copy_queue *q = queue_of(s);
    if (q) run_until(q, q->base + q->n);
    return ZT_OK;
}

static zt_status defer_event_record(zt_backend *be, zt_stream *s, void **event, zt_error *err) {
    (void)be;
    *event = NULL;
    copy_queue *q = queue_of(s);
    if (!q) return ZT_OK; /* the default stream: it has all happened */
    queue_event *ev = malloc(sizeof *ev);
    if (!ev) return ZT_FAIL(err, ZT_ERR_OOM, "deferred copies: cannot allocate an event");
    ev->q = q;
    ev->pos = q->base + q->n;
    *event = ev;
    return ZT_OK;
}

/* The waiter is about to depend on the event: what it covers happens now. */
static zt_status defer_wait_event(zt_backend *be, zt_stream *s, void *event, zt_error *err) {
    (void)be, (void)s, (void)err;
    queue_event *ev = event;
    run_until(ev->q, ev->pos);
    return ZT_OK;
}

static zt_status defer_event_sync(zt_backend *be, void *event, zt_error *err) {
    return defer_wait_event(be, NULL, event, err);
}

static void defer_event_destroy(zt_backend *be, void *event) {
    (void)be;
    free(event);
}

static zt_status defer_stream_create(zt_backend *be, zt_stream *out, zt_error *err) {
    copy_queue *q = calloc(1, sizeof *q);
    if (!q) return ZT_FAIL(err, ZT_ERR_OOM, "deferred copies: cannot allocate a stream");
    out->be = be;
    out->handle = q;
    out->nthreads = be->nthreads;
    return ZT_OK;
}

static void defer_stream_destroy(zt_backend *be, zt_stream *s) {
    (void)be;
    copy_queue *q = queue_of(s);
    if (!q) return;
    run_until(q, q->base + q->n); /* as a GPU drains a stream before destroying it */
    free(q->ops);
    free(q);
}

void zt_cpu_install_copy_queues(zt_backend *be) {
    be->memcpy_async = defer_memcpy;
    be->memset_async = defer_memset;
    be->stream_sync = defer_sync;
    be->event_record = defer_event_record;
    be->stream_wait_event = defer_wait_event;
    be->event_sync = defer_event_sync;
    be->event_destroy = defer_event_destroy;
    be->stream_create = defer_stream_create;
    be->stream_destroy = defer_stream_destroy;
}
