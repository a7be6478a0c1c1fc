/* Unit test of the tracked allocator (zt_mem), zt_parse_size, zt_format_bytes
 * and zt_os_mem_read.
 *
 * Every counter is checked exactly, to the byte, against values worked out by
 * hand from the sequence of calls (round_bytes = 512):
 *  - per-category current/peak, allocated current/peak, alloc_count;
 *  - reserved = 512-rounded blocks, live or cached; freed blocks stay reserved,
 *    and a request whose rounded size is `need` reuses the SMALLEST cached
 *    block of size in [need, 2*need] (same pointer, system_allocs unchanged;
 *    allocated still counts the requested bytes, reserved the block's);
 *    a block more than twice the request is left in the cache; a sequence of
 *    jittered sizes stops growing reserved once its largest size has appeared;
 *    zt_mem_release_cache returns cached blocks;
 *  - phase peaks (zt_mem_set_phase) and window peaks (zt_mem_window_reset);
 *  - limit_bytes: refusal with ZT_ERR_OOM, a message naming the phase, the
 *    request and the "params=..." breakdown, counters unchanged; the cache is
 *    released before refusing; a request exactly at the limit succeeds;
 *  - a raw allocator that refuses: cache released and the request retried;
 *  - zt_mem_destroy returns every block (live or cached) to the raw allocator. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "zt_mem.h"

#define CHECK_EQ(got, want)                                                                       \
    do {                                                                                          \
        size_t got_ = (size_t)(got), want_ = (size_t)(want);                                      \
        CHECK(got_ == want_, "%s = %zu, want %zu", #got, got_, want_);                            \
    } while (0)

/* A raw allocator that counts what it hands out and can refuse past a capacity. */
typedef struct {
    size_t live_bytes, live_blocks, capacity; /* capacity 0: unlimited */
    size_t allocs, frees, refusals;
    struct {
        void *p;
        size_t bytes;
    } blocks[64];
} counting_raw;

static void *counting_alloc(void *ctx, size_t bytes) {
    counting_raw *c = ctx;
    if (c->capacity && c->live_bytes + bytes > c->capacity) {
        c->refusals++;
        return NULL;
    }
    int slot = -1;
    for (int i = 0; i < 64; i++)
        if (!c->blocks[i].p) {
            slot = i;
            break;
        }
    if (slot < 0) return NULL;
    void *p = aligned_alloc(64, bytes);
    if (!p) return NULL;
    c->blocks[slot].p = p;
    c->blocks[slot].bytes = bytes;
    c->live_bytes += bytes;
    c->live_blocks++;
    c->allocs++;
    return p;
}
static void counting_free(void *ctx, void *ptr) {
    counting_raw *c = ctx;
    for (int i = 0; i < 64; i++)
        if (c->blocks[i].p == ptr) {
            c->live_bytes -= c->blocks[i].bytes;
            c->live_blocks--;
            c->blocks[i].p = NULL;
            c->frees++;
            free(ptr);
            return;
        }
    printf("FAIL: raw free of a pointer the raw allocator never gave out (%p)\n", ptr);
    g_failures++;
}
static zt_raw_allocator counting_allocator(counting_raw *c) {
    zt_raw_allocator r = {.alloc = counting_alloc, .free = counting_free, .ctx = c};
    return r;
}

/* Allocates and checks the block: want_block is the size of the block expected
 * to serve the request (the 512-rounded request for a new block or an exact
 * cached fit, a larger cached block up to twice it under best fit). */
static zt_block *must_alloc_block(zt_mem *m, size_t bytes, zt_category cat, const char *label,
                                  size_t want_block) {
    zt_error err = {0};
    zt_block *b = NULL;
    zt_status st = zt_mem_alloc(m, bytes, cat, label, &b, &err);
    CHECK(st == ZT_OK && b, "zt_mem_alloc(%zu, %s, %s) failed: %d %s", bytes, zt_category_name(cat), label,
          (int)st, err.msg);
    if (b) {
        CHECK(((uintptr_t)b->ptr & 63u) == 0, "block for %s is not 64-byte aligned (%p)", label, b->ptr);
        CHECK(b->requested_bytes == bytes, "block %s requested_bytes %zu, want %zu", label, b->requested_bytes,
              bytes);
        size_t need = (bytes + 511) / 512 * 512;
        CHECK(want_block >= need && want_block <= 2 * need, "test bug: block %s want_block %zu outside [%zu, %zu]",
              label, want_block, need, 2 * need);
        CHECK(b->block_bytes == want_block, "block %s block_bytes %zu, want %zu", label, b->block_bytes,
              want_block);
        CHECK(b->category == cat && strcmp(b->label, label) == 0, "block %s has category %d label '%s'", label,
              (int)b->category, b->label);
        memset(b->ptr, 0xA5, bytes); /* the whole request is usable (ASan checks it) */
    }
    return b;
}
/* The request is served by a block of exactly its rounded size. */
static zt_block *must_alloc(zt_mem *m, size_t bytes, zt_category cat, const char *label) {
    return must_alloc_block(m, bytes, cat, label, (bytes + 511) / 512 * 512);
}

