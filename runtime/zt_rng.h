/* Counter-style deterministic random numbers: a stream is keyed by integers
 * (seed, purpose, rank, step, ...) so any part of a run can be regenerated
 * without replaying the rest (resume, resharding, per-rank data). */
#ifndef ZT_RNG_H
#define ZT_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct {
    uint64_t state;
} zt_rng;

static inline uint64_t zt_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A stream keyed by four integers. */
static inline zt_rng zt_rng_keyed(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
    uint64_t x = a;
    uint64_t h = zt_splitmix64(&x);
    x = h ^ (b * 0xd1b54a32d192ed03ull);
    h = zt_splitmix64(&x);
    x = h ^ (c * 0xaef17502108ef2d9ull);
    h = zt_splitmix64(&x);
    x = h ^ (d * 0xf58bd2ec0b0a7d01ull);
    zt_rng r = {zt_splitmix64(&x)};
    return r;
}

static inline uint64_t zt_rng_u64(zt_rng *r) { return zt_splitmix64(&r->state); }

/* The stream as it is after n more draws of zt_rng_u64 (each draw adds
 * the same constant to the state), without making them. */
static inline void zt_rng_skip(zt_rng *r, uint64_t n) { r->state += n * 0x9e3779b97f4a7c15ull; }

/* Uniform in [0, 1) with 24 bits. */
static inline float zt_rng_uniform(zt_rng *r) { return (float)(zt_rng_u64(r) >> 40) * (1.0f / 16777216.0f); }
/* Uniform in [0, 1) with 53 bits. */
static inline double zt_rng_uniform_d(zt_rng *r) { return (double)(zt_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0); }

/* Uniform integer in [0, n). */
static inline uint32_t zt_rng_below(zt_rng *r, uint32_t n) { return (uint32_t)((zt_rng_u64(r) >> 32) * n >> 32); }

/* Standard normal (Box-Muller in double, one value per call, two draws:
 * skipping k values is zt_rng_skip(r, 2 k)). */
static inline float zt_rng_normal(zt_rng *r) {
    double u1 = zt_rng_uniform_d(r), u2 = zt_rng_uniform_d(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

#endif
