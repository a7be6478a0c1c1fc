/* Benchmark of the fused CPU AdamW (offload/zt_cpu_adam.h) against the memory
 * bandwidth of the same machine, measured in the same run.
 *
 *   bench_cpu_adam [N [REPS]]     N parameters (default 64Mi = 67108864; a
 *                                 suffix K/M/G means 2^10/2^20/2^30), best of
 *                                 REPS timed runs (default 5) after a warm-up
 *
 * (a) STREAM-like triad a[i] = b[i] + s * c[i] over three float arrays of N
 *     elements (far larger than any cache for the default N), with the same
 *     thread counts; GB/s counts the bytes read and written, 12 per element
 *     (as STREAM does: the write-allocate read of a is not counted), and the
 *     same triad with non-temporal stores (no write-allocate read: the
 *     machine's bandwidth for a stream that is only written, as the fused
 *     Adam's out is for large N; its p, m, v are read before they are written,
 *     so they need no write-allocate read either), and the fused Adam's own
 *     access pattern with next to no arithmetic (d = g - g; p += d, m += d,
 *     v += d, out = p with out streamed: 32 bytes per element, values
 *     unchanged), the ceiling a memory-bound Adam can reach here.
 * (b) zt_cpu_adam_fused for each ISA this CPU has, 1 thread and all cores,
 *     fp32 and bf16 out; bytes per parameter: read g, p, m, v (16) + write
 *     p, m, v (12) + write out (4 fp32 / 2 bf16) = 32 / 30; the fraction of
 *     the triad's GB/s and of the access pattern's at the same thread count.
 * (c) the plain loop: the same arithmetic, one pass, compiled with
 *     optimize("no-tree-vectorize") (one element per instruction), for the
 *     speed-up columns.
 * Every array is touched (first touch) and every kernel run once before the
 * timed runs. The timed runs go in rounds, each round running every kernel
 * once, so a drift in the machine's bandwidth (a shared VM) hits all of them
 * alike; each kernel's best round counts. The output is a Markdown table. Not
 * run by CTest. */
#include <math.h>
#include <omp.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "zt_cpu_adam.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* 2 MiB aligned, transparent huge pages asked for (fewer TLB misses for every
 * kernel alike), first touched by `nt` threads in static chunks. */
static void *alloc_big(size_t bytes, int nt) {
    void *mem = NULL;
    size_t align = (size_t)2 << 20;
    size_t rounded = (bytes + align - 1) / align * align;
    if (posix_memalign(&mem, align, rounded ? rounded : align) != 0) {
        fprintf(stderr, "bench_cpu_adam: cannot allocate %zu bytes\n", bytes);
        exit(1);
    }
#ifdef MADV_HUGEPAGE
    (void)madvise(mem, rounded, MADV_HUGEPAGE);
#endif
    unsigned char *b = mem;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t i = 0; i < rounded; i += 4096) b[i] = 0;
    return mem;
}

/* ---- (a) triad ----------------------------------------------------------- */

static void triad(float *a, const float *b, const float *c, float s, size_t n, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = b[i] + s * c[i];
}

/* The triad with streaming stores (SSE2, part of x86-64); plain stores elsewhere. */
static void triad_nt(float *a, const float *b, const float *c, float s, size_t n, int nt) {
#pragma omp parallel num_threads(nt)
    {
#if defined(__x86_64__) || defined(__i386__)
        const __m128 vs = _mm_set1_ps(s);
        /* a is 2 MiB aligned: blocks of 4 floats are 16-byte aligned. */
#pragma omp for schedule(static) nowait
        for (size_t j = 0; j < n / 4; j++)
            _mm_stream_ps(a + 4 * j, _mm_add_ps(_mm_loadu_ps(b + 4 * j), _mm_mul_ps(vs, _mm_loadu_ps(c + 4 * j))));
        _mm_sfence();
#pragma omp single
        for (size_t i = n / 4 * 4; i < n; i++) a[i] = b[i] + s * c[i];
#else
#pragma omp for schedule(static)
        for (size_t i = 0; i < n; i++) a[i] = b[i] + s * c[i];
#endif
    }
}

