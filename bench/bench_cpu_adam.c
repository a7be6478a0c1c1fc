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
 *     access pattern with no arithmetic (p += g, m += g, v += g, out = p with
 *     out streamed: 32 bytes per element), the ceiling a memory-bound Adam can
 *     reach here.
 * (b) zt_cpu_adam_fused for each ISA this CPU has, 1 thread and all cores,
 *     fp32 and bf16 out; bytes per parameter: read g, p, m, v (16) + write
 *     p, m, v (12) + write out (4 fp32 / 2 bf16) = 32 / 30; the fraction of
 *     the triad's GB/s and of the access pattern's at the same thread count.
 * (c) the plain loop: the same arithmetic, one pass, compiled with
 *     optimize("no-tree-vectorize") (one element per instruction), for the
 *     speed-up columns.
 * Every array is touched (first touch) and every kernel run once before the
 * timed runs. The output is a Markdown table. Not run by CTest. */
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
 * write p, m, v; stream out (fp32). */
static void pattern(float *p, const float *g, float *m, float *v, float *out, size_t n, int nt) {
#pragma omp parallel num_threads(nt)
    {
#if defined(__x86_64__) || defined(__i386__)
#pragma omp for schedule(static) nowait
        for (size_t j = 0; j < n / 4; j++) {
            const __m128 x = _mm_loadu_ps(g + 4 * j);
            const __m128 pj = _mm_add_ps(_mm_loadu_ps(p + 4 * j), x);
            _mm_storeu_ps(p + 4 * j, pj);
            _mm_storeu_ps(m + 4 * j, _mm_add_ps(_mm_loadu_ps(m + 4 * j), x));
            _mm_storeu_ps(v + 4 * j, _mm_add_ps(_mm_loadu_ps(v + 4 * j), x));
            _mm_stream_ps(out + 4 * j, pj); /* out is 2 MiB aligned */
        }
        _mm_sfence();
#pragma omp single
        for (size_t i = n / 4 * 4; i < n; i++) p[i] += g[i], m[i] += g[i], v[i] += g[i], out[i] = p[i];
#else
#pragma omp for schedule(static)
        for (size_t i = 0; i < n; i++) p[i] += g[i], m[i] += g[i], v[i] += g[i], out[i] = p[i];
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
    size_t n;
} state;

static int g_step = 0;

/* kind: -1 plain loop, else a zt_adam_isa. Returns seconds. */
static double run_adam(int kind, int nt, state *s, zt_dtype odt) {
    int t = ++g_step;
    double t0 = now_s();
    if (kind < 0) plain_adam(nt, s->p, s->g, s->m, s->v, s->out, odt, s->n, LR, B1, B2, EPS, WD, t);
    else
        zt_cpu_adam_fused((zt_adam_isa)kind, nt, s->p, s->g, s->m, s->v, s->out, odt, s->n, 1.0f, LR, B1, B2, EPS,
                          WD, t);
    return now_s() - t0;
}

static double best_adam(int kind, int nt, state *s, zt_dtype odt, int reps) {
    run_adam(kind, nt, s, odt); /* warm-up */
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double dt = run_adam(kind, nt, s, odt);
        if (dt < best) best = dt;
    }
    return best;
}

typedef void (*triad_fn)(float *, const float *, const float *, float, size_t, int);

