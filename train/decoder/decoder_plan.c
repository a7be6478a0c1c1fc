/* The decoder scaffold's passes as the planner's moments (shard/zt_plan.h),
 * as zt_decoder_forward and zt_decoder_backward allocate; the family gives
 * the sizes (zt_decoder_plan_bytes). */
#include "zt_decoder_plan.h"

zt_act_shape zt_model_plan_shape(const zt_model_plan *m) {
    int B = m->s.micro_batch, T = m->s.seq_len, P = m->seq_parallel > 1 ? m->seq_parallel : 1, t0, len;
    zt_seq_span(T, P, m->seq_index % P, &t0, &len);
    return (zt_act_shape){B, len, T, P};
}

size_t zt_decoder_exchange_bytes(zt_act_shape sh, size_t W, zt_dtype act) {
    if (sh.P <= 1) return 0;
    size_t e = zt_dtype_size(act), mine = (size_t)sh.B * sh.T * W * e;
    size_t heads = (size_t)sh.B * sh.T_full * (W / sh.P) * e;
    return (mine + 3) / 4 * 4 + (heads + 3) / 4 * 4;
}

/* The kept inputs on the device during block k's forward: blocks 0..k's
 * (the embedding's output and what blocks 0..k-1 keep), or under offload
 * only block k's (the scaffold frees each once its copy out is done
 * and the block's forward queued). */
static size_t inputs_forward(const zt_decoder_plan_bytes *b, int k) {
    return b->offload ? b->in : b->enc + b->kept_before[k];
}

/* During block k's backward: blocks 0..k's, or under offload block k's
 * and block k-1's, fetched while k's runs. */
static size_t inputs_backward(const zt_decoder_plan_bytes *b, int k) {
    return b->offload ? b->in + (k > 0 ? b->in : 0) : b->enc + b->kept_before[k];
}

/* The order in which the model gathers its units in a pass, as the engine
 * records it and prefetches from it (shard/gather.c): forward embedding,
 * blocks, head (and the tied embedding again); backward head (and the tied
 * embedding), blocks from the last. Returns the length; order[2 * nunits]. */
static int use_order(const zt_model_plan *g, int backward, int *order) {
    int n = 0, L = g->s.layers;
    if (!backward) {
        order[n++] = g->unit_embed;
        for (int k = 0; k < L; k++) order[n++] = g->first_block + k;
        order[n++] = g->unit_head;
        if (g->s.tied) order[n++] = g->unit_embed;
        return n;
    }
    order[n++] = g->unit_head;
    if (g->s.tied) order[n++] = g->unit_embed;
    for (int k = L - 1; k >= 0; k--) order[n++] = g->first_block + k;
    return n;
}

/* Forward: at each unit's gather the activations allocated so far (its own
 * buffer is allocated just before it) and, at stage 3, the units gathered
 * (in use, prefetched after it, kept for a reuse); the embedding and each
 * block are released after their forward, the head and a tied embedding
 * together at the end (train/decoder/decoder.c); after a replaying block's forward and
 * release, what it keeps is allocated while its activations still exist
 * (decoder.c keep_block). Smaller in total than backward's moments, but a
 * window can hold more gathered bytes than any of backward's (a large
 * embedding with block 0), and the keep moment more activations. */
static void forward_moments(zt_plan_sim *S, const zt_model_plan *g, const zt_decoder_plan_bytes *b) {
    int order[2 * ZT_MAX_UNITS + 2], n = use_order(g, 0, order), L = g->s.layers;
    int next[2 * ZT_MAX_UNITS + 2], next_n = use_order(g, 1, next); /* backward follows: a reuse can be kept */
    zt_plan_begin_pass(S, order, n, next, next_n);
    for (int i = 0; i < n; i++) {
        int u = order[i], lo = i;
        zt_plan_use(S, u);
        zt_plan_moment F = zt_plan_base(S);
        F.name = "forward";
        F.c[ZT_CAT_OTHER] = b->tokens;
        if (u == g->unit_head || i == L + 2) { /* the head (and the tied embedding it gathers) */
            F.c[ZT_CAT_ACTIVATIONS] = (b->offload ? b->in : b->enc + b->kept_before[L]) + b->head;
            lo = L + 1;
        } else if (u == g->unit_embed) {
            F.c[ZT_CAT_ACTIVATIONS] = b->enc;
        } else { /* block k = i - 1: its buffer, after what blocks 0..k-1 keep; its exchanges */
            F.c[ZT_CAT_ACTIVATIONS] = inputs_forward(b, i - 1) + b->blk_full;
            F.c[ZT_CAT_COMM_BUFFERS] += b->exchange;
        }
        for (int j = lo; j <= i; j++) F.c[ZT_CAT_WORKSPACE] += zt_plan_view_bytes(S, order[j]);
        F.c[ZT_CAT_GATHERED_PARAMS] = zt_plan_gathered(S);
        zt_plan_consider(S, &F);
        if (i <= L) zt_plan_release(S, u); /* the embedding, a block */
        int k = i - 1;
        if (k < 0 || k >= L || zt_recompute_keep(&g->s.recompute, k) == ZT_KEEP_ALL) continue;
        zt_plan_moment K = zt_plan_base(S); /* block k released, its kept part taken beside its activations */
        K.name = "forward (a block's kept part)";
        K.c[ZT_CAT_OTHER] = b->tokens;
        /* under offload block k's input is gone by then (decoder_io.c decoder_input_retire) */
        K.c[ZT_CAT_ACTIVATIONS] = (b->offload ? b->in : b->enc + b->kept_before[k + 1]) + b->blk_full;
        K.c[ZT_CAT_GATHERED_PARAMS] = zt_plan_gathered(S);
        zt_plan_consider(S, &K);
    }
    if (g->s.tied) zt_plan_release(S, g->unit_embed);
    zt_plan_release(S, g->unit_head);
}

