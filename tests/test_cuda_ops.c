/* The CUDA kernel table against the CPU one.
 *
 * Every zt_ops kernel runs on the CUDA backend and on the CPU backend with the
 * same fresh random inputs; outputs that a kernel overwrites are poisoned with
 * NaN on both sides first (so an element the CUDA kernel forgets shows up),
 * and outputs that a backward kernel accumulates into start from the same
 * random values (so "+=" is checked, not "=").
 *
 * Error metric, per tensor (normwise relative):
 *     err = max_i |gpu_i - cpu_i| / max_i |cpu_i|
 * with err < 1e-5 required (GEMMs in fp32: the backend turns TF32 off). A NaN
 * on one side only fails. Kernels whose CUDA version performs the CPU's
 * floating-point operations in the CPU's order must match bit for bit:
 * embedding forward and backward, residual, scale, the casts between fp32
 * and bf16 or fp16 (all 65536 16-bit patterns back to fp32),
 * softmax_xent_bwd, AdamW, SGD, 8-bit AdamW (its codes and scales too) and
 * Adafactor's statistics, preconditioning and update. (matmul's dbias and layernorm's dw/db are
 * fixed-order trees of per-warp partial sums: 1e-5.) Reductions
 * must also be reproducible: kernels with reductions run twice on the GPU and
 * give the same bits.
 *
 * The GEMMs (cuBLASLt) run in both modes of zt_backend.matmul_bf16: fp32
 * (1e-5, as above) and bf16 operands with fp32 accumulation (1e-2 against the
 * CPU's fp32; matmul forward and backward, attention forward and backward's
 * GEMM path), each also
 * repeated for the same bits. Some matmul cases pass pointers one float past
 * an aligned address (the plans depend on the alignment, and a misaligned bias
 * cannot be fused into the GEMM), and one has a long reduction (K = 4096) with
 * small outputs, the shape where cuBLASLt splits K.
 *
 * The bf16 and fp16 tables (be->ops_for[dt]) against the CPU's tables of the
 * same dtype, every op forward and backward on the same 16-bit inputs: see
 * "the bf16 and fp16 tables" below for the bounds (2 ulps of max|cpu| for
 * 16-bit outputs, 1e-5 for fp32 ones, bit for bit where the arithmetic is
 * the same), each with its negative twin.
 *
 * The Llama kernels (rmsnorm, rope, swiglu, gqa_expand/gqa_reduce, and
 * embedding without a position table) in all three tables: see "the Llama
 * kernels" below for their bounds.
 *
 * Also: sum_squares (double) with host and device result pointers against
 * the CPU (relative 1e-12), the bf16 GEMM outside zt_ops against a double
 * reference, mem_info, and the sticky error: a launch that fails inside a
 * (void) kernel is reported by the next stream_sync with its file:line.
 *
 * Exit code 77 (skipped) when cudaGetDeviceCount reports an error or no
 * device, as on CI machines without a GPU. Seed: ZT_TEST_SEED (default fixed).
 * An argument (words separated by commas) runs only the groups whose name
 * contains one of the words. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "zt_newton_schulz.h"
#include "zt_wire.h"
#include "cuda_ops.h"
#include "zt_quant.h"

#define TOL 1e-5



/* ---- random numbers ------------------------------------------------------ */

static int rng_int(int n) { return (int)(rng_next() % (uint64_t)n); }

/* ---- host buffers ---------------------------------------------------------- */

static float *falloc(size_t n) { return xmalloc(n * sizeof(float)); }
static float *frand(size_t n, float lo, float hi) {
    float *p = falloc(n);
    for (size_t i = 0; i < n; i++) p[i] = rng_uniform(lo, hi);
    return p;
}
static float *fnan(size_t n) {
    float *p = falloc(n);
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}
static float *fdup(const float *x, size_t n) {
    float *p = falloc(n);
    memcpy(p, x, n * sizeof(float));
    return p;
}
static int32_t *irand(size_t n, int hi) {
    int32_t *p = xmalloc(n * sizeof(int32_t));
    for (size_t i = 0; i < n; i++) p[i] = rng_int(hi);
    return p;
}

/* ---- the two backends and device buffers --------------------------------- */

static zt_backend *g_gpu, *g_cpu;
static zt_stream g_gs, g_cs;

#define MAX_DEV 64
static void *g_dev[MAX_DEV];
static int g_ndev = 0;

static void die_status(const char *what, const zt_error *err) {
    fprintf(stderr, "%s failed: %s (%s:%d)\n", what, err->msg, err->file ? err->file : "?", err->line);
    exit(1);
}

static void *dalloc(size_t bytes) {
    if (g_ndev == MAX_DEV) {
        fprintf(stderr, "too many device buffers\n");
        exit(2);
    }
    void *p = g_gpu->raw_device.alloc(g_gpu->raw_device.ctx, bytes ? bytes : 4);
    if (!p) {
        fprintf(stderr, "device allocation of %zu bytes failed\n", bytes);
        exit(2);
    }
    g_dev[g_ndev++] = p;
    return p;
}
static void dfree_all(void) {
    for (int i = 0; i < g_ndev; i++) g_gpu->raw_device.free(g_gpu->raw_device.ctx, g_dev[i]);
    g_ndev = 0;
}
static void gsync(const char *what) {
    zt_error err;
    zt_error_clear(&err);
    if (g_gpu->stream_sync(g_gpu, &g_gs, &err) != ZT_OK) die_status(what, &err);
}
static void h2d(void *dst, const void *src, size_t bytes) {
    zt_error err;
    zt_error_clear(&err);
    if (g_gpu->memcpy_async(g_gpu, dst, src, bytes, ZT_COPY_H2D, &g_gs, &err) != ZT_OK) die_status("H2D copy", &err);
    gsync("H2D copy");
}
static void d2h(void *dst, const void *src, size_t bytes) {
    zt_error err;
    zt_error_clear(&err);
    if (g_gpu->memcpy_async(g_gpu, dst, src, bytes, ZT_COPY_D2H, &g_gs, &err) != ZT_OK) die_status("D2H copy", &err);
    gsync("D2H copy");
}
/* A device copy of host data. */
static void *dcopy(const void *h, size_t bytes) {
    void *d = dalloc(bytes);
    h2d(d, h, bytes);
    return d;
}
static float *dcopyf(const float *h, size_t n) { return dcopy(h, n * sizeof(float)); }
/* A device buffer of n floats poisoned with NaN. */
static float *dnan(size_t n) {
    float *h = fnan(n);
    float *d = dcopyf(h, n);
    free(h);
    return d;
}
/* Device copies `off` floats past the start of their allocation (which is
 * 256-byte aligned), to exercise misaligned operands. */
static float *dcopyf_at(const float *h, size_t n, size_t off) {
    float *d = dalloc((n + off) * sizeof(float));
    h2d(d + off, h, n * sizeof(float));
    return d + off;
}
/* A device copy `off` bytes past an aligned address. */
static void *dcopy_at(const void *h, size_t bytes, size_t off) {
    char *d = dalloc(bytes + off);
    h2d(d + off, h, bytes);
    return d + off;
}
static float *dnan_at(size_t n, size_t off) {
    float *h = fnan(n);
    float *d = dcopyf_at(h, n, off);
    free(h);
    return d;
}
/* Overwrites a device buffer with NaN again (before a repeated run). */
static void dpoison(float *d, size_t n) {
    float *h = fnan(n);
    h2d(d, h, n * sizeof(float));
    free(h);
}
/* The device buffer read back into fresh host memory (after a sync). */
static float *fetch(const float *d, size_t n, const char *what) {
    gsync(what);
    float *h = falloc(n);
    d2h(h, d, n * sizeof(float));
    return h;
}

/* ---- comparisons ------------------------------------------------------------ */

static void compare(const char *what, const float *gpu, const float *cpu, size_t n, double tol) {
    double scale = 0.0, e = 0.0;
    size_t worst = 0, nan_mismatch = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(cpu[i])) scale = fmax(scale, fabs((double)cpu[i]));
    for (size_t i = 0; i < n; i++) {
        if (isnan(gpu[i]) != isnan(cpu[i])) {
            if (!nan_mismatch++) worst = i;
            continue;
        }
        if (isnan(cpu[i])) continue;
        double d = fabs((double)gpu[i] - (double)cpu[i]);
        if (!(d <= e) && !nan_mismatch) {
            e = d;
            worst = i;
        }
    }
    double rel = scale > 0 ? e / scale : e;
    CHECK(nan_mismatch == 0 && rel < tol, "%s: n=%zu, %zu NaN mismatches, rel err %.3g (tol %.0e) worst at %zu: gpu %.9g cpu %.9g",
          what, n, nan_mismatch, rel, tol, worst, n ? (double)gpu[worst] : 0.0, n ? (double)cpu[worst] : 0.0);
    if (nan_mismatch == 0 && rel < tol) printf("ok %s (rel err %.2e)\n", what, rel);
}

static void compare_bits(const char *what, const void *gpu, const void *cpu, size_t bytes, size_t elem) {
    const unsigned char *a = gpu, *b = cpu;
    size_t first = bytes, diffs = 0;
    for (size_t i = 0; i < bytes; i += elem)
        if (memcmp(a + i, b + i, elem) != 0) {
            if (first == bytes) first = i / elem;
            diffs++;
        }
    if (elem == 4 && diffs) {
        float x, y;
        memcpy(&x, a + first * 4, 4);
        memcpy(&y, b + first * 4, 4);
        CHECK(0, "%s: %zu of %zu elements differ in bits; first at %zu: gpu %.9g cpu %.9g", what, diffs,
              bytes / elem, first, (double)x, (double)y);
    } else {
        CHECK(diffs == 0, "%s: %zu of %zu elements differ in bits; first at %zu", what, diffs, bytes / elem, first);
    }
    if (!diffs) printf("ok %s (bitwise, %zu elements)\n", what, bytes / elem);
}

/* Same bits on two GPU runs. */
static void compare_repeat(const char *what, const float *run1, const float *run2, size_t n) {
    CHECK(memcmp(run1, run2, n * sizeof(float)) == 0, "%s: two GPU runs differ in bits", what);
}

/* ---- the kernels ------------------------------------------------------------- */

static void test_embedding(int B, int T, int C, int V) {
    size_t BT = (size_t)B * T, n = BT * C;
    int32_t *tok = irand(BT, V);
    float *wte = frand((size_t)V * C, -1, 1), *wpe = frand((size_t)T * C, -1, 1);
    int32_t *d_tok = dcopy(tok, BT * sizeof(int32_t));
    float *d_wte = dcopyf(wte, (size_t)V * C), *d_wpe = dcopyf(wpe, (size_t)T * C);

    float *out = fnan(n), *d_out = dnan(n);
    g_cpu->ops->embedding_fwd(&g_cs, out, tok, wte, wpe, B, T, C);
    g_gpu->ops->embedding_fwd(&g_gs, d_out, d_tok, d_wte, d_wpe, B, T, C);
    float *got = fetch(d_out, n, "embedding_fwd");
    compare_bits("embedding_fwd", got, out, n * 4, 4);
    free(got);

    float *dout = frand(n, -1, 1), *dwte = frand((size_t)V * C, -1, 1), *dwpe = frand((size_t)T * C, -1, 1);
    float *d_dout = dcopyf(dout, n), *d_dwte = dcopyf(dwte, (size_t)V * C), *d_dwpe = dcopyf(dwpe, (size_t)T * C);
    g_cpu->ops->embedding_bwd(&g_cs, dwte, dwpe, dout, tok, B, T, C);
    g_gpu->ops->embedding_bwd(&g_gs, d_dwte, d_dwpe, d_dout, d_tok, B, T, C);
    float *g_dwte = fetch(d_dwte, (size_t)V * C, "embedding_bwd"), *g_dwpe = fetch(d_dwpe, (size_t)T * C, "embedding_bwd");
    compare_bits("embedding_bwd dwte", g_dwte, dwte, (size_t)V * C * 4, 4);
    compare_bits("embedding_bwd dwpe", g_dwpe, dwpe, (size_t)T * C * 4, 4);
    free(g_dwte), free(g_dwpe), free(dout), free(dwte), free(dwpe), free(out), free(tok), free(wte), free(wpe);
    dfree_all();
}