/* ---- counters, caching, reuse ------------------------------------------- */

static void test_counters(void) {
    counting_raw raw = {0};
    zt_mem m;
    zt_mem_init(&m, "device", counting_allocator(&raw), 0);
    CHECK(strcmp(m.space_name, "device") == 0, "space_name '%s'", m.space_name);
    CHECK_EQ(m.round_bytes, 512);

    zt_block *a = must_alloc(&m, 1000, ZT_CAT_PARAMS, "a"); /* block 1024 */
    void *a_ptr = a->ptr;
    zt_block *b = must_alloc(&m, 512, ZT_CAT_GRADS, "b");   /* block 512 */
    zt_block *c = must_alloc(&m, 1, ZT_CAT_ACTIVATIONS, "c"); /* block 512 */
    CHECK_EQ(m.by_category[ZT_CAT_PARAMS].current, 1000);
    CHECK_EQ(m.by_category[ZT_CAT_GRADS].current, 512);
    CHECK_EQ(m.by_category[ZT_CAT_ACTIVATIONS].current, 1);
    CHECK_EQ(m.allocated.current, 1513);
    CHECK_EQ(m.allocated.peak, 1513);
    CHECK_EQ(m.reserved.current, 2048);
    CHECK_EQ(m.reserved.peak, 2048);
    CHECK_EQ(m.system_allocs, 3);
    CHECK_EQ(m.alloc_count, 3);
    CHECK_EQ(raw.live_bytes, 2048);

    /* Free b: allocated drops, reserved stays (cached). */
    void *b_ptr = b->ptr;
    zt_mem_free(&m, b);
    CHECK_EQ(m.by_category[ZT_CAT_GRADS].current, 0);
    CHECK_EQ(m.by_category[ZT_CAT_GRADS].peak, 512);
    CHECK_EQ(m.allocated.current, 1001);
    CHECK_EQ(m.allocated.peak, 1513);
    CHECK_EQ(m.reserved.current, 2048);
    CHECK_EQ(raw.live_bytes, 2048);

    /* Same block size (512): the cached block comes back, no system call. */
    zt_block *d = must_alloc(&m, 300, ZT_CAT_ACTIVATIONS, "d");
    CHECK(d && d->ptr == b_ptr, "cached 512-byte block was not reused (%p vs %p)", d ? d->ptr : NULL, b_ptr);
    CHECK_EQ(m.system_allocs, 3);
    CHECK_EQ(m.alloc_count, 4);
    CHECK_EQ(m.reserved.current, 2048);
    CHECK_EQ(m.by_category[ZT_CAT_ACTIVATIONS].current, 301);
    CHECK_EQ(m.by_category[ZT_CAT_ACTIVATIONS].peak, 301);
    CHECK_EQ(m.allocated.current, 1301);
    CHECK_EQ(m.allocated.peak, 1513);

    /* Different block size (1536): a new system block, reserved grows. */
    zt_block *e = must_alloc(&m, 1025, ZT_CAT_OPTIMIZER, "e");
    CHECK_EQ(m.system_allocs, 4);
    CHECK_EQ(m.reserved.current, 3584);
    CHECK_EQ(m.reserved.peak, 3584);
    CHECK_EQ(m.allocated.current, 2326);
    CHECK_EQ(m.allocated.peak, 2326);

    zt_mem_free(&m, a);
    zt_mem_free(&m, c);
    zt_mem_free(&m, d);
    zt_mem_free(&m, e);
    zt_mem_free(&m, NULL); /* no-op */
    CHECK_EQ(m.allocated.current, 0);
    CHECK_EQ(m.allocated.peak, 2326);
    for (int k = 0; k < ZT_NUM_CATEGORIES; k++)
        CHECK(m.by_category[k].current == 0, "category %s current %zu after freeing all",
              zt_category_name((zt_category)k), m.by_category[k].current);
    CHECK_EQ(m.by_category[ZT_CAT_PARAMS].peak, 1000);
    CHECK_EQ(m.by_category[ZT_CAT_OPTIMIZER].peak, 1025);
    CHECK_EQ(m.by_category[ZT_CAT_WORKSPACE].peak, 0);
    CHECK_EQ(m.reserved.current, 3584); /* everything cached */
    CHECK(m.live == NULL, "live list not empty after freeing all");
    CHECK_EQ(raw.live_bytes, 3584);

    /* Cached now: 1536 (e), 512 (d, b's block), 512 (c), 1024 (a). Three
     * 512-byte requests: the two 512-byte blocks are exact fits and taken
     * first; the third takes a's 1024 block (1024 <= 2*512), not e's 1536
     * (more than twice 512), so no new system block is needed. */
    zt_block *f1 = must_alloc(&m, 200, ZT_CAT_WORKSPACE, "f1");
    zt_block *f2 = must_alloc(&m, 512, ZT_CAT_WORKSPACE, "f2");
    CHECK_EQ(m.system_allocs, 4);
    zt_block *f3 = must_alloc_block(&m, 511, ZT_CAT_WORKSPACE, "f3", 1024);
    CHECK(f3 && f3->ptr == a_ptr, "f3 did not reuse a's cached 1024-byte block (%p vs %p)", f3 ? f3->ptr : NULL,
          a_ptr);
    CHECK_EQ(m.system_allocs, 4);
    CHECK_EQ(m.reserved.current, 3584);
    CHECK(m.cached && m.cached->block_bytes == 1536 && m.cached->next == NULL,
          "only e's 1536-byte block should remain cached");
    CHECK_EQ(m.by_category[ZT_CAT_WORKSPACE].current, 1223); /* requested bytes, not block bytes */
    CHECK_EQ(m.allocated.current, 1223);
    zt_mem_free(&m, f1), zt_mem_free(&m, f2), zt_mem_free(&m, f3);

    zt_mem_release_cache(&m);
    CHECK_EQ(m.reserved.current, 0);
    CHECK_EQ(m.reserved.peak, 3584);
    CHECK(m.cached == NULL, "cache list not empty after release");
    CHECK_EQ(raw.live_bytes, 0);
    CHECK_EQ(raw.frees, 4);

    /* Bad requests: zero bytes, unknown category, overflow. */
    zt_error err = {0};
    zt_block *x = (zt_block *)&m; /* must be reset to NULL on failure */
    CHECK(zt_mem_alloc(&m, 0, ZT_CAT_OTHER, "zero", &x, &err) == ZT_ERR_INVALID && x == NULL,
          "zero-byte request not refused as invalid");
    zt_error_clear(&err);
    CHECK(zt_mem_alloc(&m, 8, ZT_NUM_CATEGORIES, "badcat", &x, &err) == ZT_ERR_INVALID && x == NULL,
          "unknown category not refused as invalid");
    zt_error_clear(&err);
    CHECK(zt_mem_alloc(&m, SIZE_MAX - 10, ZT_CAT_OTHER, "huge", &x, &err) == ZT_ERR_OOM && x == NULL,
          "SIZE_MAX-10 request not refused as OOM: %s", err.msg);
    CHECK_EQ(m.alloc_count, 8);
    CHECK_EQ(m.allocated.current, 0);

    /* Leaks: destroy returns live and cached blocks to the raw allocator. */
    must_alloc(&m, 5000, ZT_CAT_PARAMS, "leaked");
    zt_block *g = must_alloc(&m, 700, ZT_CAT_GRADS, "cached");
    zt_mem_free(&m, g);
    CHECK_EQ(raw.live_blocks, 2);
    zt_mem_destroy(&m);
    CHECK_EQ(raw.live_blocks, 0);
    CHECK_EQ(raw.live_bytes, 0);
    CHECK_EQ(raw.allocs, raw.frees);
    if (!g_failures) printf("ok counters: per-category, allocated, reserved, cache reuse, destroy\n");
}

