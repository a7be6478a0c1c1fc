/* The units' state machine and the recorded use order (shard/gather.c), at
 * world size 1 on the CPU backend, stage 3, prefetch 1:
 *
 * 1. A synthetic model of 4 units whose passes use them in an order that is
 *    not their index order, one unit twice: 2, 0, 1, 2, 3. The first pass
 *    prefetches nothing (no record yet) and records that order; the second
 *    pass prefetches exactly the next recorded unit after each gather (after
 *    unit 2's first use unit 0, after 0 unit 1, after 1 unit 2 again, after
 *    2's second use unit 3), and nothing the order does not name.
 * 2. Illegal transitions are errors naming the unit: release before gather,
 *    gather twice without release, gather outside a pass, an optimizer step
 *    while a unit is gathered.
 * 3. The toy GPT, tied and untied: the recorded forward and backward orders
 *    are the units in the order the model uses them (forward embedding,
 *    blocks, head, and the tied embedding again; backward head, the tied
 *    embedding, blocks from the last), so an untied backward never gathers
 *    the embedding. */
#include <stdio.h>
#include <string.h>

#include "test_util.h"
#include "gpt.h"
#include "zt_ctx.h"
#include "zt_engine.h"
#include "test_comm.h"

#define MUST(expr, ctxp)                                                                   \
    do {                                                                                   \
        zt_status must_s_ = (expr);                                                        \
        if (must_s_ != ZT_OK) {                                                            \
            printf("FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #expr, (ctxp)->err.msg);    \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

static void fill_zero(void *arg, int unit, int param, float *dst) {
    const zt_model_spec *spec = arg;
    memset(dst, 0, spec->units[unit].params[param].numel * sizeof(float));
}

static zt_engine_config stage3(void) {
    zt_engine_config ec = {.stage = 3, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .prefetch = 1,
                           .overlap_comm = 1, .bucket_bytes = (size_t)1 << 20};
    return ec;
}

/* Expects st to fail with ZT_ERR_INVALID and a message containing `needle`. */
static void expect_refused(zt_status st, zt_ctx *ctx, const char *what, const char *needle) {
    CHECK(st == ZT_ERR_INVALID && strstr(ctx->err.msg, needle), "%s: status %s, message '%s' (want '%s')", what,
          zt_status_name(st), ctx->err.msg, needle);
    zt_error_clear(&ctx->err);
}

/* Which units are not sharded now, as a bit set. */
static unsigned held(const zt_engine *e) {
    unsigned bits = 0;
    for (int u = 0; u < e->spec->nunits; u++) bits |= (e->units[u].phase != ZT_UNIT_SHARDED) << u;
    return bits;
}

static void test_synthetic_order(void) {
    static zt_model_spec spec;
    memset(&spec, 0, sizeof spec);
    zt_ctx ctx;
    MUST(zt_ctx_init(&ctx, ZT_DEVICE_CPU, 1, 0, 0, 1, 1), &ctx);
    static const char *const names[] = {"u0", "u1", "u2", "u3"};
    for (int u = 0; u < 4; u++) {
        int idx, p;
        int64_t shape[1] = {64 + 16 * u};
        MUST(zt_spec_add_unit(&spec, names[u], &idx, &ctx.err), &ctx);
        MUST(zt_spec_add_param(&spec, idx, "w", 1, shape, 0, &p, &ctx.err), &ctx);
    }
    zt_spec_layout(&spec, 1);
    zt_engine eng;
    zt_engine_config ec = stage3();
    MUST(zt_engine_init(&eng, &ctx, test_comm(), &spec, &ec, fill_zero, &spec), &ctx);

    static const int use[] = {2, 0, 1, 2, 3};
    /* After each use in the second pass: the units held (in use or prefetched). */
    static const unsigned want_held[] = {1u << 2 | 1u << 0, 1u << 0 | 1u << 1, 1u << 1 | 1u << 2, 1u << 2 | 1u << 3,
                                         1u << 3};
    const void *w;
    for (int pass = 0; pass < 2; pass++) {
        MUST(zt_engine_begin_pass(&eng, ZT_PASS_FORWARD), &ctx);
        for (int i = 0; i < 5; i++) {
            MUST(zt_engine_gather(&eng, use[i], &w), &ctx);
            CHECK(eng.units[use[i]].phase == ZT_UNIT_IN_USE, "pass %d use %d: unit %d is %s", pass, i, use[i],
                  zt_unit_phase_name(eng.units[use[i]].phase));
            unsigned want = pass == 0 ? 1u << use[i] : want_held[i];
            CHECK(held(&eng) == want, "pass %d after using unit %d (use %d): held 0x%x, want 0x%x", pass, use[i], i,
                  held(&eng), want);
            MUST(zt_engine_release(&eng, use[i]), &ctx);
        }
    }
    MUST(zt_engine_begin_pass(&eng, ZT_PASS_BACKWARD), &ctx); /* the second forward becomes the record */
    const zt_use_order *o = zt_engine_use_order(&eng, ZT_PASS_FORWARD);
    CHECK(o->n == 5 && memcmp(o->units, use, sizeof use) == 0, "recorded forward order: %d units", o->n);

    /* Illegal transitions, each named. */
    expect_refused(zt_engine_release(&eng, 1), &ctx, "release before gather", "unit u1 released while sharded");
    MUST(zt_engine_gather(&eng, 3, &w), &ctx);
    expect_refused(zt_engine_gather(&eng, 3, &w), &ctx, "gather twice", "unit u3 gathered twice without a release");
    expect_refused(zt_engine_step(&eng, 1e-3f), &ctx, "step while gathered",
                   "optimizer step while unit u3 is gathered");
    MUST(zt_engine_release(&eng, 3), &ctx);
    MUST(zt_engine_step(&eng, 1e-3f), &ctx); /* released: the step runs, and ends the pass */
    expect_refused(zt_engine_gather(&eng, 0, &w), &ctx, "gather outside a pass", "gather of unit u0 outside a pass");
    zt_engine_destroy(&eng);
    zt_ctx_destroy(&ctx);
    printf("ok: synthetic order 2,0,1,2,3 recorded and prefetched in order; illegal transitions refused by name\n");
}

static void check_order(const zt_use_order *o, const int *want, int n, const char *what) {
    int same = o->n == n;
    for (int i = 0; same && i < n; i++) same = o->units[i] == want[i];
    CHECK(same, "%s: recorded %d units, want %d", what, o->n, n);
    for (int i = 0; !same && i < o->n; i++) printf("  recorded[%d] = %d\n", i, o->units[i]);
}

static void test_gpt_order(int tied) {
    zt_gpt_config gc = {.layers = 3, .d_model = 16, .heads = 2, .seq_len = 8, .vocab = 11, .micro_batch = 2,
                        .tied = tied, .seed = 5};
    zt_ctx ctx;
    zt_gpt gpt;
    zt_engine eng;
    MUST(zt_ctx_init(&ctx, ZT_DEVICE_CPU, 1, 0, 0, 1, 1), &ctx);
    MUST(zt_gpt_create(&gpt, &gc, &ctx.err), &ctx);
    zt_spec_layout(gpt.spec, 1);
    zt_engine_config ec = stage3();
    MUST(zt_engine_init(&eng, &ctx, test_comm(), gpt.spec, &ec, zt_gpt_init_param, &gpt), &ctx);
    int32_t tok[16], tgt[16];
    for (int i = 0; i < 16; i++) tok[i] = i % 11, tgt[i] = (i * 3 + 1) % 11;
    for (int step = 0; step < 2; step++) {
        MUST(zt_engine_zero_grads(&eng), &ctx);
        zt_engine_begin_micro(&eng, 1);
        MUST(zt_gpt_forward(&gpt, &eng, tok, tgt, 2, 8, NULL), &ctx);
        MUST(zt_gpt_backward(&gpt, &eng, 1.0f / 16.0f), &ctx);
        MUST(zt_engine_step(&eng, 1e-3f), &ctx);
        double loss;
        MUST(zt_gpt_take_losses(&gpt, &ctx, &loss), &ctx);
    }
    int fwd[8], bwd[8], nf = 0, nb = 0, L = gc.layers;
    fwd[nf++] = gpt.unit_embed;
    for (int k = 0; k < L; k++) fwd[nf++] = gpt.first_block + k;
    fwd[nf++] = gpt.unit_head;
    if (tied) fwd[nf++] = gpt.unit_embed;
    bwd[nb++] = gpt.unit_head;
    if (tied) bwd[nb++] = gpt.unit_embed;
    for (int k = L - 1; k >= 0; k--) bwd[nb++] = gpt.first_block + k;
    char what[64];
    snprintf(what, sizeof what, "GPT tied=%d forward", tied);
    check_order(zt_engine_use_order(&eng, ZT_PASS_FORWARD), fwd, nf, what);
    snprintf(what, sizeof what, "GPT tied=%d backward", tied);
    check_order(zt_engine_use_order(&eng, ZT_PASS_BACKWARD), bwd, nb, what);
    zt_engine_destroy(&eng);
    zt_gpt_destroy(&gpt);
    zt_ctx_destroy(&ctx);
    printf("ok: GPT tied=%d: recorded orders are the model's use orders (%d forward, %d backward gathers)\n", tied,
           nf, nb);
}

int main(void) {
    test_synthetic_order();
    test_gpt_order(0);
    test_gpt_order(1);
    printf("%ld checks, %d failed\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