static void test_layernorm(int N, int C) {
    size_t n = (size_t)N * C;
    char what[96];
    float *inp = frand(n, -2, 3), *w = frand(C, 0.5f, 1.5f), *b = frand(C, -0.5f, 0.5f);
    float *d_inp = dcopyf(inp, n), *d_w = dcopyf(w, C), *d_b = dcopyf(b, C);
    float *out = fnan(n), *mean = fnan(N), *rstd = fnan(N);
    float *d_out = dnan(n), *d_mean = dnan(N), *d_rstd = dnan(N);
    g_cpu->ops->layernorm_fwd(&g_cs, out, mean, rstd, inp, w, b, N, C);
    g_gpu->ops->layernorm_fwd(&g_gs, d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C);
    float *g_out = fetch(d_out, n, "layernorm_fwd"), *g_mean = fetch(d_mean, N, "ln"), *g_rstd = fetch(d_rstd, N, "ln");
    snprintf(what, sizeof what, "layernorm_fwd out N=%d C=%d", N, C);
    compare(what, g_out, out, n, TOL);
    snprintf(what, sizeof what, "layernorm_fwd mean N=%d C=%d", N, C);
    compare(what, g_mean, mean, N, TOL);
    snprintf(what, sizeof what, "layernorm_fwd rstd N=%d C=%d", N, C);
    compare(what, g_rstd, rstd, N, TOL);
    g_gpu->ops->layernorm_fwd(&g_gs, d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C);
    float *g_out2 = fetch(d_out, n, "layernorm_fwd");
    compare_repeat("layernorm_fwd", g_out, g_out2, n);

    /* Backward from the CPU's mean and rstd on both sides. */
    float *dout = frand(n, -1, 1), *dinp = frand(n, -1, 1), *dw = frand(C, -1, 1), *db = frand(C, -1, 1);
    float *dinp0 = fdup(dinp, n), *dw0 = fdup(dw, C), *db0 = fdup(db, C);
    float *d_dout = dcopyf(dout, n), *d_dinp = dcopyf(dinp, n), *d_dw = dcopyf(dw, C), *d_db = dcopyf(db, C);
    h2d(d_mean, mean, N * sizeof(float));
    h2d(d_rstd, rstd, N * sizeof(float));
    g_cpu->ops->layernorm_bwd(&g_cs, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    g_gpu->ops->layernorm_bwd(&g_gs, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C);
    float *g_dinp = fetch(d_dinp, n, "ln bwd"), *g_dw = fetch(d_dw, C, "ln bwd"), *g_db = fetch(d_db, C, "ln bwd");
    snprintf(what, sizeof what, "layernorm_bwd dinp N=%d C=%d", N, C);
    compare(what, g_dinp, dinp, n, TOL);
    /* dw, db: partial sums per warp, then in warp order (not the CPU's one
     * sequence over the rows), so a tolerance; repeats must match bitwise. */
    snprintf(what, sizeof what, "layernorm_bwd dw N=%d C=%d", N, C);
    compare(what, g_dw, dw, C, TOL);
    snprintf(what, sizeof what, "layernorm_bwd db N=%d C=%d", N, C);
    compare(what, g_db, db, C, TOL);
    /* Again from the same starting gradients: the same bits. */
    h2d(d_dinp, dinp0, n * sizeof(float));
    h2d(d_dw, dw0, C * sizeof(float));
    h2d(d_db, db0, C * sizeof(float));
    g_gpu->ops->layernorm_bwd(&g_gs, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C);
    float *g_dinp2 = fetch(d_dinp, n, "ln bwd"), *g_dw2 = fetch(d_dw, C, "ln bwd"), *g_db2 = fetch(d_db, C, "ln bwd");
    compare_repeat("layernorm_bwd dinp", g_dinp, g_dinp2, n);
    compare_repeat("layernorm_bwd dw", g_dw, g_dw2, C);
    compare_repeat("layernorm_bwd db", g_db, g_db2, C);

    free(inp), free(w), free(b), free(out), free(mean), free(rstd), free(g_out), free(g_mean), free(g_rstd);
    free(g_out2), free(dout), free(dinp), free(dw), free(db), free(dinp0), free(dw0), free(db0);
    free(g_dinp), free(g_dw), free(g_db), free(g_dinp2), free(g_dw2), free(g_db2);
    dfree_all();
}

/* matmul forward and backward against the CPU, in fp32 (bf16 = 0, 1e-5) or
 * with the GPU's matmul_bf16 mode (bf16 = 1: operands rounded to bf16, fp32
 * accumulation; 1e-2 against the CPU's fp32). Device operands start `off`
 * floats past an aligned address. Both directions also run a second time
 * (outputs poisoned again, gradients reset) for the same bits. */
static void test_matmul(int N, int C, int OC, int with_bias, int with_dinp, int bf16, int off) {
    char what[160], tag[96];
    snprintf(tag, sizeof tag, "N=%d C=%d OC=%d bias=%d dinp=%d %s off=%d", N, C, OC, with_bias, with_dinp,
             bf16 ? "bf16" : "fp32", off);
    double tol = bf16 ? 1e-2 : TOL;
    g_gpu->matmul_bf16 = bf16;
    uint64_t fallbacks0 = ((zt_cuda_impl *)g_gpu->impl)->lt_fallback_calls;
    size_t nin = (size_t)N * C, nw = (size_t)OC * C, nout = (size_t)N * OC, o = (size_t)off;
    float *inp = frand(nin, -1, 1), *w = frand(nw, -1, 1), *bias = frand(OC, -1, 1);
    float *d_inp = dcopyf_at(inp, nin, o), *d_w = dcopyf_at(w, nw, o), *d_bias = dcopyf_at(bias, OC, o);
    float *out = fnan(nout), *d_out = dnan_at(nout, o);
    g_cpu->ops->matmul_fwd(&g_cs, out, inp, w, with_bias ? bias : NULL, N, C, OC);
    g_gpu->ops->matmul_fwd(&g_gs, d_out, d_inp, d_w, with_bias ? d_bias : NULL, N, C, OC);
    float *g_out = fetch(d_out, nout, "matmul_fwd");
    snprintf(what, sizeof what, "matmul_fwd %s", tag);
    compare(what, g_out, out, nout, tol);
    dpoison(d_out, nout);
    g_gpu->ops->matmul_fwd(&g_gs, d_out, d_inp, d_w, with_bias ? d_bias : NULL, N, C, OC);
    float *g_out2 = fetch(d_out, nout, "matmul_fwd");
    compare_repeat(what, g_out, g_out2, nout);

    float *dout = frand(nout, -1, 1), *dinp = frand(nin, -1, 1), *dw = frand(nw, -1, 1), *dbias = frand(OC, -1, 1);
    float *dinp0 = fdup(dinp, nin), *dw0 = fdup(dw, nw), *dbias0 = fdup(dbias, OC);
    float *d_dout = dcopyf_at(dout, nout, o), *d_dinp = dcopyf_at(dinp, nin, o), *d_dw = dcopyf_at(dw, nw, o);
    float *d_dbias = dcopyf_at(dbias, OC, o);
    g_cpu->ops->matmul_bwd(&g_cs, with_dinp ? dinp : NULL, dw, with_bias ? dbias : NULL, dout, inp, w, N, C, OC);
    g_gpu->ops->matmul_bwd(&g_gs, with_dinp ? d_dinp : NULL, d_dw, with_bias ? d_dbias : NULL, d_dout, d_inp, d_w, N,
                           C, OC);
    float *g_dinp = fetch(d_dinp, nin, "matmul_bwd"), *g_dw = fetch(d_dw, nw, "matmul_bwd");
    float *g_dbias = fetch(d_dbias, OC, "matmul_bwd");
    snprintf(what, sizeof what, "matmul_bwd dinp %s", tag);
    compare(what, g_dinp, dinp, nin, tol); /* untouched when dinp is NULL: both keep the start */
    snprintf(what, sizeof what, "matmul_bwd dw %s", tag);
    compare(what, g_dw, dw, nw, tol);
    /* dbias is the backend's own fp32 reduction in both modes (not a GEMM). */
    snprintf(what, sizeof what, "matmul_bwd dbias %s", tag);
    compare(what, g_dbias, dbias, OC, TOL);

    /* Again from the same starting gradients: the same bits. */
    h2d(d_dinp, dinp0, nin * sizeof(float));
    h2d(d_dw, dw0, nw * sizeof(float));
    h2d(d_dbias, dbias0, OC * sizeof(float));
    g_gpu->ops->matmul_bwd(&g_gs, with_dinp ? d_dinp : NULL, d_dw, with_bias ? d_dbias : NULL, d_dout, d_inp, d_w, N,
                           C, OC);
    float *g_dinp2 = fetch(d_dinp, nin, "matmul_bwd"), *g_dw2 = fetch(d_dw, nw, "matmul_bwd");
    float *g_dbias2 = fetch(d_dbias, OC, "matmul_bwd");
    snprintf(what, sizeof what, "matmul_bwd dinp %s", tag);
    compare_repeat(what, g_dinp, g_dinp2, nin);
    snprintf(what, sizeof what, "matmul_bwd dw %s", tag);
    compare_repeat(what, g_dw, g_dw2, nw);
    snprintf(what, sizeof what, "matmul_bwd dbias %s", tag);
    compare_repeat(what, g_dbias, g_dbias2, OC);

    /* Aligned pointers and row strides: cuBLASLt must have had an algorithm
     * for every GEMM (the fused bias included), with the deterministic
     * reduction mask and the alignments the backend states. */
    uint64_t fallbacks = ((zt_cuda_impl *)g_gpu->impl)->lt_fallback_calls - fallbacks0;
    if (getenv("ZT_EMU_LT_REFUSE")) /* the emulator refuses every cuBLASLt matmul: all fell back */
        CHECK(fallbacks > 0, "matmul %s: cuBLASLt refused every GEMM, yet no call fell back", tag);
    else if (off == 0 && C % 8 == 0 && OC % 8 == 0)
        CHECK(fallbacks == 0, "matmul %s: %llu GEMM calls found no cuBLASLt algorithm", tag,
              (unsigned long long)fallbacks);
    else
        printf("note matmul %s: %llu GEMM calls without a cuBLASLt algorithm (cuBLAS or the unfused bias instead)\n",
               tag, (unsigned long long)fallbacks);

    g_gpu->matmul_bf16 = 0;
    free(inp), free(w), free(bias), free(out), free(g_out), free(g_out2), free(dout), free(dinp), free(dw);
    free(dbias), free(dinp0), free(dw0), free(dbias0), free(g_dinp), free(g_dw), free(g_dbias);
    free(g_dinp2), free(g_dw2), free(g_dbias2);
    dfree_all();
}

/* An attention forward (attention_fwd, or attention_fused_fwd when `fused`:
 * out [B,T,C] and `second`, the probabilities or the lse) on both backends
 * into the NaN-poisoned out/second and d_out/d_second, compared within tol;
 * then again on the GPU over poisoned outputs, for the same bits. The two
 * entries differ in their second output's type (probabilities in the
 * table's dtype, lse fp32), hence the flag rather than a function pointer. */
static void run_attention_fwd(const zt_ops *ops, zt_stream *s, int fused, float *out, float *second,
                              const float *qkv, int B, int T, int C, int NH) {
    if (fused) ops->attention_fused_fwd(s, out, second, qkv, B, T, C, NH);
    else ops->attention_fwd(s, out, second, qkv, B, T, C, NH);
}
static void check_attention_fwd(const char *op, const char *second_name, int fused, const char *tag, double tol,
                                const float *qkv, const float *d_qkv, float *out, float *second, float *d_out,
                                float *d_second, size_t nout, size_t nsecond, int B, int T, int C, int NH) {
    char what[128];
    run_attention_fwd(g_cpu->ops, &g_cs, fused, out, second, qkv, B, T, C, NH);
    run_attention_fwd(g_gpu->ops, &g_gs, fused, d_out, d_second, d_qkv, B, T, C, NH);
    float *g_out = fetch(d_out, nout, op), *g_second = fetch(d_second, nsecond, op);
    snprintf(what, sizeof what, "%s out %s", op, tag);
    compare(what, g_out, out, nout, tol);
    snprintf(what, sizeof what, "%s %s %s", op, second_name, tag);
    compare(what, g_second, second, nsecond, tol);
    dpoison(d_out, nout);
    dpoison(d_second, nsecond);
    run_attention_fwd(g_gpu->ops, &g_gs, fused, d_out, d_second, d_qkv, B, T, C, NH);
    float *g_out2 = fetch(d_out, nout, op), *g_second2 = fetch(d_second, nsecond, op);
    compare_repeat(what, g_second, g_second2, nsecond);
    snprintf(what, sizeof what, "%s out %s", op, tag);
    compare_repeat(what, g_out, g_out2, nout);
    free(g_out), free(g_second), free(g_out2), free(g_second2);
}

/* Attention forward and backward against the CPU (and repeated: the same
 * bits). Backward runs both paths: row by row (no GEMMs: fp32 always) and
 * through a lent [NH,T,T] scratch as GEMMs. bf16 = 1 runs the GEMMs (forward,
 * and backward's GEMM path) in the matmul_bf16 mode (1e-2). */
static void test_attention(int B, int T, int C, int NH, int bf16) {
    char what[128], tag[64];
    snprintf(tag, sizeof tag, "B=%d T=%d C=%d NH=%d %s", B, T, C, NH, bf16 ? "bf16" : "fp32");
    double tol = bf16 ? 1e-2 : TOL;
    g_gpu->matmul_bf16 = bf16;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    size_t ndatt = (size_t)B * NH * T;
    float *qkv = frand(nqkv, -1.5f, 1.5f), *d_qkv = dcopyf(qkv, nqkv);
    float *out = fnan(nout), *att = fnan(natt), *d_out = dnan(nout), *d_att = dnan(natt);
    check_attention_fwd("attention_fwd", "att", 0, tag, tol, qkv, d_qkv, out, att, d_out, d_att, nout, natt, B, T, C,
                        NH);
    g_gpu->matmul_bf16 = 0;

    /* Backward from the CPU's probabilities on both sides. */
    float *dout = frand(nout, -1, 1), *dqkv = frand(nqkv, -1, 1), *dqkv0 = fdup(dqkv, nqkv), *datt = fnan(ndatt);
    float *d_dout = dcopyf(dout, nout), *d_dqkv = dcopyf(dqkv, nqkv), *d_datt = dnan(ndatt);
    h2d(d_att, att, natt * sizeof(float));
    g_cpu->ops->attention_bwd(&g_cs, dqkv, datt, dout, qkv, att, B, T, C, NH, NULL, 0);
    g_gpu->ops->attention_bwd(&g_gs, d_dqkv, d_datt, d_dout, d_qkv, d_att, B, T, C, NH, NULL, 0);
    float *g_dqkv = fetch(d_dqkv, nqkv, "attention_bwd");
    snprintf(what, sizeof what, "attention_bwd dqkv %s (rows)", tag);
    compare(what, g_dqkv, dqkv, nqkv, TOL);
    h2d(d_dqkv, dqkv0, nqkv * sizeof(float));
    g_gpu->ops->attention_bwd(&g_gs, d_dqkv, d_datt, d_dout, d_qkv, d_att, B, T, C, NH, NULL, 0);
    float *g_dqkv2 = fetch(d_dqkv, nqkv, "attention_bwd");
    compare_repeat(what, g_dqkv, g_dqkv2, nqkv);
    /* With an [NH,T,T] fp32 scratch (poisoned: every element it reads must
     * be written first): the GEMM path, twice for the same bits. */
    size_t nscratch = (size_t)NH * T * T;
    float *d_scratch = dnan(nscratch);
    float *g_dqkv3 = NULL, *g_dqkv4 = NULL;
    g_gpu->matmul_bf16 = bf16;
    for (int rep = 0; rep < 2; rep++) {
        h2d(d_dqkv, dqkv0, nqkv * sizeof(float));
        dpoison(d_scratch, nscratch);
        g_gpu->ops->attention_bwd(&g_gs, d_dqkv, d_datt, d_dout, d_qkv, d_att, B, T, C, NH, d_scratch,
                                  nscratch * sizeof(float));
        if (rep == 0) g_dqkv3 = fetch(d_dqkv, nqkv, "attention_bwd (GEMM)");
        else g_dqkv4 = fetch(d_dqkv, nqkv, "attention_bwd (GEMM)");
    }
    g_gpu->matmul_bf16 = 0;
    snprintf(what, sizeof what, "attention_bwd dqkv %s (GEMM)", tag);
    compare(what, g_dqkv3, dqkv, nqkv, tol);
    compare_repeat(what, g_dqkv3, g_dqkv4, nqkv);
    /* The GEMM path really ran: the poisoned scratch now holds the last batch
     * element's softmax gradient, finite, exactly 0 above the diagonal. */
    float *x = fetch(d_scratch, nscratch, "attention_bwd scratch");
    size_t nonfinite = 0, above = 0;
    for (size_t r = 0; r < (size_t)NH * T; r++)
        for (int t2 = 0; t2 < T; t2++) {
            float v = x[r * T + t2];
            nonfinite += !isfinite(v);
            above += t2 > (int)(r % (size_t)T) && v != 0.0f;
        }
    CHECK(nonfinite == 0 && above == 0, "%s: scratch has %zu non-finite values and %zu nonzeros above the diagonal",
          what, nonfinite, above);
    free(x), free(g_dqkv3), free(g_dqkv4);

    free(qkv), free(out), free(att), free(dout), free(dqkv), free(dqkv0), free(datt);
    free(g_dqkv), free(g_dqkv2);
    dfree_all();
}

/* Fused (memory-efficient) attention against the CPU, fp32 only: the
 * forward's out and lse, then the backward from the CPU's out and lse on
 * both sides (dqkv accumulates, so it starts from the same random values),
 * with D in datt checked too. Each GPU run twice, for the same bits. */
static void test_attention_fused(int B, int T, int C, int NH) {
    char what[128], tag[64];
    snprintf(tag, sizeof tag, "B=%d T=%d C=%d NH=%d", B, T, C, NH);
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    float *qkv = frand(nqkv, -1.5f, 1.5f), *d_qkv = dcopyf(qkv, nqkv);
    float *out = fnan(nout), *lse = fnan(nlse), *d_out = dnan(nout), *d_lse = dnan(nlse);
    check_attention_fwd("attention_fused_fwd", "lse", 1, tag, TOL, qkv, d_qkv, out, lse, d_out, d_lse, nout, nlse, B,
                        T, C, NH);

    float *dout = frand(nout, -1, 1), *dqkv = frand(nqkv, -1, 1), *dqkv0 = fdup(dqkv, nqkv), *datt = fnan(nlse);
    float *d_dout = dcopyf(dout, nout), *d_dqkv = dcopyf(dqkv, nqkv), *d_datt = dnan(nlse);
    h2d(d_out, out, nout * sizeof(float));
    h2d(d_lse, lse, nlse * sizeof(float));
    g_cpu->ops->attention_fused_bwd(&g_cs, dqkv, datt, dout, qkv, out, lse, B, T, C, NH, NULL, 0);
    g_gpu->ops->attention_fused_bwd(&g_gs, d_dqkv, d_datt, d_dout, d_qkv, d_out, d_lse, B, T, C, NH, NULL, 0);
    float *g_dqkv = fetch(d_dqkv, nqkv, "attention_fused_bwd"), *g_datt = fetch(d_datt, nlse, "attention_fused_bwd");
    snprintf(what, sizeof what, "attention_fused_bwd dqkv %s", tag);
    compare(what, g_dqkv, dqkv, nqkv, TOL);
    snprintf(what, sizeof what, "attention_fused_bwd D %s", tag);
    compare(what, g_datt, datt, nlse, TOL);
    h2d(d_dqkv, dqkv0, nqkv * sizeof(float));
    dpoison(d_datt, nlse);
    g_gpu->ops->attention_fused_bwd(&g_gs, d_dqkv, d_datt, d_dout, d_qkv, d_out, d_lse, B, T, C, NH, NULL, 0);
    float *g_dqkv2 = fetch(d_dqkv, nqkv, "attention_fused_bwd"), *g_datt2 = fetch(d_datt, nlse, "attention_fused_bwd");
    compare_repeat(what, g_datt, g_datt2, nlse);
    snprintf(what, sizeof what, "attention_fused_bwd dqkv %s", tag);
    compare_repeat(what, g_dqkv, g_dqkv2, nqkv);

    free(qkv), free(out), free(lse);
    free(dout), free(dqkv), free(dqkv0), free(datt), free(g_dqkv), free(g_datt), free(g_dqkv2), free(g_datt2);
    dfree_all();
}

static void test_pointwise(size_t n) {
    char what[96];
    float *x = frand(n, -4, 4), *y = frand(n, -4, 4), *dout = frand(n, -1, 1);
    float *d_x = dcopyf(x, n), *d_y = dcopyf(y, n), *d_dout = dcopyf(dout, n);

    float *out = fnan(n), *d_out = dnan(n);
    g_cpu->ops->gelu_fwd(&g_cs, out, x, n);
    g_gpu->ops->gelu_fwd(&g_gs, d_out, d_x, n);
    float *g = fetch(d_out, n, "gelu_fwd");
    snprintf(what, sizeof what, "gelu_fwd n=%zu", n);
    compare(what, g, out, n, TOL);
    free(g);

    float *dinp = frand(n, -1, 1), *d_dinp = dcopyf(dinp, n);
    g_cpu->ops->gelu_bwd(&g_cs, dinp, x, dout, n);
    g_gpu->ops->gelu_bwd(&g_gs, d_dinp, d_x, d_dout, n);
    g = fetch(d_dinp, n, "gelu_bwd");
    snprintf(what, sizeof what, "gelu_bwd n=%zu", n);
    compare(what, g, dinp, n, TOL);
    free(g);

    float *d_out2 = dnan(n);
    for (size_t i = 0; i < n; i++) out[i] = NAN;
    g_cpu->ops->residual_fwd(&g_cs, out, x, y, n);
    g_gpu->ops->residual_fwd(&g_gs, d_out2, d_x, d_y, n);
    g = fetch(d_out2, n, "residual_fwd");
    snprintf(what, sizeof what, "residual_fwd n=%zu", n);
    compare_bits(what, g, out, n * 4, 4);
    free(g);

    float *da = frand(n, -1, 1), *db = frand(n, -1, 1), *d_da = dcopyf(da, n), *d_db = dcopyf(db, n);
    g_cpu->ops->residual_bwd(&g_cs, da, db, dout, n);
    g_gpu->ops->residual_bwd(&g_gs, d_da, d_db, d_dout, n);
    float *ga = fetch(d_da, n, "residual_bwd"), *gb = fetch(d_db, n, "residual_bwd");
    snprintf(what, sizeof what, "residual_bwd da n=%zu", n);
    compare_bits(what, ga, da, n * 4, 4);
    snprintf(what, sizeof what, "residual_bwd db n=%zu", n);
    compare_bits(what, gb, db, n * 4, 4);
    free(ga), free(gb);

    g_cpu->ops->scale(&g_cs, x, 0.37f, n);
    g_gpu->ops->scale(&g_gs, d_x, 0.37f, n);
    g = fetch(d_x, n, "scale");
    snprintf(what, sizeof what, "scale n=%zu", n);
    compare_bits(what, g, x, n * 4, 4);
    free(g);

    free(x), free(y), free(dout), free(out), free(dinp), free(da), free(db);
    dfree_all();
}

static void test_softmax_xent(int N, int V) {
    char what[96];
    size_t n = (size_t)N * V;
    float *logits = frand(n, -6, 6);
    int32_t *tgt = irand(N, V);
    float *d_logits = dcopyf(logits, n);
    int32_t *d_tgt = dcopy(tgt, N * sizeof(int32_t));
    float *probs = fnan(n), *losses = fnan(N), *d_probs = dnan(n), *d_losses = dnan(N);
    g_cpu->ops->softmax_xent_fwd(&g_cs, losses, probs, logits, tgt, N, V);
    g_gpu->ops->softmax_xent_fwd(&g_gs, d_losses, d_probs, d_logits, d_tgt, N, V);
    float *gp = fetch(d_probs, n, "xent_fwd"), *gl = fetch(d_losses, N, "xent_fwd");
    snprintf(what, sizeof what, "softmax_xent_fwd probs N=%d V=%d", N, V);
    compare(what, gp, probs, n, TOL);
    snprintf(what, sizeof what, "softmax_xent_fwd losses N=%d V=%d", N, V);
    compare(what, gl, losses, N, TOL);
    free(gl);

    /* In place: probs aliases logits; the same bits as the separate run. */
    float *d_inplace = dcopyf(logits, n), *d_losses2 = dnan(N);
    g_gpu->ops->softmax_xent_fwd(&g_gs, d_losses2, d_inplace, d_inplace, d_tgt, N, V);
    float *gp2 = fetch(d_inplace, n, "xent_fwd"), *gl2 = fetch(d_losses2, N, "xent_fwd");
    float *gl1 = fetch(d_losses, N, "xent_fwd");
    snprintf(what, sizeof what, "softmax_xent_fwd in place N=%d V=%d", N, V);
    compare_bits(what, gp2, gp, n * 4, 4);
    compare_bits(what, gl2, gl1, (size_t)N * 4, 4);

    float *dlogits = fnan(n), *d_dlogits = dnan(n);
    h2d(d_probs, probs, n * sizeof(float));
    g_cpu->ops->softmax_xent_bwd(&g_cs, dlogits, probs, tgt, N, V, 0.125f);
    g_gpu->ops->softmax_xent_bwd(&g_gs, d_dlogits, d_probs, d_tgt, N, V, 0.125f);
    float *gd = fetch(d_dlogits, n, "xent_bwd");
    snprintf(what, sizeof what, "softmax_xent_bwd N=%d V=%d", N, V);
    compare_bits(what, gd, dlogits, n * 4, 4);

    free(logits), free(tgt), free(probs), free(losses), free(gp), free(gp2), free(gl2), free(gl1), free(dlogits);
    free(gd);
    dfree_all();
}

static void test_adamw(size_t n) {
    float *p = frand(n, -1, 1), *m = frand(n, -0.1f, 0.1f), *v = frand(n, 0, 0.01f);
    float *d_p = dcopyf(p, n), *d_m = dcopyf(m, n), *d_v = dcopyf(v, n);
    for (int t = 1; t <= 3; t++) {
        float *g = frand(n, -1, 1), *d_g = dcopyf(g, n);
        float wd = t == 2 ? 0.0f : 0.1f;
        g_cpu->ops->adamw(&g_cs, p, g, m, v, n, 1e-2f, 0.9f, 0.95f, 1e-8f, wd, t);
        g_gpu->ops->adamw(&g_gs, d_p, d_g, d_m, d_v, n, 1e-2f, 0.9f, 0.95f, 1e-8f, wd, t);
        free(g);
    }
    float *gp = fetch(d_p, n, "adamw"), *gm = fetch(d_m, n, "adamw"), *gv = fetch(d_v, n, "adamw");
    compare("adamw p (3 steps)", gp, p, n, TOL);
    compare_bits("adamw p (3 steps)", gp, p, n * 4, 4);
    compare_bits("adamw m", gm, m, n * 4, 4);
    compare_bits("adamw v", gv, v, n * 4, 4);
    free(p), free(m), free(v), free(gp), free(gm), free(gv);
    dfree_all();
}

/* SGD with momentum (and Nesterov, and without weight decay on step 2), 3 steps, bit for bit. */
static void test_sgd(size_t n) {
    float *p = frand(n, -1, 1), *m = frand(n, -0.1f, 0.1f);
    float *d_p = dcopyf(p, n), *d_m = dcopyf(m, n);
    for (int t = 1; t <= 3; t++) {
        float *g = frand(n, -1, 1), *d_g = dcopyf(g, n);
        float wd = t == 2 ? 0.0f : 0.1f;
        g_cpu->ops->sgd(&g_cs, p, g, m, n, 0.05f, 0.9f, t == 3, wd);
        g_gpu->ops->sgd(&g_gs, d_p, d_g, d_m, n, 0.05f, 0.9f, t == 3, wd);
        free(g);
    }
    float *gp = fetch(d_p, n, "sgd"), *gm = fetch(d_m, n, "sgd");
    compare_bits("sgd p (3 steps)", gp, p, n * 4, 4);
    compare_bits("sgd momentum", gm, m, n * 4, 4);
    free(p), free(m), free(gp), free(gm);
    dfree_all();
}

/* 8-bit AdamW, 3 steps with weight decay, bit for bit: p, the codes and
 * the scales. n = two full quantization blocks and a partial one: the full
 * blocks start from random codes and scales, the partial one from a zero
 * state with zero gradients, so its maxima stay 0 (the branch that encodes
 * 0 without dividing). */
static void test_adam8bit(size_t n) {
    size_t nb = zt_qblocks(n), tail = (nb - 1) * ZT_QBLOCK;
    float *p = frand(n, -1, 1), *ms = frand(nb, 0.01f, 0.1f), *vs = frand(nb, 1e-4f, 1e-2f);
    uint8_t *m8 = xmalloc(n), *v8 = xmalloc(n);
    for (size_t i = 0; i < n; i++) {
        m8[i] = i < tail ? (uint8_t)rng_int(ZT_QCODES) : 127; /* 127: the signed map's 0 */
        v8[i] = i < tail ? (uint8_t)rng_int(ZT_QCODES) : 0;
    }
    ms[nb - 1] = vs[nb - 1] = 0.0f;
    float *d_p = dcopyf(p, n), *d_ms = dcopyf(ms, nb), *d_vs = dcopyf(vs, nb);
    uint8_t *d_m8 = dcopy(m8, n), *d_v8 = dcopy(v8, n);
    for (int t = 1; t <= 3; t++) {
        float *g = frand(n, -1, 1);
        for (size_t i = tail; i < n; i++) g[i] = 0.0f;
        float *d_g = dcopyf(g, n);
        g_cpu->ops->adam8bit(&g_cs, p, g, m8, v8, ms, vs, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
        g_gpu->ops->adam8bit(&g_gs, d_p, d_g, d_m8, d_v8, d_ms, d_vs, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
        free(g);
    }
    float *gp = fetch(d_p, n, "adam8bit"), *gms = fetch(d_ms, nb, "adam8bit"), *gvs = fetch(d_vs, nb, "adam8bit");
    uint8_t *gm8 = xmalloc(n), *gv8 = xmalloc(n);
    d2h(gm8, d_m8, n);
    d2h(gv8, d_v8, n);
    compare_bits("adam8bit p (3 steps)", gp, p, n * 4, 4);
    compare_bits("adam8bit m codes", gm8, m8, n, 1);
    compare_bits("adam8bit v codes", gv8, v8, n, 1);
    compare_bits("adam8bit m scales", gms, ms, nb * 4, 4);
    compare_bits("adam8bit v scales", gvs, vs, nb * 4, 4);
    CHECK(ms[nb - 1] == 0.0f && vs[nb - 1] == 0.0f && ms[0] > 0.0f && vs[0] > 0.0f,
          "adam8bit: the zero block's scales %g %g, the first block's %g %g", (double)ms[nb - 1],
          (double)vs[nb - 1], (double)ms[0], (double)vs[0]);
    free(p), free(ms), free(vs), free(m8), free(v8), free(gp), free(gms), free(gvs), free(gm8), free(gv8);
    dfree_all();
}

/* factor_stats over an R x C matrix's elements [C/2 + 3, R C - 7) in three
 * pieces: the first and last begin or end inside a row, the middle one lies
 * inside one row (so it misses most columns). The GPU's pieces, the CPU's
 * pieces and the CPU's whole range give the same bits. The negative twin:
 * the columns summed bottom-up instead differ, so these sums do tell the
 * element order from another. */
static void test_factor_stats(int R, int C) {
    size_t cols = (size_t)C, lo = cols / 2 + 3, hi = (size_t)R * cols - 7, a = 5 * cols + 17, b = a + 10;
    size_t cut[4] = {lo, a, b, hi};
    float eps1 = 1e-3f;
    float *g = frand(hi, -1, 1), *row = frand(R, 0, 1), *col = frand(C, 0, 1);
    float *row1 = fdup(row, R), *col1 = fdup(col, C);
    float *d_g = dcopyf(g, hi), *d_row = dcopyf(row, R), *d_col = dcopyf(col, C);
    float *rev = fdup(col, C);
    for (int j = 0; j < C; j++)
        for (int i = R - 1; i >= 0; i--) {
            size_t e = (size_t)i * cols + j;
            if (e >= lo && e < hi) rev[j] += g[e] * g[e] + eps1;
        }
    g_cpu->ops->factor_stats(&g_cs, row1, col1, g + lo, hi - lo, lo, cols, eps1);
    for (int k = 0; k < 3; k++) {
        size_t at = cut[k], n = cut[k + 1] - at;
        g_cpu->ops->factor_stats(&g_cs, row, col, g + at, n, at, cols, eps1);
        g_gpu->ops->factor_stats(&g_gs, d_row, d_col, d_g + at, n, at, cols, eps1);
    }
    float *grow = fetch(d_row, R, "factor_stats"), *gcol = fetch(d_col, C, "factor_stats");
    compare_bits("factor_stats rows (3 pieces)", grow, row, (size_t)R * 4, 4);
    compare_bits("factor_stats cols (3 pieces)", gcol, col, cols * 4, 4);
    compare_bits("factor_stats rows: CPU pieces as the whole", row, row1, (size_t)R * 4, 4);
    compare_bits("factor_stats cols: CPU pieces as the whole", col, col1, cols * 4, 4);
    CHECK(memcmp(rev, col, cols * 4) != 0, "factor_stats: columns summed bottom-up give the same bits");
    free(g), free(row), free(col), free(row1), free(col1), free(rev), free(grow), free(gcol);
    dfree_all();
}

/* adafactor_precondition over elements [at, at + n) of an R x C matrix:
 * factored (u only), then unfactored with store_v 0 and 1 (u and v), bit
 * for bit; u is poisoned on both sides. */
static void test_adafactor_precondition(int R, int C, size_t at, size_t n) {
    float *g = frand(n, -1, 1), *rfac = frand(R, 0.5f, 2.0f), *cfac = frand(C, 0.5f, 2.0f);
    float *d_g = dcopyf(g, n), *d_rfac = dcopyf(rfac, R), *d_cfac = dcopyf(cfac, C);
    float *u = fnan(n), *d_u = dnan(n);
    g_cpu->ops->adafactor_precondition(&g_cs, u, g, NULL, rfac, cfac, n, at, (size_t)C, 0.0f, 0.0f, 0);
    g_gpu->ops->adafactor_precondition(&g_gs, d_u, d_g, NULL, d_rfac, d_cfac, n, at, (size_t)C, 0.0f, 0.0f, 0);
    float *gu = fetch(d_u, n, "adafactor_precondition");
    compare_bits("adafactor_precondition factored u", gu, u, n * 4, 4);
    free(u), free(gu);
    for (int store_v = 0; store_v < 2; store_v++) {
        char what[96];
        float *v = frand(n, 0, 0.01f), *d_v = dcopyf(v, n);
        u = fnan(n);
        d_u = dnan(n);
        g_cpu->ops->adafactor_precondition(&g_cs, u, g, v, NULL, NULL, n, at, (size_t)C, 0.8f, 1e-30f, store_v);
        g_gpu->ops->adafactor_precondition(&g_gs, d_u, d_g, d_v, NULL, NULL, n, at, (size_t)C, 0.8f, 1e-30f,
                                           store_v);
        float *gu2 = fetch(d_u, n, "adafactor_precondition"), *gv = fetch(d_v, n, "adafactor_precondition");
        snprintf(what, sizeof what, "adafactor_precondition unfactored u (store_v %d)", store_v);
        compare_bits(what, gu2, u, n * 4, 4);
        snprintf(what, sizeof what, "adafactor_precondition unfactored v (store_v %d)", store_v);
        compare_bits(what, gv, v, n * 4, 4);
        free(v), free(u), free(gu2), free(gv);
    }
    free(g), free(rfac), free(cfac);
    dfree_all();
}

/* adafactor_apply with momentum (p and m) and without (m NULL), bit for bit. */
static void test_adafactor_apply(size_t n) {
    for (int with_m = 0; with_m < 2; with_m++) {
        char what[96];
        float *p = frand(n, -1, 1), *u = frand(n, -1, 1), *m = with_m ? frand(n, -0.1f, 0.1f) : NULL;
        float *d_p = dcopyf(p, n), *d_u = dcopyf(u, n), *d_m = m ? dcopyf(m, n) : NULL;
        g_cpu->ops->adafactor_apply(&g_cs, p, u, m, n, 1e-2f, 0.9f, 1e-3f);
        g_gpu->ops->adafactor_apply(&g_gs, d_p, d_u, d_m, n, 1e-2f, 0.9f, 1e-3f);
        float *gp = fetch(d_p, n, "adafactor_apply");
        snprintf(what, sizeof what, "adafactor_apply p (%s m)", with_m ? "with" : "without");
        compare_bits(what, gp, p, n * 4, 4);
        if (m) {
            float *gm = fetch(d_m, n, "adafactor_apply");
            compare_bits("adafactor_apply m", gm, m, n * 4, 4);
            free(gm);
        }
        free(p), free(u), free(m), free(gp);
        dfree_all();
    }
}

/* ops->cast in each 16-bit dtype, bit for bit against the CPU: fp32 -> d on
 * random values over many exponents and hand-picked ones (NaN, infinities,
 * signed zeros, bf16 and fp16 ties to even, the largest finite, fp16's
 * overflow and subnormal range), then d -> fp32 on every pattern. */
static void test_casts(zt_dtype d) {
    char what[96];
    const char *dn = zt_dtype_name(d);
    size_t n = 100000;
    float *x = falloc(n); /* [n] fp32 */
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)rng_next();
        if (d == ZT_FP16 && i % 2) /* exponent 2^-15 .. 2^16: fp16's subnormals to its overflow */
            u = (u & 0x807fffffu) | ((112u + (u >> 23) % 32u) << 23);
        memcpy(&x[i], &u, 4);
    }
    const uint32_t special[] = {0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7f800000u, 0xff800000u, 0x00000000u,
                                0x80000000u, 0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7f7fffffu, 0x00000001u,
                                0x3f7fffffu, 0xbf808000u, 0x3f801000u, 0x3f803000u, 0x477fe000u, 0x477ff000u,
                                0x477fefffu, 0x33000000u, 0x33000001u, 0x387fc000u, 0x38800000u, 0xb3800000u};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) memcpy(&x[i], &special[i], 4);
    uint16_t *h = xmalloc(n * 2), *gh = xmalloc(n * 2); /* [n] d */
    float *d_x = dcopyf(x, n);
    uint16_t *d_h = dalloc(n * 2);
    g_cpu->ops->cast(&g_cs, h, d, x, ZT_FP32, n);
    g_gpu->ops->cast(&g_gs, d_h, d, d_x, ZT_FP32, n);
    gsync("cast");
    d2h(gh, d_h, n * 2);
    snprintf(what, sizeof what, "cast fp32 -> %s", dn);
    compare_bits(what, gh, h, n * 2, 2);

    /* d -> fp32: every pattern. */
    size_t np = 65536;
    uint16_t *pat = xmalloc(np * 2); /* [65536] d */
    for (size_t i = 0; i < np; i++) pat[i] = (uint16_t)i;
    float *f = fnan(np), *d_f = dnan(np);
    uint16_t *d_pat = dcopy(pat, np * 2);
    g_cpu->ops->cast(&g_cs, f, ZT_FP32, pat, d, np);
    g_gpu->ops->cast(&g_gs, d_f, ZT_FP32, d_pat, d, np);
    float *gf = fetch(d_f, np, "cast");
    snprintf(what, sizeof what, "cast %s -> fp32 (all 65536 patterns)", dn);
    compare_bits(what, gf, f, np * 4, 4);
    free(x), free(h), free(gh), free(pat), free(f), free(gf);
    dfree_all();
}

