/* Unit test of zt_mem's CACHING and EXPANDABLE modes (runtime/mem_caching.c):
 *  - random sequences of allocations (64 bytes .. 24 MiB, every category)
 *    and frees, with and without max_split_size, keep the invariants of
 *    zt_mem_check after every call: each segment tiled exactly by its blocks
 *    in address order, no two free neighbours (frees coalesce), the free list
 *    exactly the free blocks, reserved the segments' bytes, allocated and the
 *    categories the live blocks' requests (also checked against a shadow
 *    count here);
 *  - no two live blocks overlap: each is filled with its own pattern, checked
 *    intact before it is freed;
 *  - pools: a request up to 1 MiB comes from a 2 MiB segment, one from 1 MiB
 *    to 10 MiB from a 20 MiB segment, a larger one from a segment of its own
 *    rounded to 2 MiB;
 *  - a refusal releases the wholly free segments and retries once;
 *  - a fragmentation OOM: free bytes inside the reserved segments exceed the
 *    request, no free block is as large, and the refusal says so; the same
 *    sequence succeeds in SIMPLE (its cache released) and EXPANDABLE (the
 *    granules under its holes unmapped) modes;
 *  - EXPANDABLE: the random walks keep its invariants too (live blocks on
 *    mapped granules, reserved the mapped granules' bytes);
 *  - the mode cannot change after the first allocation. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "zt_mem.h"

#define MIB ((size_t)1 << 20)

static void check_consistent(const zt_mem *m, const char *when) {
    char why[256] = "";
    int bad = zt_mem_check(m, why, sizeof why);
    CHECK(!bad, "%s: %s", when, why);
    if (bad) exit(1); /* the rest would only repeat it */
}

/* A size spread over both pools and past 10 MiB, mostly small. */
static size_t random_size(void) {
    uint64_t r = rng_next() % 100;
    if (r < 60) return 64 + rng_next() % (64 * 1024);
    if (r < 85) return 64 * 1024 + rng_next() % MIB;
    if (r < 97) return MIB + rng_next() % (9 * MIB);
    return 10 * MIB + rng_next() % (14 * MIB);
}

static void fill(zt_block *b, unsigned char v) { memset(b->ptr, v, b->requested_bytes); }
static int intact(const zt_block *b, unsigned char v) {
    const unsigned char *p = b->ptr;
    for (size_t i = 0; i < b->requested_bytes; i += 97)
        if (p[i] != v) return 0;
    return p[b->requested_bytes - 1] == v;
}

static void random_walk(zt_alloc_mode mode, size_t max_split, uint64_t seed) {
    enum { SLOTS = 64, STEPS = 3000 };
    rng_state = seed;
    zt_mem m;
    zt_error err = {0};
    zt_mem_init(&m, "device", zt_raw_allocator_cpu(), 0);
    CHECK(zt_mem_set_mode(&m, mode, max_split, &err) == ZT_OK, "set_mode: %s", err.msg);
    zt_block *slot[SLOTS] = {0};
    size_t shadow[ZT_NUM_CATEGORIES] = {0};
    for (int step = 0; step < STEPS; step++) {
        int i = (int)(rng_next() % SLOTS);
        if (slot[i]) {
            CHECK(intact(slot[i], (unsigned char)i), "step %d: block %d was overwritten", step, i);
            shadow[slot[i]->category] -= slot[i]->requested_bytes;
            zt_mem_free(&m, slot[i]);
            slot[i] = NULL;
        } else {
            zt_category cat = (zt_category)(rng_next() % ZT_NUM_CATEGORIES);
            size_t n = random_size();
            CHECK(zt_mem_alloc(&m, n, cat, "walk", &slot[i], &err) == ZT_OK, "step %d: %s", step, err.msg);
            if (!slot[i]) break;
            fill(slot[i], (unsigned char)i);
            shadow[cat] += n;
        }
        if (step % 7 == 0) check_consistent(&m, "random walk");
        for (int c = 0; step % 7 == 0 && c < ZT_NUM_CATEGORIES; c++)
            CHECK(m.by_category[c].current == shadow[c], "step %d: %s %zu, want %zu", step,
                  zt_category_name((zt_category)c), m.by_category[c].current, shadow[c]);
    }
    for (int i = 0; i < SLOTS; i++) zt_mem_free(&m, slot[i]);
    check_consistent(&m, "all freed");
    CHECK(m.allocated.current == 0, "allocated %zu after every free", m.allocated.current);
    zt_free_stats fs = zt_mem_free_stats(&m);
    CHECK(fs.free_blocks == fs.segments, "all freed: %zu free blocks in %zu segments (not coalesced)",
          fs.free_blocks, fs.segments);
    zt_mem_release_cache(&m);
    CHECK(m.reserved.current == 0, "release: %zu reserved", m.reserved.current);
    CHECK(mode == ZT_ALLOC_EXPANDABLE || m.segments == NULL, "release: segments left");
    check_consistent(&m, "released");
    zt_mem_destroy(&m);
    printf("ok %s random walk (max_split %zu MiB): %d steps, invariants after every 7th, coalesced when freed, "
           "released\n", zt_alloc_mode_name(mode), max_split / MIB, STEPS);
}

