/* Byte-exact memory accounting of the toy GPT through the engine (CPU backend,
 * one thread, world size 1, stage 0, one micro-batch flagged last, one
 * reduction bucket of every unit sent at the step), against closed forms
 * worked out from examples/gpt/gpt.c, shard/ and runtime/mem.c.
 *
 * Parameter count (gpt.c: embedding unit wte [V,C] + wpe [T,C]; per block
 * ln1 2C, qkv 3C*C + 3C, attproj C*C + C, ln2 2C, fc 4C*C + 4C,
 * fcproj 4C*C + C; head lnf 2C and, untied, lm_head [V,C]):
 *   P = ne + L*nb + nh = V*C + T*C + L*(12*C*C + 13*C) + 2*C + (tied ? 0 : V*C)
 * with T = seq_len; checked per unit and in total, padded == numel at world 1.
 *
 * For layers 0/1/3, tied/untied, d_model 16/24, vocab 13, fp32, bf16, fp16
 * (s = 4 or 2 bytes per element of the compute dtype = the storage dtype;
 * "16-bit" is bf16 and fp16 alike; r(x) = x rounded up to 512):
 *  init:     params = grads = s*P, master = 4P (16-bit) or 0, optimizer = 8P,
 *            everything else 0; allocated = phase_peak[init] = 16P for every
 *            dtype; reserved = the sum of the r()-rounded blocks.
 *  forward:  (B, T) = (3, 6), T below seq_len 7, N = B*T; w(n) = n*s rounded
 *            up to a multiple of 4 (every array starts, and every buffer ends,
 *            on a 4-byte word). other = 8N (tokens, targets);
 *            activations A = enc + L*blk + head with enc = w(NC),
 *            blk = 5w(NC) + w(3NC) + 2w(4NC) + 16N + att,
 *              att = w(B*NH*T*T), or 4*B*NH*T (lse) with --attention fused,
 *            head = w(NC) + 12N + w(NV); no fp32 views of gathered units, so
 *            workspace 0 and phase_peak[forward] = 16P + 8N + A.
 *            reserved += 2r(4N) + r(enc) + L*r(blk) + r(head) (first pass).
 *  backward: workspace W = w(14NC) + 4*B*NH*T. fp32 accumulates into the
 *            grads: phase_peak[backward] = 16P + 8N + A + W, workspace peak W,
 *            reserved += r(W). 16-bit opens a 4*numel fp32 grad (workspace)
 *            per unit, kept until the step's bucket is packed; with
 *            te = tied ? 4ne : 0 the moments are
 *              head      A + W + 4nh + te
 *              block k   enc + (k+1)*blk + W + 4nh + 4nb*(L-k) + te  (k = L-1..0)
 *              embedding enc + W + 4P
 *            phase_peak[backward] = 16P + 8N + their maximum, workspace peak
 *            W + 4P. Afterwards activations and other are 0, workspace 4P
 *            (16-bit) or 0.
 *  step:     the bucket: send, recv [P] fp32 and reduced [P] fp32 = 12P of
 *            comm buffers, while 16-bit still holds its 4P fp32 grads;
 *            phase_peak[optimizer] = 16P + 12P (fp32) or 16P + 4P + 12P;
 *            window workspace peak 0 (fp32) or max(4P, 4*largest) = 4P; then
 *            everything transient is 0. fp32 reserved: the three bucket
 *            requests (rb = r(4P) each) first take the smallest cached blocks
 *            of size in [rb, 2rb] (h of them, sizes H), the rest are new:
 *            reserved += (3 - h)*rb.
 *  steady:   a second forward/backward/step adds no reserved bytes and no
 *            system allocations (the cache serves every request).
 *  teardown: zt_engine_destroy leaves 0 bytes allocated.
 *
 * --mem-limit (fp32 in full; bf16 and fp16 init and completion), each
 * boundary checked on both sides:
 *  limit = reserved after init - 1: zt_engine_init fails with ZT_ERR_OOM, the
 *    message names phase 'init', the refused 'head exp_avg_sq' and "params=";
 *    limit = reserved after init succeeds and the first forward allocation
 *    (the input tokens) is refused in phase 'forward'; 1 GiB completes a step.
 *  limit = reserved after forward - 1: forward fails on 'head acts'.
 *  limit = reserved after forward (R_f), up to R_b - 1 with R_b = R_f + r(W):
 *    backward fails on 'backward grads'.
 *  The step: a new block over the limit first releases the whole cache, so
 *    its need is R_s = max(R_b, reserved_init + sum(H) + (3 - h)*rb). Where
 *    R_s > R_b, from R_b to R_s - 1 it fails in phase 'optimizer' on a bucket
 *    buffer ('bucket reduced' at R_s - 1); at R_s the whole step completes. */
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
static size_t round4(size_t bytes) { return (bytes + 3) / 4 * 4; }

