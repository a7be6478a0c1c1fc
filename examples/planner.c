#include "planner.h"

#include <string.h>

#include "gpt.h"
#include "zt_engine.h"

typedef struct {
    size_t c[ZT_NUM_CATEGORIES];
    const char *name;
} moment;

static size_t total(const moment *m) {
    size_t s = 0;
    for (int i = 0; i < ZT_NUM_CATEGORIES; i++) s += m->c[i];
    return s;
}

static size_t padded(const zt_plan_input *in, int u) { return in->spec->units[u].padded_numel; }

/* The order in which the model gathers its units in a pass, as the engine
 * records it and prefetches from it (shard/gather.c): forward embedding,
 * blocks, head (and the tied embedding again); backward head (and the tied
 * embedding), blocks from the last. Returns the length; order[2 * nunits]. */
static int use_order(const zt_plan_input *in, int backward, int *order) {
    int n = 0, L = in->layers;
    if (!backward) {
        order[n++] = in->unit_embed;
        for (int k = 0; k < L; k++) order[n++] = in->first_block + k;
        order[n++] = in->unit_head;
        if (in->tied) order[n++] = in->unit_embed;
        return n;
    }
    order[n++] = in->unit_head;
    if (in->tied) order[n++] = in->unit_embed;
    for (int k = L - 1; k >= 0; k--) order[n++] = in->first_block + k;
    return n;
}

/* Stage 3: bytes of the units at positions lo..hi of order[n] (each unit
 * once): the units in use from lo and those prefetched up to hi. */
static size_t window_bytes(const zt_plan_input *in, const int *order, int n, int lo, int hi) {
    size_t d = zt_dtype_size(in->dtype), b = 0;
    for (int i = lo; i <= hi && i < n; i++) {
        int seen = 0;
        for (int j = lo; j < i; j++) seen |= order[j] == order[i];
        if (!seen) b += padded(in, order[i]) * d;
    }
    return b;
}

/* The backward pass as a sequence of moments (see zt_plan_compute). */
typedef struct {
    const zt_plan_input *in;
    size_t bucket;                   /* bucket_bytes (>= 1) */
    int cap;                         /* most units per bucket */
    size_t filling_numel, waiting;   /* the filling bucket: its elements; its units' full grads (stages 2-3) */
    int filling_units;
    size_t in_flight;                /* the bucket sent last: send + receive + sums */
    int waits;                       /* full fp32 gradients wait for their bucket (stages 2-3, or 16-bit) */
    zt_category wait_cat;            /* where they are counted: comm_buffers (2-3) or workspace (0-1) */
    size_t best_c[ZT_NUM_CATEGORIES], best_total, cat_peak[ZT_NUM_CATEGORIES];
    const char *best;
} sim;

static void consider(sim *S, const moment *m) {
    size_t t = total(m);
    if (!S->best || t > S->best_total) {
        memcpy(S->best_c, m->c, sizeof S->best_c);
        S->best_total = t;
        S->best = m->name;
    }
    for (int c = 0; c < ZT_NUM_CATEGORIES; c++)
        if (m->c[c] > S->cat_peak[c]) S->cat_peak[c] = m->c[c];
}

/* Sends the filling bucket at moment m (what else is alive then): the bucket
 * in flight is freed first, then the new one's buffers are allocated while
 * its units' full gradients are still there. */
static void add_waiting(const sim *S, moment *m, size_t bytes) {
    if (S->waits) m->c[S->wait_cat] += bytes;
}

static void flush(sim *S, const moment *m, const char *name) {
    if (S->filling_units == 0) return;
    size_t n = S->filling_numel, rd = zt_dtype_size(S->in->reduce_dtype);
    size_t bufs = 2 * n * rd + n / (size_t)S->in->world * 4; /* send, receive (reduce dtype); fp32 sums */
    moment F = *m;
    F.name = name;
    F.c[ZT_CAT_COMM_BUFFERS] += bufs;
    add_waiting(S, &F, S->waiting);
    consider(S, &F);
    S->in_flight = S->in->overlap_comm ? bufs : 0; /* without overlap it completed on the spot */
    S->filling_numel = 0;
    S->filling_units = 0;
    S->waiting = 0;
}

/* Unit u's gradients are complete: into the filling bucket, sent when full. */
static void grads_ready(sim *S, int u, const moment *m, const char *name) {
    S->filling_numel += padded(S->in, u);
    S->filling_units++;
    if (S->waits) S->waiting += padded(S->in, u) * 4;
    if (S->filling_numel * 4 >= S->bucket || S->filling_units == S->cap) flush(S, m, name);
}

/* Forward: at each unit's gather the activations allocated so far (its own
 * buffer is allocated just before it) and, at stage 3, the window of units
 * in use and prefetched after it; after a replaying block's forward, what it
 * keeps is allocated while its activations still exist (gpt.c keep_block).
 * Smaller in total than backward's moments, but a window can hold more
 * gathered bytes than any of backward's (a large embedding with block 0),
 * and the keep moment more activations. */
