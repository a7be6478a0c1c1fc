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

/* Units gathered at stage 3 when unit u is in use during a pass that moves in
 * direction dir: u and the next `prefetch` units. */
static size_t gathered_bytes(const zt_plan_input *in, int u, int dir) {
    size_t d = zt_dtype_size(in->dtype), b = 0;
    for (int k = 0; k <= in->prefetch; k++) {
        int v = u + dir * k;
        if (v < 0 || v >= in->spec->nunits) break;
        b += padded(in, v) * d;
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
static void flush(sim *S, const moment *m, const char *name) {
    if (S->filling_units == 0) return;
    size_t n = S->filling_numel, bufs = (2 * n + n / (size_t)S->in->world) * 4;
    moment F = *m;
    F.name = name;
    F.c[ZT_CAT_COMM_BUFFERS] += bufs + (S->in->stage >= 2 ? S->waiting : 0);
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
    if (S->in->stage >= 2) S->waiting += padded(S->in, u) * 4;
    if (S->filling_numel * 4 >= S->bucket || S->filling_units == S->cap) flush(S, m, name);
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
    int s = in->stage, bf16 = in->dtype == ZT_BF16, L = in->layers;
    size_t B = (size_t)in->micro_batch, T = (size_t)in->seq_len, C = (size_t)in->d_model;
    size_t V = (size_t)in->vocab, NH = (size_t)in->heads, BT = B * T;

    zt_state_bytes sb = zt_engine_state_bytes(spec, s, in->dtype, in->offload);
    moment base;
    memset(&base, 0, sizeof base);
    base.c[ZT_CAT_PARAMS] = sb.params;
    base.c[ZT_CAT_GRADS] = sb.grads;
    base.c[ZT_CAT_MASTER_PARAMS] = sb.master_params;
    base.c[ZT_CAT_OPTIMIZER] = sb.optimizer;
    out->persistent_bytes = sb.params + sb.grads + sb.master_params + sb.optimizer;

    /* Activations, as zt_gpt_forward allocates them (fp32). */
    zt_gpt_config gc = {in->layers, in->d_model, in->heads, in->seq_len, in->vocab, in->micro_batch, in->tied, 0,
                        in->recompute, in->attention_fused};
    zt_gpt_block_layout lay = zt_gpt_block_layout_for(&gc, (int)B, (int)T);
    size_t enc = BT * C * 4, blk_full = lay.total * 4, blk_kept = in->recompute ? BT * C * 4 : blk_full;
    size_t head = (BT * C + 2 * BT + BT * V + BT) * 4;
    size_t tokens = 2 * BT * 4;
    size_t ws_bwd = (14 * BT * C + B * NH * T) * 4;
    out->activations_kept_bytes = enc + (size_t)L * blk_kept + head;

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
    int uh = in->unit_head, ue = in->unit_embed;
    /* A unit's full-size fp32 gradients during its backward are comm buffers
     * at stages 2-3 (until their bucket is sent), a workspace at stages 0-1 in
     * bf16 (until folded into the bf16 store), nothing at stages 0-1 in fp32
     * (they accumulate in place). A tied embedding's are open from the head's
     * backward to the end. tied32: the fp32 bytes of a tied embedding (its
     * gradients, or its fp32 view in bf16). */
    size_t tied32 = in->tied ? padded(in, ue) * 4 : 0;

    /* H: the head's backward, every activation still alive. */
    moment H = base;
    H.name = "start of backward (head)";
    H.c[ZT_CAT_OTHER] = tokens;
    H.c[ZT_CAT_ACTIVATIONS] = enc + (size_t)L * blk_kept + head;
    H.c[ZT_CAT_WORKSPACE] = ws_bwd;
    if (bf16) {
        H.c[ZT_CAT_WORKSPACE] += padded(in, uh) * 4 + tied32; /* fp32 views of the head (and embedding) */
        if (s < 2) H.c[ZT_CAT_WORKSPACE] += padded(in, uh) * 4 + tied32;
    }
    if (s >= 2) H.c[ZT_CAT_COMM_BUFFERS] = padded(in, uh) * 4 + tied32;
    /* Stage 3: the head and the units prefetched below it, and a tied
     * embedding gathered for the head too, unless it is one of those; the
     * head's release frees both (a prefetched unit once used is released). */
    size_t dsz = zt_dtype_size(in->dtype), head_window = gathered_bytes(in, uh, -1);
    size_t tied_emb = in->tied ? padded(in, ue) * dsz : 0;
    int emb_in_window = uh - in->prefetch <= ue;
    if (s == 3) H.c[ZT_CAT_GATHERED_PARAMS] = head_window + (emb_in_window ? 0 : tied_emb);
    consider(&S, &H);

    /* After the head's backward: its gradients join the bucket (the tied
     * embedding's stay open), its views and gathered copy are gone, its
     * activations not yet. */
    moment after = base;
    after.c[ZT_CAT_OTHER] = tokens;
    after.c[ZT_CAT_ACTIVATIONS] = H.c[ZT_CAT_ACTIVATIONS];
    after.c[ZT_CAT_WORKSPACE] = ws_bwd + (bf16 && s < 2 ? tied32 : 0);
    after.c[ZT_CAT_COMM_BUFFERS] = s >= 2 ? tied32 : 0;
    if (s == 3) after.c[ZT_CAT_GATHERED_PARAMS] = head_window - padded(in, uh) * dsz - (emb_in_window ? tied_emb : 0);
    grads_ready(&S, uh, &after, "gradient reduction after the head's backward");

    /* Each block's backward (its forward replayed under recompute), from
     * the last: blocks after it have freed what they kept, blocks 0..k still
     * hold theirs (all of it, or under recompute the output). */
    for (int k = L - 1; k >= 0; k--) {
        int u = in->first_block + k;
        size_t g = padded(in, u) * 4, acts = enc + (size_t)(k + 1) * blk_kept + (in->recompute ? blk_full : 0);
        moment M = base;
        M.name = k == L - 1 ? "last block's backward"
                 : k == L - 2 ? "next-to-last block's backward"
                 : k == 0     ? "first block's backward"
                 : k == 1     ? "second block's backward"
                              : "a middle block's backward";
        M.c[ZT_CAT_OTHER] = tokens;
        M.c[ZT_CAT_ACTIVATIONS] = acts;
        M.c[ZT_CAT_WORKSPACE] = ws_bwd + (bf16 ? g : 0) + (bf16 && s < 2 ? g + tied32 : 0);
        M.c[ZT_CAT_COMM_BUFFERS] = S.in_flight + (s >= 2 ? S.waiting + g + tied32 : 0);
        if (s == 3) M.c[ZT_CAT_GATHERED_PARAMS] = gathered_bytes(in, u, -1);
        consider(&S, &M);
        after = M;
        after.c[ZT_CAT_WORKSPACE] = ws_bwd + (bf16 && s < 2 ? tied32 : 0);
        after.c[ZT_CAT_COMM_BUFFERS] = s >= 2 ? tied32 : 0;
        if (s == 3) after.c[ZT_CAT_GATHERED_PARAMS] -= padded(in, u) * dsz;
        grads_ready(&S, u, &after, "gradient reduction after a block's backward");
    }

    /* The embedding's backward: only its input (the tokens) and the encoded
     * activations left; at stage 3 the embedding stays gathered when the
     * first block's backward prefetched it (it needs no parameters here). */
    size_t emb_gathered = s == 3 && in->prefetch > 0 ? padded(in, ue) * dsz : 0;
    size_t ge = in->tied ? 0 : padded(in, ue) * 4; /* the tied embedding's are open already */
    moment Em = base;
    Em.name = "embedding's backward";
    Em.c[ZT_CAT_OTHER] = tokens;
    Em.c[ZT_CAT_ACTIVATIONS] = enc;
    Em.c[ZT_CAT_WORKSPACE] = ws_bwd + (bf16 && s < 2 ? ge + tied32 : 0);
    Em.c[ZT_CAT_COMM_BUFFERS] = S.in_flight + (s >= 2 ? S.waiting + ge + tied32 : 0);
    Em.c[ZT_CAT_GATHERED_PARAMS] = emb_gathered;
    consider(&S, &Em);
    after = Em;
    after.c[ZT_CAT_WORKSPACE] = ws_bwd;
    after.c[ZT_CAT_COMM_BUFFERS] = 0;
    grads_ready(&S, ue, &after, "gradient reduction after the embedding's backward");

    /* E: the last bucket sent at the end of backward (activations gone). */
    moment E = base;
    E.c[ZT_CAT_GATHERED_PARAMS] = emb_gathered;
    flush(&S, &E, "gradient reduction at the end of backward");

    /* O: the optimizer step. */
    moment O = base;
    O.name = "optimizer step";
    if (bf16 && !in->offload) O.c[ZT_CAT_WORKSPACE] = spec->largest_unit_numel * 4;
    consider(&S, &O);

    memcpy(out->by_category, S.best_c, sizeof out->by_category);
    memcpy(out->peak_by_category, S.cat_peak, sizeof out->peak_by_category);
    out->peak_bytes = S.best_total;
    out->peak_moment = S.best;

    if (in->offload) {
        /* master + m + v of the owned part, plus the transfer buffers at
         * their fullest (shard/offload_step.c): after backward every unit's
         * reduced gradients wait on the host as sent (g bytes each: fp32, or
         * bf16 widened later); the step then gives unit u an fp32 copy (bf16),
         * takes its output buffer while u-1's copy to the device may still be
         * reading its own, and only then frees u's gradients. */
        size_t d = zt_dtype_size(in->dtype), g = in->dtype == ZT_BF16 ? 2 : 4;
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
