/* Byte-exact memory accounting of the toy GPT through the engine (CPU backend,
 * one thread, world size 1, stage 0), against closed forms worked out from
 * examples/gpt.c and shard/engine.c.
 *
 * Parameter count (gpt.c: embedding unit wte [V,C] + wpe [T,C]; per block
 * ln1 2C, qkv 3C*C + 3C, attproj C*C + C, ln2 2C, fc 4C*C + 4C,
 * fcproj 4C*C + C; head lnf 2C and, untied, lm_head [V,C]):
 *   P = V*C + T*C + L*(12*C*C + 13*C) + 2*C + (tied ? 0 : V*C)
 * with T = seq_len; checked per unit and in total, padded == numel at world 1.
 *
 * For layers 0/1/3, tied/untied, d_model 16/24, vocab 13, fp32 and bf16:
 *  init:     params = grads = P*s (s = 4 fp32, 2 bf16), master = 4P (bf16) or 0,
 *            optimizer = 8P, everything else 0; allocated = phase_peak[init]
 *            = 16P for both dtypes; reserved = the sum of the 512-rounded
 *            blocks.
 *  forward:  (B, T) = (3, 6), T below seq_len 7, N = B*T.
 *            other = 2*N*4 (tokens, targets),
 *            activations A = 4*(N*C + L*blk + N*C + 2N + N*V + N) with
 *            blk = 16*N*C + 4*N + B*NH*T*T (= zt_gpt_block_layout_for total;
 *            B*NH*T with --attention fused, which keeps only lse),
 *            workspace 0 after the pass; phase_peak[forward] = 16P + 8N + A
 *            (fp32), and for bf16 the largest of the moments when a unit's
 *            fp32 view (4 * unit numel, workspace) is live next to the
 *            activations allocated so far.
 *  backward: workspace W = 4*(14*N*C + B*NH*T); phase_peak[backward] =
 *            16P + 8N + A + W (fp32); bf16 adds each unit's fp32 view and fp32
 *            gradient (and, tied, the embedding's fp32 gradient stays open from
 *            the head to the embedding). Afterwards activations, workspace and
 *            other are 0; activations peak = A; workspace peak exact.
 *  step:     window workspace peak = 4 * largest_unit_numel (bf16) or 0 (fp32),
 *            phase_peak[optimizer] = 16P + that; persistent categories unchanged.
 *  steady:   a second forward/backward/step adds no reserved bytes and no
 *            system allocations (the cache serves every request).
 *  teardown: zt_engine_destroy leaves 0 bytes allocated.
 *
 * --mem-limit (fp32; init also bf16), each boundary checked on both sides:
 *  limit = reserved after init - 1: zt_engine_init fails with ZT_ERR_OOM, the
 *    message names phase 'init', the refused 'head adam v' and "params=";
 *    limit = reserved after init succeeds and the first forward allocation
 *    (the input tokens) is refused in phase 'forward'; a 1 GiB limit completes
 *    a whole step.
 *  limit = reserved after forward - 1: init succeeds, forward fails in phase
 *    'forward' on 'head acts'; at the exact limit it succeeds.
 *  limit = reserved after forward + round512(W) - 1: forward succeeds,
 *    backward fails in phase 'backward' on 'backward grads'; at the exact
 *    limit backward and the step succeed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "gpt.h"
#include "zt_ctx.h"
#include "zt_engine.h"
#include "test_comm.h"



#define CHECK_EQ(got, want)                                                                                \
    do {                                                                                                   \
        size_t got_ = (size_t)(got), want_ = (size_t)(want);                                               \
        CHECK(got_ == want_, "[%s] %s = %zu, want %zu (%+lld)", g_label, #got, got_, want_,                \
              (long long)got_ - (long long)want_);                                                         \
    } while (0)

static char g_label[96]; /* the configuration under test, for messages */

