/* Per-kernel GPU times at one transformer block's shapes, so a GPU session
 * sees at once where a step's time goes (which kernels to make faster next).
 *   bench_kernels [B T C NH V reps]     (default: GPT-2 small, B 8, T 1024, V 256)
 * Prints a Markdown table: kernel, milliseconds per call (mean over reps,
 * timed with CUDA events on the backend's stream), and for the GEMM-shaped
 * ones the TFLOP/s they reach. Inputs are random; nothing is checked here
 * (tests/test_cuda_ops checks values). fp32 and the bf16 GEMM mode are both
 * timed for matmul and attention. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ops.h"

static zt_backend *g_be;
static zt_stream g_s;

static void die(const char *what, const zt_error *err) {
    fprintf(stderr, "bench_kernels: %s: %s\n", what, err ? err->msg : "failed");
    exit(1);
}

/* A device buffer of n floats filled with values in [-1, 1). */
static float *dev_rand(size_t n, unsigned *seed) {
    float *h = malloc(n * sizeof(float)), *d = NULL;
    if (!h || cudaMalloc((void **)&d, n * sizeof(float)) != cudaSuccess) die("allocation", NULL);
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        h[i] = (float)(*seed >> 8) / 8388608.0f - 1.0f;
    }
    cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice);
    free(h);
    return d;
}

typedef enum {
    K_EMB_F, K_EMB_B, K_LN_F, K_LN_B, K_QKV_F, K_QKV_B, K_ATT_F, K_ATT_B_GEMM, K_ATT_B_ROWS,
    K_ATT_FUSED_F, K_ATT_FUSED_B, K_GELU_F, K_GELU_B, K_XENT_F, K_XENT_B, K_ADAMW, K_COUNT
} kernel_id;

typedef struct {
    int B, T, C, NH, V;
    float *x, *y, *dx, *dy, *w, *b, *dw, *db, *mean, *rstd, *qkv, *dqkv, *att, *datt, *scratch, *logits, *m, *v;
    int32_t *tok;
} bufs;

static void run(kernel_id k, bufs *u) {
    int B = u->B, T = u->T, C = u->C, NH = u->NH, V = u->V, N = B * T;
    const zt_ops *o = g_be->ops;
    switch (k) {
    case K_EMB_F: o->embedding_fwd(&g_s, u->x, u->tok, u->w, u->b, B, T, C); break;
    case K_EMB_B: o->embedding_bwd(&g_s, u->dw, u->db, u->dy, u->tok, B, T, C); break;
    case K_LN_F: o->layernorm_fwd(&g_s, u->y, u->mean, u->rstd, u->x, u->w, u->b, N, C); break;
    case K_LN_B: o->layernorm_bwd(&g_s, u->dx, u->dw, u->db, u->dy, u->x, u->w, u->mean, u->rstd, N, C); break;
    case K_QKV_F: o->matmul_fwd(&g_s, u->qkv, u->x, u->w, u->b, N, C, 3 * C); break;
    case K_QKV_B: o->matmul_bwd(&g_s, u->dx, u->dw, u->db, u->dqkv, u->x, u->w, N, C, 3 * C); break;
    case K_ATT_F: o->attention_fwd(&g_s, u->y, u->att, u->qkv, B, T, C, NH); break;
    case K_ATT_B_GEMM:
        o->attention_bwd(&g_s, u->dqkv, u->datt, u->dy, u->qkv, u->att, B, T, C, NH, u->scratch,
                         (size_t)NH * T * T * sizeof(float));
        break;
    case K_ATT_B_ROWS: o->attention_bwd(&g_s, u->dqkv, u->datt, u->dy, u->qkv, u->att, B, T, C, NH, NULL, 0); break;
    /* --attention fused: lse [B,NH,T] in the front of the att buffer */
    case K_ATT_FUSED_F: o->attention_fused_fwd(&g_s, u->y, u->att, u->qkv, B, T, C, NH); break;
    case K_ATT_FUSED_B:
        o->attention_fused_bwd(&g_s, u->dqkv, u->datt, u->dy, u->qkv, u->y, u->att, B, T, C, NH, NULL, 0);
        break;
    case K_GELU_F: o->gelu_fwd(&g_s, u->y, u->x, (size_t)N * C); break;
    case K_GELU_B: o->gelu_bwd(&g_s, u->dx, u->x, u->dy, (size_t)N * C); break;
    case K_XENT_F: o->softmax_xent_fwd(&g_s, u->mean, u->logits, u->logits, u->tok, N, V); break;
    case K_XENT_B: o->softmax_xent_bwd(&g_s, u->logits, u->logits, u->tok, N, V, 1.0f / (float)N); break;
    case K_ADAMW: o->adamw(&g_s, u->w, u->dw, u->m, u->v, (size_t)3 * C * C, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 3); break;
    default: break;
    }
}

static const char *names[K_COUNT] = {
    "embedding_fwd", "embedding_bwd", "layernorm_fwd", "layernorm_bwd", "matmul_fwd (qkv)", "matmul_bwd (qkv)",
    "attention_fwd", "attention_bwd (GEMM)", "attention_bwd (rows)", "attention_fused_fwd",
    "attention_fused_bwd", "gelu_fwd (4C)", "gelu_bwd (4C)",
    "softmax_xent_fwd", "softmax_xent_bwd", "adamw (3C x C)"};

/* FLOPs of one call, for the GEMM-shaped kernels (0 otherwise). Attention
 * counts its full T x T products (2 forward, 4 backward), whichever way it
 * runs: the fused kernels (which skip the blocks above the diagonal and
 * recompute the scores in backward) are then rated on the same scale as the
 * materialized GEMMs, so the faster of the two has the larger number. */
