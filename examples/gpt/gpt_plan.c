/* The GPT's sizes for the decoder scaffold's planner walk
 * (train/zt_decoder_plan.h): compute-dtype activations, fp32 statistics,
 * buffers in whole 4-byte words, as gpt.c lays them out. */
#include "gpt_plan.h"

/* The sizes the scaffold's walk needs, per micro-batch. */
static zt_decoder_plan_bytes bytes_of(const zt_gpt_plan_model *g, zt_dtype act) {
    const zt_gpt_config *gc = &g->cfg;
    zt_act_shape sh = g->sh;
    int B = sh.B, T = sh.T, L = gc->layers;
    zt_decoder_plan_bytes b = {0};
    size_t BT = (size_t)B * T;
    b.enc = (BT * (size_t)gc->d_model * zt_dtype_size(act) + 3) / 4 * 4;
    b.in = zt_gpt_input_bytes(gc, B, T, act);
    b.offload = gc->offload_activations;
    b.blk_full = zt_gpt_block_layout_for(gc, sh, act).total;
    b.head = zt_gpt_head_layout_for(gc, B, T, act).total;
    b.tokens = 2 * BT * 4;
    b.ws_bwd = zt_gpt_backward_workspace_bytes(gc, sh, act);
    b.exchange = zt_decoder_exchange_bytes(sh, 3 * (size_t)gc->d_model, act); /* q, k, v (and their gradients) */
    b.kept_before[0] = 0;
    for (int k = 0; k < L; k++)
        b.kept_before[k + 1] =
            b.kept_before[k] + zt_gpt_block_kept_bytes(gc, sh, act, zt_recompute_keep(&gc->recompute, k));
    return b;
}

size_t zt_gpt_plan_offloaded_bytes(const zt_gpt_plan_model *g, zt_dtype act) {
    const zt_gpt_config *gc = &g->cfg;
    return gc->offload_activations ? (size_t)gc->layers * zt_gpt_input_bytes(gc, g->sh.B, g->sh.T, act) : 0;
}

void zt_gpt_plan_walk(void *arg, zt_plan_sim *S) {
    const zt_gpt_plan_model *g = arg;
    zt_decoder_plan_bytes b = bytes_of(g, zt_plan_compute_dtype(S));
    zt_model_plan m = {.s = {.layers = g->cfg.layers, .tied = g->cfg.tied, .recompute = g->cfg.recompute},
                       .unit_embed = g->unit_embed, .first_block = g->first_block, .unit_head = g->unit_head};
    zt_decoder_plan_walk(&m, &b, S);
}