/* The fused Adam's memory traffic without its arithmetic: read g, p, m, v;
 * write p, m, v (unchanged: d = g - g is 0 for finite g, and the compiler may
 * not fold it); stream out (fp32). */
static void pattern(float *p, const float *g, float *m, float *v, float *out, size_t n, int nt) {
#pragma omp parallel num_threads(nt)
    {
#if defined(__x86_64__) || defined(__i386__)
#pragma omp for schedule(static) nowait
        for (size_t j = 0; j < n / 4; j++) {
            const __m128 gj = _mm_loadu_ps(g + 4 * j), x = _mm_sub_ps(gj, gj);
            const __m128 pj = _mm_add_ps(_mm_loadu_ps(p + 4 * j), x);
            _mm_storeu_ps(p + 4 * j, pj);
            _mm_storeu_ps(m + 4 * j, _mm_add_ps(_mm_loadu_ps(m + 4 * j), x));
            _mm_storeu_ps(v + 4 * j, _mm_add_ps(_mm_loadu_ps(v + 4 * j), x));
            _mm_stream_ps(out + 4 * j, pj); /* out is 2 MiB aligned */
        }
        _mm_sfence();
#pragma omp single
        for (size_t i = n / 4 * 4; i < n; i++) {
            float d = g[i] - g[i];
            p[i] += d, m[i] += d, v[i] += d, out[i] = p[i];
        }
#else
#pragma omp for schedule(static)
        for (size_t i = 0; i < n; i++) {
            float d = g[i] - g[i];
            p[i] += d, m[i] += d, v[i] += d, out[i] = p[i];
        }
#endif
    }
}

/* ---- (c) the plain loop -------------------------------------------------- */

/* One element at a time: the reference arithmetic with no vectorisation. */
__attribute__((optimize("no-tree-vectorize"))) static void plain_span(float *p, const float *g, float *m, float *v,
                                                                     void *out, zt_dtype odt, size_t n, float lr,
                                                                     float beta1, float beta2, float eps, float wd,
                                                                     int t) {
    float bc1 = 1.0f - powf(beta1, (float)t);
    float bc2 = 1.0f - powf(beta2, (float)t);
    float *of = out;
    zt_bf16 *ob = out;
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1;
        float vhat = vi / bc2;
        p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[i]);
        if (odt == ZT_BF16) ob[i] = zt_f32_to_bf16(p[i]);
        else of[i] = p[i];
    }
}

static void plain_adam(int nt, float *p, const float *g, float *m, float *v, void *out, zt_dtype odt, size_t n,
                       float lr, float beta1, float beta2, float eps, float wd, int t) {
    size_t osz = zt_dtype_size(odt);
#pragma omp parallel num_threads(nt)
    {
        size_t parts = (size_t)omp_get_num_threads(), k = (size_t)omp_get_thread_num();
        size_t lo = n / parts * k + n % parts * k / parts, hi = n / parts * (k + 1) + n % parts * (k + 1) / parts;
        plain_span(p + lo, g + lo, m + lo, v + lo, (char *)out + lo * osz, odt, hi - lo, lr, beta1, beta2, eps, wd,
                   t);
    }
}

/* ---- the runs ------------------------------------------------------------ */

#define LR 1e-3f
#define B1 0.9f
#define B2 0.999f
#define EPS 1e-8f
#define WD 0.01f

typedef struct {
    float *p, *g, *m, *v;
    void *out; /* room for n floats */
    float *a, *b, *c; /* the triad's arrays */
    size_t n;
    int step;
} arrays;

typedef enum { K_TRIAD, K_TRIAD_NT, K_PATTERN, K_PLAIN, K_FUSED } kernel_kind;

typedef struct {
    kernel_kind kind;
    int isa; /* K_FUSED */
    int nt;
    zt_dtype odt; /* K_PLAIN, K_FUSED */
    double best;  /* seconds */
} config;