static double flops(kernel_id k, const bufs *u) {
    double N = (double)u->B * u->T, C = u->C, T = u->T, BNH = (double)u->B * u->NH, hs = C / u->NH;
    switch (k) {
    case K_QKV_F: return 2 * N * C * 3 * C;
    case K_QKV_B: return 4 * N * C * 3 * C;
    case K_ATT_F:
    case K_ATT_FUSED_F: return 2 * (2 * BNH * T * T * hs); /* Q K^T and att V */
    case K_ATT_B_GEMM:
    case K_ATT_FUSED_B: return 4 * (2 * BNH * T * T * hs);
    default: return 0;
    }
}

int main(int argc, char **argv) {
    int B = argc > 1 ? atoi(argv[1]) : 8, T = argc > 2 ? atoi(argv[2]) : 1024, C = argc > 3 ? atoi(argv[3]) : 768;
    int NH = argc > 4 ? atoi(argv[4]) : 12, V = argc > 5 ? atoi(argv[5]) : 256, reps = argc > 6 ? atoi(argv[6]) : 10;
    if (B < 1 || T < 1 || C < 1 || NH < 1 || C % NH || V < 2 || reps < 1) {
        fprintf(stderr, "usage: bench_kernels [B T C NH V reps] (C a multiple of NH)\n");
        return 2;
    }
    zt_error err;
    zt_error_clear(&err);
    if (zt_backend_cuda_create(1, 0, &g_be, &err) != ZT_OK) die("zt_backend_cuda_create", &err);
    g_s = zt_backend_stream(g_be);
    unsigned seed = 12345u;
    size_t N = (size_t)B * T, NC = N * C;
    bufs u;
    memset(&u, 0, sizeof u);
    u.B = B, u.T = T, u.C = C, u.NH = NH, u.V = V;
    u.x = dev_rand(4 * NC, &seed), u.y = dev_rand(4 * NC, &seed), u.dx = dev_rand(4 * NC, &seed);
    u.dy = dev_rand(4 * NC, &seed), u.w = dev_rand((size_t)3 * C * C + (size_t)V * C, &seed);
    u.b = dev_rand((size_t)3 * C + (size_t)T * C, &seed), u.dw = dev_rand((size_t)3 * C * C + (size_t)V * C, &seed);
    u.db = dev_rand((size_t)3 * C + (size_t)T * C, &seed), u.mean = dev_rand(N, &seed), u.rstd = dev_rand(N, &seed);
    u.qkv = dev_rand(3 * NC, &seed), u.dqkv = dev_rand(3 * NC, &seed);
    u.att = dev_rand((size_t)B * NH * T * T, &seed), u.datt = dev_rand((size_t)B * NH * T, &seed);
    u.scratch = dev_rand((size_t)NH * T * T, &seed), u.logits = dev_rand(N * (size_t)V, &seed);
    u.m = dev_rand((size_t)3 * C * C, &seed), u.v = dev_rand((size_t)3 * C * C, &seed);
    int32_t *htok = malloc(N * sizeof *htok);
    if (!htok || cudaMalloc((void **)&u.tok, N * sizeof *htok) != cudaSuccess) die("allocation", NULL);
    for (size_t i = 0; i < N; i++) htok[i] = (int32_t)((i * 2654435761u) % (unsigned)V);
    cudaMemcpy(u.tok, htok, N * sizeof *htok, cudaMemcpyHostToDevice);
    free(htok);
    /* AdamW's second moment must start >= 0 (it is a running mean of g^2). */
    cudaMemset(u.v, 0, (size_t)3 * C * C * sizeof(float));
    /* The copies and the memset above ran on the legacy default stream, which
     * the backend's non-blocking stream does not wait for (and a copy from
     * pageable memory may return before its DMA lands): wait here. */
    if (cudaDeviceSynchronize() != cudaSuccess) die("setting up the inputs", NULL);

    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    printf("B %d, T %d, C %d, NH %d, V %d, %d reps\n\n| kernel | mode | ms per call | TFLOP/s |\n|---|---|---|---|\n", B,
           T, C, NH, V, reps);
    for (int bf16 = 0; bf16 < 2; bf16++) {
        g_be->matmul_bf16 = bf16;
        for (int k = 0; k < K_COUNT; k++) {
            int gemm = k == K_QKV_F || k == K_QKV_B || k == K_ATT_F || k == K_ATT_B_GEMM;
            if (bf16 && !gemm) continue;
            run((kernel_id)k, &u); /* warm-up: plans, first-touch */
            if (g_be->stream_sync(g_be, &g_s, &err) != ZT_OK) die(names[k], &err);
            cudaEventRecord(e0, (cudaStream_t)g_s.handle);
            for (int r = 0; r < reps; r++) run((kernel_id)k, &u);
            cudaEventRecord(e1, (cudaStream_t)g_s.handle);
            if (g_be->stream_sync(g_be, &g_s, &err) != ZT_OK) die(names[k], &err);
            float ms = 0.0f;
            cudaEventElapsedTime(&ms, e0, e1);
            double per = ms / reps, f = flops((kernel_id)k, &u);
            if (f > 0) printf("| %s | %s | %.3f | %.1f |\n", names[k], bf16 ? "bf16" : "fp32", per, f / (per * 1e9));
            else printf("| %s | fp32 | %.3f | |\n", names[k], per);
        }
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    zt_backend_destroy(g_be);
    return 0;
}
