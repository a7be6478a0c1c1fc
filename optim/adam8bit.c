/* 8-bit Adam (Dettmers et al., bitsandbytes' Adam8bit, block-wise): exp_avg
 * and sqrt(exp_avg_sq) as 8-bit codes of dynamic maps (zt_quant.h), one fp32
 * scale per block of ZT_QBLOCK values and moment; the update itself is
 * AdamW's in fp32. Blocks start at each segment (one parameter's part of
 * one world slice: optim/layout.c), so a block never straddles two ranks
 * and every stage steps the same blocks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"
#include "zt_optim_engine.h"
#include "zt_quant.h"

enum { EXP_AVG_CODES = 0, EXP_AVG_SQ_CODES, BLOCK_SCALES };

static size_t a8_slot_words(const zt_engine_config *cfg, int slot, const zt_unit_spec *us, size_t lo, size_t hi) {
    (void)cfg;
    if (slot == BLOCK_SCALES) return 2 * zt_owned_qblocks(us, lo, hi); /* exp_avg's, then exp_avg_sq's */
    return (hi - lo + 3) / 4;                                           /* a byte per element */
}

/* Per segment (its own blocks; a 16-bit piece is whole blocks, as the
 * chunk is), pieces of gradients scaled by mult first. */
static zt_status a8_device_step(zt_engine *e, int u, const zt_optim_step *s) {
    zt_unit_state *ust = &e->units[u];
    const zt_unit_spec *us = &e->spec->units[u];
    const zt_ops *ops = e->ctx->be->ops;
    zt_stream *cs = &e->ctx->compute;
    size_t lo = owned_lo(e, u), hi = lo + owned_numel(e, u);
    uint8_t *m8 = ust->opt_state[EXP_AVG_CODES].data, *v8 = ust->opt_state[EXP_AVG_SQ_CODES].data; /* [owned] */
    float *ms = zt_f32(&ust->opt_state[BLOCK_SCALES]), *vs = ms + zt_owned_qblocks(us, lo, hi);      /* [blocks] */
    zt_segment_iter it = zt_segments(us, lo, hi);
    zt_segment seg;
    float *g;
    size_t at, gn;
    while (zt_next_segment(&it, &seg)) {
        float wd = us->params[seg.param].decay ? e->cfg.weight_decay : 0.0f;
        for (zt_grad_pieces gp = zt_engine_grad_pieces(e, u, seg.a, seg.b - seg.a, s->ws);
             zt_engine_next_grad_piece(&gp, &g, &at, &gn);) {
            if (s->mult != 1.0f) ops->scale(cs, g, s->mult, gn);
            size_t b = seg.block + (at - seg.a) / ZT_QBLOCK;
            ops->adam8bit(cs, s->p + (at - s->p_at), g, m8 + (at - lo), v8 + (at - lo), ms + b, vs + b, gn, s->lr,
                          e->cfg.beta1, e->cfg.beta2, e->cfg.eps, wd, s->t);
        }
    }
    return ZT_OK;
}

/* The CPU backend's kernel per segment on the host state, g scaled by
 * clip first. Never writes out. */
static zt_status a8_host_step(const zt_engine *e, int u, float *g, void *out, const zt_optim_step *s, int *written) {
    (void)out;
    zt_unit_state *ust = &e->units[u];
    const zt_unit_spec *us = &e->spec->units[u];
    zt_stream host = {.nthreads = e->cfg.host_threads > 0 ? e->cfg.host_threads : 1};
    size_t lo = owned_lo(e, u), hi = lo + owned_numel(e, u);
    float *p = zt_f32(&ust->host_master), *ms = zt_f32(&ust->host_opt_state[BLOCK_SCALES]);
    float *vs = ms + zt_owned_qblocks(us, lo, hi);
    uint8_t *m8 = ust->host_opt_state[EXP_AVG_CODES].data, *v8 = ust->host_opt_state[EXP_AVG_SQ_CODES].data;
    scale_host_grads(g, hi - lo, s->mult);
    zt_segment_iter it = zt_segments(us, lo, hi);
    zt_segment seg;
    while (zt_next_segment(&it, &seg)) {
        size_t j = seg.a - lo;
        float wd = us->params[seg.param].decay ? e->cfg.weight_decay : 0.0f;
        zt_cpu_adam8bit(&host, p + j, g + j, m8 + j, v8 + j, ms + seg.block, vs + seg.block, seg.b - seg.a, s->lr,
                        e->cfg.beta1, e->cfg.beta2, e->cfg.eps, wd, s->t);
    }
    *written = 0;
    return ZT_OK;
}

/* Checkpoint block b (0: exp_avg, 1: exp_avg_sq) over this rank's slice,
 * dequantized into dst[S] (exp_avg_sq the square of its stored root). */