static size_t max2(size_t a, size_t b) { return a > b ? a : b; }
static size_t round512(size_t bytes) { return (bytes + 511) / 512 * 512; }

typedef struct {
    int layers, d_model, heads, tied;
    zt_dtype dtype;
    int attention_fused; /* blocks keep lse [B,NH,T] instead of att [B,NH,T,T] */
} acct_config;

enum { SEQ_LEN = 7, VOCAB = 13, MICRO_B = 3, FWD_T = 6 };

/* Everything the closed forms give for one configuration. */
typedef struct {
    size_t ne, nb, nh;   /* numel of the embedding, each block, the head */
    size_t P, largest;   /* total, largest unit */
    size_t s;            /* storage bytes per element */
    size_t persistent;   /* 16P */
    size_t reserved_init;
    size_t N, blk;       /* positions, floats per block activation buffer */
    size_t other, enc, head_acts, acts; /* forward bytes */
    size_t reserved_fwd_fp32;           /* after the first forward (fp32) */
    size_t ws;                          /* backward workspace bytes */
    size_t fwd_peak, bwd_peak, ws_peak; /* phase peaks, workspace category peak */
} expect;

static expect expected(const acct_config *c) {
    expect e;
    memset(&e, 0, sizeof e);
    size_t C = (size_t)c->d_model, V = VOCAB, T = SEQ_LEN, L = (size_t)c->layers, NH = (size_t)c->heads;
    size_t B = MICRO_B, Tf = FWD_T;
    int bf16 = c->dtype == ZT_BF16;
    e.ne = V * C + T * C;
    e.nb = 12 * C * C + 13 * C;
    e.nh = 2 * C + (c->tied ? 0 : V * C);
    e.P = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C + (c->tied ? 0 : V * C);
    e.largest = max2(max2(e.ne, e.nh), L ? e.nb : 0);
    e.s = bf16 ? 2 : 4;
    e.persistent = 16 * e.P;
    /* Per unit: params, grads, [master], adam m, adam v. */
    size_t units[3] = {e.ne, e.nb, e.nh}, counts[3] = {1, L, 1};
    for (int k = 0; k < 3; k++) {
        size_t n = units[k];
        size_t r = 2 * round512(n * e.s) + (bf16 ? round512(4 * n) : 0) + 2 * round512(4 * n);
        e.reserved_init += counts[k] * r;
    }

    e.N = B * Tf;
    e.blk = 16 * e.N * C + 4 * e.N + B * NH * Tf * (c->attention_fused ? 1 : Tf);
    e.other = 2 * e.N * 4;
    e.enc = e.N * C * 4;
    e.head_acts = (e.N * C + 2 * e.N + e.N * V + e.N) * 4;
    e.acts = e.enc + L * e.blk * 4 + e.head_acts;
    e.reserved_fwd_fp32 = e.reserved_init + 2 * round512(e.N * 4) + round512(e.enc) + L * round512(e.blk * 4) +
                          round512(e.head_acts);
    e.ws = (14 * e.N * C + B * NH * Tf) * 4;

    size_t base = e.persistent + e.other; /* held through forward and backward */
    size_t tied_e = c->tied ? 4 * e.ne : 0;
    if (!bf16) {
        e.fwd_peak = base + e.acts;
        e.bwd_peak = base + e.acts + e.ws;
        e.ws_peak = e.ws;
    } else {
        /* Forward: each unit's fp32 view is gathered after its activations are
         * allocated; the head also gathers the embedding when tied. */
        size_t f_embed = e.enc + 4 * e.ne;
        size_t f_block = L ? e.enc + L * e.blk * 4 + 4 * e.nb : 0; /* the last block is the largest moment */
        size_t f_head = e.acts + 4 * e.nh + tied_e;
        e.fwd_peak = base + max2(max2(f_embed, f_block), f_head);
        size_t fwd_ws = max2(max2(4 * e.ne, L ? 4 * e.nb : 0), 4 * e.nh + tied_e);
        /* Backward: the workspace, then per unit its fp32 view + fp32 gradient;
         * tied, the embedding's fp32 gradient opened by the head stays live
         * until the embedding's grads_ready. */
        size_t b_head = e.ws + 8 * e.nh + 2 * tied_e;
        size_t b_block = L ? e.ws + 8 * e.nb + tied_e : 0;
        size_t b_embed = e.ws + 4 * e.ne;
        e.bwd_peak = base + max2(max2(e.acts + b_head, L ? e.enc + L * e.blk * 4 + b_block : 0), e.enc + b_embed);
        e.ws_peak = max2(max2(fwd_ws, b_head), max2(b_block, b_embed));
    }
    return e;
}

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        printf("FAIL: calloc(%zu, %zu)\n", n, size);
        exit(1);
    }
    return p;
}

