/* PyTorch memory_viz snapshots of a zt_mem (docs/interop_memory_viz.md):
 * the blocks held now, as segments tiled by blocks, and the last N allocator
 * events, in the layout torch.cuda.memory._snapshot() returns, so that
 * torch/cuda/_memory_viz.py and the memory_viz page read them unchanged.
 *
 * zerotrain has no Python stack to show; each block's and event's "frames"
 * say instead what the bytes are: the allocation's label, its category and
 * the phase it was made in (innermost first, as PyTorch lists frames). Every
 * block and event also has a "category" key, for a page to colour by. */
#include "mem_internal.h"
#include "zt_mem.h"
#include "zt_pickle.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    zt_mem_action action;
    zt_category category;
    zt_phase phase;
    uintptr_t addr;
    size_t size;      /* the block's bytes (rounded), as PyTorch's events carry */
    size_t requested; /* what the caller asked for: zerotrain's "allocated" counts these */
    int64_t time_us;
    char label[40];
} zt_mem_event;

/* The ring: grows by doubling up to max entries, then overwrites the oldest,
 * so a short run costs only what it records. */
struct zt_mem_trace {
    zt_mem_event *ev;
    size_t cap, max;
    size_t count; /* entries held (<= cap) */
    size_t next;  /* where the next one goes once the ring is full */
    size_t lost;  /* events not recorded: the ring could not grow */
};

static const char *const action_names[ZT_MEM_NUM_EVENTS] = {
    "alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map", "segment_unmap", "oom",
};

zt_status zt_mem_trace_enable(zt_mem *m, size_t entries, zt_error *err) {
    if (entries == 0) return ZT_FAIL(err, ZT_ERR_INVALID, "memory snapshot: keeping 0 events is no trace");
    if (m->trace) return ZT_FAIL(err, ZT_ERR_INVALID, "%s memory: events are already recorded", m->space_name);
    m->trace = calloc(1, sizeof *m->trace);
    if (!m->trace) return ZT_FAIL(err, ZT_ERR_OOM, "%s memory: cannot allocate the snapshot's event ring", m->space_name);
    m->trace->max = entries;
    return ZT_OK;
}

void zt_mem_trace_free(zt_mem *m) {
    if (!m->trace) return;
    free(m->trace->ev);
    free(m->trace);
    m->trace = NULL;
}

static zt_mem_event *trace_slot(struct zt_mem_trace *t) {
    if (t->count == t->cap && t->cap < t->max) {
        size_t cap = t->cap ? (t->cap > t->max / 2 ? t->max : 2 * t->cap) : (t->max < 1024 ? t->max : 1024);
        zt_mem_event *ev = realloc(t->ev, cap * sizeof *ev);
        if (!ev) return NULL;
        t->ev = ev, t->cap = cap;
    }
    if (t->count < t->cap) return &t->ev[t->count++];
    zt_mem_event *e = &t->ev[t->next]; /* full at max: the oldest goes */
    t->next = (t->next + 1) % t->cap;
    return e;
}

static int64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void zt_mem_trace_note(zt_mem *m, zt_mem_action a, const void *addr, size_t size, size_t requested,
                       zt_category cat, const char *label) {
    if (!m->trace) return;
    zt_mem_event *e = trace_slot(m->trace);
    if (!e) {
        m->trace->lost++;
        return;
    }
    e->action = a, e->category = cat, e->phase = m->phase;
    e->addr = (uintptr_t)addr, e->size = size, e->requested = requested;
    e->time_us = now_us();
    snprintf(e->label, sizeof e->label, "%s", label ? label : "");
}

/* One frame {filename, line, name}: the filename carries the kind of fact
 * ("zerotrain/category"), the name the fact, so both the page's stack view
 * and _memory_viz.py's "file:line:name" read well. */
static void put_frame(FILE *f, const char *kind, const char *name) {
    char file[64];
    snprintf(file, sizeof file, "zerotrain/%s", kind);
    zt_pickle_dict_open(f);
    zt_pickle_key(f, "filename"), zt_pickle_str(f, file);
    zt_pickle_key(f, "line"), zt_pickle_int(f, 0);
    zt_pickle_key(f, "name"), zt_pickle_str(f, name);
    zt_pickle_dict_close(f);
}

