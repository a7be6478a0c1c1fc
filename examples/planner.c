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
    zt_gpt_config gc = {in->layers, in->d_model, in->heads, in->seq_len, in->vocab, in->micro_batch, in->tied, 0,
                        in->recompute, in->attention_fused};
    zt_dtype act = in->compute_dtype;
    zt_gpt_block_layout lay = zt_gpt_block_layout_for(&gc, (int)B, (int)T, act);
    size_t enc = (BT * C * zt_dtype_size(act) + 3) / 4 * 4, blk_full = lay.total;
    size_t blk_kept = in->recompute ? enc : blk_full;
    size_t head = zt_gpt_head_layout_for(&gc, (int)B, (int)T, act).total;
    size_t tokens = 2 * BT * 4;
    size_t ws_bwd = zt_gpt_backward_workspace_bytes(&gc, (int)B, (int)T, act);
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

    /* H: the head's backward, every activation still alive. */
    moment H = base;
    H.name = "start of backward (head)";
    H.c[ZT_CAT_OTHER] = tokens;
    H.c[ZT_CAT_ACTIVATIONS] = enc + (size_t)L * blk_kept + head;
    H.c[ZT_CAT_WORKSPACE] = ws_bwd + (widen ? padded(in, uh) * 4 + tied32 : 0);
    add_waiting(&S, &H, padded(in, uh) * 4 + tied32);
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
    after.c[ZT_CAT_WORKSPACE] = ws_bwd;
    add_waiting(&S, &after, tied32);
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
        M.c[ZT_CAT_WORKSPACE] = ws_bwd + (widen ? g : 0);
        M.c[ZT_CAT_COMM_BUFFERS] = S.in_flight;
        add_waiting(&S, &M, S.waiting + g + tied32);
        if (s == 3) M.c[ZT_CAT_GATHERED_PARAMS] = gathered_bytes(in, u, -1);
        consider(&S, &M);
        after = M;
        after.c[ZT_CAT_WORKSPACE] = ws_bwd;
        after.c[ZT_CAT_COMM_BUFFERS] = 0;
        add_waiting(&S, &after, tied32);
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
    Em.c[ZT_CAT_WORKSPACE] = ws_bwd;
    Em.c[ZT_CAT_COMM_BUFFERS] = S.in_flight;
    add_waiting(&S, &Em, S.waiting + ge + tied32);
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
    if (half) { /* one chunk of widened gradients (zt_engine_optimizer_chunk) */
        size_t most = 0;
        for (int u = 0; u < spec->nunits; u++) {
            size_t n = s == 0 ? padded(in, u) : spec->units[u].shard_numel;
            if (n > most) most = n;
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
