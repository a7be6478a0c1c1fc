/* Run-time dispatch of the vector math (vmath.h). */
#include "vmath.h"

#include <sleef.h>

typedef enum { VM_SCALAR, VM_AVX2, VM_AVX512 } vm_isa;

/* libgcc's detection also checks that the OS saves the YMM/ZMM state. */
static vm_isa best_isa(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return VM_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return VM_AVX2;
#endif
    return VM_SCALAR;
}

const char *zt_vmath_isa(void) {
    switch (best_isa()) {
    case VM_AVX512: return "avx512";
    case VM_AVX2: return "avx2";
    case VM_SCALAR: break;
    }
    return "scalar";
}

void zt_vexpf(float *y, const float *x, size_t n) {
    size_t done = 0;
    switch (best_isa()) {
    case VM_AVX512: done = zt_vexpf_avx512(y, x, n); break;
    case VM_AVX2: done = zt_vexpf_avx2(y, x, n); break;
    case VM_SCALAR: break;
    }
    for (size_t i = done; i < n; i++) y[i] = Sleef_expf_u10(x[i]);
}

void zt_vtanhf(float *y, const float *x, size_t n) {
    size_t done = 0;
    switch (best_isa()) {
    case VM_AVX512: done = zt_vtanhf_avx512(y, x, n); break;
    case VM_AVX2: done = zt_vtanhf_avx2(y, x, n); break;
    case VM_SCALAR: break;
    }
    for (size_t i = done; i < n; i++) y[i] = Sleef_tanhf_u35(x[i]);
}