/* ---- phase and window peaks --------------------------------------------- */

static void test_phases(void) {
    int before = g_failures;
    zt_mem m;
    zt_mem_init(&m, "device", zt_raw_allocator_cpu(), 0);
    CHECK(m.phase == ZT_PHASE_INIT, "initial phase %d", (int)m.phase);

    zt_block *params = must_alloc(&m, 4096, ZT_CAT_PARAMS, "params");
    CHECK_EQ(m.phase_peak[ZT_PHASE_INIT], 4096);

    zt_mem_set_phase(&m, ZT_PHASE_FORWARD);
    CHECK_EQ(m.phase_peak[ZT_PHASE_FORWARD], 4096); /* memory held at entry counts */
    zt_block *act1 = must_alloc(&m, 1000, ZT_CAT_ACTIVATIONS, "act1");
    zt_block *act2 = must_alloc(&m, 2000, ZT_CAT_ACTIVATIONS, "act2");
    zt_mem_free(&m, act1);
    CHECK_EQ(m.phase_peak[ZT_PHASE_FORWARD], 7096);

    zt_mem_set_phase(&m, ZT_PHASE_BACKWARD);
    CHECK_EQ(m.phase_peak[ZT_PHASE_BACKWARD], 6096);
    zt_block *grads = must_alloc(&m, 4096, ZT_CAT_GRADS, "grads");
    zt_mem_free(&m, act2);
    CHECK_EQ(m.phase_peak[ZT_PHASE_BACKWARD], 10192);

    zt_mem_set_phase(&m, ZT_PHASE_OPTIMIZER);
    /* Cached: 2048 (act2), 1024 (act1). A 512-byte request takes the 1024
     * block (<= 2*512); the 2048 block is more than twice it. */
    zt_block *opt = must_alloc_block(&m, 100, ZT_CAT_OPTIMIZER, "opt", 1024);
    zt_mem_free(&m, opt);
    CHECK_EQ(m.phase_peak[ZT_PHASE_OPTIMIZER], 8292);
    CHECK_EQ(m.phase_peak[ZT_PHASE_INIT], 4096);
    CHECK_EQ(m.phase_peak[ZT_PHASE_FORWARD], 7096);
    CHECK_EQ(m.allocated.peak, 10192);
    CHECK_EQ(m.by_category[ZT_CAT_ACTIVATIONS].peak, 3000);
    /* blocks: 4096 + 1024 + 2048 + 4096 (opt reused act1's 1024) */
    CHECK_EQ(m.reserved.current, 11264);
    CHECK_EQ(m.window_allocated_peak, 10192);
    CHECK_EQ(m.window_phase_peak[ZT_PHASE_BACKWARD], 10192);

    /* A new window: peaks restart from what is held now (8192 in optimizer). */
    zt_mem_window_reset(&m);
    CHECK_EQ(m.window_allocated_peak, 8192);
    CHECK_EQ(m.window_reserved_peak, 11264);
    CHECK_EQ(m.window_phase_peak[ZT_PHASE_OPTIMIZER], 8192);
    CHECK_EQ(m.window_phase_peak[ZT_PHASE_INIT], 0);
    CHECK_EQ(m.window_phase_peak[ZT_PHASE_FORWARD], 0);
    CHECK_EQ(m.window_phase_peak[ZT_PHASE_BACKWARD], 0);
    CHECK_EQ(m.window_cat_peak[ZT_CAT_PARAMS], 4096);
    CHECK_EQ(m.window_cat_peak[ZT_CAT_GRADS], 4096);
    CHECK_EQ(m.window_cat_peak[ZT_CAT_ACTIVATIONS], 0);
    CHECK_EQ(m.window_cat_peak[ZT_CAT_OPTIMIZER], 0);

    zt_mem_set_phase(&m, ZT_PHASE_FORWARD);
    CHECK_EQ(m.window_phase_peak[ZT_PHASE_FORWARD], 8192);
    zt_block *act3 = must_alloc(&m, 3500, ZT_CAT_ACTIVATIONS, "act3"); /* new 3584 block */
    zt_block *act4 = must_alloc(&m, 900, ZT_CAT_ACTIVATIONS, "act4");  /* cached 1024 (not 2048) */
    zt_mem_free(&m, act3);
    zt_mem_free(&m, act4);
    zt_mem_set_phase(&m, ZT_PHASE_BACKWARD);
    /* No 512 block exists; the cached 1024 block is the only one <= 2*512. */
    zt_block *act5 = must_alloc_block(&m, 10, ZT_CAT_ACTIVATIONS, "act5", 1024);
    zt_mem_free(&m, act5);

    CHECK_EQ(m.window_allocated_peak, 12592);
    CHECK_EQ(m.window_reserved_peak, 14848); /* 11264 + 3584 */
    CHECK_EQ(m.reserved.peak, 14848);
    CHECK_EQ(m.window_phase_peak[ZT_PHASE_FORWARD], 12592);
    CHECK_EQ(m.window_phase_peak[ZT_PHASE_BACKWARD], 8202);
    CHECK_EQ(m.window_phase_peak[ZT_PHASE_OPTIMIZER], 8192);
    CHECK_EQ(m.window_phase_peak[ZT_PHASE_INIT], 0);
    CHECK_EQ(m.window_cat_peak[ZT_CAT_ACTIVATIONS], 4400);
    CHECK_EQ(m.window_cat_peak[ZT_CAT_PARAMS], 4096);
    /* Whole-run peaks keep the earlier maxima. */
    CHECK_EQ(m.phase_peak[ZT_PHASE_FORWARD], 12592);
    CHECK_EQ(m.phase_peak[ZT_PHASE_BACKWARD], 10192);
    CHECK_EQ(m.by_category[ZT_CAT_ACTIVATIONS].peak, 4400);
    CHECK_EQ(m.allocated.peak, 12592);

    zt_mem_free(&m, params);
    zt_mem_free(&m, grads);
    zt_mem_destroy(&m);
    if (g_failures == before) printf("ok phase peaks and window peaks\n");
}

