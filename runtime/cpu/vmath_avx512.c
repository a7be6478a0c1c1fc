/* vmath.h's AVX-512 bodies (this file is compiled with -mavx512f). */
#include <immintrin.h>
#include <sleef.h>

#include "vmath.h"

size_t zt_vexpf_avx512(float *y, const float *x, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, Sleef_expf16_u10avx512f(_mm512_loadu_ps(x + i)));
    return i;
}

size_t zt_vtanhf_avx512(float *y, const float *x, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, Sleef_tanhf16_u35avx512f(_mm512_loadu_ps(x + i)));
    return i;
}