static zt_status a8_get_block(zt_engine *e, int u, int b, float *dst) {
    const zt_unit_spec *us = &e->spec->units[u];
    size_t lo = owned_lo(e, u), hi = lo + owned_numel(e, u), blocks = zt_owned_qblocks(us, lo, hi);
    size_t slo = shard_lo(e, u), shi = slo + us->shard_numel;
    int is_m = b == 0;
    zt_tensor *codes_t = opt_slot(e, u, is_m ? EXP_AVG_CODES : EXP_AVG_SQ_CODES);
    uint8_t *codes = malloc(zt_tensor_bytes(codes_t) + 1);       /* [owned] */
    float *scales = malloc((2 * blocks + 1) * sizeof(float)), map[ZT_QMAP_LEN]; /* [2 x blocks] */
    zt_status r = codes && scales ? ZT_OK
                                  : ZT_FAIL(&e->ctx->err, ZT_ERR_OOM, "adam8bit: cannot allocate a staging buffer");
    if (r == ZT_OK) r = zt_engine_fetch_state(e, codes_t, codes);
    if (r == ZT_OK) r = zt_engine_fetch_state(e, opt_slot(e, u, BLOCK_SCALES), scales);
    zt_qmap_fill(map, is_m);
    memset(dst, 0, us->shard_numel * sizeof(float));
    zt_segment_iter it = zt_segments(us, lo, hi);
    zt_segment seg;
    while (r == ZT_OK && zt_next_segment(&it, &seg))
        if (seg.a >= slo && seg.b <= shi)
            zt_dequantize(map, codes + (seg.a - lo), scales + (is_m ? 0 : blocks) + seg.block, seg.b - seg.a,
                          dst + (seg.a - slo));
    for (size_t i = 0; !is_m && i < us->shard_numel; i++) dst[i] *= dst[i]; /* exp_avg_sq is kept as its root */
    free(codes);
    free(scales);
    return r;
}

/* Block b from given[owned], quantized per segment (exp_avg_sq through its
 * root: sqrt of a square gives back the value it squared, so a saved block
 * quantizes to the codes it came from). The other moment's scales stay. */
static zt_status a8_set_block(zt_engine *e, int u, int b, const float *given) {
    const zt_unit_spec *us = &e->spec->units[u];
    size_t lo = owned_lo(e, u), hi = lo + owned_numel(e, u), blocks = zt_owned_qblocks(us, lo, hi), n = hi - lo;
    int is_m = b == 0;
    zt_tensor *codes_t = opt_slot(e, u, is_m ? EXP_AVG_CODES : EXP_AVG_SQ_CODES);
    zt_tensor *scales_t = opt_slot(e, u, BLOCK_SCALES);
    uint8_t *codes = calloc(zt_tensor_bytes(codes_t) + 1, 1);             /* [owned] */
    float *scales = malloc((2 * blocks + 1) * sizeof(float)), map[ZT_QMAP_LEN]; /* [2 x blocks] */
    float *roots = is_m ? NULL : malloc(n * sizeof(float) + 4);           /* [owned] sqrt(exp_avg_sq) */
    const float *vals = is_m ? given : roots;
    zt_status r = codes && scales && (is_m || roots)
                      ? ZT_OK
                      : ZT_FAIL(&e->ctx->err, ZT_ERR_OOM, "adam8bit: cannot allocate a staging buffer");
    for (size_t i = 0; r == ZT_OK && roots && i < n; i++) roots[i] = sqrtf(given[i]);
    if (r == ZT_OK) r = zt_engine_fetch_state(e, scales_t, scales);
    zt_qmap_fill(map, is_m);
    zt_segment_iter it = zt_segments(us, lo, hi);
    zt_segment seg;
    while (r == ZT_OK && zt_next_segment(&it, &seg))
        zt_quantize(map, vals + (seg.a - lo), seg.b - seg.a, codes + (seg.a - lo),
                    scales + (is_m ? 0 : blocks) + seg.block);
    if (r == ZT_OK) r = zt_engine_store_state(e, codes_t, codes);
    if (r == ZT_OK) r = zt_engine_store_state(e, scales_t, scales);
    free(codes);
    free(scales);
    free(roots);
    return r;
}

const zt_optim zt_optim_adam8bit = {
    .name = "adam8bit",
    .description = "8-bit Adam: exp_avg, exp_avg_sq block-wise in 8 bits (2 bytes, + 8 per 2048-value block)",
    .nslots = 3,
    /* exp_avg's codes start at the signed map's 0 (code 127), not its -1
     * (code 0), so that a checkpoint of an untrained state reads back +0 */
    .slots = {{"exp_avg_codes", ZT_SLOT_BLOCK_CODES, 8, 127},
              {"exp_avg_sq_codes", ZT_SLOT_BLOCK_CODES, 8, -1},
              {"block_scales", ZT_SLOT_BLOCK_SCALES, 32, -1}},
    .slot_words = a8_slot_words,
    .chunk_align = ZT_QBLOCK,
    .device_step = a8_device_step,
    .host_step = a8_host_step,
    .ckpt_blocks = {"exp_avg", "exp_avg_sq"},
    .get_block = a8_get_block,
    .set_block = a8_set_block,
    .reshard_note = "8-bit Adam's m and v were dequantized and quantized again in this world's blocks (each value "
                    "within half a code step of its block's scale)",
};
