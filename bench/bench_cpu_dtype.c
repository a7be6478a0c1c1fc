/* CPU kernel times by compute dtype at one transformer block's shapes: where
 * a bf16 or fp16 step's extra time goes on a CPU without 16-bit GEMMs.
 *   bench_cpu_dtype [B T C NH threads reps]   (default: B 8, T 128, C 256, NH 4, 1 thread)
 * Prints a Markdown table: kernel, milliseconds per call in fp32, bf16 and
 * fp16 (best of reps), and the 16-bit / fp32 ratios. Inputs are random
 * values stored in each dtype; nothing is checked here (test_ops_dtype
 * checks values). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zt_backend.h"
#include "zt_time.h"

typedef enum { K_LN_F, K_LN_B, K_QKV_F, K_QKV_B, K_ATT_F, K_ATT_B, K_GELU_F, K_GELU_B, K_COUNT } kernel_id;
static const char *names[K_COUNT] = {"layernorm_fwd", "layernorm_bwd", "matmul_fwd (qkv)", "matmul_bwd (qkv)",
                                     "attention_fwd", "attention_bwd", "gelu_fwd (4C)", "gelu_bwd (4C)"};

typedef struct {
    int B, T, C, NH;
    void *x, *y, *dx, *dy, *w, *b, *qkv, *dqkv, *att, *scratch; /* in the dtype */
    float *dw, *db, *mean, *rstd, *datt;                         /* fp32 */
} bufs;

static void *rand_buf(size_t n, zt_dtype dt, unsigned *seed) {
    void *p = malloc(n * 4 + 64);
    if (!p) exit(1);
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        zt_dtype_store(p, dt, i, ((float)(*seed >> 8) / 8388608.0f - 1.0f) * 0.5f);
    }
    return p;
}

static bufs make(int B, int T, int C, int NH, zt_dtype dt) {
    unsigned seed = 12345u;
    size_t N = (size_t)B * T, NC = N * C;
    bufs u;
    memset(&u, 0, sizeof u);
    u.B = B, u.T = T, u.C = C, u.NH = NH;
    u.x = rand_buf(4 * NC, dt, &seed), u.y = rand_buf(4 * NC, dt, &seed), u.dx = rand_buf(4 * NC, dt, &seed);
    u.dy = rand_buf(4 * NC, dt, &seed), u.w = rand_buf((size_t)3 * C * C, dt, &seed);
    u.b = rand_buf((size_t)3 * C, dt, &seed), u.qkv = rand_buf(3 * NC, dt, &seed);
    u.dqkv = rand_buf(3 * NC, dt, &seed), u.att = rand_buf((size_t)B * NH * T * T, dt, &seed);
    u.scratch = rand_buf(8 * NC, dt, &seed);
    u.dw = rand_buf((size_t)3 * C * C, ZT_FP32, &seed), u.db = rand_buf((size_t)3 * C, ZT_FP32, &seed);
    u.mean = rand_buf(N, ZT_FP32, &seed), u.rstd = rand_buf(N, ZT_FP32, &seed);
    u.datt = rand_buf((size_t)B * NH * T, ZT_FP32, &seed);
    return u;
}

static void release(bufs *u) {
    void *all[] = {u->x, u->y, u->dx, u->dy, u->w, u->b, u->qkv, u->dqkv, u->att, u->scratch,
                   u->dw, u->db, u->mean, u->rstd, u->datt};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

static void run(const zt_ops *o, zt_stream *s, kernel_id k, bufs *u, size_t elem) {
    int B = u->B, T = u->T, C = u->C, NH = u->NH, N = B * T;
    size_t NC = (size_t)N * C;
    switch (k) {
    case K_LN_F: o->layernorm_fwd(s, u->y, u->mean, u->rstd, u->x, u->w, u->b, N, C); break;
    case K_LN_B: o->layernorm_bwd(s, u->dx, u->dw, u->db, u->dy, u->x, u->w, u->mean, u->rstd, N, C); break;
    case K_QKV_F: o->matmul_fwd(s, u->qkv, u->x, u->w, u->b, N, C, 3 * C); break;
    case K_QKV_B: o->matmul_bwd(s, u->dx, u->dw, u->db, u->dqkv, u->x, u->w, N, C, 3 * C); break;
    case K_ATT_F: o->attention_fwd(s, u->y, u->att, u->qkv, B, T, C, NH); break;
    case K_ATT_B:
        o->attention_bwd(s, u->dqkv, u->datt, u->dy, u->qkv, u->att, B, T, C, NH, u->scratch, 8 * NC * elem);
        break;
    case K_GELU_F: o->gelu_fwd(s, u->y, u->x, NC * 4); break;
    case K_GELU_B: o->gelu_bwd(s, u->dx, u->x, u->dy, NC * 4); break;
    default: break;
    }
}

int main(int argc, char **argv) {
    int B = argc > 1 ? atoi(argv[1]) : 8, T = argc > 2 ? atoi(argv[2]) : 128, C = argc > 3 ? atoi(argv[3]) : 256;
    int NH = argc > 4 ? atoi(argv[4]) : 4, threads = argc > 5 ? atoi(argv[5]) : 1;
    int reps = argc > 6 ? atoi(argv[6]) : 5;
    if (B < 1 || T < 1 || C < 1 || NH < 1 || C % NH || threads < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_cpu_dtype [B T C NH threads reps] (C a multiple of NH)\n");
        return 2;
    }
    zt_backend *be;
    zt_error err = {0};
    if (zt_backend_create(ZT_DEVICE_CPU, threads, &be, &err) != ZT_OK) {
        fprintf(stderr, "bench_cpu_dtype: %s\n", err.msg);
        return 1;
    }
    zt_stream s = zt_backend_stream(be);
    double ms[ZT_NDTYPES][K_COUNT];
    for (int d = 0; d < ZT_NDTYPES; d++) {
        bufs u = make(B, T, C, NH, (zt_dtype)d);
        for (int k = 0; k < K_COUNT; k++) {
            run(be->ops_for[d], &s, (kernel_id)k, &u, zt_dtype_size((zt_dtype)d)); /* warm-up */
            double best = 1e30;
            for (int r = 0; r < reps; r++) {
                double t0 = zt_now_s();
                run(be->ops_for[d], &s, (kernel_id)k, &u, zt_dtype_size((zt_dtype)d));
                double t = zt_now_s() - t0;
                if (t < best) best = t;
            }
            ms[d][k] = best * 1e3;
        }
        release(&u);
    }
    printf("B %d, T %d, C %d, NH %d, %d thread(s), best of %d\n\n", B, T, C, NH, threads, reps);
    printf("| kernel | fp32 ms | bf16 ms | fp16 ms | bf16 / fp32 | fp16 / fp32 |\n|---|---:|---:|---:|---:|---:|\n");
    for (int k = 0; k < K_COUNT; k++)
        printf("| %s | %.3f | %.3f | %.3f | %.2f | %.2f |\n", names[k], ms[0][k], ms[1][k], ms[2][k],
               ms[1][k] / ms[0][k], ms[2][k] / ms[0][k]);
    zt_backend_destroy(be);
    return 0;
}
