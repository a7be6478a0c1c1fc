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
 *    the embedding.
 * 4. DeepSpeed's stage-3 knobs on the synthetic model (units of 64, 80, 96,
 *    112 parameters), each with its negative twin: persistent units are
 *    held from init on, never gathered nor prefetched, and the closed form
 *    counts their params full (at world 4, where it differs); a cap on live
 *    parameters stops prefetches in order at the first that would exceed
 *    it, but never the model's own gathers; a unit whose next use (in this
 *    pass, then the next) comes within the reuse distance stays gathered,
 *    one just beyond it does not, and the optimizer step frees every kept
 *    unit; sub_group_size sets the optimizer's 16-bit chunk. */
#include <stdio.h>
#include <string.h>

#include "test_util.h"
#include "gpt.h"
#include "zt_ctx.h"
#include "zt_engine.h"
#include "test_comm.h"

static void fill_zero(void *arg, int unit, int param, size_t first, size_t count, float *dst) {
    (void)arg, (void)unit, (void)param, (void)first;
    memset(dst, 0, count * sizeof(float));
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

/* The synthetic model: units u0..u3 of 64, 80, 96, 112 parameters, laid out for world 1. */
static void synthetic_spec(zt_model_spec *spec, zt_ctx *ctx) {
    memset(spec, 0, sizeof *spec);
    static const char *const names[] = {"u0", "u1", "u2", "u3"};
    for (int u = 0; u < 4; u++) {
        int idx, p;
        int64_t shape[1] = {64 + 16 * u};
        MUST(zt_spec_add_unit(spec, names[u], &idx, &ctx->err), ctx);
        MUST(zt_spec_add_param(spec, idx, "w", 1, shape, 0, &p, &ctx->err), ctx);
    }
    zt_spec_layout(spec, 1);
}

static void test_synthetic_order(void) {
    static zt_model_spec spec;
    zt_ctx ctx;
    MUST(zt_ctx_init(&ctx, ZT_DEVICE_CPU, 1, 0, 0, 1, 1), &ctx);
    synthetic_spec(&spec, &ctx);
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
    zt_spec_layout(gpt.dec.spec, 1);
    zt_engine_config ec = stage3();
    MUST(zt_engine_init(&eng, &ctx, test_comm(), gpt.dec.spec, &ec, zt_gpt_init_param, &gpt), &ctx);
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
    fwd[nf++] = gpt.dec.unit_embed;
    for (int k = 0; k < L; k++) fwd[nf++] = gpt.dec.first_block + k;
    fwd[nf++] = gpt.dec.unit_head;
    if (tied) fwd[nf++] = gpt.dec.unit_embed;
    bwd[nb++] = gpt.dec.unit_head;
    if (tied) bwd[nb++] = gpt.dec.unit_embed;
    for (int k = L - 1; k >= 0; k--) bwd[nb++] = gpt.dec.first_block + k;
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

/* One pass of `kind` over use[n], each unit released right after its
 * gather. gathered[i] / released[i] (NULL: unchecked): the units held
 * (bit set) after use i's gather / release. */
static void run_pass(zt_engine *e, zt_pass kind, const int *use, int n, const unsigned *gathered,
                     const unsigned *released, const char *what) {
    const void *w;
    MUST(zt_engine_begin_pass(e, kind), e->ctx);
    for (int i = 0; i < n; i++) {
        MUST(zt_engine_gather(e, use[i], &w), e->ctx);
        if (gathered)
            CHECK(held(e) == gathered[i], "%s: after gathering unit %d (use %d): held 0x%x, want 0x%x", what, use[i],
                  i, held(e), gathered[i]);
        MUST(zt_engine_release(e, use[i]), e->ctx);
        if (released)
            CHECK(held(e) == released[i], "%s: after releasing unit %d (use %d): held 0x%x, want 0x%x", what, use[i],
                  i, held(e), released[i]);
    }
}

static const int g_use[] = {2, 0, 1, 2, 3}; /* the synthetic forward order */

/* persist_threshold 81: u0 (64) and u1 (80) stay whole from init on, are
 * never gathered (no gathered bytes while u0 is in use) nor prefetched
 * (prefetch 1 after u2 would take u0; after u0, u1). */
static void test_persistent(void) {
    static zt_model_spec spec;
    zt_ctx ctx;
    MUST(zt_ctx_init(&ctx, ZT_DEVICE_CPU, 1, 0, 0, 1, 1), &ctx);
    synthetic_spec(&spec, &ctx);
    zt_engine eng;
    zt_engine_config ec = stage3();
    ec.persist_threshold = 81;
    MUST(zt_engine_init(&eng, &ctx, test_comm(), &spec, &ec, fill_zero, &spec), &ctx);
    CHECK(held(&eng) == 0x3, "persistent units held after init: 0x%x, want 0x3", held(&eng));
    static const unsigned want[] = {0x7, 0x3, 0x7, 0xF, 0xB};
    run_pass(&eng, ZT_PASS_FORWARD, g_use, 5, NULL, NULL, "persist, first pass");
    run_pass(&eng, ZT_PASS_FORWARD, g_use, 5, want, NULL, "persist, second pass");
    const void *w;
    MUST(zt_engine_gather(&eng, 0, &w), &ctx);
    CHECK(eng.gathered_inflight_now == 0, "persistent u0 in use: %zu gathered bytes, want 0", eng.gathered_inflight_now);
    MUST(zt_engine_release(&eng, 0), &ctx);
    MUST(zt_engine_step(&eng, 1e-3f), &ctx);
    CHECK(held(&eng) == 0x3, "after the step: held 0x%x, want the persistent 0x3", held(&eng));
    zt_engine_destroy(&eng);
    zt_ctx_destroy(&ctx);
    /* The closed form at world 4 (quantum 64: padded 64, 128, 128, 128):
     * u0, u1 full, u2, u3 a quarter; at stage 2 everything full anyway. */
    zt_spec_layout(&spec, 4);
    zt_engine_config c3 = {.stage = 3, .persist_threshold = 81}, c3none = {.stage = 3}, c2 = c3;
    c2.stage = 2;
    size_t p3 = zt_engine_state_bytes(&spec, &c3, 0).params;
    size_t none = zt_engine_state_bytes(&spec, &c3none, 0).params;
    size_t p2 = zt_engine_state_bytes(&spec, &c2, 0).params;
    CHECK(p3 == (64 + 128 + 32 + 32) * 4, "stage 3 params with threshold 81: %zu bytes, want %d", p3, 256 * 4);
    CHECK(none == (16 + 32 + 32 + 32) * 4, "negative twin, no threshold: %zu bytes, want %d", none, 112 * 4);
    CHECK(p2 == 448 * 4, "stage 2 with a threshold: %zu bytes, want %d", p2, 448 * 4);
    printf("ok: persistent units held from init, never gathered nor prefetched; closed form counts them full\n");
}

/* max_live_params over the second pass of 2,0,1,2,3 at prefetch 3. */
static void live_cap_pass(size_t cap, const unsigned *want, size_t want_peak, const char *what) {
    static zt_model_spec spec;
    zt_ctx ctx;
    MUST(zt_ctx_init(&ctx, ZT_DEVICE_CPU, 1, 0, 0, 1, 1), &ctx);
    synthetic_spec(&spec, &ctx);
    zt_engine eng;
    zt_engine_config ec = stage3();
    ec.prefetch = 3;
    ec.max_live_params = cap;
    MUST(zt_engine_init(&eng, &ctx, test_comm(), &spec, &ec, fill_zero, &spec), &ctx);
    run_pass(&eng, ZT_PASS_FORWARD, g_use, 5, NULL, NULL, what);
    run_pass(&eng, ZT_PASS_FORWARD, g_use, 5, want, NULL, what);
    CHECK(zt_engine_gathered_peak(&eng) == want_peak, "%s: gathered peak %zu bytes, want %zu", what,
          zt_engine_gathered_peak(&eng), want_peak);
    zt_engine_destroy(&eng);
    zt_ctx_destroy(&ctx);
}

/* Cap 250: after u2 (96) the prefetch takes u0, u1 (240 in all); after u0
 * u3 (112) would make 352 and waits; after u1 still 288; after u2's second
 * use 208 fits. Without the cap u0's prefetch takes all four; with a cap
 * below every unit the model's own gathers still go. */
static void test_max_live(void) {
    static const unsigned capped[] = {0x7, 0x7, 0x6, 0xC, 0x8}, uncapped[] = {0x7, 0xF, 0xE, 0xC, 0x8},
                          tiny[] = {0x4, 0x1, 0x2, 0x4, 0x8};
    live_cap_pass(250, capped, 240 * 4, "max_live 250");
    live_cap_pass(0, uncapped, 352 * 4, "negative twin, no cap");
    live_cap_pass(50, tiny, 112 * 4, "max_live 50, below every unit");
    printf("ok: max_live_params stops prefetches in order at the cap, never the model's gathers\n");
}

/* max_reuse_distance D at prefetch 0, forward 2,0,1,2,3 then backward 3,1,
 * over two steps (the second looks ahead in the first's records): u2's
 * first release sees u0, u1 (144) before its reuse, u1's sees u2, u3
 * (208), u3's last release nothing before backward's u3. released[5 + 2]:
 * the units held after each release of the second step. */
static void reuse_steps(size_t D, const unsigned *released, const char *what) {
    static zt_model_spec spec;
    static const int back[] = {3, 1};
    zt_ctx ctx;
    MUST(zt_ctx_init(&ctx, ZT_DEVICE_CPU, 1, 0, 0, 1, 1), &ctx);
    synthetic_spec(&spec, &ctx);
    zt_engine eng;
    zt_engine_config ec = stage3();
    ec.prefetch = 0;
    ec.max_reuse_distance = D;
    MUST(zt_engine_init(&eng, &ctx, test_comm(), &spec, &ec, fill_zero, &spec), &ctx);
    for (int step = 0; step < 2; step++) {
        run_pass(&eng, ZT_PASS_FORWARD, g_use, 5, NULL, step ? released : NULL, what);
        run_pass(&eng, ZT_PASS_BACKWARD, back, 2, NULL, step ? released + 5 : NULL, what);
        MUST(zt_engine_step(&eng, 1e-3f), &ctx);
    }
    /* A forward that keeps units for a backward that never comes: the
     * optimizer step frees them (they would hold the old parameters). */
    run_pass(&eng, ZT_PASS_FORWARD, g_use, 5, NULL, NULL, what);
    MUST(zt_engine_step(&eng, 1e-3f), &ctx);
    CHECK(held(&eng) == 0 && eng.gathered_inflight_now == 0, "%s: after the step held 0x%x, %zu bytes, want none",
          what, held(&eng), eng.gathered_inflight_now);
    zt_engine_destroy(&eng);
    zt_ctx_destroy(&ctx);
}

static void test_reuse(void) {
    static const unsigned d150[] = {0x4, 0x4, 0x4, 0x0, 0x8, 0x0, 0x0}, d208[] = {0x4, 0x4, 0x6, 0x2, 0xA, 0x2, 0x0},
                          d143[] = {0x0, 0x0, 0x0, 0x0, 0x8, 0x0, 0x0}, off[] = {0, 0, 0, 0, 0, 0, 0};
    reuse_steps(150, d150, "reuse 150");
    reuse_steps(208, d208, "reuse 208");
    reuse_steps(143, d143, "negative twin, reuse 143 (one short of u2's 144)");
    reuse_steps(0, off, "negative twin, reuse off");
    printf("ok: max_reuse_distance keeps exactly the units used again within it; the step frees them\n");
}

/* sub_group_size sets the optimizer's 16-bit chunk; without it the largest
 * owned range (112, below ZT_OPTIMIZER_CHUNK); fp32 has none. */
static void test_sub_group(void) {
    static zt_model_spec spec;
    static const struct { zt_dtype dtype; size_t sub, want; } cases[] = {
        {ZT_BF16, 50, 50}, {ZT_BF16, 0, 112}, {ZT_BF16, 1000, 112}, {ZT_FP32, 50, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        zt_ctx ctx;
        MUST(zt_ctx_init(&ctx, ZT_DEVICE_CPU, 1, 0, 0, 1, 1), &ctx);
        synthetic_spec(&spec, &ctx);
        zt_engine eng;
        zt_engine_config ec = stage3();
        ec.dtype = ec.reduce_dtype = cases[i].dtype;
        ec.sub_group_size = cases[i].sub;
        MUST(zt_engine_init(&eng, &ctx, test_comm(), &spec, &ec, fill_zero, &spec), &ctx);
        CHECK(zt_engine_optimizer_chunk(&eng) == cases[i].want, "%s sub_group_size %zu: chunk %zu, want %zu",
              zt_dtype_name(cases[i].dtype), cases[i].sub, zt_engine_optimizer_chunk(&eng), cases[i].want);
        run_pass(&eng, ZT_PASS_FORWARD, g_use, 5, NULL, NULL, "sub_group");
        MUST(zt_engine_step(&eng, 1e-3f), &ctx); /* the step in pieces of the chunk */
        zt_engine_destroy(&eng);
        zt_ctx_destroy(&ctx);
    }
    printf("ok: sub_group_size is the optimizer's 16-bit chunk\n");
}

int main(void) {
    test_synthetic_order();
    test_gpt_order(0);
    test_gpt_order(1);
    test_persistent();
    test_max_live();
    test_reuse();
    test_sub_group();
    printf("%ld checks, %d failed\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