/* ---- best fit within [need, 2*need] -------------------------------------- */

/* Allocates bytes, expecting the cached block at want_ptr (of want_block bytes)
 * to come back without a system allocation. */
static zt_block *expect_reuse(zt_mem *m, size_t bytes, const char *label, void *want_ptr, size_t want_block) {
    size_t sys_before = m->system_allocs, reserved_before = m->reserved.current;
    zt_block *b = must_alloc_block(m, bytes, ZT_CAT_ACTIVATIONS, label, want_block);
    CHECK(b && b->ptr == want_ptr, "%s: cached %zu-byte block was not reused (%p vs %p)", label, want_block,
          b ? b->ptr : NULL, want_ptr);
    CHECK(m->system_allocs == sys_before, "%s: system_allocs %zu -> %zu on a reuse", label, sys_before,
          m->system_allocs);
    CHECK(m->reserved.current == reserved_before, "%s: reserved %zu -> %zu on a reuse", label, reserved_before,
          m->reserved.current);
    return b;
}

static int is_cached(const zt_mem *m, const void *ptr) {
    for (const zt_block *b = m->cached; b; b = b->next)
        if (b->ptr == ptr) return 1;
    return 0;
}

static void test_best_fit(void) {
    int before = g_failures;
    counting_raw raw = {0};
    zt_mem m;
    zt_mem_init(&m, "device", counting_allocator(&raw), 0);

    /* (1) A freed 1024-byte block serves a 600-byte request (600 rounds to
     * 1024, so this is an exact block fit), and also requests whose rounded
     * size is smaller, down to 512 (1024 == 2*512, the bound is inclusive).
     * allocated counts the request, reserved the block. */
    zt_block *k = must_alloc(&m, 1024, ZT_CAT_ACTIVATIONS, "k1024");
    void *k_ptr = k->ptr;
    zt_mem_free(&m, k);
    zt_block *r = expect_reuse(&m, 600, "r600", k_ptr, 1024);
    CHECK_EQ(m.allocated.current, 600);
    CHECK_EQ(m.by_category[ZT_CAT_ACTIVATIONS].current, 600);
    CHECK_EQ(m.reserved.current, 1024);
    zt_mem_free(&m, r);
    r = expect_reuse(&m, 300, "r300", k_ptr, 1024); /* need 512: 1024 <= 2*512 */
    CHECK_EQ(m.allocated.current, 300);
    zt_mem_free(&m, r);
    CHECK_EQ(m.system_allocs, 1);

    /* A 2048-byte block serves a 1100-byte request (need 1536; 2048 <= 3072). */
    zt_block *w = must_alloc(&m, 2048, ZT_CAT_ACTIVATIONS, "w2048"); /* new: 1024 < 2048 */
    void *w_ptr = w->ptr;
    CHECK_EQ(m.system_allocs, 2);
    zt_mem_free(&m, w);
    r = expect_reuse(&m, 1100, "r1100", w_ptr, 2048);
    CHECK_EQ(m.allocated.current, 1100);
    zt_mem_free(&m, r);
    zt_mem_release_cache(&m);
    CHECK_EQ(m.reserved.current, 0);
    CHECK_EQ(raw.live_bytes, 0);

    /* (2) A freed 4096-byte block is NOT reused for a 512-byte request (4096 >
     * 2*512): a new 512 block is taken and the 4096 block stays cached. The
     * same holds just over the bound: 1536 > 2*512. But a request of need
     * 2048 does take the 4096 block (4096 == 2*2048). */
    zt_block *big = must_alloc(&m, 4096, ZT_CAT_ACTIVATIONS, "big4096");
    void *big_ptr = big->ptr;
    zt_block *mid = must_alloc(&m, 1536, ZT_CAT_ACTIVATIONS, "mid1536");
    void *mid_ptr = mid->ptr;
    zt_mem_free(&m, big);
    zt_mem_free(&m, mid);
    CHECK_EQ(m.system_allocs, 4);
    CHECK_EQ(m.reserved.current, 5632);
    zt_block *small = must_alloc(&m, 512, ZT_CAT_ACTIVATIONS, "small512");
    CHECK(small && small->ptr != big_ptr && small->ptr != mid_ptr, "512-byte request took a block more than twice it");
    CHECK_EQ(m.system_allocs, 5);
    CHECK_EQ(m.reserved.current, 6144); /* 4096 + 1536 + 512 */
    CHECK_EQ(raw.live_bytes, 6144);
    CHECK(is_cached(&m, big_ptr) && is_cached(&m, mid_ptr), "the 4096 and 1536 blocks left the cache");
    r = expect_reuse(&m, 1600, "r1600", big_ptr, 4096); /* need 2048; 1536 too small */
    CHECK(is_cached(&m, mid_ptr), "the 1536 block left the cache");
    zt_mem_free(&m, small);
    zt_mem_free(&m, r);
    zt_mem_release_cache(&m);
    CHECK_EQ(raw.live_bytes, 0);

    /* (3) Among several cached blocks the smallest fitting one is chosen,
     * wherever it sits in the cache list. Blocks freed in the order 2048,
     * 1536, 3072, 1024 (the cache list, newest first: 1024, 3072, 1536, 2048).
     * Requests of 1100 bytes (need 1536, fit in [1536, 3072]) take 1536, then
     * 2048 (though 3072 comes first in the list), then 3072; the fourth
     * finds only 1024 (< 1536) and takes a new block; a 700-byte request
     * (need 1024) then gets the 1024 block. */
    size_t sizes[4] = {2048, 1536, 3072, 1024};
    void *ptrs[4];
    zt_block *blk[4];
    for (int i = 0; i < 4; i++) {
        blk[i] = must_alloc(&m, sizes[i], ZT_CAT_WORKSPACE, "set");
        ptrs[i] = blk[i]->ptr;
    }
    for (int i = 0; i < 4; i++) zt_mem_free(&m, blk[i]);
    CHECK_EQ(m.system_allocs, 9); /* k, w, big, mid, small, then these 4 */
    CHECK_EQ(m.reserved.current, 7680);
    zt_block *q1 = expect_reuse(&m, 1100, "q1", ptrs[1], 1536);
    zt_block *q2 = expect_reuse(&m, 1100, "q2", ptrs[0], 2048);
    zt_block *q3 = expect_reuse(&m, 1100, "q3", ptrs[2], 3072);
    zt_block *q4 = must_alloc(&m, 1100, ZT_CAT_WORKSPACE, "q4");
    CHECK(q4 && q4->ptr != ptrs[3], "q4 took the 1024 block");
    CHECK_EQ(m.system_allocs, 10);
    CHECK_EQ(m.reserved.current, 9216); /* 7680 + 1536 */
    zt_block *q5 = expect_reuse(&m, 700, "q5", ptrs[3], 1024);
    CHECK(m.cached == NULL, "cache not empty after every cached block was reused");
    CHECK_EQ(m.allocated.current, 4 * 1100 + 700);
    zt_mem_free(&m, q1), zt_mem_free(&m, q2), zt_mem_free(&m, q3), zt_mem_free(&m, q4), zt_mem_free(&m, q5);

    zt_mem_destroy(&m);
    CHECK_EQ(raw.live_blocks, 0);
    CHECK_EQ(raw.live_bytes, 0);
    CHECK_EQ(raw.allocs, 10);
    CHECK_EQ(raw.allocs, raw.frees);
    if (g_failures == before) printf("ok best fit: reuse up to 2x, none beyond, smallest fitting block chosen\n");
}

