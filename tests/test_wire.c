/* The block-wise wire codes of quantized communication (runtime/zt_wire.h,
 * ops->wire_quantize and wire_dequantize on the CPU backend):
 *   error bound: every value decodes within half a step of its block's
 *     scale (absmax / 127 for int8, / 7 for int4; plus the decoding
 *     product's rounding, an ulp of the value), for blocks of 16, 256
 *     and odd tails (n not a multiple of the block), from fp32 and bf16;
 *   special blocks: all zeros decode to zeros (scale 0), a constant block
 *     to its value within the bound, the block maximum's code is +-qmax;
 *   non-finite: a block holding inf or NaN decodes to NaN throughout (the
 *     others untouched), its feedback is reset to 0;
 *   feedback: after encoding x + f, f holds exactly what the codes lost
 *     (x + f_old - decoded), and encoding twice with feedback sums to the
 *     inputs within one step;
 *   split and threads: encoding a segment at once equals encoding its
 *     block-aligned parts, and 3 threads give the bytes of 1;
 *   segment size: zt_wire_bytes is the codes (int4: two per byte) rounded
 *     to 4 bytes plus one float per block. */
#include <math.h>
#include <string.h>

#include "test_util.h"
#include "zt_backend.h"
#include "zt_wire.h"

#define NMAX 1000

static void decode(const uint8_t *codes, const float *scales, size_t n, int bits, unsigned block, float *out) {
    for (size_t i = 0; i < n; i++) out[i] = zt_wire_value(zt_wire_get(codes, i, bits), scales[i / block]);
}

