/* Vectorised exp and tanh over float arrays for the CPU kernels, from SLEEF
 * (libsleef: exp from its u10 functions, at most 1.0 ulp from the exact
 * result; tanh, which only GELU uses, from its u35 ones, at most 3.5 ulp
 * and 2% of a training step faster), dispatched by the CPU's ISA at run
 * time: AVX-512, AVX2 (with FMA), or SLEEF's scalar functions. A kernel's
 * results therefore do not depend on --threads, and may differ by those
 * bounds between machines of different ISAs. In place is allowed (y == x). */
#ifndef ZT_CPU_VMATH_H
#define ZT_CPU_VMATH_H

#include <stddef.h>

void zt_vexpf(float *y, const float *x, size_t n);
void zt_vtanhf(float *y, const float *x, size_t n);
/* Which implementation runs here: "avx512", "avx2" or "scalar". */
const char *zt_vmath_isa(void);

/* The ISA-specific bodies (vmath_avx2.c, vmath_avx512.c): whole vectors
 * only; they return how many leading elements they did. */
size_t zt_vexpf_avx2(float *y, const float *x, size_t n);
size_t zt_vtanhf_avx2(float *y, const float *x, size_t n);
size_t zt_vexpf_avx512(float *y, const float *x, size_t n);
size_t zt_vtanhf_avx512(float *y, const float *x, size_t n);

#endif