static void forward_moments(sim *S, moment base, const zt_plan_input *in, size_t enc, const size_t *kept_before,
                            size_t blk_full, size_t head, size_t tokens, int widen) {
    int order[2 * ZT_MAX_UNITS + 2], n = use_order(in, 0, order), p = in->prefetch, L = in->layers;
    int s3 = in->stage == 3;
    for (int i = 0; i < n; i++) {
        int u = order[i], lo = i;
        moment F = base;
        F.name = "forward";
        F.c[ZT_CAT_OTHER] = tokens;
        if (u == in->unit_head || i == L + 2) { /* the head (and the tied embedding it gathers) */
            F.c[ZT_CAT_ACTIVATIONS] = enc + kept_before[L] + head;
            lo = L + 1;
        } else if (u == in->unit_embed) {
            F.c[ZT_CAT_ACTIVATIONS] = enc;
        } else { /* block k = i - 1: its buffer, after what blocks 0..k-1 keep */
            F.c[ZT_CAT_ACTIVATIONS] = enc + kept_before[i - 1] + blk_full;
        }
        for (int j = lo; widen && j <= i; j++) F.c[ZT_CAT_WORKSPACE] += padded(in, order[j]) * 4; /* fp32 views */
        if (s3) F.c[ZT_CAT_GATHERED_PARAMS] = window_bytes(in, order, n, lo, i + p);
        consider(S, &F);
        int k = i - 1;
        if (k < 0 || k >= L || zt_recompute_keep(&in->recompute, k) == ZT_KEEP_ALL) continue;
        moment K = base; /* block k released, its kept part taken beside its activations */
        K.name = "forward (a block's kept part)";
        K.c[ZT_CAT_OTHER] = tokens;
        K.c[ZT_CAT_ACTIVATIONS] = enc + kept_before[k + 1] + blk_full;
        if (s3) K.c[ZT_CAT_GATHERED_PARAMS] = window_bytes(in, order, n, i + 1, i + p);
        consider(S, &K);
    }
}