static zt_gpt_config gpt_config(const acct_config *c) {
    zt_gpt_config g;
    memset(&g, 0, sizeof g);
    g.layers = c->layers;
    g.d_model = c->d_model;
    g.heads = c->heads;
    g.seq_len = SEQ_LEN;
    g.vocab = VOCAB;
    g.micro_batch = MICRO_B;
    g.tied = c->tied;
    g.seed = 7;
    g.attention_fused = c->attention_fused;
    return g;
}

static zt_engine_config engine_config(zt_dtype dtype) {
    zt_engine_config ec = {.stage = 0, .dtype = dtype, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                           .weight_decay = 0.1f, .grad_clip = 1.0f};
    return ec;
}

/* Deterministic tokens and targets in [0, VOCAB). */
static void make_batch(int32_t *tok, int32_t *tgt, size_t n) {
    for (size_t i = 0; i < n; i++) {
        tok[i] = (int32_t)((i * 5 + 3) % VOCAB);
        tgt[i] = (int32_t)((i * 7 + 1) % VOCAB);
    }
}

static int ok_or_report(zt_status st, const zt_ctx *ctx, const char *what) {
    CHECK(st == ZT_OK, "[%s] %s failed: %s: %s", g_label, what, zt_status_name(st), ctx->err.msg);
    return st == ZT_OK;
}

static void check_persistent(const zt_mem *m, const expect *e, int bf16) {
    CHECK_EQ(m->by_category[ZT_CAT_PARAMS].current, e->P * e->s);
    CHECK_EQ(m->by_category[ZT_CAT_GRADS].current, e->P * e->s);
    CHECK_EQ(m->by_category[ZT_CAT_MASTER_PARAMS].current, bf16 ? 4 * e->P : 0);
    CHECK_EQ(m->by_category[ZT_CAT_OPTIMIZER].current, 8 * e->P);
    CHECK_EQ(m->by_category[ZT_CAT_GATHERED_PARAMS].current, 0);
    CHECK_EQ(m->by_category[ZT_CAT_COMM_BUFFERS].current, 0);
}

static void check_transient_zero(const zt_mem *m) {
    CHECK_EQ(m->by_category[ZT_CAT_ACTIVATIONS].current, 0);
    CHECK_EQ(m->by_category[ZT_CAT_WORKSPACE].current, 0);
    CHECK_EQ(m->by_category[ZT_CAT_OTHER].current, 0);
}

/* ---- the accounting walk of one configuration -------------------------- */