typedef struct {
    int layers, d_model, heads, tied;
    zt_dtype dtype;
    int attention_fused; /* blocks keep lse [B,NH,T] instead of att [B,NH,T,T] */
} acct_config;

enum { SEQ_LEN = 7, VOCAB = 13, MICRO_B = 3, FWD_T = 6 };

/* Everything the closed forms give for one configuration (sizes in bytes
 * unless they are numels). */
typedef struct {
    size_t ne, nb, nh;   /* numel of the embedding, each block, the head */
    size_t P, largest;   /* total, largest unit */
    int half;            /* 16-bit (bf16 or fp16): fp32 master and fp32 grad buffers */
    size_t s;            /* storage and compute bytes per element */
    size_t persistent;   /* 16P */
    size_t reserved_init;
    size_t N, blk;       /* positions, bytes of one block's activation buffer */
    size_t other, enc, head_acts, acts; /* forward bytes */
    size_t reserved_fwd;                /* after the first forward */
    size_t ws;                          /* backward workspace bytes */
    size_t fwd_peak, bwd_peak, ws_peak; /* phase peaks, backward workspace category peak */
    size_t after_bwd_ws;                /* workspace still held after backward (fp32 grads) */
    size_t bucket;                      /* the step's comm buffers: 12P */
    size_t step_peak, step_ws_peak;     /* optimizer phase peak, its window workspace peak */
    /* fp32, the step's bucket against the cache left by the first backward: */
    size_t reserved_bwd;                /* R_b */
    size_t bucket_hits, bucket_hit_bytes; /* h and sum(H) */
    size_t reserved_step;               /* after the first step (unlimited) */
    size_t step_need;                   /* R_s */
} expect;