static double bytes_per_elem(const config *c) {
    switch (c->kind) {
    case K_TRIAD:
    case K_TRIAD_NT: return 12.0;
    case K_PATTERN: return 32.0;
    default: return 28.0 + (double)zt_dtype_size(c->odt);
    }
}

/* One run of a configuration; returns seconds. */
static double run_config(const config *c, arrays *s) {
    int t = ++s->step;
    double t0 = now_s();
    switch (c->kind) {
    case K_TRIAD: triad(s->a, s->b, s->c, 0.5f, s->n, c->nt); break;
    case K_TRIAD_NT: triad_nt(s->a, s->b, s->c, 0.5f, s->n, c->nt); break;
    case K_PATTERN: pattern(s->p, s->g, s->m, s->v, s->out, s->n, c->nt); break;
    case K_PLAIN: plain_adam(c->nt, s->p, s->g, s->m, s->v, s->out, c->odt, s->n, LR, B1, B2, EPS, WD, t); break;
    case K_FUSED:
        zt_cpu_adam_fused((zt_adam_isa)c->isa, c->nt, s->p, s->g, s->m, s->v, s->out, c->odt, s->n, 1.0f, LR, B1,
                          B2, EPS, WD, t);
        break;
    }
    return now_s() - t0;
}

/* Each ISA must give the plain loop's bits (a quick check; the unit test
 * test_cpu_adam is the thorough one). */
static int check_bits(size_t n) {
    float *buf = malloc(n * 4 * 12); /* inputs, reference, under test: 4 arrays each */
    if (!buf) return 0;
    float *p0 = buf, *g0 = buf + n, *m0 = buf + 2 * n, *v0 = buf + 3 * n;
    uint32_t x = 12345;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        p0[i] = (float)(x >> 8) / 16777216.0f - 0.5f;
        g0[i] = (float)((x >> 4) & 0xffff) / 65536.0f - 0.5f;
        m0[i] = g0[i] * 0.1f;
        v0[i] = g0[i] * g0[i] * 0.01f;
    }
    float *ref = buf + 4 * n, *got = ref + 4 * n;
    memcpy(ref, p0, 4 * n * 4);
    float *rp = ref, *rg = ref + n, *rm = ref + 2 * n, *rv = ref + 3 * n;
    zt_bf16 *rout = malloc(n * 2), *gout = malloc(n * 2);
    if (!rout || !gout) {
        free(rout), free(gout), free(buf);
        return 0;
    }
    plain_adam(1, rp, rg, rm, rv, rout, ZT_BF16, n, LR, B1, B2, EPS, WD, 3);
    int ok = 1;
    for (int isa = 0; isa < ZT_ADAM_NUM_ISAS; isa++) {
        if (!zt_cpu_adam_isa_supported((zt_adam_isa)isa)) continue;
        float *gp = got, *gg = got + n, *gm = got + 2 * n, *gv = got + 3 * n;
        memcpy(gp, p0, n * 4), memcpy(gg, g0, n * 4), memcpy(gm, m0, n * 4), memcpy(gv, v0, n * 4);
        zt_cpu_adam_fused((zt_adam_isa)isa, 0, gp, gg, gm, gv, gout, ZT_BF16, n, 1.0f, LR, B1, B2, EPS, WD, 3);
        ok &= memcmp(gp, rp, n * 4) == 0 && memcmp(gm, rm, n * 4) == 0 && memcmp(gv, rv, n * 4) == 0 &&
              memcmp(gout, rout, n * 2) == 0;
    }
    free(rout), free(gout);
    free(buf);
    return ok;
}

static size_t parse_size(const char *s) {
    char *end = NULL;
    double x = strtod(s, &end);
    if (end && (*end == 'k' || *end == 'K')) x *= 1024.0;
    if (end && (*end == 'm' || *end == 'M')) x *= 1048576.0;
    if (end && (*end == 'g' || *end == 'G')) x *= 1073741824.0;
    return x < 1 ? 0 : (size_t)x;
}