void zt_plan_compute(const zt_plan_input *in, zt_plan *out) {
    memset(out, 0, sizeof *out);
    const zt_model_spec *spec = in->spec;
    /* As zt-train resolves it, on the laid-out units: DeepSpeed's knob counts
     * parameters, ours units. */
    zt_plan_input resolved = *in;
    if (in->prefetch_params > 0 && spec->largest_unit_numel > 0)
        resolved.prefetch = (int)(in->prefetch_params / (long long)spec->largest_unit_numel);
    in = &resolved;
    int s = in->stage, L = in->layers;
    int half = in->dtype != ZT_FP32, widen = in->compute_dtype != in->dtype;
    size_t B = (size_t)in->micro_batch, T = (size_t)in->seq_len, C = (size_t)in->d_model, BT = B * T;

    zt_state_bytes sb = zt_engine_state_bytes(spec, s, in->dtype, in->offload);
    moment base;
    memset(&base, 0, sizeof base);
    base.c[ZT_CAT_PARAMS] = sb.params;
    base.c[ZT_CAT_GRADS] = sb.grads;
    base.c[ZT_CAT_MASTER_PARAMS] = sb.master_params;
    base.c[ZT_CAT_OPTIMIZER] = sb.optimizer;
    out->persistent_bytes = sb.params + sb.grads + sb.master_params + sb.optimizer;

    /* Activations, as zt_gpt_forward allocates them (compute dtype, fp32
     * statistics; buffers in whole 4-byte words). */
    zt_gpt_config gc = {.layers = in->layers, .d_model = in->d_model, .heads = in->heads, .seq_len = in->seq_len,
                        .vocab = in->vocab, .micro_batch = in->micro_batch, .tied = in->tied,
                        .recompute = in->recompute, .attention_fused = in->attention_fused};
    zt_dtype act = in->compute_dtype;
    zt_gpt_block_layout lay = zt_gpt_block_layout_for(&gc, (int)B, (int)T, act);
    size_t enc = (BT * C * zt_dtype_size(act) + 3) / 4 * 4, blk_full = lay.total;
    /* What each block keeps under the recomputation policy; kept_before[k]:
     * what blocks 0..k-1 keep together. */
    size_t kept_before[ZT_MAX_UNITS + 1];
    kept_before[0] = 0;
    for (int k = 0; k < L; k++)
        kept_before[k + 1] = kept_before[k] + zt_gpt_block_kept_bytes(&gc, (int)B, (int)T, act,
                                                                      zt_recompute_keep(&in->recompute, k));
    size_t head = zt_gpt_head_layout_for(&gc, (int)B, (int)T, act).total;
    size_t tokens = 2 * BT * 4;
    size_t ws_bwd = zt_gpt_backward_workspace_bytes(&gc, (int)B, (int)T, act);
    out->activations_kept_bytes = enc + kept_before[L] + head;

    /* Backward, step by step as zt_gpt_backward and the engine run it
     * (shard/reduce.c, shard/gather.c): every moment where the peak can
     * occur is evaluated, the largest total is the peak, and each category's
     * own largest value is its peak. Gradients of a unit are handed to the
     * filling bucket when its backward is done; the bucket is sent once it
     * holds >= bucket bytes (whole units, so it can exceed the size), which
     * first frees the bucket in flight, then allocates the packed send, the
     * received chunks and this rank's sums, and only then frees the units'
     * full gradients. The last bucket goes at the end of backward, after the
     * activations are freed. */
    sim S = {0};
    S.in = in;
    S.bucket = in->bucket_bytes ? in->bucket_bytes : 1;
    S.cap = (int)(sizeof ((zt_bucket *)0)->units / sizeof ((zt_bucket *)0)->units[0]);
    /* A unit's full-size fp32 gradients (grad32) live from its backward until
     * its bucket is packed: comm buffers at stages 2-3, a workspace at stages
     * 0-1 in a 16-bit dtype; at stages 0-1 in fp32 they are the persistent
     * grads themselves. A tied embedding's are open from the head's backward
     * to the end. Where the backend computes in fp32 on 16-bit parameters
     * (widen), each gathered unit in use also has an fp32 view (workspace).
     * tied32: the fp32 bytes of a tied embedding (its gradients or view). */
    S.waits = s >= 2 || half;
    S.wait_cat = s >= 2 ? ZT_CAT_COMM_BUFFERS : ZT_CAT_WORKSPACE;
    int uh = in->unit_head, ue = in->unit_embed;
    size_t tied32 = in->tied ? padded(in, ue) * 4 : 0;

    /* Stage 3 windows: the backward order from the head, and the forward
     * pass's, whose windows can hold more (a large embedding with block 0). */
    int order[2 * ZT_MAX_UNITS + 2], norder = use_order(in, 1, order), p = in->prefetch, tpos = in->tied ? 1 : 0;
    forward_moments(&S, base, in, enc, kept_before, blk_full, head, tokens, widen);

    /* H: the head's backward, every activation still alive. */
    moment H = base;
    H.name = "start of backward (head)";
    H.c[ZT_CAT_OTHER] = tokens;
    H.c[ZT_CAT_ACTIVATIONS] = enc + kept_before[L] + head;
    H.c[ZT_CAT_WORKSPACE] = ws_bwd + (widen ? padded(in, uh) * 4 + tied32 : 0);
    add_waiting(&S, &H, padded(in, uh) * 4 + tied32);
    /* Stage 3: the head (and a tied embedding) in use and the units
     * prefetched after them; their release frees both. */
    if (s == 3) H.c[ZT_CAT_GATHERED_PARAMS] = window_bytes(in, order, norder, 0, tpos + p);
    consider(&S, &H);

    /* After the head's backward: its gradients join the bucket (the tied
     * embedding's stay open), its views and gathered copy are gone, its
     * activations not yet. */
    moment after = base;
    after.c[ZT_CAT_OTHER] = tokens;
    after.c[ZT_CAT_ACTIVATIONS] = H.c[ZT_CAT_ACTIVATIONS];
    after.c[ZT_CAT_WORKSPACE] = ws_bwd;
    add_waiting(&S, &after, tied32);
    if (s == 3) after.c[ZT_CAT_GATHERED_PARAMS] = window_bytes(in, order, norder, tpos + 1, tpos + p);
    grads_ready(&S, uh, &after, "gradient reduction after the head's backward");

    /* Each block's backward (what it does not keep replayed first), from the
     * last: blocks after it have freed what they kept, blocks 0..k still hold
     * theirs. */
    for (int k = L - 1; k >= 0; k--) {
        int u = in->first_block + k;
        /* A replaying block's activations come back (gpt.c replay_block)
         * before its gradients are opened: after its kept output is freed
         * (full), or while its kept GEMM outputs are copied into them
         * (selective, then freed). */
        zt_keep keep = zt_recompute_keep(&in->recompute, k);
        size_t g = padded(in, u) * 4, own = kept_before[k + 1] - kept_before[k];
        int at = tpos + L - k; /* block k's position in the backward order */
        if (keep != ZT_KEEP_ALL) {
            moment R = base;
            R.name = "a block's replay";
            R.c[ZT_CAT_OTHER] = tokens;
            R.c[ZT_CAT_ACTIVATIONS] = enc + kept_before[k] + (keep == ZT_KEEP_GEMM_OUTPUTS ? own : 0) + blk_full;
            R.c[ZT_CAT_WORKSPACE] = ws_bwd + (widen ? g : 0);
            R.c[ZT_CAT_COMM_BUFFERS] = S.in_flight;
            add_waiting(&S, &R, S.waiting + tied32);
            if (s == 3) R.c[ZT_CAT_GATHERED_PARAMS] = window_bytes(in, order, norder, at, at + p);
            consider(&S, &R);
        }
        size_t acts = enc + kept_before[k] + (keep == ZT_KEEP_ALL ? own : blk_full);
        moment M = base;
        M.name = k == L - 1 ? "last block's backward"
                 : k == L - 2 ? "next-to-last block's backward"
                 : k == 0     ? "first block's backward"
                 : k == 1     ? "second block's backward"
                              : "a middle block's backward";
        M.c[ZT_CAT_OTHER] = tokens;
        M.c[ZT_CAT_ACTIVATIONS] = acts;
        M.c[ZT_CAT_WORKSPACE] = ws_bwd + (widen ? g : 0);
        M.c[ZT_CAT_COMM_BUFFERS] = S.in_flight;
        add_waiting(&S, &M, S.waiting + g + tied32);
        if (s == 3) M.c[ZT_CAT_GATHERED_PARAMS] = window_bytes(in, order, norder, at, at + p);
        consider(&S, &M);
        after = M;
        after.c[ZT_CAT_WORKSPACE] = ws_bwd;
        after.c[ZT_CAT_COMM_BUFFERS] = 0;
        add_waiting(&S, &after, tied32);
        if (s == 3) after.c[ZT_CAT_GATHERED_PARAMS] = window_bytes(in, order, norder, at + 1, at + p);
        grads_ready(&S, u, &after, "gradient reduction after a block's backward");
    }

    /* The embedding's backward: only its input (the tokens) and the encoded
     * activations left; it needs no parameters, so nothing is gathered (the
     * recorded order ends with block 0). */
    size_t ge = in->tied ? 0 : padded(in, ue) * 4; /* the tied embedding's are open already */
    moment Em = base;
    Em.name = "embedding's backward";
    Em.c[ZT_CAT_OTHER] = tokens;
    Em.c[ZT_CAT_ACTIVATIONS] = enc;
    Em.c[ZT_CAT_WORKSPACE] = ws_bwd;
    Em.c[ZT_CAT_COMM_BUFFERS] = S.in_flight;
    add_waiting(&S, &Em, S.waiting + ge + tied32);
    consider(&S, &Em);
    after = Em;
    after.c[ZT_CAT_WORKSPACE] = ws_bwd;
    after.c[ZT_CAT_COMM_BUFFERS] = 0;
    grads_ready(&S, ue, &after, "gradient reduction after the embedding's backward");

    /* E: the last bucket sent at the end of backward (activations gone). */
    moment E = base;
    flush(&S, &E, "gradient reduction at the end of backward");

    /* O: the optimizer step. */
    moment O = base;
    O.name = "optimizer step";
    if (half) { /* one chunk of widened gradients (zt_engine_optimizer_chunk) */
        size_t most = 0;
        for (int u = 0; u < spec->nunits; u++) {
            size_t owned = s == 0 ? padded(in, u) : spec->units[u].shard_numel;
            if (owned > most) most = owned;
        }
        O.c[ZT_CAT_WORKSPACE] = 4 * (most < ZT_OPTIMIZER_CHUNK ? most : ZT_OPTIMIZER_CHUNK);
    }
    consider(&S, &O);

    memcpy(out->by_category, S.best_c, sizeof out->by_category);
    memcpy(out->peak_by_category, S.cat_peak, sizeof out->peak_by_category);
    out->peak_bytes = S.best_total;
    out->peak_moment = S.best;

    if (in->offload) {
        /* master + m + v of the owned part, plus the transfer buffers at
         * their fullest (shard/offload_step.c): after backward every unit's
         * reduced gradients wait on the host as sent (g bytes each: fp32, or
         * 16-bit widened later); the step then gives unit u an fp32 copy (16-bit),
         * takes its output buffer while u-1's copy to the device may still be
         * reading its own, and only then frees u's gradients. */
        size_t d = zt_dtype_size(in->dtype), g = d;
        size_t owned = 0;
        for (int u = 0; u < spec->nunits; u++) owned += s == 0 ? padded(in, u) : spec->units[u].shard_numel;
        size_t transfer = owned * g, waiting = owned, prev = 0;
        for (int u = 0; u < spec->nunits; u++) {
            size_t o = s == 0 ? padded(in, u) : spec->units[u].shard_numel;
            size_t at_u = (waiting - o) * g + 4 * o + (prev + o) * d;
            if (at_u > transfer) transfer = at_u;
            waiting -= o;
            prev = o;
        }
        out->host_bytes = sb.host_master_params + sb.host_optimizer + transfer;
    }
}