/* ops->cast_sr (stochastic rounding to bf16) bit for bit against the CPU,
 * on random values of every exponent with the special ones first, with a
 * key whose first index is not 0 (the bits follow the element's index). */
static void test_cast_sr(void) {
    size_t n = 100000;
    float *x = falloc(n); /* [n] fp32 */
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)rng_next();
        memcpy(&x[i], &u, 4);
    }
    const uint32_t special[] = {0x7fc00000u, 0x7f800000u, 0xff800000u, 0x00000000u, 0x80000000u, 0x7f7fffffu};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) memcpy(&x[i], &special[i], 4);
    zt_sr_key key = {1234, 7, zt_sr_tensor(3, 1), 1000003};
    uint16_t *h = xmalloc(n * 2), *gh = xmalloc(n * 2), *d_h = dalloc(n * 2); /* [n] bf16 */
    float *d_x = dcopyf(x, n);
    g_cpu->ops->cast_sr(&g_cs, h, x, n, key);
    g_gpu->ops->cast_sr(&g_gs, d_h, d_x, n, key);
    gsync("cast_sr");
    d2h(gh, d_h, n * 2);
    compare_bits("cast_sr fp32 -> bf16", gh, h, n * 2, 2);
    free(x), free(h), free(gh);
    dfree_all();
}