/* The head's backward, every activation still alive (stage 3: the head and
 * a tied embedding in use, and the units prefetched after them); then its
 * gradients join the bucket (the tied embedding's stay open). */
static void head_backward(zt_plan_sim *S, const zt_model_plan *g, const zt_decoder_plan_bytes *b) {
    int uh = g->unit_head, ue = g->unit_embed, L = g->s.layers;
    size_t tied_view = g->s.tied ? zt_plan_view_bytes(S, ue) : 0;
    zt_plan_use(S, uh);
    if (g->s.tied) zt_plan_use(S, ue);
    zt_plan_moment H = zt_plan_base(S);
    H.name = "start of backward (head)";
    H.c[ZT_CAT_OTHER] = b->tokens;
    /* under offload: the last block's output and its input, on its way back */
    H.c[ZT_CAT_ACTIVATIONS] = (b->offload ? b->in + (L > 0 ? b->in : 0) : b->enc + b->kept_before[L]) + b->head;
    H.c[ZT_CAT_WORKSPACE] = b->ws_bwd + zt_plan_view_bytes(S, uh) + tied_view;
    zt_plan_open_grads(S, &H, uh);
    if (g->s.tied) zt_plan_open_grads(S, &H, ue);
    H.c[ZT_CAT_GATHERED_PARAMS] = zt_plan_gathered(S);
    zt_plan_consider(S, &H);
    if (g->s.tied) zt_plan_release(S, ue);
    zt_plan_release(S, uh);
    zt_plan_moment after = zt_plan_base(S); /* its views and gathered copy gone, its activations not yet */
    after.c[ZT_CAT_OTHER] = b->tokens;
    after.c[ZT_CAT_ACTIVATIONS] = H.c[ZT_CAT_ACTIVATIONS];
    after.c[ZT_CAT_WORKSPACE] = b->ws_bwd;
    if (g->s.tied) zt_plan_open_grads(S, &after, ue);
    after.c[ZT_CAT_GATHERED_PARAMS] = zt_plan_gathered(S);
    zt_plan_grads_ready(S, uh, &after, "gradient reduction after the head's backward");
}

static const char *block_moment_name(int k, int L) {
    return k == L - 1 ? "last block's backward"
           : k == L - 2 ? "next-to-last block's backward"
           : k == 0     ? "first block's backward"
           : k == 1     ? "second block's backward"
                        : "a middle block's backward";
}

/* Block k's backward (what it does not keep replayed first): blocks after
 * it have freed what they kept, blocks 0..k still hold theirs. A replaying
 * block's activations come back (decoder.c replay_block) before its gradients
 * are opened: after its kept output is freed (full), or while its kept GEMM
 * outputs are copied into them (selective, then freed). */
