/* Stochastic rounding to bf16 (runtime/zt_sround.h, ops->cast_sr on the CPU
 * backend), what --master-dtype none and --optim-state-dtype bf16 rest on:
 *   unbiased: for values between two bf16 neighbours (and exact ones), the
 *     mean of n = 65536 roundings (each with its own key: another update
 *     count) is within 5 ulp / (2 sqrt(n)) + 2^-16 ulp of the value (ulp:
 *     the bf16 spacing there; the first term is 5 standard deviations of
 *     the mean of n draws of at most one ulp apart);
 *   rank-independent: one call over [0, N) gives the bits of calls over
 *     any split of it with the matching first index (what makes every
 *     stage and world size round alike), and 1 and 3 threads agree;
 *   keyed: another seed, count or tensor changes the result; the same key
 *     twice does not;
 *   special values: exact bf16 values, zeros, infinities and NaN keep
 *     their value (NaN stays NaN); the largest finite fp32 may round to inf. */
#include <math.h>
#include <string.h>

#include "test_util.h"
#include "zt_backend.h"
#include "zt_sround.h"

static float bf16_to_f32(uint16_t h) {
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* The bf16 spacing at |x| (x finite, nonzero). */
static double ulp_at(float x) {
    int e;
    frexp(fabs((double)x), &e);
    return ldexp(1.0, e - 8); /* 8 significant bits */
}

static void check_unbiased(void) {
    const float xs[] = {1.0f + 1.0f / 1024.0f, -3.14159265f, 1e-3f, 0.1f + 3e-9f, 65504.5f, 1.5f, -2.0f / 3.0f};
    const size_t n = 65536;
    for (size_t k = 0; k < sizeof xs / sizeof xs[0]; k++) {
        double sum = 0.0;
        for (size_t c = 0; c < n; c++) {
            zt_sr_key key = {7, c, zt_sr_tensor(1, 0), 12345};
            sum += bf16_to_f32(zt_bf16_sround(xs[k], zt_sr_bits(&key, 12345)));
        }
        double mean = sum / (double)n, ulp = ulp_at(xs[k]), bound = 5.0 * ulp / (2.0 * sqrt((double)n)) + ulp / 65536.0;
        CHECK(fabs(mean - xs[k]) <= bound, "x = %.9g: mean of %zu roundings %.9g, off by %.3g > %.3g", (double)xs[k], n,
              mean, fabs(mean - xs[k]), bound);
    }
}

static void check_split(const zt_ops *ops, zt_stream *s1, zt_stream *s3) {
    enum { N = 1000 };
    static float src[N];
    static uint16_t whole[N], parts[N], threaded[N];
    for (int i = 0; i < N; i++) src[i] = rng_uniform(-4.0f, 4.0f);
    zt_sr_key key = {42, 3, zt_sr_tensor(5, 2), 100};
    ops->cast_sr(s1, whole, src, N, key);
    ops->cast_sr(s3, threaded, src, N, key);
    const size_t cuts[] = {0, 1, 17, 333, 334, 900, N};
    for (size_t c = 0; c + 1 < sizeof cuts / sizeof cuts[0]; c++) {
        zt_sr_key part = key;
        part.first = key.first + cuts[c];
        ops->cast_sr(s1, parts + cuts[c], src + cuts[c], cuts[c + 1] - cuts[c], part);
    }
    CHECK(memcmp(whole, parts, sizeof whole) == 0, "a split changes the rounding");
    CHECK(memcmp(whole, threaded, sizeof whole) == 0, "3 threads round otherwise than 1");
    uint16_t again[N], other[N];
    ops->cast_sr(s1, again, src, N, key);
    CHECK(memcmp(whole, again, sizeof whole) == 0, "the same key rounds otherwise twice");
    zt_sr_key keys[3] = {key, key, key};
    keys[0].seed++, keys[1].count++, keys[2].tensor++;
    for (int k = 0; k < 3; k++) {
        ops->cast_sr(s1, other, src, N, keys[k]);
        CHECK(memcmp(whole, other, sizeof whole) != 0, "changing part %d of the key changes nothing", k);
    }
}

static void check_special(void) {
    zt_sr_key key = {1, 1, 0, 0};
    const float exact[] = {0.0f, -0.0f, 1.0f, -2.5f, INFINITY, -INFINITY, 3.0e38f};
    for (size_t k = 0; k < sizeof exact / sizeof exact[0]; k++) {
        uint32_t b;
        memcpy(&b, &exact[k], sizeof b);
        if (b & 0xffffu) continue; /* 3.0e38 is not a bf16 value: covered below */
        for (uint64_t i = 0; i < 64; i++) {
            uint16_t h = zt_bf16_sround(exact[k], zt_sr_bits(&key, i));
            CHECK(h == (uint16_t)(b >> 16), "an exact value %g rounded to %g", (double)exact[k], (double)bf16_to_f32(h));
        }
    }
    for (uint64_t i = 0; i < 64; i++) {
        CHECK(isnan(bf16_to_f32(zt_bf16_sround(NAN, zt_sr_bits(&key, i)))), "NaN rounded to a number");
        float big = bf16_to_f32(zt_bf16_sround(3.4028235e38f, zt_sr_bits(&key, i)));
        CHECK(big == 3.3895314e38f || isinf(big), "FLT_MAX rounded to %g", (double)big);
    }
}

int main(void) {
    zt_backend *be = NULL;
    zt_error err = {0};
    if (zt_backend_cpu_create(1, &be, &err) != ZT_OK) {
        printf("FAIL: zt_backend_cpu_create: %s\n", err.msg);
        return 1;
    }
    zt_stream s1 = zt_backend_stream(be), s3 = s1;
    s3.nthreads = 3;
    check_unbiased();
    check_split(be->ops, &s1, &s3);
    check_special();
    zt_backend_destroy(be);
    printf("%ld checks, %d failures\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