/* ops->wire_quantize and wire_dequantize (quantized communication's
 * codes, zt_wire.h) bit for bit against the CPU: int8 and int4 over an odd
 * tail, from bf16, with fp32 feedback in and out, a block holding NaN and
 * one of zeros; the device's decoding of the CPU's codes into bf16. */
static void test_wire(int bits) {
    size_t n = 5000, block = 256, nb = zt_wire_nblocks(n, block), cb = zt_wire_scales_at(n, bits);
    uint16_t *x = xmalloc(n * 2); /* [n] bf16 */
    float *fb = frand(n, -0.01f, 0.01f);
    for (size_t i = 0; i < n; i++) zt_dtype_store(x, ZT_BF16, i, i < block ? 0.0f : rng_uniform(-3.0f, 3.0f));
    zt_dtype_store(x, ZT_BF16, 3 * block + 7, NAN);
    for (size_t i = 0; i < block; i++) fb[i] = 0.0f;
    uint8_t *codes = xmalloc(cb), *gcodes = xmalloc(cb), *d_codes = dalloc(cb);
    float *scales = falloc(nb), *d_scales = dalloc(nb * 4), *d_fb = dcopyf(fb, n);
    uint16_t *d_x = dalloc(n * 2);
    h2d(d_x, x, n * 2);
    g_cpu->ops->wire_quantize(&g_cs, codes, scales, x, ZT_BF16, fb, ZT_FP32, n, bits, (unsigned)block);
    g_gpu->ops->wire_quantize(&g_gs, d_codes, d_scales, d_x, ZT_BF16, d_fb, ZT_FP32, n, bits, (unsigned)block);
    gsync("wire_quantize");
    d2h(gcodes, d_codes, cb);
    char what[64];
    snprintf(what, sizeof what, "wire_quantize int%d codes", bits);
    compare_bits(what, gcodes, codes, bits == 4 ? (n + 1) / 2 : n, 1);
    float *gscales = fetch(d_scales, nb, "wire scales"), *gfb = fetch(d_fb, n, "wire feedback");
    snprintf(what, sizeof what, "wire_quantize int%d scales", bits);
    compare_bits(what, gscales, scales, nb * 4, 4);
    snprintf(what, sizeof what, "wire_quantize int%d feedback", bits);
    compare_bits(what, gfb, fb, n * 4, 4);
    uint16_t *y = xmalloc(n * 2), *gy = xmalloc(n * 2), *d_y = dalloc(n * 2);
    h2d(d_codes, codes, cb);
    h2d(d_scales, scales, nb * 4);
    g_cpu->ops->wire_dequantize(&g_cs, y, ZT_BF16, codes, scales, n, bits, (unsigned)block);
    g_gpu->ops->wire_dequantize(&g_gs, d_y, ZT_BF16, d_codes, d_scales, n, bits, (unsigned)block);
    gsync("wire_dequantize");
    d2h(gy, d_y, n * 2);
    snprintf(what, sizeof what, "wire_dequantize int%d -> bf16", bits);
    compare_bits(what, gy, y, n * 2, 2);
    free(x), free(fb), free(codes), free(gcodes), free(scales), free(gscales), free(gfb), free(y), free(gy);
    dfree_all();
}

/* ops->newton_schulz on the device against the CPU's, wide and tall: the
 * same steps in fp32 GEMMs that sum in other orders, so within 1e-4 of the
 * output's largest value (the iteration keeps singular values near 1: a
 * wrong transpose, coefficient or norm is off by O(1)). */
static void test_newton_schulz(size_t rows, size_t cols) {
    const float coef[3] = {3.4445f, -4.7750f, 2.0315f};
    size_t n = rows * cols, sn = zt_newton_schulz_scratch(rows, cols);
    float *x = frand(n, -1, 1), *scratch = falloc(sn);
    float *d_x = dcopyf(x, n), *d_scratch = dalloc(sn * sizeof(float));
    g_cpu->ops->newton_schulz(&g_cs, x, rows, cols, 5, coef, 1e-7f, scratch);
    g_gpu->ops->newton_schulz(&g_gs, d_x, rows, cols, 5, coef, 1e-7f, d_scratch);
    float *got = fetch(d_x, n, "newton_schulz");
    double worst = 0.0, largest = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (fabs(x[i]) > largest) largest = fabs(x[i]);
        if (!(fabs(got[i] - x[i]) <= worst)) worst = fabs(got[i] - x[i]);
    }
    CHECK(worst <= 1e-4 * largest, "newton_schulz [%zu, %zu]: device differs from the CPU by %g (largest %g)", rows,
          cols, worst, largest);
    printf("ok newton_schulz [%zu, %zu]: within %.2g of the CPU (largest %.3g)\n", rows, cols, worst, largest);
    free(x), free(scratch), free(got);
    dfree_all();
}