static void test_config(const acct_config *c) {
    int bf16 = c->dtype == ZT_BF16;
    snprintf(g_label, sizeof g_label, "L=%d C=%d NH=%d tied=%d %s%s", c->layers, c->d_model, c->heads, c->tied,
             zt_dtype_name(c->dtype), c->attention_fused ? " fused" : "");
    int before = g_failures;
    expect e = expected(c);
    zt_gpt_config gc = gpt_config(c);
    zt_engine_config ec = engine_config(c->dtype);

    zt_ctx ctx;
    zt_gpt gpt;
    zt_engine eng;
    memset(&gpt, 0, sizeof gpt);
    memset(&eng, 0, sizeof eng);
    if (!ok_or_report(zt_ctx_init(&ctx, ZT_DEVICE_CPU, 1, 0, 0, 1, 1), &ctx, "zt_ctx_init")) return;
    zt_mem *m = &ctx.device_mem;
    if (!ok_or_report(zt_gpt_create(&gpt, &gc, &ctx.err), &ctx, "zt_gpt_create")) goto done;
    zt_spec_layout(gpt.spec, 1);
    const zt_model_spec *spec = gpt.spec;

    /* Parameter count: closed form, per unit and in total. */
    CHECK_EQ(spec->nunits, c->layers + 2);
    CHECK_EQ(spec->total_numel, e.P);
    CHECK_EQ(spec->total_padded_numel, e.P);
    CHECK_EQ(spec->largest_unit_numel, e.largest);
    for (int u = 0; u < spec->nunits; u++) {
        size_t want = u == gpt.unit_embed ? e.ne : u == gpt.unit_head ? e.nh : e.nb;
        CHECK_EQ(spec->units[u].numel, want);
        CHECK_EQ(spec->units[u].padded_numel, want);
    }
    zt_gpt_block_layout lay = zt_gpt_block_layout_for(&gc, MICRO_B, FWD_T);
    CHECK_EQ(lay.total, e.blk);

    /* Init. */
    zt_mem_set_phase(m, ZT_PHASE_INIT);
    if (!ok_or_report(zt_engine_init(&eng, &ctx, test_comm(), spec, &ec, zt_gpt_init_param, &gpt), &ctx, "zt_engine_init"))
        goto done;
    check_persistent(m, &e, bf16);
    check_transient_zero(m); /* activations, workspace, other: 0 */
    CHECK_EQ(m->allocated.current, e.persistent);
    CHECK_EQ(m->allocated.current, (2 * e.s + (bf16 ? 4 : 0) + 8) * e.P);
    CHECK_EQ(m->phase_peak[ZT_PHASE_INIT], e.persistent);
    CHECK_EQ(m->reserved.current, e.reserved_init);
    CHECK_EQ(m->alloc_count, (size_t)spec->nunits * (bf16 ? 5 : 4));

    size_t n = e.N;
    int32_t *tok = xcalloc(n, sizeof *tok), *tgt = xcalloc(n, sizeof *tgt);
    make_batch(tok, tgt, n);
    size_t reserved_after_iter[2] = {0, 0}, sysallocs_after_iter[2] = {0, 0};

    for (int iter = 0; iter < 2; iter++) {
        /* Forward. */
        zt_mem_window_reset(m);
        if (!ok_or_report(zt_engine_zero_grads(&eng), &ctx, "zero_grads")) break;
        zt_mem_set_phase(m, ZT_PHASE_FORWARD);
        float loss = 0.0f;
        if (!ok_or_report(zt_gpt_forward(&gpt, &eng, tok, tgt, MICRO_B, FWD_T, &loss), &ctx, "forward")) break;
        CHECK(loss > 0.0f, "[%s] loss %g", g_label, (double)loss);
        check_persistent(m, &e, bf16);
        CHECK_EQ(m->by_category[ZT_CAT_OTHER].current, e.other);
        CHECK_EQ(m->by_category[ZT_CAT_ACTIVATIONS].current, e.acts);
        CHECK_EQ(m->by_category[ZT_CAT_WORKSPACE].current, 0);
        CHECK_EQ(m->allocated.current, e.persistent + e.other + e.acts);
        CHECK_EQ(m->phase_peak[ZT_PHASE_FORWARD], e.fwd_peak);
        CHECK_EQ(m->window_phase_peak[ZT_PHASE_FORWARD], e.fwd_peak);
        if (!bf16 && iter == 0) CHECK_EQ(m->reserved.current, e.reserved_fwd_fp32);

        /* Backward. */
        zt_mem_set_phase(m, ZT_PHASE_BACKWARD);
        if (!ok_or_report(zt_gpt_backward(&gpt, &eng, 1.0f / (float)n), &ctx, "backward")) break;
        check_persistent(m, &e, bf16);
        check_transient_zero(m);
        CHECK_EQ(m->allocated.current, e.persistent);
        CHECK_EQ(m->by_category[ZT_CAT_ACTIVATIONS].peak, e.acts);
        CHECK_EQ(m->by_category[ZT_CAT_OTHER].peak, e.other);
        CHECK_EQ(m->by_category[ZT_CAT_WORKSPACE].peak, e.ws_peak);
        CHECK_EQ(m->window_cat_peak[ZT_CAT_ACTIVATIONS], e.acts);
        CHECK_EQ(m->window_cat_peak[ZT_CAT_WORKSPACE], e.ws_peak);
        CHECK_EQ(m->phase_peak[ZT_PHASE_BACKWARD], e.bwd_peak);
        CHECK_EQ(m->window_phase_peak[ZT_PHASE_BACKWARD], e.bwd_peak);
        CHECK_EQ(m->allocated.peak, max2(e.fwd_peak, e.bwd_peak));
        if (!bf16 && iter == 0) CHECK_EQ(m->reserved.current, e.reserved_fwd_fp32 + round512(e.ws));

        /* Optimizer step: only bf16 needs a workspace (the fp32 up-cast of the
         * largest unit's bf16 gradients). */
        zt_mem_window_reset(m);
        zt_mem_set_phase(m, ZT_PHASE_OPTIMIZER);
        if (!ok_or_report(zt_engine_step(&eng, 1e-3f), &ctx, "step")) break;
        size_t step_ws = bf16 ? 4 * e.largest : 0;
        CHECK_EQ(m->window_cat_peak[ZT_CAT_WORKSPACE], step_ws);
        CHECK_EQ(m->window_phase_peak[ZT_PHASE_OPTIMIZER], e.persistent + step_ws);
        CHECK_EQ(m->phase_peak[ZT_PHASE_OPTIMIZER], e.persistent + step_ws);
        CHECK_EQ(m->window_allocated_peak, e.persistent + step_ws);
        check_persistent(m, &e, bf16);
        check_transient_zero(m);
        CHECK_EQ(m->allocated.current, e.persistent);
        CHECK_EQ(m->phase_peak[ZT_PHASE_INIT], e.persistent); /* untouched by later phases */
        CHECK_EQ(eng.steps_taken, iter + 1);
        reserved_after_iter[iter] = m->reserved.current;
        sysallocs_after_iter[iter] = m->system_allocs;
    }
    /* The second iteration is served from the cache. */
    CHECK_EQ(reserved_after_iter[1], reserved_after_iter[0]);
    CHECK_EQ(sysallocs_after_iter[1], sysallocs_after_iter[0]);
    free(tok);
    free(tgt);

    zt_engine_destroy(&eng);
    CHECK_EQ(m->allocated.current, 0);
    if (g_failures == before)
        printf("ok %s: P=%zu persistent %zu, reserved init %zu, forward +%zu other +%zu activations (peak %zu), "
               "backward workspace peak %zu (phase peak %zu), step workspace %zu\n",
               g_label, e.P, e.persistent, e.reserved_init, e.other, e.acts, e.fwd_peak, e.ws_peak, e.bwd_peak,
               bf16 ? 4 * e.largest : (size_t)0);
done:
    zt_engine_destroy(&eng);
    zt_gpt_destroy(&gpt);
    zt_ctx_destroy(&ctx);
}

