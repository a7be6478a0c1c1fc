/* What the C unit tests share: failure counting with file:line messages and a
 * small seeded PRNG (xorshift64*). Each test is one translation unit, so the
 * counters and the generator state are that test's own. */
#ifndef ZT_TEST_UTIL_H
#define ZT_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "zt_error.h"

static int g_failures = 0;
static long g_checks = 0;

/* Counts a check; on failure prints where and a printf-style message. */
#define CHECK(cond, ...)                                \
    do {                                                \
        g_checks++;                                     \
        if (!(cond)) {                                  \
            g_failures++;                               \
            printf("FAIL %s:%d: ", __FILE__, __LINE__); \
            printf(__VA_ARGS__);                        \
            printf("\n");                               \
        }                                               \
    } while (0)

/* A call that must succeed for the test to go on: on failure prints where,
 * the call, its status and ctxp's message (anything with an `err` member:
 * a zt_ctx, an engine's context), then exits. */
#define MUST(expr, ctxp)                                                                         \
    do {                                                                                         \
        zt_status must_st_ = (expr);                                                             \
        if (must_st_ != ZT_OK) {                                                                 \
            printf("FAIL %s:%d: %s: %s: %s\n", __FILE__, __LINE__, #expr, zt_status_name(must_st_), \
                   (ctxp)->err.msg);                                                             \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

/* Tests set their own seed (rng_state = ...) where they need another stream. */
static uint64_t rng_state = 0x243F6A8885A308D3ull;
static inline uint64_t rng_next(void) { /* xorshift64* */
    uint64_t x = rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * 0x2545F4914F6CDD1Dull;
}
/* Uniform in [lo, hi) with 24 bits. */
static inline float rng_uniform(float lo, float hi) {
    return lo + (hi - lo) * (float)((double)(rng_next() >> 40) / 16777216.0);
}

/* malloc that ends the test on failure (test code may exit). */
static inline void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "malloc(%zu) failed\n", bytes);
        exit(2);
    }
    return p;
}

#endif