static void test_pools(void) {
    zt_mem m;
    zt_error err = {0};
    zt_mem_init(&m, "device", zt_raw_allocator_cpu(), 0);
    zt_mem_set_mode(&m, ZT_ALLOC_CACHING, 0, &err);
    zt_block *a, *b, *c, *d;
    zt_mem_alloc(&m, 1000, ZT_CAT_OTHER, "small", &a, &err);
    CHECK(m.reserved.current == 2 * MIB, "a 1000-byte request: reserved %zu, want one 2 MiB segment", m.reserved.current);
    zt_mem_alloc(&m, 3 * MIB, ZT_CAT_OTHER, "large", &b, &err);
    CHECK(m.reserved.current == 22 * MIB, "a 3 MiB request: reserved %zu, want + a 20 MiB segment", m.reserved.current);
    zt_mem_alloc(&m, 2 * MIB, ZT_CAT_OTHER, "large", &c, &err);
    CHECK(m.reserved.current == 22 * MIB && (char *)c->ptr == (char *)b->ptr + 3 * MIB,
          "a 2 MiB request: split from the 20 MiB segment right after the 3 MiB block");
    zt_mem_alloc(&m, 15 * MIB + 5, ZT_CAT_OTHER, "huge", &d, &err); /* the free 15 MiB is 5 bytes short */
    CHECK(m.reserved.current == 22 * MIB + 16 * MIB, "a 15 MiB request: reserved %zu, want + 16 MiB of its own",
          m.reserved.current);
    CHECK(zt_mem_set_mode(&m, ZT_ALLOC_SIMPLE, 0, &err) == ZT_ERR_INVALID, "the mode changed after allocations");
    check_consistent(&m, "pools");
    zt_mem_free(&m, b);
    zt_mem_free(&m, c);
    check_consistent(&m, "pools freed");
    zt_free_stats fs = zt_mem_free_stats(&m);
    CHECK(fs.largest_free == 20 * MIB, "the large segment's blocks coalesced: largest free %zu", fs.largest_free);
    zt_mem_free(&m, a);
    zt_mem_free(&m, d);
    zt_mem_destroy(&m);
    printf("ok caching pools: 2 MiB small segments, 20 MiB large ones, own segments from 10 MiB; splits and "
           "coalescing\n");
}

/* Under a 44 MiB cap: eight 5 MiB blocks (CACHING: from two 20 MiB large
 * segments), every other one freed: 20 MiB free in four 5 MiB holes. An
 * 8 MiB request then fails in CACHING as a fragmentation OOM (a third
 * segment would pass the cap); SIMPLE releases its cached blocks and
 * serves it, EXPANDABLE unmaps the 8 granules wholly inside the holes and
 * maps 4 at the segment's end. */
