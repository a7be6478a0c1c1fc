/* The CPU's single-thread sgemm peak (OpenBLAS, as the CPU backend calls it):
 * GFLOP/s, best of 5, for GPT-2 small's GEMM shapes (tokens x in x out).
 *   bench_sgemm [tokens]     (default 1024)
 * Prints one line per shape and, last, "peak GFLOP/s: X" (the best). */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include "zt_time.h"

static double best_gflops(int M, int K, int N) {
    float *a = malloc(sizeof(float) * (size_t)M * K), *b = malloc(sizeof(float) * (size_t)K * N);
    float *c = calloc((size_t)M * N, sizeof(float));
    if (!a || !b || !c) {
        fprintf(stderr, "bench_sgemm: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < (size_t)M * K; i++) a[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < (size_t)K * N; i++) b[i] = (float)(i % 5) * 0.1f;
    double best = 0.0;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = zt_now_s();
        /* out = x W^T, as matmul_fwd multiplies */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
        double g = 2.0 * M * N * K / (zt_now_s() - t0) / 1e9;
        if (g > best) best = g;
    }
    free(a);
    free(b);
    free(c);
    return best;
}

int main(int argc, char **argv) {
    int tokens = argc > 1 ? atoi(argv[1]) : 1024;
    openblas_set_num_threads(1);
    static const int shapes[][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};
    double peak = 0.0;
    for (int i = 0; i < 4; i++) {
        double g = best_gflops(tokens, shapes[i][0], shapes[i][1]);
        printf("sgemm %dx%dx%d: %.1f GFLOP/s\n", tokens, shapes[i][0], shapes[i][1], g);
        if (g > peak) peak = g;
    }
    printf("peak GFLOP/s: %.1f\n", peak);
    return 0;
}