static void test_sum_squares(size_t n) {
    float *x = frand(n, -2, 2), *d_x = dcopyf(x, n);
    double cpu = -1.0, gpu_host = -1.0, gpu_host2 = -1.0, gpu_dev = -1.0;
    g_cpu->ops->sum_squares(&g_cs, &cpu, x, n);
    g_gpu->ops->sum_squares(&g_gs, &gpu_host, d_x, n); /* host pointer: valid on return */
    g_gpu->ops->sum_squares(&g_gs, &gpu_host2, d_x, n);
    double *d_res = dalloc(sizeof(double));
    g_gpu->ops->sum_squares(&g_gs, d_res, d_x, n); /* device pointer: valid after a sync */
    gsync("sum_squares");
    d2h(&gpu_dev, d_res, sizeof(double));
    double rel = fabs(gpu_host - cpu) / (cpu > 0 ? cpu : 1.0);
    CHECK(n == 0 ? gpu_host == 0.0 : rel <= 1e-12, "sum_squares n=%zu: gpu %.17g cpu %.17g (rel %.3g)", n, gpu_host,
          cpu, rel);
    CHECK(memcmp(&gpu_host, &gpu_host2, sizeof(double)) == 0 && memcmp(&gpu_host, &gpu_dev, sizeof(double)) == 0,
          "sum_squares n=%zu: runs differ: %.17g %.17g %.17g", n, gpu_host, gpu_host2, gpu_dev);
    if (n == 0 ? gpu_host == 0.0 : rel <= 1e-12)
        printf("ok sum_squares n=%zu (rel err %.2e; host and device results, repeat: same bits)\n", n, rel);
    free(x);
    dfree_all();
}

/* Row-major reference in double of C = alpha op(A) op(B) + beta C0. */
static void gemm_ref(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                     int ldb, float beta, const float *C0, int ldc, double *out) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = 0.0;
            for (int k = 0; k < K; k++) {
                double a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                double b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                acc += a * b;
            }
            out[(size_t)i * N + j] = alpha * acc + (double)beta * C0[(size_t)i * ldc + j];
        }
}

static void test_gemm_bf16(int M, int N, int K) {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int cbf = 0; cbf < 2; cbf++) {
                int lda = ta ? M : K, ldb = tb ? K : N, ldc = N;
                size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
                /* Inputs already bf16-representable, so the reference sees what the GPU sees. */
                zt_bf16 *a = xmalloc(na * 2), *b = xmalloc(nb * 2), *c16 = xmalloc(nc * 2);
                float *af = falloc(na), *bf = falloc(nb), *c0 = falloc(nc);
                for (size_t i = 0; i < na; i++) af[i] = zt_bf16_to_f32(a[i] = zt_f32_to_bf16(rng_uniform(-1, 1)));
                for (size_t i = 0; i < nb; i++) bf[i] = zt_bf16_to_f32(b[i] = zt_f32_to_bf16(rng_uniform(-1, 1)));
                for (size_t i = 0; i < nc; i++) c0[i] = zt_bf16_to_f32(c16[i] = zt_f32_to_bf16(rng_uniform(-1, 1)));
                double *ref = xmalloc(nc * sizeof(double));
                gemm_ref(ta, tb, M, N, K, 1.5f, af, lda, bf, ldb, 0.5f, c0, ldc, ref);
                void *d_a = dcopy(a, na * 2), *d_b = dcopy(b, nb * 2);
                void *d_c = cbf ? dcopy(c16, nc * 2) : dcopy(c0, nc * 4);
                zt_error err;
                zt_error_clear(&err);
                zt_status st = zt_cuda_gemm_bf16(&g_gs, ta, tb, M, N, K, 1.5f, d_a, lda, d_b, ldb, 0.5f, d_c,
                                                 cbf ? ZT_BF16 : ZT_FP32, ldc, &err);
                CHECK(st == ZT_OK, "zt_cuda_gemm_bf16: %s", err.msg);
                gsync("gemm_bf16");
                float *got = falloc(nc), *want = falloc(nc);
                if (cbf) {
                    d2h(c16, d_c, nc * 2);
                    for (size_t i = 0; i < nc; i++) got[i] = zt_bf16_to_f32(c16[i]);
                } else {
                    d2h(got, d_c, nc * 4);
                }
                for (size_t i = 0; i < nc; i++) want[i] = (float)ref[i];
                char what[96];
                snprintf(what, sizeof what, "gemm_bf16 M=%d N=%d K=%d ta=%d tb=%d out=%s", M, N, K, ta, tb,
                         cbf ? "bf16" : "fp32");
                /* bf16 output: one rounding to 8 significant bits. */
                compare(what, got, want, nc, cbf ? 8e-3 : TOL);
                free(a), free(b), free(c16), free(af), free(bf), free(c0), free(ref), free(got), free(want);
                dfree_all();
            }
}

static void test_backend_basics(void) {
    zt_error err;
    zt_error_clear(&err);
    size_t fb = 0, tb = 0;
    zt_status st = g_gpu->mem_info(g_gpu, &fb, &tb, &err);
    CHECK(st == ZT_OK && fb > 0 && tb >= fb, "mem_info: status %d free %zu total %zu (%s)", (int)st, fb, tb, err.msg);
    CHECK(g_gs.handle != NULL, "zt_backend_stream: the CUDA stream handle is NULL");
    CHECK(g_gpu->device == ZT_DEVICE_CUDA && strcmp(g_gpu->name, "cuda") == 0, "backend identity");
    /* memset_async, then a device-to-device copy. */
    size_t n = 1000;
    float *d_a = dalloc(n * 4), *d_b = dnan(n), *h = falloc(n);
    st = g_gpu->memset_async(g_gpu, d_a, 0, n * 4, &g_gs, &err);
    if (st == ZT_OK) st = g_gpu->memcpy_async(g_gpu, d_b, d_a, n * 4, ZT_COPY_D2D, &g_gs, &err);
    CHECK(st == ZT_OK, "memset/memcpy: %s", err.msg);
    d2h(h, d_b, n * 4);
    int zeros = 1;
    for (size_t i = 0; i < n; i++) zeros &= h[i] == 0.0f;
    CHECK(zeros, "memset_async + D2D copy: not all zeros");
    free(h);
    dfree_all();
    if (!g_failures) printf("ok backend basics (mem_info free %zu of %zu bytes)\n", fb, tb);
}

/* A kernel launch that fails inside a (void) zt_ops call (attention backward
 * asking for more shared memory than any GPU has, so nothing runs) is reported
 * by the next stream_sync with its file:line, and keeps being reported; other
 * backends are unaffected. */
/* Events order streams without the host: a long chain of kernels on the
 * compute stream writes a buffer; a second stream waits on an event and
 * copies it out; the host waits only on the second stream's event. Without
 * the wait the copy would overtake the kernels and read the poison. */
static void test_stream_ordering(void) {
    zt_error err;
    zt_error_clear(&err);
    size_t n = (size_t)1 << 24; /* 64 MiB: the chain takes far longer than a launch */
    float *d = dnan(n);
    float *host = NULL;
    CHECK(cudaMallocHost((void **)&host, n * sizeof(float)) == cudaSuccess, "cudaMallocHost");
    if (!host) return;
    for (size_t i = 0; i < n; i++) host[i] = -1.0f;
    zt_stream side;
    CHECK(zt_stream_create(g_gpu, &side, &err) == ZT_OK, "zt_stream_create: %s", err.msg);
    CHECK(side.handle != NULL && side.handle != g_gs.handle, "a second stream has its own handle");
    float *ones = frand(n, 1.0f, 1.0f);
    h2d(d, ones, n * sizeof(float));
    gsync("stream ordering setup");
    dpoison(d, n); /* NaN, on compute */
    h2d(d, ones, n * sizeof(float));
    for (int k = 0; k < 20; k++) g_gpu->ops->scale(&g_gs, d, 1.0f + (float)(k % 2), n); /* ones -> 2^10 */
    void *ev = NULL;
    CHECK(zt_event_record(g_gpu, &g_gs, &ev, &err) == ZT_OK && ev, "zt_event_record: %s", err.msg);
    CHECK(zt_stream_wait_event(g_gpu, &side, ev, &err) == ZT_OK, "zt_stream_wait_event: %s", err.msg);
    zt_event_destroy(g_gpu, ev); /* the wait keeps its point */
    CHECK(g_gpu->memcpy_async(g_gpu, host, d, n * sizeof(float), ZT_COPY_D2H, &side, &err) == ZT_OK, "copy: %s",
          err.msg);
    void *done = NULL;
    CHECK(zt_event_record(g_gpu, &side, &done, &err) == ZT_OK, "record on the side stream: %s", err.msg);
    CHECK(zt_event_sync(g_gpu, done, &err) == ZT_OK, "zt_event_sync: %s", err.msg);
    zt_event_destroy(g_gpu, done);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += host[i] != 1024.0f;
    CHECK(bad == 0, "stream ordering: %zu of %zu values copied before the kernels finished", bad, n);
    /* zt_stream_after is the same through one call. */
    dpoison(d, n);
    CHECK(zt_stream_after(g_gpu, &side, &g_gs, &err) == ZT_OK, "zt_stream_after: %s", err.msg);
    CHECK(g_gpu->memcpy_async(g_gpu, host, d, n * sizeof(float), ZT_COPY_D2H, &side, &err) == ZT_OK, "copy");
    CHECK(g_gpu->stream_sync(g_gpu, &side, &err) == ZT_OK, "sync the side stream: %s", err.msg);
    CHECK(host[0] != host[0] && host[n - 1] != host[n - 1], "zt_stream_after: the copy saw the poison");
    zt_stream_destroy(g_gpu, &side);
    cudaFreeHost(host);
    free(ones);
}

static void test_sticky_error(void) {
    zt_backend *be = NULL;
    zt_error err;
    zt_error_clear(&err);
    if (zt_backend_cuda_create(1, 0, &be, &err) != ZT_OK) die_status("second CUDA backend", &err);
    zt_stream s = zt_backend_stream(be);
    zt_status st = be->stream_sync(be, &s, &err);
    CHECK(st == ZT_OK, "fresh backend: sync failed: %s", err.msg);
    be->ops->attention_bwd(&s, NULL, NULL, NULL, NULL, NULL, 1, 1 << 20, 32, 1, NULL, 0); /* 4 MiB of shared memory */
    zt_error_clear(&err);
    st = be->stream_sync(be, &s, &err);
    CHECK(st != ZT_OK && err.file && strstr(err.file, "ops_attention") != NULL,
          "failed launch: sync gave status %d, %s:%d: %s", (int)st, err.file ? err.file : "?", err.line, err.msg);
    printf("sticky error reported as: %s:%d: %s\n", err.file ? err.file : "?", err.line, err.msg);
    zt_error_clear(&err);
    CHECK(be->stream_sync(be, &s, &err) != ZT_OK, "the sticky error was reported only once");
    zt_backend_destroy(be);
    zt_error_clear(&err);
    CHECK(g_gpu->stream_sync(g_gpu, &g_gs, &err) == ZT_OK, "the other backend sees the error: %s", err.msg);
    if (!g_failures) printf("ok sticky error\n");
}

/* ---- the bf16 and fp16 tables ------------------------------------------------
 * Each op of the CUDA table of dtype dt against the CPU's table of the same
 * dtype (be->ops_for[dt] of each backend), on the same 16-bit inputs. The two
 * sum in different orders (cuBLASLt's or a block's tree against the CPU's
 * loops) and then round once each, so a 16-bit output may differ by an ulp
 * where the fp32 sums straddle a rounding boundary. Bounds, per tensor:
 *   16-bit outputs   max |gpu - cpu| <= ULPS16 ulps of max |cpu| (the ulp of
 *                    the largest reference value: 2^-7 x its power of two in
 *                    bf16, 2^-10 in fp16);
 *   fp32 outputs     (mean, rstd, lse, D, losses, dw, db, dbias) the normwise
 *                    TOL of the fp32 tests: both sides widen the same 16-bit
 *                    values exactly and sum in fp32;
 *   bit for bit      where both do the same fp32 operations in the same
 *                    order: embedding forward and backward, residual forward
 *                    and backward, softmax_xent backward.
 * attention's forward output is att V, which the GPU multiplies from the
 * rounded probabilities and the CPU from its fp32 ones: the same bound
 * holds (the rounding errors of T probabilities mostly cancel). The CPU's
 * attention backward gets a scratch for its fp32 gradient sums (one rounding,
 * as the GPU's kernels), else it would round after every term.
 * Each metric also proves it can fail: a copy of the CPU's result with one
 * element moved by 4 ulps must be rejected. */
#define ULPS16 2.0

static const zt_ops *cpu16(zt_dtype dt) { return g_cpu->ops_for[dt]; }
static const zt_ops *gpu16(zt_dtype dt) { return g_gpu->ops_for[dt]; }
static size_t esz(zt_dtype dt) { return zt_dtype_size(dt); }

/* n random values in [lo, hi) rounded to dt, as a host buffer of dt. */
static void *hrand(zt_dtype dt, size_t n, float lo, float hi) {
    void *p = xmalloc(n * esz(dt));
    for (size_t i = 0; i < n; i++) zt_dtype_store(p, dt, i, rng_uniform(lo, hi));
    return p;
}
static void *hnan(zt_dtype dt, size_t n) {
    void *p = xmalloc(n * esz(dt));
    for (size_t i = 0; i < n; i++) zt_dtype_store(p, dt, i, NAN);
    return p;
}
static void *hdup(const void *x, size_t bytes) {
    void *p = xmalloc(bytes);
    memcpy(p, x, bytes);
    return p;
}
static void *dnan16(zt_dtype dt, size_t n) {
    void *h = hnan(dt, n), *d = dcopy(h, n * esz(dt));
    free(h);
    return d;
}
static void *fetch_bytes(const void *d, size_t bytes, const char *what) {
    gsync(what);
    void *h = xmalloc(bytes);
    d2h(h, d, bytes);
    return h;
}
static float *widen(zt_dtype dt, const void *p, size_t n) {
    float *f = falloc(n);
    for (size_t i = 0; i < n; i++) f[i] = zt_dtype_load(p, dt, i);
    return f;
}

/* The ulp of |x| in dt (the subnormal spacing below the normal range). */
static double ulp16(zt_dtype dt, double x) {
    int e;
    if (!(x > 0)) return dt == ZT_FP16 ? ldexp(1, -24) : ldexp(1, -133);
    frexp(x, &e); /* x = f 2^e, f in [0.5, 1) */
    if (dt == ZT_FP16) return ldexp(1, (e - 1 < -14 ? -14 : e - 1) - 10);
    return ldexp(1, e - 1 - 7);
}

