/* vmath.h's AVX2 bodies (this file is compiled with -mavx2 -mfma). */
#include <immintrin.h>
#include <sleef.h>

#include "vmath.h"

size_t zt_vexpf_avx2(float *y, const float *x, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, Sleef_expf8_u10avx2(_mm256_loadu_ps(x + i)));
    return i;
}

size_t zt_vtanhf_avx2(float *y, const float *x, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, Sleef_tanhf8_u35avx2(_mm256_loadu_ps(x + i)));
    return i;
}