static void block_backward(zt_plan_sim *S, const zt_model_plan *g, const zt_decoder_plan_bytes *b, int k) {
    int u = g->first_block + k, L = g->s.layers;
    zt_keep keep = zt_recompute_keep(&g->s.recompute, k);
    size_t own = b->kept_before[k + 1] - b->kept_before[k];
    zt_plan_use(S, u);
    if (keep != ZT_KEEP_ALL) {
        zt_plan_moment R = zt_plan_base(S);
        R.name = "a block's replay";
        R.c[ZT_CAT_OTHER] = b->tokens;
        R.c[ZT_CAT_ACTIVATIONS] = inputs_backward(b, k) + (keep == ZT_KEEP_GEMM_OUTPUTS ? own : 0) + b->blk_full;
        R.c[ZT_CAT_WORKSPACE] = b->ws_bwd + zt_plan_view_bytes(S, u);
        R.c[ZT_CAT_COMM_BUFFERS] = zt_plan_in_flight(S) + b->exchange;
        zt_plan_add_waiting(S, &R, zt_plan_waiting(S));
        if (g->s.tied) zt_plan_open_grads(S, &R, g->unit_embed);
        R.c[ZT_CAT_GATHERED_PARAMS] = zt_plan_gathered(S);
        zt_plan_consider(S, &R);
    }
    zt_plan_moment M = zt_plan_base(S);
    M.name = block_moment_name(k, L);
    M.c[ZT_CAT_OTHER] = b->tokens;
    M.c[ZT_CAT_ACTIVATIONS] = inputs_backward(b, k) + (keep == ZT_KEEP_ALL ? own : b->blk_full);
    M.c[ZT_CAT_WORKSPACE] = b->ws_bwd + zt_plan_view_bytes(S, u);
    M.c[ZT_CAT_COMM_BUFFERS] = zt_plan_in_flight(S) + b->exchange;
    zt_plan_add_waiting(S, &M, zt_plan_waiting(S));
    zt_plan_open_grads(S, &M, u);
    if (g->s.tied) zt_plan_open_grads(S, &M, g->unit_embed);
    M.c[ZT_CAT_GATHERED_PARAMS] = zt_plan_gathered(S);
    zt_plan_consider(S, &M);
    zt_plan_release(S, u);
    zt_plan_moment after = M; /* its views, the bucket in flight and its waiting gradients accounted anew */
    after.c[ZT_CAT_WORKSPACE] = b->ws_bwd;
    after.c[ZT_CAT_COMM_BUFFERS] = 0;
    if (g->s.tied) zt_plan_open_grads(S, &after, g->unit_embed);
    after.c[ZT_CAT_GATHERED_PARAMS] = zt_plan_gathered(S);
    zt_plan_grads_ready(S, u, &after, "gradient reduction after a block's backward");
}

/* The embedding's backward: only its input (the tokens) and the encoded
 * activations left; it needs no parameters, so nothing is gathered (the
 * recorded order ends with block 0). Then the last bucket goes, at the end
 * of backward, after the activations are freed. */
static void embedding_backward(zt_plan_sim *S, const zt_model_plan *g, const zt_decoder_plan_bytes *b) {
    int ue = g->unit_embed;
    zt_plan_moment Em = zt_plan_base(S);
    Em.name = "embedding's backward";
    Em.c[ZT_CAT_OTHER] = b->tokens;
    Em.c[ZT_CAT_ACTIVATIONS] = b->enc;
    Em.c[ZT_CAT_WORKSPACE] = b->ws_bwd;
    Em.c[ZT_CAT_COMM_BUFFERS] = zt_plan_in_flight(S);
    zt_plan_add_waiting(S, &Em, zt_plan_waiting(S));
    zt_plan_open_grads(S, &Em, ue); /* tied: open since the head's backward; untied: its own */
    zt_plan_consider(S, &Em);
    zt_plan_moment after = Em;
    after.c[ZT_CAT_WORKSPACE] = b->ws_bwd;
    after.c[ZT_CAT_COMM_BUFFERS] = 0;
    zt_plan_grads_ready(S, ue, &after, "gradient reduction after the embedding's backward");
    zt_plan_moment E = zt_plan_base(S);
    zt_plan_flush(S, &E, "gradient reduction at the end of backward");
}

/* Backward, step by step as zt_decoder_backward and the engine run it: every
 * moment where the peak can occur is evaluated (the largest total is the
 * peak, each category's own largest value its peak). A unit's gradients are
 * handed to the filling bucket when its backward is done. Where the backend
 * computes in fp32 on 16-bit parameters, each gathered unit in use also has
 * an fp32 view; a tied embedding's gradients are open from the head's
 * backward to the end. */
void zt_decoder_plan_walk(const zt_model_plan *g, const zt_decoder_plan_bytes *bp, zt_plan_sim *S) {
    const zt_decoder_plan_bytes b = *bp;
    /* on the device: under offload only the last block's output beside the head's */
    zt_plan_set_kept(S, (b.offload ? b.in : b.enc + b.kept_before[g->s.layers]) + b.head);
    forward_moments(S, g, &b);
    int order[2 * ZT_MAX_UNITS + 2], n = use_order(g, 1, order);
    zt_plan_begin_pass(S, order, n, NULL, 0); /* the optimizer step follows */
    head_backward(S, g, &b);
    for (int k = g->s.layers - 1; k >= 0; k--) block_backward(S, g, &b, k);
    embedding_backward(S, g, &b);
}