static void check_bound(const zt_ops *ops, zt_stream *s, int bits, unsigned block, size_t n, zt_dtype dt) {
    static float x[NMAX], y[NMAX], scales[NMAX];
    static uint8_t xin[NMAX * 4], codes[NMAX];
    for (size_t i = 0; i < n; i++) {
        x[i] = rng_uniform(-3.0f, 3.0f) * (i % 97 == 0 ? 50.0f : 1.0f);
        zt_dtype_store(xin, dt, i, x[i]);
        x[i] = zt_dtype_load(xin, dt, i);
    }
    ops->wire_quantize(s, codes, scales, xin, dt, NULL, ZT_FP32, n, bits, block);
    ops->wire_dequantize(s, y, ZT_FP32, codes, scales, n, bits, block);
    int qmax = zt_wire_qmax(bits);
    for (size_t b = 0; b < zt_wire_nblocks(n, block); b++) {
        size_t lo = b * block, hi = lo + block < n ? lo + block : n;
        float amax = 0.0f;
        for (size_t i = lo; i < hi; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
        CHECK(scales[b] == amax / (float)qmax, "int%d block %zu: scale %g, absmax / %d = %g", bits, b,
              (double)scales[b], qmax, (double)(amax / (float)qmax));
        int top = 0;
        for (size_t i = lo; i < hi; i++) {
            double err = fabs((double)y[i] - (double)x[i]);
            /* half a step, and the product's own rounding */
            CHECK(err <= 0.5 * scales[b] + fabs((double)y[i]) * 0x1p-23, "int%d block %u value %zu: %g decodes to %g "
                  "(off %g > half of scale %g)", bits, block, i, (double)x[i], (double)y[i], err, (double)scales[b]);
            int q = zt_wire_get(codes, i, bits);
            top |= q == qmax || q == -qmax;
        }
        CHECK(top, "int%d block %zu: no value has the largest code", bits, b);
    }
}

static void check_special(const zt_ops *ops, zt_stream *s, int bits) {
    enum { B = 16, N = 5 * B + 3 };
    float x[N], y[N], fb[N], scales[6];
    uint8_t codes[N];
    for (int i = 0; i < N; i++) x[i] = rng_uniform(-1.0f, 1.0f), fb[i] = 0.25f;
    for (int i = 0; i < B; i++) x[i] = 0.0f, fb[i] = 0.0f;  /* block 0: zeros */
    for (int i = B; i < 2 * B; i++) x[i] = -1.7f;           /* block 1: constant (feedback added: -1.45) */
    x[2 * B + 5] = INFINITY;                                 /* block 2: inf */
    x[3 * B + 9] = NAN;                                      /* block 3: NaN */
    ops->wire_quantize(s, codes, scales, x, ZT_FP32, fb, ZT_FP32, N, bits, B);
    ops->wire_dequantize(s, y, ZT_FP32, codes, scales, N, bits, B);
    for (int i = 0; i < B; i++) CHECK(y[i] == 0.0f && fb[i] == 0.0f, "a zero block decodes to %g", (double)y[i]);
    CHECK(scales[0] == 0.0f, "a zero block's scale is %g", (double)scales[0]);
    for (int i = B; i < 2 * B; i++)
        CHECK(fabsf(y[i] + 1.45f) <= 0.5f * scales[1] && y[i] + fb[i] == -1.45f, "a constant block: %g (feedback %g)",
              (double)y[i], (double)fb[i]);
    for (int i = 2 * B; i < 4 * B; i++)
        CHECK(isnan(y[i]) && fb[i] == 0.0f, "a non-finite block's value %d decodes to %g, feedback %g", i, (double)y[i],
              (double)fb[i]);
    for (int i = 4 * B; i < N; i++) {
        CHECK(isfinite(y[i]), "value %d after the non-finite blocks is %g", i, (double)y[i]);
        CHECK(y[i] + fb[i] == x[i] + 0.25f, "value %d: decoded %g + feedback %g != input %g", i, (double)y[i],
              (double)fb[i], (double)(x[i] + 0.25f));
    }
}

/* Feedback over two encodings: what the codes carried adds up to the
 * inputs within the last encoding's half step. */
static void check_feedback(const zt_ops *ops, zt_stream *s, int bits) {
    enum { B = 64, N = 4 * B };
    float x1[N], x2[N], fb[N], y1[N], y2[N], sc[4];
    uint8_t codes[N];
    memset(fb, 0, sizeof fb);
    for (int i = 0; i < N; i++) x1[i] = rng_uniform(-1.0f, 1.0f), x2[i] = rng_uniform(-1.0f, 1.0f);
    ops->wire_quantize(s, codes, sc, x1, ZT_FP32, fb, ZT_FP32, N, bits, B);
    decode(codes, sc, N, bits, B, y1);
    ops->wire_quantize(s, codes, sc, x2, ZT_FP32, fb, ZT_FP32, N, bits, B);
    decode(codes, sc, N, bits, B, y2);
    for (int i = 0; i < N; i++) {
        double carried = (double)y1[i] + y2[i], given = (double)x1[i] + x2[i];
        CHECK(fabs(carried - given) <= 0.5 * sc[i / B] * (1 + 1e-5) + 1e-6,
              "int%d value %d: carried %g of %g over two steps", bits, i, carried, given);
    }
}

static void check_split(const zt_ops *ops, zt_stream *s1, zt_stream *s3, int bits) {
    enum { B = 32, N = 10 * B };
    float x[N], sw[10], sp[10], st[10];
    uint8_t whole[N], parts[N], threaded[N];
    for (int i = 0; i < N; i++) x[i] = rng_uniform(-2.0f, 2.0f);
    ops->wire_quantize(s1, whole, sw, x, ZT_FP32, NULL, ZT_FP32, N, bits, B);
    ops->wire_quantize(s3, threaded, st, x, ZT_FP32, NULL, ZT_FP32, N, bits, B);
    const size_t cuts[] = {0, B, 4 * B, 5 * B, N};
    for (size_t c = 0; c + 1 < sizeof cuts / sizeof cuts[0]; c++) {
        size_t at = cuts[c];
        ops->wire_quantize(s1, parts + (bits == 4 ? at / 2 : at), sp + at / B, x + at, ZT_FP32, NULL, ZT_FP32,
                           cuts[c + 1] - at, bits, B);
    }
    size_t code_bytes = bits == 4 ? N / 2 : N;
    CHECK(memcmp(whole, parts, code_bytes) == 0 && memcmp(sw, sp, sizeof sw) == 0, "int%d: parts encode otherwise",
          bits);
    CHECK(memcmp(whole, threaded, code_bytes) == 0 && memcmp(sw, st, sizeof sw) == 0, "int%d: 3 threads differ", bits);
}

static void check_sizes(void) {
    zt_wire w8 = {ZT_BF16, 8, 256}, w4 = {ZT_BF16, 4, 256}, plain = {ZT_BF16, 0, 0};
    CHECK(zt_wire_bytes(&w8, 1024) == 1024 + 16, "int8 of 1024: %zu bytes", zt_wire_bytes(&w8, 1024));
    CHECK(zt_wire_bytes(&w4, 1024) == 512 + 16, "int4 of 1024: %zu bytes", zt_wire_bytes(&w4, 1024));
    CHECK(zt_wire_bytes(&w4, 3) == 4 + 4, "int4 of 3: %zu bytes", zt_wire_bytes(&w4, 3));
    CHECK(zt_wire_bytes(&w8, 257) == 260 + 8, "int8 of 257: %zu bytes", zt_wire_bytes(&w8, 257));
    CHECK(zt_wire_bytes(&plain, 10) == 20, "bf16 of 10: %zu bytes", zt_wire_bytes(&plain, 10));
}

int main(void) {
    zt_backend *be = NULL;
    zt_error err = {0};
    if (zt_backend_cpu_create(1, &be, &err) != ZT_OK) {
        printf("FAIL: zt_backend_cpu_create: %s\n", err.msg);
        return 1;
    }
    zt_stream s1 = zt_backend_stream(be), s3 = s1;
    s3.nthreads = 3;
    const unsigned blocks[] = {16, 256};
    const size_t sizes[] = {NMAX, 256, 999, 17};
    for (int bits = 4; bits <= 8; bits += 4) {
        for (size_t b = 0; b < 2; b++)
            for (size_t k = 0; k < 4; k++) {
                check_bound(be->ops, &s1, bits, blocks[b], sizes[k], ZT_FP32);
                check_bound(be->ops, &s1, bits, blocks[b], sizes[k], ZT_BF16);
            }
        check_special(be->ops, &s1, bits);
        check_feedback(be->ops, &s1, bits);
        check_split(be->ops, &s1, &s3, bits);
    }
    check_sizes();
    zt_backend_destroy(be);
    printf("%ld checks, %d failures\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