/* max |gpu - cpu| in ulps of max |cpu| (dt values); NaN when one side only
 * is NaN. */
static double ulps_err(zt_dtype dt, const void *gpu, const void *cpu, size_t n, size_t *worst) {
    double scale = 0, e = 0;
    *worst = 0;
    for (size_t i = 0; i < n; i++) {
        double c = zt_dtype_load(cpu, dt, i);
        if (isfinite(c)) scale = fmax(scale, fabs(c));
    }
    for (size_t i = 0; i < n; i++) {
        double g = zt_dtype_load(gpu, dt, i), c = zt_dtype_load(cpu, dt, i);
        if (isnan(g) != isnan(c)) return *worst = i, NAN;
        if (isnan(c)) continue;
        if (fabs(g - c) > e) e = fabs(g - c), *worst = i;
    }
    return e / ulp16(dt, scale);
}

static void compare16(const char *what, zt_dtype dt, const void *gpu, const void *cpu, size_t n, double max_ulps) {
    size_t w;
    double u = ulps_err(dt, gpu, cpu, n, &w);
    CHECK(u <= max_ulps, "%s %s: n=%zu, err %.3g ulps of max|cpu| (bound %.1f) worst at %zu: gpu %.9g cpu %.9g",
          what, zt_dtype_name(dt), n, u, max_ulps, w, n ? zt_dtype_load(gpu, dt, w) : 0.0,
          n ? zt_dtype_load(cpu, dt, w) : 0.0);
    if (u <= max_ulps) printf("ok %s %s (%.2f ulps of max|cpu|)\n", what, zt_dtype_name(dt), u);
    /* The negative twin: 4 ulps off at one element is rejected. */
    if (n && u <= max_ulps) {
        void *bad = hdup(cpu, n * esz(dt));
        size_t i = n / 2;
        double c = zt_dtype_load(cpu, dt, i);
        if (isfinite(c)) {
            double scale = 0;
            for (size_t j = 0; j < n; j++) {
                double x = zt_dtype_load(cpu, dt, j);
                if (isfinite(x)) scale = fmax(scale, fabs(x));
            }
            zt_dtype_store(bad, dt, i, (float)(c + 4 * ulp16(dt, scale)));
            CHECK(!(ulps_err(dt, bad, cpu, n, &w) <= max_ulps), "%s %s: a 4-ulp error passed the check", what,
                  zt_dtype_name(dt));
        }
        free(bad);
    }
}
/* Fetches a device tensor of dt and compares it with the CPU's. */
static void check16(const char *what, zt_dtype dt, const void *d, const void *cpu, size_t n, double max_ulps) {
    void *g = fetch_bytes(d, n * esz(dt), what);
    compare16(what, dt, g, cpu, n, max_ulps);
    free(g);
}
static void check16_bits(const char *what, zt_dtype dt, const void *d, const void *cpu, size_t n) {
    char w[160];
    void *g = fetch_bytes(d, n * esz(dt), what);
    snprintf(w, sizeof w, "%s %s", what, zt_dtype_name(dt));
    compare_bits(w, g, cpu, n * esz(dt), esz(dt));
    free(g);
}
static void check32(const char *what, zt_dtype dt, const float *d, const float *cpu, size_t n, double tol) {
    char w[160];
    float *g = fetch(d, n, what);
    snprintf(w, sizeof w, "%s %s", what, zt_dtype_name(dt));
    compare(w, g, cpu, n, tol);
    free(g);
}
/* A second GPU run over the device buffer d (refilled by the caller) gave
 * the bits `first` holds. */
static void check_repeat16(const char *what, const void *d, const void *first, size_t bytes) {
    void *g = fetch_bytes(d, bytes, what);
    CHECK(memcmp(g, first, bytes) == 0, "%s: two GPU runs differ in bits", what);
    free(g);
}

static void test16_embedding(zt_dtype dt, int B, int T, int C, int V) {
    size_t BT = (size_t)B * T, n = BT * C, e = esz(dt);
    int32_t *tok = irand(BT, V), *d_tok = dcopy(tok, BT * sizeof(int32_t));
    void *wte = hrand(dt, (size_t)V * C, -1, 1), *wpe = hrand(dt, (size_t)T * C, -1, 1);
    void *d_wte = dcopy(wte, (size_t)V * C * e), *d_wpe = dcopy(wpe, (size_t)T * C * e);
    void *out = hnan(dt, n), *d_out = dnan16(dt, n);
    cpu16(dt)->embedding_fwd(&g_cs, out, tok, wte, wpe, B, T, C);
    gpu16(dt)->embedding_fwd(&g_gs, d_out, d_tok, d_wte, d_wpe, B, T, C);
    check16_bits("embedding_fwd", dt, d_out, out, n);

    void *dout = hrand(dt, n, -1, 1), *d_dout = dcopy(dout, n * e);
    float *dwte = frand((size_t)V * C, -1, 1), *dwpe = frand((size_t)T * C, -1, 1);
    float *d_dwte = dcopyf(dwte, (size_t)V * C), *d_dwpe = dcopyf(dwpe, (size_t)T * C);
    cpu16(dt)->embedding_bwd(&g_cs, dwte, dwpe, dout, tok, B, T, C);
    gpu16(dt)->embedding_bwd(&g_gs, d_dwte, d_dwpe, d_dout, d_tok, B, T, C);
    check16_bits("embedding_bwd dwte (fp32)", ZT_FP32, d_dwte, dwte, (size_t)V * C);
    check16_bits("embedding_bwd dwpe (fp32)", ZT_FP32, d_dwpe, dwpe, (size_t)T * C);
    free(tok), free(wte), free(wpe), free(out), free(dout), free(dwte), free(dwpe);
    dfree_all();
}