/* ---- --mem-limit --------------------------------------------------------- */

/* How far one run under a device limit got. */
typedef enum { FAILED_INIT, FAILED_FORWARD, FAILED_BACKWARD, FAILED_STEP, COMPLETED } limit_outcome;

static limit_outcome run_with_limit(const acct_config *c, size_t limit, char *msg, size_t msg_cap,
                                    zt_status *status) {
    zt_gpt_config gc = gpt_config(c);
    zt_engine_config ec = engine_config(c->dtype);
    expect e = expected(c);
    zt_ctx ctx;
    zt_gpt gpt;
    zt_engine eng;
    memset(&gpt, 0, sizeof gpt);
    memset(&eng, 0, sizeof eng);
    msg[0] = '\0';
    *status = ZT_OK;
    limit_outcome out = FAILED_INIT;
    int32_t tok[MICRO_B * FWD_T], tgt[MICRO_B * FWD_T];
    make_batch(tok, tgt, (size_t)MICRO_B * FWD_T);
    float loss;

    zt_status st = zt_ctx_init(&ctx, ZT_DEVICE_CPU, 1, limit, 0, 1, 1);
    if (st != ZT_OK) {
        CHECK(0, "[%s] zt_ctx_init: %s", g_label, ctx.err.msg);
        return FAILED_INIT;
    }
    zt_mem *m = &ctx.device_mem;
    CHECK_EQ(m->limit_bytes, limit);
    if ((st = zt_gpt_create(&gpt, &gc, &ctx.err)) != ZT_OK) goto done;
    zt_spec_layout(gpt.spec, 1);
    zt_mem_set_phase(m, ZT_PHASE_INIT);
    if ((st = zt_engine_init(&eng, &ctx, test_comm(), gpt.spec, &ec, zt_gpt_init_param, &gpt)) != ZT_OK) goto done;
    out = FAILED_FORWARD;
    CHECK_EQ(m->allocated.current, e.persistent);
    zt_mem_set_phase(m, ZT_PHASE_FORWARD);
    if ((st = zt_gpt_forward(&gpt, &eng, tok, tgt, MICRO_B, FWD_T, &loss)) != ZT_OK) goto done;
    out = FAILED_BACKWARD;
    zt_mem_set_phase(m, ZT_PHASE_BACKWARD);
    if ((st = zt_gpt_backward(&gpt, &eng, 1.0f / (float)(MICRO_B * FWD_T))) != ZT_OK) goto done;
    out = FAILED_STEP;
    zt_mem_set_phase(m, ZT_PHASE_OPTIMIZER);
    if ((st = zt_engine_step(&eng, 1e-3f)) != ZT_OK) goto done;
    out = COMPLETED;
done:
    *status = st;
    snprintf(msg, msg_cap, "%s", ctx.err.msg);
    CHECK(m->reserved.current <= limit, "[%s] reserved %zu above the limit %zu", g_label, m->reserved.current,
          limit);
    /* A refusal leaves the runtime consistent: everything can be freed. */
    zt_gpt_free_activations(&gpt, &eng);
    zt_engine_destroy(&eng);
    CHECK_EQ(m->allocated.current, 0);
    zt_gpt_destroy(&gpt);
    zt_ctx_destroy(&ctx);
    return out;
}