/* ---- jittered sizes stop growing reserved -------------------------------- */

/* 10 rounds, each allocating one buffer of a jittered size (within +-30% of
 * 100 KiB = 102400) and freeing it, as activations vary with sequence length.
 *
 * Bound: every size lies in [71680, 133120] = [0.7, 1.3] * 102400, and both
 * ends are multiples of 512, so every rounded request `need` and every block
 * lies there too; since 133120 <= 2 * 71680 = 143360, every cached block at
 * least as large as a request is at most twice it, so it fits. With one live
 * buffer per round, a system block is therefore taken exactly when the
 * rounded request exceeds every earlier one (a new running maximum), and
 *   reserved after round k = sum of the rounded running maxima up to k,
 * constant from the round where the largest size first appears.
 *
 * Sizes and their rounded blocks (512 * ceil(size/512)):
 *   round 1:  98000 ->  98304  new A (max)
 *   round 2: 120000 -> 120320  new B (max)
 *   round 3:  80000 ->  80384  A (smallest of A, B)
 *   round 4: 133000 -> 133120  new C (max; the largest size)
 *   round 5:  75000 ->  75264  A
 *   round 6: 110000 -> 110080  B
 *   round 7: 131000 -> 131072  C
 *   round 8:  72000 ->  72192  A
 *   round 9: 125000 -> 125440  C (B = 120320 is too small)
 *   round 10: 102400 -> 102400 B (A = 98304 is too small)
 * reserved: 98304, 218624, 218624, then 351744 (= A + B + C) from round 4 on.
 * Exact-size reuse would have taken 10 blocks, 1048576 bytes. */