static double best_triad(triad_fn fn, float *a, const float *b, const float *c, size_t n, int nt, int reps) {
    fn(a, b, c, 0.5f, n, nt); /* warm-up */
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        fn(a, b, c, 0.5f, n, nt);
        double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    return best;
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
    printf("# bench_cpu_adam: N = %zu parameters, best of %d after a warm-up\n\n", n, reps);
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

    /* (a) triad */
    double stream_gbs[2] = {0, 0}, stream_nt_gbs[2] = {0, 0};
    {
        float *a = alloc_big(n * 4, ncores), *b = alloc_big(n * 4, ncores), *c = alloc_big(n * 4, ncores);
#pragma omp parallel for num_threads(ncores) schedule(static)
        for (size_t i = 0; i < n; i++) a[i] = 0.0f, b[i] = 1.0f, c[i] = 2.0f;
        for (int ti = 0; ti < nthread_counts; ti++) {
            stream_gbs[ti] = 12.0 * (double)n / best_triad(triad, a, b, c, n, threads[ti], reps) / 1e9;
            stream_nt_gbs[ti] = 12.0 * (double)n / best_triad(triad_nt, a, b, c, n, threads[ti], reps) / 1e9;
        }
        free(a), free(b), free(c);
    }

    /* (b), (c) */
    state s = {alloc_big(n * 4, ncores), alloc_big(n * 4, ncores), alloc_big(n * 4, ncores),
               alloc_big(n * 4, ncores), alloc_big(n * 4, ncores), n};
#pragma omp parallel for num_threads(ncores) schedule(static)
    for (size_t i = 0; i < n; i++) {
        uint32_t x = (uint32_t)i * 2654435761u;
        s.p[i] = (float)(x >> 8) / 16777216.0f - 0.5f;
        s.g[i] = (float)((x >> 4) & 0xffff) / 65536.0f - 0.5f + 1e-3f;
        s.m[i] = 0.0f;
        s.v[i] = 0.0f;
        ((float *)s.out)[i] = 0.0f;
    }

    static const zt_dtype odts[2] = {ZT_FP32, ZT_BF16};
    double plain_s[2][2]; /* [threads][odt] */
    for (int ti = 0; ti < nthread_counts; ti++)
        for (int oi = 0; oi < 2; oi++) plain_s[ti][oi] = best_adam(-1, threads[ti], &s, odts[oi], reps);

    /* The access pattern, on the Adam arrays (their values only grow a little). */
    double pattern_gbs[2] = {0, 0};
    for (int ti = 0; ti < nthread_counts; ti++) {
        pattern(s.p, s.g, s.m, s.v, s.out, n, threads[ti]); /* warm-up */
        double best = 1e30;
        for (int r = 0; r < reps; r++) {
            double t0 = now_s();
            pattern(s.p, s.g, s.m, s.v, s.out, n, threads[ti]);
            double dt = now_s() - t0;
            if (dt < best) best = dt;
        }
        pattern_gbs[ti] = 32.0 * (double)n / best / 1e9;
    }
    for (size_t i = 0; i < n; i++) s.m[i] = 0.0f, s.v[i] = 0.0f;

    printf("| kernel | ISA | threads | out | best ms | Mparams/s | GB/s | %% of triad | %% of Adam's access "
           "pattern | speed-up vs plain loop (same threads) | speed-up vs plain loop (1 thread) |\n");
    printf("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int ti = 0; ti < nthread_counts; ti++)
        printf("| STREAM triad a = b + s*c | - | %d | - | %.1f | - | %.1f | 100%% | %.0f%% | - | - |\n",
               threads[ti], 12.0 * (double)n / stream_gbs[ti] / 1e9 * 1e3, stream_gbs[ti],
               100.0 * stream_gbs[ti] / pattern_gbs[ti]);
    for (int ti = 0; ti < nthread_counts; ti++)
        printf("| triad, streaming stores | - | %d | - | %.1f | - | %.1f | %.0f%% | %.0f%% | - | - |\n",
               threads[ti], 12.0 * (double)n / stream_nt_gbs[ti] / 1e9 * 1e3, stream_nt_gbs[ti],
               100.0 * stream_nt_gbs[ti] / stream_gbs[ti], 100.0 * stream_nt_gbs[ti] / pattern_gbs[ti]);
    for (int ti = 0; ti < nthread_counts; ti++)
        printf("| access pattern only: p,m,v += g; out = p (streamed) | - | %d | fp32 | %.1f | %.0f | %.1f | %.0f%% | "
               "100%% | - | - |\n",
               threads[ti], 32.0 * (double)n / pattern_gbs[ti] / 1e9 * 1e3, pattern_gbs[ti] / 32.0 * 1e3,
               pattern_gbs[ti], 100.0 * pattern_gbs[ti] / stream_gbs[ti]);
    for (int kind = -1; kind < ZT_ADAM_NUM_ISAS; kind++) {
        if (kind >= 0 && !zt_cpu_adam_isa_supported((zt_adam_isa)kind)) continue;
        for (int ti = 0; ti < nthread_counts; ti++)
            for (int oi = 0; oi < 2; oi++) {
                double dt = kind < 0 ? plain_s[ti][oi] : best_adam(kind, threads[ti], &s, odts[oi], reps);
                double bytes = (28.0 + (double)zt_dtype_size(odts[oi])) * (double)n;
                double gbs = bytes / dt / 1e9;
                printf("| %s | %s | %d | %s | %.1f | %.0f | %.1f | %.0f%% | %.0f%% | %.2fx | %.2fx |\n",
                       kind < 0 ? "plain loop (no-tree-vectorize)" : "zt_cpu_adam_fused",
                       kind < 0 ? "scalar" : zt_adam_isa_name((zt_adam_isa)kind), threads[ti],
                       zt_dtype_name(odts[oi]), dt * 1e3, (double)n / dt / 1e6, gbs,
                       100.0 * gbs / stream_gbs[ti], 100.0 * gbs / pattern_gbs[ti], plain_s[ti][oi] / dt,
                       plain_s[0][oi] / dt);
            }
    }
    printf("\nBytes per parameter: 16 read (g, p, m, v) + 12 written (p, m, v) + 4 (fp32) or 2 (bf16) out; "
           "triad: 12 per element (STREAM's count: with plain stores the hardware also reads a before writing "
           "it, 16 bytes in all, which is why a kernel without that extra read can exceed 100%% of the triad). "
           "The fused Adam streams out when it is at least %zu bytes. ISA \"scalar\" of zt_cpu_adam_fused is the "
           "library's scalar span (the compiler may vectorise it); the plain loop may not.\n",
           (size_t)ZT_ADAM_STREAM_MIN_BYTES);
    free(s.p), free(s.g), free(s.m), free(s.v), free(s.out);
    return bits_ok ? 0 : 1;
}