static const char *outcome_name(limit_outcome o) {
    static const char *const names[] = {"init", "forward", "backward", "step", "completed"};
    return names[o];
}

/* Runs under `limit`; expects to stop at `want` (COMPLETED: no error) and the
 * refusal message to contain each of the NULL-terminated needles. */
static void expect_limit(const acct_config *c, size_t limit, limit_outcome want, const char *const *needles) {
    char msg[1024];
    zt_status st;
    int before = g_failures;
    limit_outcome got = run_with_limit(c, limit, msg, sizeof msg, &st);
    CHECK(got == want, "[%s] limit %zu: stopped at %s, want %s (%s: %s)", g_label, limit, outcome_name(got),
          outcome_name(want), zt_status_name(st), msg);
    if (want == COMPLETED) {
        CHECK(st == ZT_OK, "[%s] limit %zu: status %s", g_label, limit, zt_status_name(st));
        return;
    }
    CHECK(st == ZT_ERR_OOM, "[%s] limit %zu: status %s, want OOM", g_label, limit, zt_status_name(st));
    for (int i = 0; needles && needles[i]; i++)
        CHECK(strstr(msg, needles[i]) != NULL, "[%s] limit %zu: message lacks \"%s\": %s", g_label, limit,
              needles[i], msg);
    if (g_failures == before) printf("ok [%s] limit %zu refused in %s: %s\n", g_label, limit, outcome_name(got), msg);
}