static void test_jitter(void) {
    int before = g_failures;
    counting_raw raw = {0};
    zt_mem m;
    zt_mem_init(&m, "device", counting_allocator(&raw), 0);
    static const size_t sizes[10] = {98000, 120000, 80000, 133000, 75000, 110000, 131000, 72000, 125000, 102400};
    static const size_t blocks[10] = {98304, 120320, 98304, 133120, 98304, 120320, 133120, 98304, 133120, 120320};
    static const int which[10] = {0, 1, 0, 2, 0, 1, 2, 0, 2, 1}; /* A, B, C */
    static const size_t want_reserved[10] = {98304,  218624, 218624, 351744, 351744,
                                             351744, 351744, 351744, 351744, 351744};
    static const size_t want_sys[10] = {1, 2, 2, 3, 3, 3, 3, 3, 3, 3};
    void *abc[3] = {NULL, NULL, NULL};
    size_t reserved_at_max = 0;
    for (int i = 0; i < 10; i++) {
        char label[24]; /* "round" and any int */
        snprintf(label, sizeof label, "round%d", i + 1);
        zt_block *b = must_alloc_block(&m, sizes[i], ZT_CAT_ACTIVATIONS, label, blocks[i]);
        if (!b) continue;
        if (!abc[which[i]]) abc[which[i]] = b->ptr; /* first use: a new block */
        else
            CHECK(b->ptr == abc[which[i]], "%s did not reuse block %c", label, 'A' + which[i]);
        CHECK(m.reserved.current == want_reserved[i], "%s: reserved %zu, want %zu", label, m.reserved.current,
              want_reserved[i]);
        CHECK(m.system_allocs == want_sys[i], "%s: system_allocs %zu, want %zu", label, m.system_allocs,
              want_sys[i]);
        if (i == 3) reserved_at_max = m.reserved.current; /* round 4: 133000 first appears */
        zt_mem_free(&m, b);
    }
    CHECK_EQ(m.reserved.current, reserved_at_max);
    CHECK_EQ(m.reserved.current, 98304 + 120320 + 133120);
    CHECK_EQ(m.reserved.peak, 351744);
    CHECK_EQ(m.allocated.current, 0);
    CHECK_EQ(m.allocated.peak, 133000);
    CHECK_EQ(m.alloc_count, 10);
    CHECK_EQ(raw.allocs, 3);
    CHECK_EQ(raw.live_bytes, 351744);
    zt_mem_destroy(&m);
    CHECK_EQ(raw.live_bytes, 0);
    CHECK_EQ(raw.allocs, raw.frees);
    if (g_failures == before) printf("ok jittered sizes: reserved stops at %zu after the largest size\n", reserved_at_max);
}