static expect expected(const acct_config *c) {
    expect e;
    memset(&e, 0, sizeof e);
    size_t C = (size_t)c->d_model, V = VOCAB, T = SEQ_LEN, L = (size_t)c->layers, NH = (size_t)c->heads;
    size_t B = MICRO_B, Tf = FWD_T;
    e.half = c->dtype != ZT_FP32;
    e.ne = V * C + T * C;
    e.nb = 12 * C * C + 13 * C;
    e.nh = 2 * C + (c->tied ? 0 : V * C);
    e.P = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C + (c->tied ? 0 : V * C);
    e.largest = max2(max2(e.ne, e.nh), L ? e.nb : 0);
    e.s = e.half ? 2 : 4;
    e.persistent = 16 * e.P;
    /* Per unit: params, grads, [master], exp_avg, exp_avg_sq. */
    size_t units[3] = {e.ne, e.nb, e.nh}, counts[3] = {1, L, 1};
    for (int k = 0; k < 3; k++) {
        size_t n = units[k];
        size_t r = 2 * round512(n * e.s) + (e.half ? round512(4 * n) : 0) + 2 * round512(4 * n);
        e.reserved_init += counts[k] * r;
    }

    size_t N = B * Tf, NC = N * C, s = e.s;
#define WB(n) round4((n) * s) /* n elements of the compute dtype, in whole words */
    e.N = N;
    e.blk = 5 * WB(NC) + WB(3 * NC) + 2 * WB(4 * NC) + 16 * N +
            (c->attention_fused ? 4 * B * NH * Tf : WB(B * NH * Tf * Tf));
    e.other = 2 * N * 4;
    e.enc = WB(NC);
    e.head_acts = WB(NC) + 12 * N + WB(N * V);
    e.acts = e.enc + L * e.blk + e.head_acts;
    e.reserved_fwd = e.reserved_init + 2 * round512(N * 4) + round512(e.enc) + L * round512(e.blk) +
                     round512(e.head_acts);
    e.ws = WB(14 * NC) + 4 * B * NH * Tf;
#undef WB

    size_t base = e.persistent + e.other; /* held through forward and backward */
    e.fwd_peak = base + e.acts;
    if (!e.half) {
        e.bwd_peak = base + e.acts + e.ws;
        e.ws_peak = e.ws;
    } else {
        /* Each unit's fp32 grad opens when its backward starts and stays
         * until the step packs the bucket; tied, the head opens the
         * embedding's. Activations go after each unit's grads_ready. */
        size_t te = c->tied ? 4 * e.ne : 0;
        size_t m = e.acts + e.ws + 4 * e.nh + te; /* head */
        for (size_t k = L; k-- > 0;)
            m = max2(m, e.enc + (k + 1) * e.blk + e.ws + 4 * e.nh + 4 * e.nb * (L - k) + te);
        m = max2(m, e.enc + e.ws + 4 * e.P); /* embedding */
        e.bwd_peak = base + m;
        e.ws_peak = e.ws + 4 * e.P;
        e.after_bwd_ws = 4 * e.P;
    }
    e.bucket = 3 * 4 * e.P; /* send, recv in the fp32 reduce dtype; reduced fp32 */
    e.step_peak = e.persistent + e.after_bwd_ws + e.bucket;
    e.step_ws_peak = e.half ? max2(4 * e.P, 4 * e.largest) : 0;

    /* fp32: what the caching allocator (mem.c) does with the bucket. After
     * the first backward every transient block is cached; each of the three
     * requests of rb bytes takes the smallest cached block in [rb, 2rb]
     * (best fit), else a new block. */
    e.reserved_bwd = e.reserved_fwd + round512(e.ws);
    size_t cached[ZT_MAX_UNITS + 4], nc = 0; /* tokens, targets, enc, L blocks, head, W */
    cached[nc++] = round512(N * 4);
    cached[nc++] = round512(N * 4);
    cached[nc++] = round512(e.enc);
    for (size_t k = 0; k < L; k++) cached[nc++] = round512(e.blk);
    cached[nc++] = round512(e.head_acts);
    cached[nc++] = round512(e.ws);
    size_t rb = round512(4 * e.P);
    for (int req = 0; req < 3; req++) {
        size_t best = nc;
        for (size_t i = 0; i < nc; i++)
            if (cached[i] >= rb && cached[i] <= 2 * rb && (best == nc || cached[i] < cached[best])) best = i;
        if (best == nc) break; /* this and every later request is a new block */
        e.bucket_hits++;
        e.bucket_hit_bytes += cached[best];
        cached[best] = cached[--nc];
    }
    e.reserved_step = e.reserved_bwd + (3 - e.bucket_hits) * rb;
    /* Under a limit a new block that does not fit first releases the whole
     * cache: left are init's blocks, the bucket blocks taken from the cache
     * and those allocated so far. */
    e.step_need = max2(e.reserved_bwd, e.reserved_init + e.bucket_hit_bytes + (3 - e.bucket_hits) * rb);
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

/* One bucket holding every unit, sent by the step's sync_grads. */
static zt_engine_config engine_config(zt_dtype dtype) {
    zt_engine_config ec = {.stage = 0, .dtype = dtype, .reduce_dtype = ZT_FP32, .beta1 = 0.9f, .beta2 = 0.95f,
                           .eps = 1e-8f, .weight_decay = 0.1f, .grad_clip = 1.0f,
                           .bucket_bytes = (size_t)1 << 40};
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

static void check_persistent(const zt_mem *m, const expect *e) {
    CHECK_EQ(m->by_category[ZT_CAT_PARAMS].current, e->P * e->s);
    CHECK_EQ(m->by_category[ZT_CAT_GRADS].current, e->P * e->s);
    CHECK_EQ(m->by_category[ZT_CAT_MASTER_PARAMS].current, e->half ? 4 * e->P : 0);
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
    zt_spec_layout(gpt.dec.spec, 1);
    const zt_model_spec *spec = gpt.dec.spec;

    /* Parameter count: closed form, per unit and in total. */
    CHECK_EQ(spec->nunits, c->layers + 2);
    CHECK_EQ(spec->total_numel, e.P);
    CHECK_EQ(spec->total_padded_numel, e.P);
    CHECK_EQ(spec->largest_unit_numel, e.largest);
    for (int u = 0; u < spec->nunits; u++) {
        size_t want = u == gpt.dec.unit_embed ? e.ne : u == gpt.dec.unit_head ? e.nh : e.nb;
        CHECK_EQ(spec->units[u].numel, want);
        CHECK_EQ(spec->units[u].padded_numel, want);
    }
    /* Cross-check of the closed forms against gpt.c's own layouts (bytes). */
    CHECK_EQ(zt_gpt_block_layout_for(&gc, zt_act_shape_plain(MICRO_B, FWD_T), c->dtype).total, e.blk);
    CHECK_EQ(zt_gpt_head_layout_for(&gc, MICRO_B, FWD_T, c->dtype).total, e.head_acts);
    CHECK_EQ(zt_gpt_backward_workspace_bytes(&gc, zt_act_shape_plain(MICRO_B, FWD_T), c->dtype), e.ws);

    /* Init. */
    zt_mem_set_phase(m, ZT_PHASE_INIT);
    if (!ok_or_report(zt_engine_init(&eng, &ctx, test_comm(), spec, &ec, zt_gpt_init_param, &gpt), &ctx, "zt_engine_init"))
        goto done;
    CHECK(eng.compute_dtype == c->dtype, "[%s] compute dtype %s", g_label, zt_dtype_name(eng.compute_dtype));
    check_persistent(m, &e);
    check_transient_zero(m); /* activations, workspace, other: 0 */
    CHECK_EQ(m->allocated.current, e.persistent);
    CHECK_EQ(m->allocated.current, (2 * e.s + (e.half ? 4 : 0) + 8) * e.P);
    CHECK_EQ(m->phase_peak[ZT_PHASE_INIT], e.persistent);
    CHECK_EQ(m->reserved.current, e.reserved_init);
    CHECK_EQ(m->alloc_count, (size_t)spec->nunits * (e.half ? 5 : 4));

    size_t n = e.N;
    int32_t *tok = xcalloc(n, sizeof *tok), *tgt = xcalloc(n, sizeof *tgt);
    make_batch(tok, tgt, n);
    size_t reserved_after_iter[2] = {0, 0}, sysallocs_after_iter[2] = {0, 0};

    for (int iter = 0; iter < 2; iter++) {
        /* Forward: one micro-batch, the last of its step. */
        zt_mem_window_reset(m);
        if (!ok_or_report(zt_engine_zero_grads(&eng), &ctx, "zero_grads")) break;
        zt_mem_set_phase(m, ZT_PHASE_FORWARD);
        zt_engine_begin_micro(&eng, 1);
        float loss = 0.0f;
        if (!ok_or_report(zt_gpt_forward(&gpt, &eng, tok, tgt, MICRO_B, FWD_T, &loss), &ctx, "forward")) break;
        CHECK(loss > 0.0f, "[%s] loss %g", g_label, (double)loss);
        check_persistent(m, &e);
        CHECK_EQ(m->by_category[ZT_CAT_OTHER].current, e.other);
        CHECK_EQ(m->by_category[ZT_CAT_ACTIVATIONS].current, e.acts);
        CHECK_EQ(m->by_category[ZT_CAT_WORKSPACE].current, 0);
        CHECK_EQ(m->allocated.current, e.persistent + e.other + e.acts);
        CHECK_EQ(m->phase_peak[ZT_PHASE_FORWARD], e.fwd_peak);
        CHECK_EQ(m->window_phase_peak[ZT_PHASE_FORWARD], e.fwd_peak);
        CHECK_EQ(m->window_cat_peak[ZT_CAT_WORKSPACE], 0);
        if (iter == 0) CHECK_EQ(m->reserved.current, e.reserved_fwd);

        /* Backward: no bucket goes out before the step. */
        zt_mem_set_phase(m, ZT_PHASE_BACKWARD);
        if (!ok_or_report(zt_gpt_backward(&gpt, &eng, 1.0f / (float)n), &ctx, "backward")) break;
        check_persistent(m, &e);
        CHECK_EQ(m->by_category[ZT_CAT_ACTIVATIONS].current, 0);
        CHECK_EQ(m->by_category[ZT_CAT_OTHER].current, 0);
        CHECK_EQ(m->by_category[ZT_CAT_WORKSPACE].current, e.after_bwd_ws);
        CHECK_EQ(m->allocated.current, e.persistent + e.after_bwd_ws);
        CHECK_EQ(m->by_category[ZT_CAT_ACTIVATIONS].peak, e.acts);
        CHECK_EQ(m->by_category[ZT_CAT_OTHER].peak, e.other);
        CHECK_EQ(m->by_category[ZT_CAT_WORKSPACE].peak, e.ws_peak);
        CHECK_EQ(m->by_category[ZT_CAT_COMM_BUFFERS].peak, iter ? e.bucket : 0);
        CHECK_EQ(m->window_cat_peak[ZT_CAT_ACTIVATIONS], e.acts);
        CHECK_EQ(m->window_cat_peak[ZT_CAT_WORKSPACE], e.ws_peak);
        CHECK_EQ(m->window_cat_peak[ZT_CAT_COMM_BUFFERS], 0);
        CHECK_EQ(m->phase_peak[ZT_PHASE_BACKWARD], e.bwd_peak);
        CHECK_EQ(m->window_phase_peak[ZT_PHASE_BACKWARD], e.bwd_peak);
        CHECK_EQ(m->allocated.peak, max2(max2(e.fwd_peak, e.bwd_peak), iter ? e.step_peak : 0));
        if (!e.half && iter == 0) CHECK_EQ(m->reserved.current, e.reserved_bwd);

        /* Optimizer step: sync_grads sends the one bucket (16-bit: packed
         * from, then freeing, the fp32 grads), then AdamW (16-bit: through a
         * workspace of the largest unit's fp32 gradients). */
        zt_mem_window_reset(m);
        zt_mem_set_phase(m, ZT_PHASE_OPTIMIZER);
        if (!ok_or_report(zt_engine_step(&eng, 1e-3f), &ctx, "step")) break;
        CHECK(!eng.last_step_skipped, "[%s] step skipped (grad norm %g)", g_label, eng.last_grad_norm);
        CHECK_EQ(m->window_cat_peak[ZT_CAT_WORKSPACE], e.step_ws_peak);
        CHECK_EQ(m->window_cat_peak[ZT_CAT_COMM_BUFFERS], e.bucket);
        CHECK_EQ(m->window_phase_peak[ZT_PHASE_OPTIMIZER], e.step_peak);
        CHECK_EQ(m->phase_peak[ZT_PHASE_OPTIMIZER], e.step_peak);
        CHECK_EQ(m->window_allocated_peak, e.step_peak);
        CHECK_EQ(m->allocated.peak, max2(max2(e.fwd_peak, e.bwd_peak), e.step_peak));
        check_persistent(m, &e);
        check_transient_zero(m);
        CHECK_EQ(m->allocated.current, e.persistent);
        CHECK_EQ(m->phase_peak[ZT_PHASE_INIT], e.persistent); /* untouched by later phases */
        if (!e.half && iter == 0) CHECK_EQ(m->reserved.current, e.reserved_step);
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
               "backward workspace peak %zu (phase peak %zu), step peak %zu (workspace %zu)\n",
               g_label, e.P, e.persistent, e.reserved_init, e.other, e.acts, e.fwd_peak, e.ws_peak, e.bwd_peak,
               e.step_peak, e.step_ws_peak);
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
    zt_spec_layout(gpt.dec.spec, 1);
    zt_mem_set_phase(m, ZT_PHASE_INIT);
    if ((st = zt_engine_init(&eng, &ctx, test_comm(), gpt.dec.spec, &ec, zt_gpt_init_param, &gpt)) != ZT_OK) goto done;
    out = FAILED_FORWARD;
    CHECK_EQ(m->allocated.current, e.persistent);
    zt_mem_set_phase(m, ZT_PHASE_FORWARD);
    zt_engine_begin_micro(&eng, 1);
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
        if (g_failures == before) printf("ok [%s] limit %zu completes a step\n", g_label, limit);
        return;
    }
    CHECK(st == ZT_ERR_OOM, "[%s] limit %zu: status %s, want OOM", g_label, limit, zt_status_name(st));
    for (int i = 0; needles && needles[i]; i++)
        CHECK(strstr(msg, needles[i]) != NULL, "[%s] limit %zu: message lacks \"%s\": %s", g_label, limit,
              needles[i], msg);
    if (g_failures == before) printf("ok [%s] limit %zu refused in %s: %s\n", g_label, limit, outcome_name(got), msg);
}

static void test_limits(const acct_config *c) {
    snprintf(g_label, sizeof g_label, "limit L=%d C=%d tied=%d %s%s", c->layers, c->d_model, c->tied,
             zt_dtype_name(c->dtype), c->attention_fused ? " fused" : "");
    expect e = expected(c);

    static const char *const init_needles[] = {"phase 'init'", "params=", "optimizer 'head exp_avg_sq'", NULL};
    expect_limit(c, e.reserved_init - 1, FAILED_INIT, init_needles);
    /* Below the bytes init must hold: refused earlier, on whichever block first
     * crosses the limit. */
    expect_limit(c, e.persistent - 1, FAILED_INIT, (const char *const[]){"phase 'init'", "params=", NULL});
    /* At exactly init's need nothing is cached and nothing is left: the first
     * forward allocation (the input tokens) is refused. */
    expect_limit(c, e.reserved_init, FAILED_FORWARD,
                 (const char *const[]){"phase 'forward'", "params=", "other 'input tokens'", NULL});
    expect_limit(c, (size_t)1 << 30, COMPLETED, NULL);
    /* 16-bit fp32 grads come and go through the cache (which a limit
     * empties on demand), so their backward and step needs are not pinned
     * here; fp32's are. */
    if (c->dtype != ZT_FP32) return;

    static const char *const fwd_needles[] = {"phase 'forward'", "params=", "activations 'head acts'", NULL};
    expect_limit(c, e.reserved_fwd - 1, FAILED_FORWARD, fwd_needles);

    static const char *const bwd_needles[] = {"phase 'backward'", "params=", "workspace 'backward grads'", NULL};
    expect_limit(c, e.reserved_fwd, FAILED_BACKWARD, bwd_needles);
    expect_limit(c, e.reserved_bwd - 1, FAILED_BACKWARD, bwd_needles);
    /* The step's bucket (12P of comm buffers) needs room beyond backward's
     * unless the blocks released from the cache make it (L=0 here). */
    if (e.step_need > e.reserved_bwd) {
        expect_limit(c, e.reserved_bwd, FAILED_STEP,
                     (const char *const[]){"phase 'optimizer'", "params=", "comm_buffers 'engine bucket ", NULL});
        expect_limit(c, e.step_need - 1, FAILED_STEP,
                     (const char *const[]){"phase 'optimizer'", "params=", "comm_buffers 'engine bucket reduced'",
                                           NULL});
    }
    expect_limit(c, e.step_need, COMPLETED, NULL);
}

int main(void) {
    static const int layer_counts[] = {0, 1, 3};
    static const zt_dtype dtypes[] = {ZT_FP32, ZT_BF16, ZT_FP16};
    for (int li = 0; li < 3; li++)
        for (int tied = 0; tied < 2; tied++)
            for (int d = 0; d < 3; d++) {
                acct_config c;
                c.layers = layer_counts[li];
                c.tied = tied;
                c.d_model = ((tied + li) % 2) ? 24 : 16;
                c.heads = c.d_model == 24 ? 3 : 4;
                c.dtype = dtypes[d];
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
        {3, 16, 4, 1, ZT_FP16, 0},
        {3, 16, 4, 0, ZT_FP32, 1},
    };
    for (size_t i = 0; i < sizeof limit_configs / sizeof limit_configs[0]; i++) test_limits(&limit_configs[i]);

    printf("%ld checks, %d failed\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