static void test16_layernorm(zt_dtype dt, int N, int C) {
    size_t n = (size_t)N * C, e = esz(dt);
    char what[96];
    void *inp = hrand(dt, n, -2, 3), *w = hrand(dt, C, 0.5f, 1.5f), *b = hrand(dt, C, -0.5f, 0.5f);
    void *d_inp = dcopy(inp, n * e), *d_w = dcopy(w, C * e), *d_b = dcopy(b, C * e);
    void *out = hnan(dt, n), *d_out = dnan16(dt, n);
    float *mean = fnan(N), *rstd = fnan(N), *d_mean = dnan(N), *d_rstd = dnan(N);
    cpu16(dt)->layernorm_fwd(&g_cs, out, mean, rstd, inp, w, b, N, C);
    gpu16(dt)->layernorm_fwd(&g_gs, d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C);
    snprintf(what, sizeof what, "layernorm_fwd out N=%d C=%d", N, C);
    void *g_out = fetch_bytes(d_out, n * e, what);
    compare16(what, dt, g_out, out, n, ULPS16);
    check32("layernorm_fwd mean", dt, d_mean, mean, N, TOL);
    check32("layernorm_fwd rstd", dt, d_rstd, rstd, N, TOL);
    gpu16(dt)->layernorm_fwd(&g_gs, d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C);
    check_repeat16(what, d_out, g_out, n * e);

    void *dout = hrand(dt, n, -1, 1), *dinp = hrand(dt, n, -1, 1);
    float *dw = frand(C, -1, 1), *db = frand(C, -1, 1);
    void *d_dout = dcopy(dout, n * e), *d_dinp = dcopy(dinp, n * e);
    float *d_dw = dcopyf(dw, C), *d_db = dcopyf(db, C);
    h2d(d_mean, mean, N * sizeof(float));
    h2d(d_rstd, rstd, N * sizeof(float));
    cpu16(dt)->layernorm_bwd(&g_cs, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    gpu16(dt)->layernorm_bwd(&g_gs, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C);
    snprintf(what, sizeof what, "layernorm_bwd dinp N=%d C=%d", N, C);
    check16(what, dt, d_dinp, dinp, n, ULPS16);
    check32("layernorm_bwd dw", dt, d_dw, dw, C, TOL);
    check32("layernorm_bwd db", dt, d_db, db, C, TOL);
    free(inp), free(w), free(b), free(out), free(mean), free(rstd), free(g_out), free(dout), free(dinp);
    free(dw), free(db);
    dfree_all();
}

/* Device operands start `off` elements past an aligned address (2 bytes:
 * the bias cannot be fused, and cuBLASLt sees 2-byte alignment). */
static void test16_matmul(zt_dtype dt, int N, int C, int OC, int with_bias, int with_dinp, int off) {
    char what[160], tag[96];
    snprintf(tag, sizeof tag, "N=%d C=%d OC=%d bias=%d dinp=%d off=%d", N, C, OC, with_bias, with_dinp, off);
    size_t e = esz(dt), nin = (size_t)N * C, nw = (size_t)OC * C, nout = (size_t)N * OC, o = (size_t)off * e;
    uint64_t fallbacks0 = ((zt_cuda_impl *)g_gpu->impl)->lt_fallback_calls;
    void *inp = hrand(dt, nin, -1, 1), *w = hrand(dt, nw, -1, 1), *bias = hrand(dt, OC, -1, 1);
#define DAT(h, bytes) ((char *)dcopy_at((h), (bytes), o))
    char *d_inp = DAT(inp, nin * e), *d_w = DAT(w, nw * e), *d_bias = DAT(bias, OC * e);
    void *out = hnan(dt, nout), *hn = hnan(dt, nout);
    char *d_out = DAT(hn, nout * e);
    cpu16(dt)->matmul_fwd(&g_cs, out, inp, w, with_bias ? bias : NULL, N, C, OC);
    gpu16(dt)->matmul_fwd(&g_gs, d_out, d_inp, d_w, with_bias ? d_bias : NULL, N, C, OC);
    snprintf(what, sizeof what, "matmul_fwd %s", tag);
    void *g_out = fetch_bytes(d_out, nout * e, what);
    compare16(what, dt, g_out, out, nout, ULPS16);
    h2d(d_out, hn, nout * e);
    gpu16(dt)->matmul_fwd(&g_gs, d_out, d_inp, d_w, with_bias ? d_bias : NULL, N, C, OC);
    check_repeat16(what, d_out, g_out, nout * e);

    void *dout = hrand(dt, nout, -1, 1), *dinp = hrand(dt, nin, -1, 1), *dinp0 = hdup(dinp, nin * e);
    float *dw = frand(nw, -1, 1), *dbias = frand(OC, -1, 1);
    char *d_dout = DAT(dout, nout * e), *d_dinp = DAT(dinp, nin * e);
    float *d_dw = dcopyf(dw, nw), *d_dbias = dcopyf(dbias, OC);
    cpu16(dt)->matmul_bwd(&g_cs, with_dinp ? dinp : NULL, dw, with_bias ? dbias : NULL, dout, inp, w, N, C, OC);
    gpu16(dt)->matmul_bwd(&g_gs, with_dinp ? d_dinp : NULL, d_dw, with_bias ? d_dbias : NULL, d_dout, d_inp, d_w,
                          N, C, OC);
    snprintf(what, sizeof what, "matmul_bwd dinp %s", tag);
    void *g_dinp = fetch_bytes(d_dinp, nin * e, what);
    compare16(what, dt, g_dinp, dinp, nin, ULPS16);
    snprintf(what, sizeof what, "matmul_bwd dw %s", tag);
    check32(what, dt, d_dw, dw, nw, TOL);
    snprintf(what, sizeof what, "matmul_bwd dbias %s", tag);
    check32(what, dt, d_dbias, dbias, OC, TOL);
    h2d(d_dinp, dinp0, nin * e);
    gpu16(dt)->matmul_bwd(&g_gs, with_dinp ? d_dinp : NULL, d_dw, NULL, d_dout, d_inp, d_w, N, C, OC);
    snprintf(what, sizeof what, "matmul_bwd dinp %s", tag);
    check_repeat16(what, d_dinp, g_dinp, nin * e);
#undef DAT
    uint64_t fallbacks = ((zt_cuda_impl *)g_gpu->impl)->lt_fallback_calls - fallbacks0;
    if (getenv("ZT_EMU_LT_REFUSE"))
        CHECK(fallbacks > 0, "matmul %s %s: cuBLASLt refused every GEMM, yet no call fell back", tag,
              zt_dtype_name(dt));
    else if (off == 0 && C % 8 == 0 && OC % 8 == 0)
        CHECK(fallbacks == 0, "matmul %s %s: %llu GEMM calls found no cuBLASLt algorithm", tag, zt_dtype_name(dt),
              (unsigned long long)fallbacks);
    free(inp), free(w), free(bias), free(out), free(hn), free(g_out), free(dout), free(dinp), free(dinp0);
    free(dw), free(dbias), free(g_dinp);
    dfree_all();
}

/* attention_fwd, then attention_bwd both ways on the GPU (row kernels
 * without scratch; GEMMs with NH*T*T*(4 + 2) bytes of poisoned scratch),
 * from the CPU's probabilities; the CPU with its fp32 gradient scratch. */
static void test16_attention(zt_dtype dt, int B, int T, int C, int NH) {
    char what[128], tag[64];
    snprintf(tag, sizeof tag, "B=%d T=%d C=%d NH=%d", B, T, C, NH);
    size_t e = esz(dt), nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    size_t ndatt = (size_t)B * NH * T;
    void *qkv = hrand(dt, nqkv, -1.5f, 1.5f), *d_qkv = dcopy(qkv, nqkv * e);
    void *out = hnan(dt, nout), *att = hnan(dt, natt), *d_out = dnan16(dt, nout), *d_att = dnan16(dt, natt);
    cpu16(dt)->attention_fwd(&g_cs, out, att, qkv, B, T, C, NH);
    gpu16(dt)->attention_fwd(&g_gs, d_out, d_att, d_qkv, B, T, C, NH);
    snprintf(what, sizeof what, "attention_fwd att %s", tag);
    void *g_att = fetch_bytes(d_att, natt * e, what);
    compare16(what, dt, g_att, att, natt, ULPS16);
    snprintf(what, sizeof what, "attention_fwd out %s", tag);
    void *g_out = fetch_bytes(d_out, nout * e, what);
    compare16(what, dt, g_out, out, nout, ULPS16);
    gpu16(dt)->attention_fwd(&g_gs, d_out, d_att, d_qkv, B, T, C, NH);
    check_repeat16(what, d_out, g_out, nout * e);
    free(g_att), free(g_out);

    void *dout = hrand(dt, nout, -1, 1), *dqkv = hrand(dt, nqkv, -1, 1), *dqkv0 = hdup(dqkv, nqkv * e);
    float *datt = fnan(ndatt), *d_datt = dnan(ndatt);
    void *d_dout = dcopy(dout, nout * e), *d_dqkv = dcopy(dqkv, nqkv * e);
    size_t cpu_scratch = nqkv * sizeof(float);
    void *scr = xmalloc(cpu_scratch);
    h2d(d_att, att, natt * e);
    cpu16(dt)->attention_bwd(&g_cs, dqkv, datt, dout, qkv, att, B, T, C, NH, scr, cpu_scratch);
    size_t nscr = (size_t)NH * T * T * (sizeof(float) + e);
    void *d_scr = dalloc(nscr), *hscr = xmalloc(nscr);
    memset(hscr, 0xff, nscr);
    for (int path = 0; path < 2; path++) {
        const char *pn = path ? "GEMM" : "rows";
        void *first = NULL;
        for (int rep = 0; rep < 2; rep++) {
            h2d(d_dqkv, dqkv0, nqkv * e);
            h2d(d_scr, hscr, nscr);
            gpu16(dt)->attention_bwd(&g_gs, d_dqkv, d_datt, d_dout, d_qkv, d_att, B, T, C, NH, path ? d_scr : NULL,
                                     path ? nscr : 0);
            snprintf(what, sizeof what, "attention_bwd dqkv %s (%s)", tag, pn);
            if (rep == 0) {
                first = fetch_bytes(d_dqkv, nqkv * e, what);
                compare16(what, dt, first, dqkv, nqkv, ULPS16); /* datt: scratch, the CPU's is not D */
            } else {
                check_repeat16(what, d_dqkv, first, nqkv * e);
            }
        }
        free(first);
    }
    free(qkv), free(out), free(att), free(dout), free(dqkv), free(dqkv0), free(datt), free(scr), free(hscr);
    dfree_all();
}

static void test16_attention_fused(zt_dtype dt, int B, int T, int C, int NH) {
    char what[128], tag[64];
    snprintf(tag, sizeof tag, "B=%d T=%d C=%d NH=%d", B, T, C, NH);
    size_t e = esz(dt), nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    void *qkv = hrand(dt, nqkv, -1.5f, 1.5f), *d_qkv = dcopy(qkv, nqkv * e);
    void *out = hnan(dt, nout), *d_out = dnan16(dt, nout);
    float *lse = fnan(nlse), *d_lse = dnan(nlse);
    cpu16(dt)->attention_fused_fwd(&g_cs, out, lse, qkv, B, T, C, NH);
    gpu16(dt)->attention_fused_fwd(&g_gs, d_out, d_lse, d_qkv, B, T, C, NH);
    snprintf(what, sizeof what, "attention_fused_fwd out %s", tag);
    check16(what, dt, d_out, out, nout, ULPS16);
    snprintf(what, sizeof what, "attention_fused_fwd lse %s", tag);
    check32(what, dt, d_lse, lse, nlse, TOL);

    void *dout = hrand(dt, nout, -1, 1), *dqkv = hrand(dt, nqkv, -1, 1), *dqkv0 = hdup(dqkv, nqkv * e);
    float *datt = fnan(nlse), *d_datt = dnan(nlse);
    void *d_dout = dcopy(dout, nout * e), *d_dqkv = dcopy(dqkv, nqkv * e);
    size_t cpu_scratch = nqkv * sizeof(float);
    void *scr = xmalloc(cpu_scratch);
    h2d(d_out, out, nout * e);
    h2d(d_lse, lse, nlse * sizeof(float));
    cpu16(dt)->attention_fused_bwd(&g_cs, dqkv, datt, dout, qkv, out, lse, B, T, C, NH, scr, cpu_scratch);
    gpu16(dt)->attention_fused_bwd(&g_gs, d_dqkv, d_datt, d_dout, d_qkv, d_out, d_lse, B, T, C, NH, NULL, 0);
    snprintf(what, sizeof what, "attention_fused_bwd dqkv %s", tag);
    void *first = fetch_bytes(d_dqkv, nqkv * e, what);
    compare16(what, dt, first, dqkv, nqkv, ULPS16);
    snprintf(what, sizeof what, "attention_fused_bwd D %s", tag);
    check32(what, dt, d_datt, datt, nlse, TOL);
    h2d(d_dqkv, dqkv0, nqkv * e);
    gpu16(dt)->attention_fused_bwd(&g_gs, d_dqkv, d_datt, d_dout, d_qkv, d_out, d_lse, B, T, C, NH, NULL, 0);
    snprintf(what, sizeof what, "attention_fused_bwd dqkv %s", tag);
    check_repeat16(what, d_dqkv, first, nqkv * e);
    free(qkv), free(out), free(lse), free(dout), free(dqkv), free(dqkv0), free(datt), free(scr), free(first);
    dfree_all();
}

static void test16_pointwise(zt_dtype dt, size_t n) {
    size_t e = esz(dt);
    void *x = hrand(dt, n, -4, 4), *y = hrand(dt, n, -4, 4), *dout = hrand(dt, n, -1, 1);
    void *d_x = dcopy(x, n * e), *d_y = dcopy(y, n * e), *d_dout = dcopy(dout, n * e);
    void *out = hnan(dt, n), *d_out = dnan16(dt, n);
    cpu16(dt)->gelu_fwd(&g_cs, out, x, n);
    gpu16(dt)->gelu_fwd(&g_gs, d_out, d_x, n);
    check16("gelu_fwd", dt, d_out, out, n, ULPS16); /* tanhf: CUDA's and glibc's differ by an ulp or two */
    void *dinp = hrand(dt, n, -1, 1), *d_dinp = dcopy(dinp, n * e);
    cpu16(dt)->gelu_bwd(&g_cs, dinp, x, dout, n);
    gpu16(dt)->gelu_bwd(&g_gs, d_dinp, d_x, d_dout, n);
    check16("gelu_bwd", dt, d_dinp, dinp, n, ULPS16);
    cpu16(dt)->residual_fwd(&g_cs, out, x, y, n);
    gpu16(dt)->residual_fwd(&g_gs, d_out, d_x, d_y, n);
    check16_bits("residual_fwd", dt, d_out, out, n);
    void *da = hrand(dt, n, -1, 1), *db = hrand(dt, n, -1, 1);
    void *d_da = dcopy(da, n * e), *d_db = dcopy(db, n * e);
    cpu16(dt)->residual_bwd(&g_cs, da, db, dout, n);
    gpu16(dt)->residual_bwd(&g_gs, d_da, d_db, d_dout, n);
    check16_bits("residual_bwd da", dt, d_da, da, n);
    check16_bits("residual_bwd db", dt, d_db, db, n);
    free(x), free(y), free(dout), free(out), free(dinp), free(da), free(db);
    dfree_all();
}

/* Also in place (probs = logits), as the model runs it. */
static void test16_softmax_xent(zt_dtype dt, int N, int V) {
    size_t n = (size_t)N * V, e = esz(dt);
    void *logits = hrand(dt, n, -4, 4), *d_logits = dcopy(logits, n * e);
    int32_t *tgt = irand(N, V), *d_tgt = dcopy(tgt, N * sizeof(int32_t));
    void *probs = hnan(dt, n), *d_probs = dnan16(dt, n);
    float *losses = fnan(N), *d_losses = dnan(N);
    cpu16(dt)->softmax_xent_fwd(&g_cs, losses, probs, logits, tgt, N, V);
    gpu16(dt)->softmax_xent_fwd(&g_gs, d_losses, d_probs, d_logits, d_tgt, N, V);
    check16("softmax_xent_fwd probs", dt, d_probs, probs, n, ULPS16);
    check32("softmax_xent_fwd losses", dt, d_losses, losses, N, TOL);
    gpu16(dt)->softmax_xent_fwd(&g_gs, d_losses, d_logits, d_logits, d_tgt, N, V); /* in place */
    check16("softmax_xent_fwd probs (in place)", dt, d_logits, probs, n, ULPS16);
    check32("softmax_xent_fwd losses (in place)", dt, d_losses, losses, N, TOL);
    void *dl = hnan(dt, n), *d_dl = dnan16(dt, n);
    h2d(d_probs, probs, n * e);
    cpu16(dt)->softmax_xent_bwd(&g_cs, dl, probs, tgt, N, V, 0.37f);
    gpu16(dt)->softmax_xent_bwd(&g_gs, d_dl, d_probs, d_tgt, N, V, 0.37f);
    check16_bits("softmax_xent_bwd", dt, d_dl, dl, n);
    free(logits), free(tgt), free(probs), free(losses), free(dl);
    dfree_all();
}

/* ---- the Llama kernels, in every dtype ------------------------------------
 * The same 16-bit helpers hold fp32 tensors too (dt = ZT_FP32). An output in
 * the table's dtype is held to TOL (normwise) in fp32 and to ULPS16 in 16
 * bits (the CUDA kernels do the CPU's fp32 operations, except where noted:
 * RMSNorm's sums run in another order, SwiGLU's exp is CUDA's, not SLEEF's,
 * and RoPE's cos and sin come from CUDA's double-precision libm); fp32
 * outputs (rstd, dw) are held to TOL; the copies and GQA's sums must match
 * bit for bit. */

static void check_act(const char *what, zt_dtype dt, const void *d, const void *cpu, size_t n) {
    if (dt == ZT_FP32) check32(what, dt, d, cpu, n, TOL);
    else check16(what, dt, d, cpu, n, ULPS16);
}

static void test_llama_rmsnorm(zt_dtype dt, int N, int C) {
    size_t n = (size_t)N * C, e = esz(dt);
    char what[96];
    void *inp = hrand(dt, n, -2, 3), *w = hrand(dt, C, 0.5f, 1.5f);
    void *d_inp = dcopy(inp, n * e), *d_w = dcopy(w, C * e);
    void *out = hnan(dt, n), *d_out = dnan16(dt, n);
    float *rstd = fnan(N), *d_rstd = dnan(N);
    cpu16(dt)->rmsnorm_fwd(&g_cs, out, rstd, inp, w, N, C, 1e-5f);
    gpu16(dt)->rmsnorm_fwd(&g_gs, d_out, d_rstd, d_inp, d_w, N, C, 1e-5f);
    snprintf(what, sizeof what, "rmsnorm_fwd out N=%d C=%d", N, C);
    check_act(what, dt, d_out, out, n);
    void *g_out = fetch_bytes(d_out, n * e, what);
    snprintf(what, sizeof what, "rmsnorm_fwd rstd N=%d C=%d", N, C);
    check32(what, dt, d_rstd, rstd, N, TOL);
    gpu16(dt)->rmsnorm_fwd(&g_gs, d_out, d_rstd, d_inp, d_w, N, C, 1e-5f);
    check_repeat16("rmsnorm_fwd out", d_out, g_out, n * e);

    /* Backward from the CPU's rstd on both sides. */
    void *dout = hrand(dt, n, -1, 1), *dinp = hrand(dt, n, -1, 1), *dinp0 = hdup(dinp, n * e);
    float *dw = frand(C, -1, 1), *dw0 = fdup(dw, C);
    void *d_dout = dcopy(dout, n * e), *d_dinp = dcopy(dinp, n * e);
    float *d_dw = dcopyf(dw, C);
    h2d(d_rstd, rstd, N * sizeof(float));
    cpu16(dt)->rmsnorm_bwd(&g_cs, dinp, dw, dout, inp, w, rstd, N, C);
    gpu16(dt)->rmsnorm_bwd(&g_gs, d_dinp, d_dw, d_dout, d_inp, d_w, d_rstd, N, C);
    snprintf(what, sizeof what, "rmsnorm_bwd dinp N=%d C=%d", N, C);
    check_act(what, dt, d_dinp, dinp, n);
    void *g_dinp = fetch_bytes(d_dinp, n * e, what);
    float *g_dw = fetch(d_dw, C, what);
    snprintf(what, sizeof what, "rmsnorm_bwd dw N=%d C=%d", N, C);
    check32(what, dt, d_dw, dw, C, TOL);
    h2d(d_dinp, dinp0, n * e);
    h2d(d_dw, dw0, C * sizeof(float));
    gpu16(dt)->rmsnorm_bwd(&g_gs, d_dinp, d_dw, d_dout, d_inp, d_w, d_rstd, N, C);
    check_repeat16("rmsnorm_bwd dinp", d_dinp, g_dinp, n * e);
    check_repeat16("rmsnorm_bwd dw", d_dw, g_dw, C * sizeof(float));
    free(inp), free(w), free(out), free(rstd), free(g_out), free(dout), free(dinp), free(dinp0), free(dw), free(dw0);
    free(g_dinp), free(g_dw);
    dfree_all();
}

/* Forward and backward in place on the same random qkv, theta 500000 (a
 * Llama 3's). */
static void test_llama_rope(zt_dtype dt, int B, int T, int NH, int NKV, int HD) {
    size_t n = (size_t)B * T * (NH + 2 * NKV) * HD, e = esz(dt);
    char what[96];
    void *qkv = hrand(dt, n, -2, 2), *d_qkv = dcopy(qkv, n * e);
    for (int dir = 0; dir < 2; dir++) {
        void *x = hdup(qkv, n * e);
        h2d(d_qkv, qkv, n * e);
        if (dir == 0) {
            cpu16(dt)->rope_fwd(&g_cs, x, B, T, NH, NKV, HD, 500000.0f);
            gpu16(dt)->rope_fwd(&g_gs, d_qkv, B, T, NH, NKV, HD, 500000.0f);
        } else {
            cpu16(dt)->rope_bwd(&g_cs, x, B, T, NH, NKV, HD, 500000.0f);
            gpu16(dt)->rope_bwd(&g_gs, d_qkv, B, T, NH, NKV, HD, 500000.0f);
        }
        snprintf(what, sizeof what, "rope_%s B=%d T=%d NH=%d NKV=%d HD=%d", dir ? "bwd" : "fwd", B, T, NH, NKV, HD);
        check_act(what, dt, d_qkv, x, n);
        free(x);
    }
    free(qkv);
    dfree_all();
}

static void test_llama_swiglu(zt_dtype dt, int N, int F) {
    size_t n = (size_t)N * F, e = esz(dt);
    char what[96];
    void *gu = hrand(dt, 2 * n, -8, 8), *d_gu = dcopy(gu, 2 * n * e);
    void *out = hnan(dt, n), *d_out = dnan16(dt, n);
    cpu16(dt)->swiglu_fwd(&g_cs, out, gu, N, F);
    gpu16(dt)->swiglu_fwd(&g_gs, d_out, d_gu, N, F);
    snprintf(what, sizeof what, "swiglu_fwd N=%d F=%d", N, F);
    check_act(what, dt, d_out, out, n);
    void *dout = hrand(dt, n, -1, 1), *d_dout = dcopy(dout, n * e);
    void *dgu = hnan(dt, 2 * n), *d_dgu = dnan16(dt, 2 * n);
    cpu16(dt)->swiglu_bwd(&g_cs, dgu, gu, dout, N, F);
    gpu16(dt)->swiglu_bwd(&g_gs, d_dgu, d_gu, d_dout, N, F);
    snprintf(what, sizeof what, "swiglu_bwd N=%d F=%d", N, F);
    check_act(what, dt, d_dgu, dgu, 2 * n);
    free(gu), free(out), free(dout), free(dgu);
    dfree_all();
}

static void test_llama_gqa(zt_dtype dt, int N, int NH, int NKV, int HD) {
    size_t nsmall = (size_t)N * (NH + 2 * NKV) * HD, nfull = (size_t)N * 3 * NH * HD, e = esz(dt);
    char what[96];
    void *qkv = hrand(dt, nsmall, -2, 2), *d_qkv = dcopy(qkv, nsmall * e);
    void *full = hnan(dt, nfull), *d_full = dnan16(dt, nfull);
    cpu16(dt)->gqa_expand(&g_cs, full, qkv, N, NH, NKV, HD);
    gpu16(dt)->gqa_expand(&g_gs, d_full, d_qkv, N, NH, NKV, HD);
    snprintf(what, sizeof what, "gqa_expand N=%d NH=%d NKV=%d HD=%d", N, NH, NKV, HD);
    check16_bits(what, dt, d_full, full, nfull);
    void *dfull = hrand(dt, nfull, -1, 1), *d_dfull = dcopy(dfull, nfull * e);
    void *dqkv = hrand(dt, nsmall, -1, 1), *d_dqkv = dcopy(dqkv, nsmall * e);
    cpu16(dt)->gqa_reduce(&g_cs, dqkv, dfull, N, NH, NKV, HD);
    gpu16(dt)->gqa_reduce(&g_gs, d_dqkv, d_dfull, N, NH, NKV, HD);
    snprintf(what, sizeof what, "gqa_reduce N=%d NH=%d NKV=%d HD=%d", N, NH, NKV, HD);
    check16_bits(what, dt, d_dqkv, dqkv, nsmall);
    free(qkv), free(full), free(dfull), free(dqkv);
    dfree_all();
}

/* embedding_fwd/bwd with wpe and dwpe NULL: the token rows, bit for bit. */
static void test_embedding_no_wpe(zt_dtype dt, int B, int T, int C, int V) {
    size_t BT = (size_t)B * T, n = BT * C, e = esz(dt);
    int32_t *tok = irand(BT, V), *d_tok = dcopy(tok, BT * sizeof(int32_t));
    void *wte = hrand(dt, (size_t)V * C, -1, 1), *d_wte = dcopy(wte, (size_t)V * C * e);
    void *out = hnan(dt, n), *d_out = dnan16(dt, n);
    cpu16(dt)->embedding_fwd(&g_cs, out, tok, wte, NULL, B, T, C);
    gpu16(dt)->embedding_fwd(&g_gs, d_out, d_tok, d_wte, NULL, B, T, C);
    check16_bits("embedding_fwd without wpe", dt, d_out, out, n);
    void *dout = hrand(dt, n, -1, 1), *d_dout = dcopy(dout, n * e);
    float *dwte = frand((size_t)V * C, -1, 1), *d_dwte = dcopyf(dwte, (size_t)V * C);
    cpu16(dt)->embedding_bwd(&g_cs, dwte, NULL, dout, tok, B, T, C);
    gpu16(dt)->embedding_bwd(&g_gs, d_dwte, NULL, d_dout, d_tok, B, T, C);
    check16_bits("embedding_bwd dwte without dwpe (fp32)", ZT_FP32, d_dwte, dwte, (size_t)V * C);
    free(tok), free(wte), free(out), free(dout), free(dwte);
    dfree_all();
}

/* The tables themselves: one per dtype, each of its dtype, the engine's
 * operations shared. */
static void test16_tables(void) {
    for (int d = 0; d < ZT_NDTYPES; d++) {
        const zt_ops *t = g_gpu->ops_for[d];
        CHECK(t && t->dtype == (zt_dtype)d && t->matmul_fwd && t->attention_fused_bwd &&
                  t->adamw == g_gpu->ops->adamw && t->adam8bit == g_gpu->ops->adam8bit && t->factor_stats &&
                  t->adafactor_precondition && t->adafactor_apply,
              "CUDA ops_for[%s] missing or of another dtype", zt_dtype_name((zt_dtype)d));
    }
    CHECK(g_gpu->ops_for[ZT_FP32] == g_gpu->ops, "ops_for[fp32] is not be->ops");
}

/* With an argument, a comma-separated list of words, only the groups whose
 * name contains one of them run (the basics always do):
 * `test_cuda_ops attention_fused` under a sanitizer, say. */
static const char *g_only;
static const char *g_groups[48]; /* every group name main() offers, for the check below */
static int g_ngroups;
/* Whether `group` contains the n-character word w. */
static int group_has(const char *group, const char *w, size_t n) {
    for (const char *g = group; n && strlen(g) >= n; g++)
        if (strncmp(g, w, n) == 0) return 1;
    return 0;
}
static int wanted(const char *group) {
    int known = 0;
    for (int i = 0; i < g_ngroups; i++) known |= strcmp(g_groups[i], group) == 0;
    if (!known && g_ngroups < 48) g_groups[g_ngroups++] = group;
    if (!g_only) return 1;
    for (const char *w = g_only; *w;) {
        size_t n = strcspn(w, ",");
        if (group_has(group, w, n)) return 1;
        w += n + (w[n] == ',');
    }
    return 0;
}
/* A word that matched no group is a mistake in the command, not a pass. */
static void check_filter_words(void) {
    for (const char *w = g_only ? g_only : ""; *w;) {
        size_t n = strcspn(w, ","), hit = 0;
        for (int i = 0; i < g_ngroups; i++) hit |= (size_t)group_has(g_groups[i], w, n);
        CHECK(hit, "no test group matches '%.*s'", (int)n, w);
        w += n + (w[n] == ',');
    }
}
#define RUN(group, call)                \
    do {                                \
        if (wanted(group)) (call);      \
    } while (0)

int main(int argc, char **argv) {
    g_only = argc > 1 ? argv[1] : NULL;
    rng_state = 0x9E3779B97F4A7C15ull; /* this test's own stream */
    int count = 0;
    cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess || count == 0) {
        printf("SKIP: no CUDA device (cudaGetDeviceCount: %s, %d devices)\n",
               rc != cudaSuccess ? cudaGetErrorString(rc) : "ok", count);
        return 77;
    }
    const char *seed = getenv("ZT_TEST_SEED");
    if (seed && *seed) rng_state = strtoull(seed, NULL, 0) | 1u;
    printf("seed 0x%016llx, %d CUDA device(s)\n", (unsigned long long)rng_state, count);

    zt_error err;
    zt_error_clear(&err);
    if (zt_backend_create(ZT_DEVICE_CUDA, 1, &g_gpu, &err) != ZT_OK) die_status("zt_backend_create(cuda)", &err);
    if (zt_backend_create(ZT_DEVICE_CPU, 2, &g_cpu, &err) != ZT_OK) die_status("zt_backend_create(cpu)", &err);
    g_gs = zt_backend_stream(g_gpu);
    g_cs = zt_backend_stream(g_cpu);

    test_backend_basics();
    RUN("embedding", test_embedding(3, 17, 40, 53));
    RUN("embedding", test_embedding(4, 64, 96, 1000));
    RUN("embedding", test_embedding(8, 256, 72, 300)); /* tokens repeat across the 32 warps of a tile */
    RUN("layernorm", test_layernorm(37, 48));
    RUN("layernorm", test_layernorm(130, 770));
    RUN("layernorm", test_layernorm(4096, 768)); /* 128 rows per warp in dw, db */
    for (int bf16 = 0; bf16 < 2; bf16++) {
        RUN("matmul", test_matmul(37, 48, 72, 1, 1, bf16, 0));
        RUN("matmul", test_matmul(64, 256, 200, 0, 1, bf16, 0));
        RUN("matmul", test_matmul(50, 33, 17, 1, 0, bf16, 0));
        RUN("matmul", test_matmul(256, 512, 384, 1, 1, bf16, 0));
        RUN("matmul", test_matmul(64, 256, 200, 1, 1, bf16, 1)); /* misaligned: the bias is added unfused */
        RUN("matmul", test_matmul(50, 33, 17, 1, 1, bf16, 1));
        RUN("matmul", test_matmul(4096, 64, 96, 1, 1, bf16, 0)); /* dw: K = 4096 over a 96 x 64 output */
        RUN("matmul", test_matmul(512, 768, 2304, 1, 1, bf16, 0));
    }
    RUN("attention", test_attention(2, 19, 48, 4, 0));
    RUN("attention", test_attention(1, 1, 16, 2, 0));
    RUN("attention", test_attention(2, 64, 64, 2, 0));
    RUN("attention", test_attention(1, 200, 96, 3, 0));
    RUN("attention", test_attention(2, 256, 128, 2, 0));
    RUN("attention", test_attention(2, 19, 48, 4, 1));
    RUN("attention", test_attention(2, 64, 64, 2, 1));
    RUN("attention", test_attention(1, 200, 96, 3, 1));
    RUN("attention_fused", test_attention_fused(2, 19, 48, 4));
    RUN("attention_fused", test_attention_fused(1, 1, 16, 2));
    RUN("attention_fused", test_attention_fused(2, 64, 64, 2));
    RUN("attention_fused", test_attention_fused(1, 200, 96, 3));
    RUN("attention_fused", test_attention_fused(2, 256, 128, 2));
    RUN("attention_fused", test_attention_fused(1, 77, 30, 3));  /* head size 10: padded to 12 */
    RUN("attention_fused", test_attention_fused(1, 40, 512, 2)); /* head size 256: over 48 KiB of shared memory */
    RUN("pointwise", test_pointwise(1));
    RUN("pointwise", test_pointwise(100003));
    RUN("softmax_xent", test_softmax_xent(23, 37));
    RUN("softmax_xent", test_softmax_xent(9, 5003));
    RUN("adamw", test_adamw(1031));
    RUN("sgd", test_sgd(1031));
    RUN("adam8bit", test_adam8bit(2 * ZT_QBLOCK + 37));
    RUN("factor_stats", test_factor_stats(37, 53));
    RUN("adafactor_precondition", test_adafactor_precondition(37, 53, 100, 1500));
    RUN("adafactor_apply", test_adafactor_apply(100003));
    RUN("casts", test_casts(ZT_BF16));
    RUN("casts", test_casts(ZT_FP16));
    RUN("cast_sr", test_cast_sr());
    RUN("wire int8", test_wire(8));
    RUN("wire int4", test_wire(4));
    RUN("newton_schulz", test_newton_schulz(48, 96));
    RUN("newton_schulz", test_newton_schulz(120, 40));
    RUN("sum_squares", test_sum_squares(0));
    RUN("sum_squares", test_sum_squares(1));
    RUN("sum_squares", test_sum_squares(4097));
    RUN("sum_squares", test_sum_squares((1u << 20) + 5));
    RUN("tables16", test16_tables());
    for (int d = ZT_BF16; d <= ZT_FP16; d++) {
        zt_dtype dt = (zt_dtype)d;
        RUN("embedding16", test16_embedding(dt, 3, 17, 40, 53));
        RUN("embedding16", test16_embedding(dt, 8, 256, 72, 300));
        RUN("layernorm16", test16_layernorm(dt, 37, 48));
        RUN("layernorm16", test16_layernorm(dt, 130, 770));
        RUN("matmul16", test16_matmul(dt, 37, 48, 72, 1, 1, 0));
        RUN("matmul16", test16_matmul(dt, 64, 256, 200, 0, 1, 0));
        RUN("matmul16", test16_matmul(dt, 50, 33, 17, 1, 0, 0));
        RUN("matmul16", test16_matmul(dt, 64, 256, 200, 1, 1, 1)); /* misaligned: the bias is added unfused */
        RUN("matmul16", test16_matmul(dt, 4096, 64, 96, 1, 1, 0)); /* dw: K = 4096 */
        RUN("matmul16", test16_matmul(dt, 256, 768, 2304, 1, 1, 0));
        RUN("attention16", test16_attention(dt, 2, 19, 48, 4));
        RUN("attention16", test16_attention(dt, 1, 1, 16, 2));
        RUN("attention16", test16_attention(dt, 2, 64, 64, 2));
        RUN("attention16", test16_attention(dt, 1, 200, 96, 3));
        RUN("attention_fused16", test16_attention_fused(dt, 2, 19, 48, 4));
        RUN("attention_fused16", test16_attention_fused(dt, 2, 64, 64, 2));
        RUN("attention_fused16", test16_attention_fused(dt, 1, 77, 30, 3));
        RUN("pointwise16", test16_pointwise(dt, 100003));
        RUN("softmax_xent16", test16_softmax_xent(dt, 23, 37));
        RUN("softmax_xent16", test16_softmax_xent(dt, 9, 5003));
    }
    for (int d = 0; d < ZT_NDTYPES; d++) {
        zt_dtype dt = (zt_dtype)d;
        RUN("embedding_no_wpe", test_embedding_no_wpe(dt, 3, 17, 40, 53));
        RUN("llama_rmsnorm", test_llama_rmsnorm(dt, 37, 48));
        RUN("llama_rmsnorm", test_llama_rmsnorm(dt, 130, 770));
        RUN("llama_rope", test_llama_rope(dt, 2, 19, 4, 2, 16));
        RUN("llama_rope", test_llama_rope(dt, 1, 300, 3, 1, 128)); /* positions of many turns */
        RUN("llama_swiglu", test_llama_swiglu(dt, 37, 101));
        RUN("llama_swiglu", test_llama_swiglu(dt, 3, 5000));
        RUN("llama_gqa", test_llama_gqa(dt, 37, 6, 2, 16));
        RUN("llama_gqa", test_llama_gqa(dt, 37, 4, 4, 8));
        RUN("llama_gqa", test_llama_gqa(dt, 19, 8, 1, 10));
    }
    RUN("gemm_bf16", test_gemm_bf16(37, 45, 64));
    RUN("gemm_bf16", test_gemm_bf16(64, 128, 256));
    RUN("stream_ordering", test_stream_ordering());
    RUN("sticky_error", test_sticky_error()); /* last: it leaves one launch failed on a second backend */
    check_filter_words();

    zt_backend_destroy(g_gpu);
    zt_backend_destroy(g_cpu);
    printf("%ld checks, %d failures\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