static void test_limits(const acct_config *c) {
    snprintf(g_label, sizeof g_label, "limit L=%d C=%d tied=%d %s", c->layers, c->d_model, c->tied,
             zt_dtype_name(c->dtype));
    expect e = expected(c);

    static const char *const init_needles[] = {"phase 'init'", "params=", "optimizer 'head adam v'", NULL};
    expect_limit(c, e.reserved_init - 1, FAILED_INIT, init_needles);
    /* Below the bytes init must hold: refused earlier, on whichever block first
     * crosses the limit. */
    expect_limit(c, e.persistent - 1, FAILED_INIT, (const char *const[]){"phase 'init'", "params=", NULL});
    /* At exactly init's need nothing is cached and nothing is left: the first
     * forward allocation (the input tokens) is refused. */
    expect_limit(c, e.reserved_init, FAILED_FORWARD,
                 (const char *const[]){"phase 'forward'", "params=", "other 'input tokens'", NULL});
    expect_limit(c, (size_t)1 << 30, COMPLETED, NULL);
    /* bf16 views and fp32 gradients come and go through the cache (which a
     * limit empties on demand), so its forward and backward needs are not
     * pinned here; fp32's are. */
    if (c->dtype == ZT_BF16) return;

    static const char *const fwd_needles[] = {"phase 'forward'", "params=", "activations 'head acts'", NULL};
    expect_limit(c, e.reserved_fwd_fp32 - 1, FAILED_FORWARD, fwd_needles);

    size_t bwd_need = e.reserved_fwd_fp32 + round512(e.ws);
    static const char *const bwd_needles[] = {"phase 'backward'", "params=", "workspace 'backward grads'", NULL};
    expect_limit(c, e.reserved_fwd_fp32, FAILED_BACKWARD, bwd_needles);
    expect_limit(c, bwd_need - 1, FAILED_BACKWARD, bwd_needles);
    expect_limit(c, bwd_need, COMPLETED, NULL); /* the fp32 step allocates nothing */
}

int main(void) {
    static const int layer_counts[] = {0, 1, 3};
    for (int li = 0; li < 3; li++)
        for (int tied = 0; tied < 2; tied++)
            for (int d = 0; d < 2; d++) {
                acct_config c;
                c.layers = layer_counts[li];
                c.tied = tied;
                c.d_model = ((tied + li) % 2) ? 24 : 16;
                c.heads = c.d_model == 24 ? 3 : 4;
                c.dtype = d ? ZT_BF16 : ZT_FP32;
                c.attention_fused = 0;
                test_config(&c);
                if (li > 0 && !tied) { /* --attention fused: the same closed forms with lse */
                    c.attention_fused = 1;
                    test_config(&c);
                }
            }

    static const acct_config limit_configs[] = {
        {1, 16, 4, 0, ZT_FP32, 0},
        {3, 24, 3, 1, ZT_FP32, 0},
        {0, 16, 2, 1, ZT_FP32, 0},
        {1, 24, 3, 0, ZT_BF16, 0},
        {3, 16, 4, 0, ZT_FP32, 1},
    };
    for (size_t i = 0; i < sizeof limit_configs / sizeof limit_configs[0]; i++) test_limits(&limit_configs[i]);

    printf("%ld checks, %d failed\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
