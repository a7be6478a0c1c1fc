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

void zt_plan_compute(const zt_plan_input *in, zt_plan *out) {
    memset(out, 0, sizeof *out);
    const zt_model_spec *spec = in->spec;
    int N = in->world, s = in->stage, bf16 = in->dtype == ZT_BF16, L = in->layers;
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

    size_t model_bytes = spec->total_padded_numel * 4; /* fp32 gradients of every unit */
    size_t bucket = in->bucket_bytes;
    if (bucket < spec->largest_unit_numel * 4) bucket = spec->largest_unit_numel * 4;
    int one_bucket = bucket >= model_bytes;
    /* A bucket on its way: packed send + received chunks + this rank's sums. */
    size_t bucket_bufs = one_bucket ? 0 : 2 * bucket + bucket / (size_t)N;
    int uh = in->unit_head, ul = L > 0 ? in->first_block + L - 1 : in->unit_embed;

    /* H: the head's backward, every activation still alive. */
    moment H = base;
    H.name = "start of backward (head)";
    H.c[ZT_CAT_OTHER] = tokens;
    H.c[ZT_CAT_ACTIVATIONS] = enc + (size_t)L * blk_kept + head;
    H.c[ZT_CAT_WORKSPACE] = ws_bwd;
    if (bf16) {
        H.c[ZT_CAT_WORKSPACE] += padded(in, uh) * 4; /* fp32 view of the head */
        if (in->tied) H.c[ZT_CAT_WORKSPACE] += padded(in, in->unit_embed) * 4;
    }
    size_t head_grads = padded(in, uh) * 4 + (in->tied ? padded(in, in->unit_embed) * 4 : 0);
    if (s >= 2) H.c[ZT_CAT_COMM_BUFFERS] = head_grads;
    else if (bf16) H.c[ZT_CAT_WORKSPACE] += head_grads;
    if (s == 3) H.c[ZT_CAT_GATHERED_PARAMS] = gathered_bytes(in, uh, -1) + (in->tied ? padded(in, in->unit_embed) * zt_dtype_size(in->dtype) : 0);

    /* R: the last block's backward (its forward replayed under recompute). */
    moment R = base;
    R.name = "last block's backward";
    R.c[ZT_CAT_OTHER] = tokens;
    R.c[ZT_CAT_ACTIVATIONS] = enc + (size_t)L * blk_kept + (in->recompute && L > 0 ? blk_full : 0);
    R.c[ZT_CAT_WORKSPACE] = ws_bwd + (bf16 ? padded(in, ul) * 4 : 0);
    size_t pending = padded(in, ul) * 4 + (one_bucket ? head_grads : 0);
    if (s >= 2) R.c[ZT_CAT_COMM_BUFFERS] = pending + bucket_bufs;
    else {
        if (bf16) R.c[ZT_CAT_WORKSPACE] += padded(in, ul) * 4;
        R.c[ZT_CAT_COMM_BUFFERS] = bucket_bufs;
    }
    if (s == 3) R.c[ZT_CAT_GATHERED_PARAMS] = gathered_bytes(in, ul, -1);

    /* E: gradients reduce-scattered at the end of backward (activations gone). */
    moment E = base;
    E.name = "gradient reduction at the end of backward";
    size_t last_bucket = one_bucket ? model_bytes : bucket;
    E.c[ZT_CAT_COMM_BUFFERS] = 2 * last_bucket + last_bucket / (size_t)N + (s >= 2 ? last_bucket : 0);
    if (s == 3) E.c[ZT_CAT_GATHERED_PARAMS] = padded(in, in->unit_embed) * zt_dtype_size(in->dtype);

    /* O: the optimizer step. */
    moment O = base;
    O.name = "optimizer step";
    if (bf16 && !in->offload) O.c[ZT_CAT_WORKSPACE] = spec->largest_unit_numel * 4;

    const moment *all[] = {&H, &R, &E, &O};
    const moment *best = all[0];
    for (size_t i = 1; i < sizeof all / sizeof all[0]; i++)
        if (total(all[i]) > total(best)) best = all[i];
    memcpy(out->by_category, best->c, sizeof out->by_category);
    out->peak_bytes = total(best);
    out->peak_moment = best->name;

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