static void test_fragmentation_oom(void) {
    for (int mode = ZT_ALLOC_SIMPLE; mode <= ZT_ALLOC_EXPANDABLE; mode++) {
        const char *name = zt_alloc_mode_name((zt_alloc_mode)mode);
        zt_mem m;
        zt_error err = {0};
        zt_mem_init(&m, "device", zt_raw_allocator_cpu(), 44 * MIB);
        zt_mem_set_mode(&m, (zt_alloc_mode)mode, 0, &err);
        zt_block *blk[8] = {0};
        for (int i = 0; i < 8; i++) zt_mem_alloc(&m, 5 * MIB, ZT_CAT_ACTIVATIONS, "jittered", &blk[i], &err);
        for (int i = 0; i < 8; i += 2) zt_mem_free(&m, blk[i]);
        check_consistent(&m, "holes");
        zt_block *big = NULL;
        zt_status st = zt_mem_alloc(&m, 8 * MIB, ZT_CAT_ACTIVATIONS, "longer sequence", &big, &err);
        if (mode == ZT_ALLOC_CACHING) {
            CHECK(st == ZT_ERR_OOM && strstr(err.msg, "(a fragmentation OOM)") && strstr(err.msg, "caching allocator"),
                  "caching: want a fragmentation OOM, got %d: %s", (int)st, err.msg);
            zt_free_stats fs = zt_mem_free_stats(&m);
            CHECK(fs.free_bytes == 20 * MIB && fs.largest_free == 5 * MIB, "free %zu, largest %zu", fs.free_bytes,
                  fs.largest_free);
            if (st == ZT_ERR_OOM) printf("ok caching fragmentation OOM: %s\n", err.msg);
        } else {
            CHECK(st == ZT_OK, "%s: the 8 MiB request should be served: %s", name, err.msg);
            if (mode == ZT_ALLOC_EXPANDABLE)
                CHECK(m.reserved.current == 32 * MIB, "expandable: reserved %zu, want 40 - 16 unmapped + 8 MiB",
                      m.reserved.current);
            if (st == ZT_OK) printf("ok %s serves the same request (reserved %zu MiB)\n", name, m.reserved.current / MIB);
        }
        check_consistent(&m, "after the request");
        zt_mem_free(&m, big);
        for (int i = 1; i < 8; i += 2) zt_mem_free(&m, blk[i]);
        check_consistent(&m, "all freed");
        zt_mem_destroy(&m);
    }
}

/* Under a 17 MiB cap, a wholly free 2 MiB small segment stands in the way
 * of a 16 MiB one: the refusal releases it and the retry succeeds. */
static void test_release_and_retry(void) {
    zt_mem m;
    zt_error err = {0};
    zt_mem_init(&m, "device", zt_raw_allocator_cpu(), 17 * MIB);
    zt_mem_set_mode(&m, ZT_ALLOC_CACHING, 0, &err);
    zt_block *a, *b;
    zt_mem_alloc(&m, 100 * 1024, ZT_CAT_OTHER, "first", &a, &err); /* a 2 MiB small segment */
    zt_mem_free(&m, a);                                             /* wholly free, still reserved */
    CHECK(m.reserved.current == 2 * MIB, "reserved %zu, want the free small segment", m.reserved.current);
    CHECK(zt_mem_alloc(&m, 15 * MIB, ZT_CAT_OTHER, "second", &b, &err) == ZT_OK,
          "a refusal should release the free segment and retry: %s", err.msg);
    CHECK(m.reserved.current == 16 * MIB, "reserved %zu after the retry, want the 16 MiB segment alone",
          m.reserved.current);
    check_consistent(&m, "retry");
    zt_mem_free(&m, b);
    zt_mem_destroy(&m);
    printf("ok caching: a refusal releases free segments and retries once\n");
}

int main(void) {
    random_walk(ZT_ALLOC_CACHING, 0, 0x9E3779B97F4A7C15ull);
    random_walk(ZT_ALLOC_CACHING, 4 * MIB, 0xD1B54A32D192ED03ull);
    random_walk(ZT_ALLOC_EXPANDABLE, 0, 0x8CB92BA72F3D8DD7ull);
    test_pools();
    test_fragmentation_oom();
    test_release_and_retry();
    printf("%ld checks, %d failed\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
