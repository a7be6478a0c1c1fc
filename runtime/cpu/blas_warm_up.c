/* zt_cpu_blas_warm_up (blas_warm_up.h). */
#include "blas_warm_up.h"

#include <cblas.h>
#include <stdlib.h>

/* Large enough for BLAS's packed path (small products skip the buffers). */
#define WARM_N 256

void zt_cpu_blas_warm_up(void) {
    float *a = calloc((size_t)WARM_N * WARM_N * 3, sizeof *a); /* A, B, C: [WARM_N, WARM_N] each */
    if (!a) return; /* nothing to watch then; the first training call maps them */
    float *b = a + (size_t)WARM_N * WARM_N, *c = b + (size_t)WARM_N * WARM_N;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, WARM_N, WARM_N, WARM_N, 1.0f, a, WARM_N, b, WARM_N, 0.0f,
                c, WARM_N);
    free(a);
}