static void put_frames(FILE *f, const char *label, const char *category, zt_phase phase) {
    zt_pickle_list_open(f);
    if (label && label[0]) put_frame(f, "label", label);
    put_frame(f, "category", category);
    put_frame(f, "phase", zt_phase_name(phase));
    zt_pickle_list_close(f);
}

static void put_block(FILE *f, const zt_block *b) {
    int live = b->requested_bytes > 0;
    zt_pickle_dict_open(f);
    zt_pickle_key(f, "address"), zt_pickle_uint(f, (uintptr_t)b->ptr);
    zt_pickle_key(f, "size"), zt_pickle_uint(f, b->block_bytes);
    zt_pickle_key(f, "requested_size"), zt_pickle_uint(f, b->requested_bytes);
    zt_pickle_key(f, "state"), zt_pickle_str(f, live ? "active_allocated" : "inactive");
    zt_pickle_key(f, "frames");
    if (live) put_frames(f, b->label, zt_category_name(b->category), b->phase);
    else zt_pickle_list_open(f), zt_pickle_list_close(f);
    if (live) zt_pickle_key(f, "category"), zt_pickle_str(f, zt_category_name(b->category));
    if (live) zt_pickle_key(f, "label"), zt_pickle_str(f, b->label);
    zt_pickle_dict_close(f);
}

/* A segment's keys, its blocks written by the caller between open and close. */
static void segment_open(FILE *f, int device, const void *base, size_t total, size_t allocated, size_t requested,
                         int expandable) {
    zt_pickle_dict_open(f);
    zt_pickle_key(f, "device"), zt_pickle_int(f, device);
    zt_pickle_key(f, "address"), zt_pickle_uint(f, (uintptr_t)base);
    zt_pickle_key(f, "total_size"), zt_pickle_uint(f, total);
    zt_pickle_key(f, "allocated_size"), zt_pickle_uint(f, allocated);
    zt_pickle_key(f, "active_size"), zt_pickle_uint(f, allocated);
    zt_pickle_key(f, "requested_size"), zt_pickle_uint(f, requested);
    zt_pickle_key(f, "stream"), zt_pickle_int(f, 0);
    zt_pickle_key(f, "segment_type"), zt_pickle_str(f, total > ((size_t)1 << 20) ? "large" : "small");
    zt_pickle_key(f, "segment_pool_id"), zt_pickle_list_open(f), zt_pickle_int(f, 0), zt_pickle_int(f, 0),
        zt_pickle_list_close(f);
    zt_pickle_key(f, "is_expandable"), zt_pickle_bool(f, expandable);
    zt_pickle_key(f, "frames"), zt_pickle_list_open(f), zt_pickle_list_close(f);
    zt_pickle_key(f, "blocks"), zt_pickle_list_open(f);
}
static void segment_close(FILE *f) {
    zt_pickle_list_close(f);
    zt_pickle_dict_close(f);
}

/* SIMPLE: every system block, live or cached, is a segment of its own. */
static void put_simple_segments(FILE *f, const zt_mem *m, int device) {
    const zt_block *lists[2] = {m->live, m->cached};
    for (int l = 0; l < 2; l++)
        for (const zt_block *b = lists[l]; b; b = b->next) {
            size_t held = b->requested_bytes ? b->block_bytes : 0;
            segment_open(f, device, b->ptr, b->block_bytes, held, b->requested_bytes, 0);
            put_block(f, b);
            segment_close(f);
        }
}

/* CACHING and EXPANDABLE: the segments as the allocator tiles them. */
static void put_cached_segments(FILE *f, const zt_mem *m, int device) {
    for (const zt_mem_segment *s = m->segments; s; s = s->next) {
        size_t held = 0, requested = 0;
        for (const zt_block *b = s->first; b; b = b->seg_next)
            if (b->requested_bytes) held += b->block_bytes, requested += b->requested_bytes;
        segment_open(f, device, s->base, s->bytes, held, requested, s->mapped != NULL);
        for (const zt_block *b = s->first; b; b = b->seg_next) put_block(f, b);
        segment_close(f);
    }
}

/* Segment events serve no one request: their category is "segment". */
static const char *event_category(const zt_mem_event *e) {
    int segment = e->action >= ZT_MEM_EV_SEGMENT_ALLOC && e->action <= ZT_MEM_EV_SEGMENT_UNMAP;
    return segment ? "segment" : zt_category_name(e->category);
}