/* ---- the limit ----------------------------------------------------------- */

static void test_limit(void) {
    int before = g_failures;
    counting_raw raw = {0};
    zt_mem m;
    zt_mem_init(&m, "device", counting_allocator(&raw), 4096);
    zt_mem_set_phase(&m, ZT_PHASE_BACKWARD);
    zt_block *p = must_alloc(&m, 2000, ZT_CAT_PARAMS, "wte");  /* 2048 */
    zt_block *g = must_alloc(&m, 1000, ZT_CAT_GRADS, "dwte");  /* 1024 */

    zt_error err = {0};
    zt_block *b = NULL;
    zt_status st = zt_mem_alloc(&m, 1500, ZT_CAT_ACTIVATIONS, "ln1_out", &b, &err); /* 1536: 4608 > 4096 */
    CHECK(st == ZT_ERR_OOM && err.code == ZT_ERR_OOM && b == NULL, "over-limit request: status %d code %d",
          (int)st, (int)err.code);
    CHECK(strstr(err.msg, "backward") != NULL, "OOM message lacks the phase name: %s", err.msg);
    CHECK(strstr(err.msg, "1500") != NULL, "OOM message lacks the requested bytes: %s", err.msg);
    CHECK(strstr(err.msg, "params=2000") != NULL, "OOM message lacks the params= breakdown: %s", err.msg);
    CHECK(strstr(err.msg, "grads=1000") != NULL, "OOM message lacks the grads= breakdown: %s", err.msg);
    CHECK(strstr(err.msg, "ln1_out") != NULL, "OOM message lacks the label: %s", err.msg);
    printf("  OOM message: %s\n", err.msg);
    /* A refusal changes nothing. */
    CHECK_EQ(m.allocated.current, 3000);
    CHECK_EQ(m.reserved.current, 3072);
    CHECK_EQ(m.alloc_count, 2);
    CHECK_EQ(m.system_allocs, 2);
    CHECK_EQ(m.by_category[ZT_CAT_ACTIVATIONS].current, 0);
    CHECK_EQ(m.by_category[ZT_CAT_ACTIVATIONS].peak, 0);

    /* Exactly at the limit is allowed. */
    zt_block *full = must_alloc(&m, 1024, ZT_CAT_ACTIVATIONS, "exact");
    CHECK_EQ(m.reserved.current, 4096);
    zt_mem_free(&m, full);
    zt_mem_free(&m, p);
    zt_mem_free(&m, g);
    zt_mem_destroy(&m);
    CHECK_EQ(raw.live_bytes, 0);

    /* The cache is released before refusing: limit 1024, A (512) freed and
     * cached, then B of a larger size (1024; A's block is too small to serve
     * it) fits only once A's block is gone. */
    counting_raw raw2 = {0};
    zt_mem_init(&m, "device", counting_allocator(&raw2), 1024);
    zt_block *a = must_alloc(&m, 512, ZT_CAT_ACTIVATIONS, "A");
    zt_mem_free(&m, a);
    CHECK_EQ(m.reserved.current, 512);
    zt_block *bb = must_alloc(&m, 1000, ZT_CAT_ACTIVATIONS, "B");
    CHECK(bb != NULL, "B was refused although releasing the cache makes room");
    CHECK_EQ(m.reserved.current, 1024);
    CHECK_EQ(m.system_allocs, 2);
    CHECK(m.cached == NULL, "A's block still cached");
    CHECK_EQ(raw2.live_bytes, 1024);
    CHECK_EQ(raw2.frees, 1);
    /* Now nothing more fits; the refusal message says so with the limit. */
    zt_error_clear(&err);
    st = zt_mem_alloc(&m, 1, ZT_CAT_OTHER, "one", &b, &err);
    CHECK(st == ZT_ERR_OOM, "allocation beyond a full limit succeeded");
    CHECK(strstr(err.msg, "init") != NULL, "OOM message lacks phase 'init': %s", err.msg);
    zt_mem_free(&m, bb);
    zt_mem_destroy(&m);
    CHECK_EQ(raw2.live_bytes, 0);

    /* No limit, but the system refuses: the cache is released and the request
     * retried; a final refusal says "system refused". */
    counting_raw raw3 = {.capacity = 2048};
    zt_mem_init(&m, "host", counting_allocator(&raw3), 0);
    zt_block *c1 = must_alloc(&m, 1024, ZT_CAT_COMM_BUFFERS, "c1");
    zt_mem_free(&m, c1);
    zt_block *c2 = must_alloc(&m, 2048, ZT_CAT_COMM_BUFFERS, "c2"); /* raw refuses once, then fits */
    CHECK_EQ(raw3.refusals, 1);
    CHECK_EQ(m.reserved.current, 2048);
    CHECK_EQ(m.system_allocs, 2);
    zt_error_clear(&err);
    st = zt_mem_alloc(&m, 512, ZT_CAT_COMM_BUFFERS, "c3", &b, &err);
    CHECK(st == ZT_ERR_OOM && b == NULL, "system refusal not reported as OOM (%d)", (int)st);
    CHECK(strstr(err.msg, "host") && strstr(err.msg, "system refused") && strstr(err.msg, "comm_buffers=2048"),
          "system-refusal message: %s", err.msg);
    CHECK_EQ(m.reserved.current, 2048);
    zt_mem_free(&m, c2);
    zt_mem_destroy(&m);
    CHECK_EQ(raw3.live_bytes, 0);
    if (g_failures == before) printf("ok limit: OOM status and message, cache released before refusing\n");
}

