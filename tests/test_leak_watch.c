/* The leak watch (train/leak_watch.h) on made-up step-end samples: a part
 * that grows is named once, within the window, also from sparse samples;
 * noise, a cache that grows with allocated, a part not measured and a
 * window too short are not; bad settings are refused. */
#include <string.h>

#include "leak_watch.h"
#include "test_util.h"

#define KIB 1024.0

/* A sample whose parts are flat at 10 MiB plus noise of +-32 KiB. */
static zt_proc_sample flat_sample(int step) {
    zt_proc_sample s;
    memset(&s, 0, sizeof s);
    s.step = step;
    s.measured = (1u << ZT_NUM_PARTS) - 1;
    for (int p = 0; p < ZT_NUM_PARTS; p++)
        s.parts[p] = (size_t)(10 << 20) + (size_t)(rng_uniform(-32.0f, 32.0f) * KIB);
    return s;
}

/* Feeds steps [from, to] (every `every`-th) with `grow` bytes per step on
 * part `part` from step `onset` on (also on allocated when with_allocated);
 * returns the step the part was first named at (0: never) and the count. */
static int feed(zt_leak_watch *w, int from, int to, int every, int part, double grow, int onset, int with_allocated,
                int *named) {
    int first = 0;
    for (int step = from; step <= to; step += every) {
        zt_proc_sample s = flat_sample(step);
        if (step >= onset) {
            s.parts[part] += (size_t)(grow * (step - onset));
            if (with_allocated) s.parts[ZT_PART_ALLOCATOR_ALLOCATED] += (size_t)(grow * (step - onset));
        }
        zt_leak_warning out[ZT_LEAK_SERIES];
        int n = 0;
        zt_leak_watch_add(w, &s, out, &n);
        for (int i = 0; i < n; i++) {
            (*named)++;
            CHECK(out[i].series == part, "step %d named %s, not %s", step, zt_leak_series_name(out[i].series),
                  zt_leak_series_name(part));
            /* the window still holds flat steps from before the onset */
            CHECK(out[i].bytes_per_step > 64 * KIB && out[i].bytes_per_step < 1.2 * grow,
                  "rate %.0f, grown %.0f per step", out[i].bytes_per_step, grow);
            if (!first) first = step;
        }
    }
    return first;
}

static void check_named(int every) {
    zt_leak_watch w;
    zt_error err = {0};
    CHECK(zt_leak_watch_init(&w, 50, 64 * KIB, &err) == ZT_OK, "init: %s", err.msg);
    int named = 0;
    int at = feed(&w, 1, 400, every, ZT_PART_HEAP, 256 * KIB, 200, 0, &named);
    CHECK(at > 200 && at <= 300, "a heap growing 256 KiB/step from step 200 named at step %d (every %d)", at, every);
    CHECK(named == 1, "named %d times, once expected (every %d)", named, every);
    zt_leak_watch_destroy(&w);
}

static void check_quiet(int part, double grow, int with_allocated, const char *what) {
    zt_leak_watch w;
    zt_error err = {0};
    CHECK(zt_leak_watch_init(&w, 50, 64 * KIB, &err) == ZT_OK, "init: %s", err.msg);
    int named = 0;
    feed(&w, 1, 400, 1, part, grow, 1, with_allocated, &named);
    CHECK(named == 0, "%s: named %d times", what, named);
    zt_leak_watch_destroy(&w);
}

static void check_not_measured(void) {
    zt_leak_watch w;
    zt_error err = {0};
    CHECK(zt_leak_watch_init(&w, 20, 64 * KIB, &err) == ZT_OK, "init: %s", err.msg);
    int named = 0;
    for (int step = 1; step <= 100; step++) {
        zt_proc_sample s = flat_sample(step);
        s.measured &= ~(1u << ZT_PART_LIB_MPI);
        s.parts[ZT_PART_LIB_MPI] = (size_t)step << 20; /* garbage where not measured */
        zt_leak_warning out[ZT_LEAK_SERIES];
        int n = 0;
        zt_leak_watch_add(&w, &s, out, &n);
        named += n;
    }
    CHECK(named == 0, "a part not measured was named %d times", named);
    zt_leak_watch_destroy(&w);
}

static void check_refused(void) {
    zt_leak_watch w;
    zt_error err = {0};
    CHECK(zt_leak_watch_init(&w, 0, 64 * KIB, &err) == ZT_ERR_INVALID && strstr(err.msg, "window"),
          "window 0: %s", err.msg);
    zt_error_clear(&err);
    CHECK(zt_leak_watch_init(&w, 50, 0, &err) == ZT_ERR_INVALID && strstr(err.msg, "rate"), "rate 0: %s", err.msg);
    zt_error_clear(&err);
    CHECK(zt_leak_watch_init(&w, 50, -1, &err) == ZT_ERR_INVALID, "rate -1: %s", err.msg);
}

int main(void) {
    check_named(1);
    check_named(3); /* the sampling budget declines two step ends in three */
    check_named(7);
    check_quiet(ZT_PART_HEAP, 0, 0, "flat parts with noise");
    check_quiet(ZT_PART_HEAP, 32 * KIB, 0, "a heap growing below the rate");
    check_quiet(ZT_PART_ALLOCATOR_CACHED, 256 * KIB, 1, "a cache growing with allocated");
    check_quiet(ZT_PART_ALLOCATOR_ALLOCATED, 256 * KIB, 0, "allocated growing");
    check_not_measured();
    check_refused();
    {
        /* the cache growing while allocated stays flat is named */
        zt_leak_watch w;
        zt_error err = {0};
        CHECK(zt_leak_watch_init(&w, 50, 64 * KIB, &err) == ZT_OK, "init: %s", err.msg);
        int named = 0;
        int at = feed(&w, 1, 200, 1, ZT_PART_ALLOCATOR_CACHED, 128 * KIB, 50, 0, &named);
        CHECK(at > 50 && at <= 150, "a cache growing with allocated flat named at step %d", at);
        zt_leak_watch_destroy(&w);
    }
    printf("%s: %ld checks, %d failed\n", g_failures ? "FAIL" : "ok", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