static void put_event(FILE *f, const zt_mem *m, const zt_mem_event *e) {
    zt_pickle_dict_open(f);
    zt_pickle_key(f, "action"), zt_pickle_str(f, action_names[e->action]);
    zt_pickle_key(f, "addr"), zt_pickle_uint(f, e->addr);
    zt_pickle_key(f, "size"), zt_pickle_uint(f, e->size);
    zt_pickle_key(f, "requested_size"), zt_pickle_uint(f, e->requested);
    zt_pickle_key(f, "stream"), zt_pickle_int(f, 0);
    zt_pickle_key(f, "time_us"), zt_pickle_int(f, e->time_us);
    zt_pickle_key(f, "category"), zt_pickle_str(f, event_category(e));
    zt_pickle_key(f, "phase"), zt_pickle_str(f, zt_phase_name(e->phase));
    zt_pickle_key(f, "label"), zt_pickle_str(f, e->label);
    if (e->action == ZT_MEM_EV_OOM) { /* what the cap left: _memory_viz.py prints it */
        size_t room = m->limit_bytes > m->reserved.current ? m->limit_bytes - m->reserved.current : 0;
        zt_pickle_key(f, "device_free"), zt_pickle_uint(f, room);
    }
    zt_pickle_key(f, "frames"), put_frames(f, e->label, event_category(e), e->phase);
    zt_pickle_dict_close(f);
}

static void put_snapshot(FILE *f, const zt_mem *m, int device) {
    zt_pickle_begin(f);
    zt_pickle_dict_open(f);
    zt_pickle_key(f, "segments"), zt_pickle_list_open(f);
    if (m->mode == ZT_ALLOC_SIMPLE) put_simple_segments(f, m, device);
    else put_cached_segments(f, m, device);
    zt_pickle_list_close(f);
    zt_pickle_key(f, "device_traces"), zt_pickle_list_open(f);
    for (int d = 0; d <= device; d++) { /* one list per device index, ours at its own */
        zt_pickle_list_open(f);
        const struct zt_mem_trace *t = d == device ? m->trace : NULL;
        for (size_t i = 0; t && i < t->count; i++) put_event(f, m, &t->ev[(t->next + i) % t->cap]);
        zt_pickle_list_close(f);
    }
    zt_pickle_list_close(f);
    zt_pickle_key(f, "allocator_settings"), zt_pickle_dict_open(f);
    zt_pickle_key(f, "mode"), zt_pickle_str(f, zt_alloc_mode_name(m->mode));
    zt_pickle_key(f, "limit_bytes"), zt_pickle_uint(f, m->limit_bytes);
    zt_pickle_key(f, "trace_max_entries"), zt_pickle_uint(f, m->trace ? m->trace->max : 0);
    zt_pickle_key(f, "trace_lost_events"), zt_pickle_uint(f, m->trace ? m->trace->lost : 0);
    zt_pickle_key(f, "allocated_bytes"), zt_pickle_uint(f, m->allocated.current);
    zt_pickle_key(f, "allocated_peak_bytes"), zt_pickle_uint(f, m->allocated.peak);
    zt_pickle_key(f, "reserved_bytes"), zt_pickle_uint(f, m->reserved.current);
    zt_pickle_dict_close(f);
    zt_pickle_dict_close(f);
    zt_pickle_end(f);
}

zt_status zt_mem_snapshot_write(const zt_mem *m, int device, const char *path, zt_error *err) {
    char tmp[1100];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return ZT_FAIL(err, ZT_ERR_INVALID, "memory snapshot: path too long: %s", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return ZT_FAIL(err, ZT_ERR_IO, "memory snapshot: cannot create %s: %s", tmp, strerror(errno));
    put_snapshot(f, m, device < 0 ? 0 : device);
    int bad = ferror(f);
    int saved = errno;
    if (fclose(f) != 0 && !bad) bad = 1, saved = errno;
    if (bad) {
        (void)remove(tmp);
        return ZT_FAIL(err, ZT_ERR_IO, "memory snapshot: cannot write %s: %s", tmp, strerror(saved));
    }
    if (rename(tmp, path) != 0) {
        saved = errno;
        (void)remove(tmp);
        return ZT_FAIL(err, ZT_ERR_IO, "memory snapshot: cannot rename %s to %s: %s", tmp, path, strerror(saved));
    }
    return ZT_OK;
}