/* ---- sizes and the OS view ----------------------------------------------- */

static void test_parse_size(void) {
    int before = g_failures;
    static const struct {
        const char *s;
        size_t want;
    } good[] = {
        {"512MiB", 536870912u},
        {"4GiB", 4294967296u},
        {"1.5GB", 1500000000u},
        {"123", 123u},
        {"0", 0u},
        {"1KiB", 1024u},
        {"1KB", 1000u},
        {"2TiB", 2199023255552u},
        {"3MB", 3000000u},
        {"64B", 64u},
        {"1.5KiB", 1536u},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        zt_error err = {0};
        size_t out = 7;
        zt_status st = zt_parse_size(good[i].s, &out, &err);
        CHECK(st == ZT_OK && out == good[i].want, "zt_parse_size(\"%s\") = %d, %zu; want ok, %zu (%s)", good[i].s,
              (int)st, out, good[i].want, err.msg);
    }
    static const char *const bad[] = {"abc", "12XB", "-5", "", "MiB", "5 MiBs", "nan", "inf", "-1GiB"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        zt_error err = {0};
        size_t out = 7;
        zt_status st = zt_parse_size(bad[i], &out, &err);
        CHECK(st == ZT_ERR_INVALID && err.code == ZT_ERR_INVALID && err.msg[0] != '\0',
              "zt_parse_size(\"%s\") was accepted (status %d, out %zu)", bad[i], (int)st, out);
    }
    {
        zt_error err = {0};
        size_t out = 0;
        CHECK(zt_parse_size(NULL, &out, &err) == ZT_ERR_INVALID, "zt_parse_size(NULL) accepted");
    }

    char buf[32];
    zt_format_bytes(100, buf, sizeof buf);
    CHECK(strcmp(buf, "100 B") == 0, "zt_format_bytes(100) = '%s'", buf);
    zt_format_bytes(1536, buf, sizeof buf);
    CHECK(strcmp(buf, "1.50 KiB") == 0, "zt_format_bytes(1536) = '%s'", buf);
    zt_format_bytes(536870912u, buf, sizeof buf);
    CHECK(strcmp(buf, "512.00 MiB") == 0, "zt_format_bytes(512MiB) = '%s'", buf);
    if (g_failures == before) printf("ok zt_parse_size and zt_format_bytes\n");
}

static void test_os_mem(void) {
    int before = g_failures;
    zt_os_mem os;
    zt_error err = {0};
    zt_status st = zt_os_mem_read(&os, &err);
    CHECK(st == ZT_OK, "zt_os_mem_read: %s", err.msg);
    CHECK(os.vm_rss > 0, "vm_rss is 0");
    CHECK(os.vm_hwm >= os.vm_rss, "vm_hwm %zu < vm_rss %zu", os.vm_hwm, os.vm_rss);
    if (g_failures == before) printf("ok zt_os_mem_read: vm_rss %zu, vm_hwm %zu\n", os.vm_rss, os.vm_hwm);
}

int main(void) {
    test_counters();
    test_phases();
    test_best_fit();
    test_jitter();
    test_limit();
    test_parse_size();
    test_os_mem();
    if (g_failures) printf("%d failed\n", g_failures);
    return g_failures ? 1 : 0;
}
