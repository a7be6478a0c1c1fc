/* The learning-rate schedules against DeepSpeed's (WarmupLR, WarmupDecayLR,
 * WarmupCosineLR as their classes compute them, with the scheduler stepped
 * after each optimizer step from iteration -1; values from a transcription
 * of those classes) and zerotrain's own warm-up + cosine. */
#include <math.h>

#include "test_util.h"
#include "zt_lr_schedule.h"

static void check_series(const char *name, const zt_lr_schedule *s, const int *steps, const double *want, int n) {
    for (int i = 0; i < n; i++) {
        double got = zt_lr_at(s, steps[i]);
        CHECK(fabs(got - want[i]) <= 1e-15 + 1e-12 * fabs(want[i]), "%s step %d: %.17g, want %.17g", name, steps[i],
              got, want[i]);
    }
}

int main(void) {
    static const int steps[] = {0, 1, 2, 3, 5, 10, 11, 20, 29};
    enum { N = sizeof steps / sizeof steps[0] };
    zt_lr_schedule warm = {.kind = ZT_LR_WARMUP, .lr = 3e-3, .warmup = 10, .warmup_min_lr = 1e-4};
    static const double warm_want[N] = {0.0001, 0.0001, 0.0009729869874255454, 0.0014836516386870211,
                                        0.002127013012574454, 0.003, 0.003, 0.003, 0.003};
    check_series("WarmupLR log", &warm, steps, warm_want, N);

    zt_lr_schedule decay = {.kind = ZT_LR_WARMUP_DECAY, .lr = 3e-3, .warmup = 10, .total_steps = 30,
                            .warmup_shape = ZT_WARMUP_LINEAR};
    static const double decay_want[N] = {0, 0, 0.0003, 0.0006, 0.0012, 0.0027, 0.003, 0.00165, 0.0003};
    check_series("WarmupDecayLR linear", &decay, steps, decay_want, N);

    zt_lr_schedule wcos = {.kind = ZT_LR_WARMUP_COSINE, .lr = 3e-3, .warmup = 10, .total_steps = 30,
                           .warmup_min_ratio = 0.1, .cos_min_ratio = 0.01};
    static const double wcos_want[N] = {0.0, 0.0003, 0.0011127809882927491, 0.0015882273877430887,
                                        0.002187219011707251, 0.003, 0.00298171718578378, 0.001515,
                                        4.828281421622057e-05};
    check_series("WarmupCosineLR log", &wcos, steps, wcos_want, N);

    /* zerotrain's: (s + 1) / warmup of the peak, then cosine to the floor at the last step. */
    zt_lr_schedule own = {.kind = ZT_LR_COSINE, .lr = 1.0, .warmup = 4, .total_steps = 14, .min_lr_frac = 0.1};
    CHECK(zt_lr_at(&own, 0) == 0.25 && zt_lr_at(&own, 3) == 1.0, "warm-up");
    CHECK(fabs(zt_lr_at(&own, 13) - 0.1) < 1e-15 && zt_lr_at(&own, 4) == 1.0, "cosine ends");

    zt_lr_kind k;
    CHECK(zt_lr_kind_parse("warmup-cosine", &k) && k == ZT_LR_WARMUP_COSINE, "parse");
    CHECK(!zt_lr_kind_parse("OneCycle", &k), "parse refuses");
    printf("%s: %ld checks, %d failures\n", __FILE__, g_checks, g_failures);
    return g_failures != 0;
}
