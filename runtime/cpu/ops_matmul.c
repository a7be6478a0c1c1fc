/* Dense layers through OpenBLAS sgemm (weights stored [OC, C], as out = x W^T).
 * OpenBLAS runs single-threaded; the stream's OpenMP threads each multiply a
 * block of output rows. One thread pool instead of two: OpenBLAS's and
 * OpenMP's spinning workers fought over the cores and halved the speed. */
#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu_ops.h"

/* Rows [lo, hi) of n for thread `id` of `nt` (balanced, contiguous). */
static void split(int n, int id, int nt, int *lo, int *hi) {
    *lo = (int)((long)n * id / nt);
    *hi = (int)((long)n * (id + 1) / nt);
}

void zt_cpu_matmul_fwd(zt_stream *s, float *out, const float *inp, const float *w,
                       const float *bias, int N, int C, int OC) {
#pragma omp parallel num_threads(s->nthreads)
    {
        int lo, hi, id = 0, nt = 1;
#ifdef _OPENMP
        id = omp_get_thread_num();
        nt = omp_get_num_threads();
#endif
        split(N, id, nt, &lo, &hi);
        if (hi > lo) {
            float beta = 0.0f;
            if (bias) {
                for (int n = lo; n < hi; n++)
                    for (int o = 0; o < OC; o++) out[(size_t)n * OC + o] = bias[o];
                beta = 1.0f;
            }
            /* out[lo:hi, OC] = inp[lo:hi, C] @ w[OC,C]^T (+ bias) */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, hi - lo, OC, C, 1.0f, inp + (size_t)lo * C, C,
                        w, C, beta, out + (size_t)lo * OC, OC);
        }
    }
}

void zt_cpu_matmul_bwd(zt_stream *s, float *dinp, float *dw, float *dbias, const float *dout,
                       const float *inp, const float *w, int N, int C, int OC) {
#pragma omp parallel num_threads(s->nthreads)
    {
        int lo, hi, id = 0, nt = 1;
#ifdef _OPENMP
        id = omp_get_thread_num();
        nt = omp_get_num_threads();
#endif
        /* dinp[lo:hi, C] += dout[lo:hi, OC] @ w[OC,C] */
        split(N, id, nt, &lo, &hi);
        if (dinp && hi > lo)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, hi - lo, C, OC, 1.0f, dout + (size_t)lo * OC, OC,
                        w, C, 1.0f, dinp + (size_t)lo * C, C);
        /* dw[lo:hi, C] += dout[:, lo:hi]^T @ inp[N,C] */
        split(OC, id, nt, &lo, &hi);
        if (hi > lo)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, hi - lo, C, N, 1.0f, dout + lo, OC, inp, C, 1.0f,
                        dw + (size_t)lo * C, C);
        if (dbias)
            for (int o = lo; o < hi; o++) {
                float sum = 0.0f;
                for (int n = 0; n < N; n++) sum += dout[(size_t)n * OC + o];
                dbias[o] += sum;
            }
    }
}