static void cpu_model(char *buf, size_t len) {
    snprintf(buf, len, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0) {
            char *c = strchr(line, ':');
            if (c) {
                c += 1 + (c[1] == ' ');
                c[strcspn(c, "\n")] = 0;
                snprintf(buf, len, "%s", c);
            }
            break;
        }
    fclose(f);
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? parse_size(argv[1]) : (size_t)64 << 20;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    if (n == 0 || reps < 1) {
        fprintf(stderr, "usage: %s [N_PARAMS[K|M|G] [REPS]]\n", argv[0]);
        return 2;
    }
    int ncores = omp_get_num_procs();
    int threads[2] = {1, ncores};
    int nthread_counts = ncores > 1 ? 2 : 1;

    char model[256];
    cpu_model(model, sizeof model);
    printf("# bench_cpu_adam: N = %zu parameters, best of %d rounds after a warm-up\n\n", n, reps);
    printf("CPU: %s, %d cores (omp_get_num_procs), best ISA: %s; ISAs run:", model, ncores,
           zt_adam_isa_name(zt_cpu_adam_best_isa()));
    for (int isa = 0; isa < ZT_ADAM_NUM_ISAS; isa++)
        if (zt_cpu_adam_isa_supported((zt_adam_isa)isa)) printf(" %s", zt_adam_isa_name((zt_adam_isa)isa));
    printf("\n");
    /* Large enough for the streamed out, odd for the tails. */
    size_t check_n = ZT_ADAM_STREAM_MIN_BYTES / 2 + 7;
    int bits_ok = check_bits(check_n);
    printf("bitwise check of every ISA against the plain loop (%zu elements, bf16 out, all threads): %s\n\n",
           check_n, bits_ok ? "identical" : "DIFFERENT");

    arrays s = {0};
    s.n = n;
    s.p = alloc_big(n * 4, ncores), s.g = alloc_big(n * 4, ncores), s.m = alloc_big(n * 4, ncores);
    s.v = alloc_big(n * 4, ncores), s.out = alloc_big(n * 4, ncores);
    s.a = alloc_big(n * 4, ncores), s.b = alloc_big(n * 4, ncores), s.c = alloc_big(n * 4, ncores);
#pragma omp parallel for num_threads(ncores) schedule(static)
    for (size_t i = 0; i < n; i++) {
        uint32_t x = (uint32_t)i * 2654435761u;
        s.p[i] = (float)(x >> 8) / 16777216.0f - 0.5f;
        s.g[i] = (float)((x >> 4) & 0xffff) / 65536.0f - 0.5f + 1e-3f;
        s.m[i] = 0.0f;
        s.v[i] = 0.0f;
        ((float *)s.out)[i] = 0.0f;
        s.a[i] = 0.0f, s.b[i] = 1.0f, s.c[i] = 2.0f;
    }

    /* Every configuration, in table order. */
    static const zt_dtype odts[2] = {ZT_FP32, ZT_BF16};
    config cfgs[64];
    int ncfg = 0;
    for (int ti = 0; ti < nthread_counts; ti++) cfgs[ncfg++] = (config){K_TRIAD, 0, threads[ti], ZT_FP32, 1e30};
    for (int ti = 0; ti < nthread_counts; ti++) cfgs[ncfg++] = (config){K_TRIAD_NT, 0, threads[ti], ZT_FP32, 1e30};
    for (int ti = 0; ti < nthread_counts; ti++) cfgs[ncfg++] = (config){K_PATTERN, 0, threads[ti], ZT_FP32, 1e30};
    for (int ti = 0; ti < nthread_counts; ti++)
        for (int oi = 0; oi < 2; oi++) cfgs[ncfg++] = (config){K_PLAIN, 0, threads[ti], odts[oi], 1e30};
    for (int isa = 0; isa < ZT_ADAM_NUM_ISAS; isa++) {
        if (!zt_cpu_adam_isa_supported((zt_adam_isa)isa)) continue;
        for (int ti = 0; ti < nthread_counts; ti++)
            for (int oi = 0; oi < 2; oi++) cfgs[ncfg++] = (config){K_FUSED, isa, threads[ti], odts[oi], 1e30};
    }
    for (int k = 0; k < ncfg; k++) run_config(&cfgs[k], &s); /* warm-up */
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < ncfg; k++) {
            double dt = run_config(&cfgs[k], &s);
            if (dt < cfgs[k].best) cfgs[k].best = dt;
        }

    /* References at each thread count: the triad, the access pattern, the plain loop. */
    double triad_gbs[2] = {0, 0}, pattern_gbs[2] = {0, 0}, plain_s[2][2] = {{0, 0}, {0, 0}};
    for (int k = 0; k < ncfg; k++) {
        int ti = cfgs[k].nt == 1 ? 0 : 1;
        double gbs = bytes_per_elem(&cfgs[k]) * (double)n / cfgs[k].best / 1e9;
        if (cfgs[k].kind == K_TRIAD) triad_gbs[ti] = gbs;
        if (cfgs[k].kind == K_PATTERN) pattern_gbs[ti] = gbs;
        if (cfgs[k].kind == K_PLAIN) plain_s[ti][cfgs[k].odt == ZT_BF16] = cfgs[k].best;
    }

    printf("| kernel | ISA | threads | out | best ms | Mparams/s | GB/s | %% of triad | %% of Adam's access "
           "pattern | speed-up vs plain loop (same threads) | speed-up vs plain loop (1 thread) |\n");
    printf("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int k = 0; k < ncfg; k++) {
        const config *c = &cfgs[k];
        int ti = c->nt == 1 ? 0 : 1, oi = c->odt == ZT_BF16;
        double gbs = bytes_per_elem(c) * (double)n / c->best / 1e9;
        int adam = c->kind == K_PLAIN || c->kind == K_FUSED;
        const char *name = c->kind == K_TRIAD      ? "STREAM triad a = b + s*c"
                           : c->kind == K_TRIAD_NT ? "triad, streaming stores"
                           : c->kind == K_PATTERN  ? "access pattern only: p,m,v += g-g; out = p (streamed)"
                           : c->kind == K_PLAIN    ? "plain loop (no-tree-vectorize)"
                                                   : "zt_cpu_adam_fused";
        char mps[32] = "-", up_same[32] = "-", up_one[32] = "-";
        if (c->kind == K_PATTERN || adam) snprintf(mps, sizeof mps, "%.0f", (double)n / c->best / 1e6);
        if (adam) {
            snprintf(up_same, sizeof up_same, "%.2fx", plain_s[ti][oi] / c->best);
            snprintf(up_one, sizeof up_one, "%.2fx", plain_s[0][oi] / c->best);
        }
        printf("| %s | %s | %d | %s | %.1f | %s | %.1f | %.0f%% | %.0f%% | %s | %s |\n", name,
               c->kind == K_FUSED ? zt_adam_isa_name((zt_adam_isa)c->isa) : c->kind == K_PLAIN ? "scalar" : "-",
               c->nt, adam || c->kind == K_PATTERN ? zt_dtype_name(c->odt) : "-", c->best * 1e3, mps, gbs,
               100.0 * gbs / triad_gbs[ti], 100.0 * gbs / pattern_gbs[ti], up_same, up_one);
    }
    printf("\nBytes per parameter: 16 read (g, p, m, v) + 12 written (p, m, v) + 4 (fp32) or 2 (bf16) out; "
           "triad: 12 per element (STREAM's count: with plain stores the hardware also reads a before writing "
           "it, 16 bytes in all, which is why a kernel without that extra read can exceed 100%% of the triad). "
           "The fused Adam streams out when it is at least %zu bytes. ISA \"scalar\" of zt_cpu_adam_fused is the "
           "library's scalar span (the compiler may vectorise it); the plain loop may not.\n",
           (size_t)ZT_ADAM_STREAM_MIN_BYTES);
    free(s.p), free(s.g), free(s.m), free(s.v), free(s.out), free(s.a), free(s.b), free(s.c);
    return bits_ok ? 0 : 1;
}
