/* Stochastic rounding of fp32 to bf16, for state kept without an fp32
 * copy (--master-dtype none, --optim-state-dtype bf16): a value between two
 * bf16 neighbours rounds up with probability equal to its distance from
 * the lower one, so E[round(x)] = x and an update smaller than half a bf16
 * step still moves the value on average, where rounding to nearest would
 * drop it every time.
 *
 * The random bits are a hash of (seed, count, tensor, index): the run's
 * seed, the applied-update count, which tensor (a unit's params or one of
 * its optimizer slots) and the element's index in its unit. None of these
 * depends on the rank, the world size or where a slice starts, so every
 * stage and world size rounds an element alike, and a resumed run (at any
 * world size) continues with the bits it would have drawn. */
#ifndef ZT_SROUND_H
#define ZT_SROUND_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define ZT_SR_HD __host__ __device__
#else
#define ZT_SR_HD
#endif

typedef struct {
    uint64_t seed;   /* the run's seed */
    uint64_t count;  /* applied updates so far, this one included */
    uint32_t tensor; /* zt_sr_tensor: which tensor of which unit */
    uint64_t first;  /* the unit index of the first element rounded */
} zt_sr_key;

/* A unit's tensors: its params (kind 0) and optimizer slots (1 + slot). */
static inline ZT_SR_HD uint32_t zt_sr_tensor(int unit, int kind) { return (uint32_t)unit * 8u + (uint32_t)kind; }

static inline ZT_SR_HD uint64_t zt_sr_mix(uint64_t z) { /* splitmix64's finalizer */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* 16 random bits for element `index` of the keyed tensor. */
static inline ZT_SR_HD uint32_t zt_sr_bits(const zt_sr_key *k, uint64_t index) {
    uint64_t h = zt_sr_mix(k->seed ^ 0x9e3779b97f4a7c15ull);
    h = zt_sr_mix(h ^ k->count);
    h = zt_sr_mix(h ^ ((uint64_t)k->tensor << 40) ^ index);
    return (uint32_t)(h >> 48);
}

/* x rounded to bf16 with random bits r (16 of them): NaN stays NaN;
 * finite values beyond the largest bf16 may round to infinity. */
static inline ZT_SR_HD uint16_t zt_bf16_sround(float x, uint32_t r) {
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    if ((b & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((b >> 16) | 0x40u); /* quiet NaN */
    if ((b & 0x7fffffffu) == 0x7f800000u) return (uint16_t)(b >> 16);          /* infinity */
    b += r & 0xffffu; /* carries into the kept bits with probability (low bits) / 2^16 */
    return (uint16_t)(b >> 16);
}

#endif
