/* A Llama-style decoder: token embedding (no learned positions), L pre-norm
 * blocks of RMSNorm, grouped-query causal self-attention with rotary
 * position embedding (rotate-half, as Hugging Face transformers' Llama) and
 * a SwiGLU MLP, final RMSNorm, LM head (untied by default). No biases. It
 * gives the decoder scaffold (train/zt_decoder.h) its layers; it knows
 * nothing of ranks or stages.
 *
 * Grouped-query attention runs the backend's multi-head attention over
 * keys and values expanded to every query head (gqa_expand), and sums the
 * expanded gradients back per key/value head (gqa_reduce); with kv_heads
 * == heads the projection is already [q | k | v] and nothing is expanded. */
#ifndef ZT_LLAMA_H
#define ZT_LLAMA_H

#include "zt_decoder.h"

/* Parameter indices inside each block unit (declared in this order). */
enum {
    LLAMA_ATTN_NORM_W, /* [C] */
    LLAMA_QKV_W,       /* [(NH + 2 NKV) HD, C]: q heads, k heads, v heads */
    LLAMA_ATTPROJ_W,   /* [C, C] */
    LLAMA_MLP_NORM_W,  /* [C] */
    LLAMA_GATE_UP_W,   /* [2F, C]: gate rows, then up rows */
    LLAMA_DOWN_W,      /* [C, F] */
    LLAMA_BLOCK_NPARAMS
};

typedef struct {
    zt_decoder dec; /* first: the scaffold's shared hooks take a zt_llama as its zt_decoder */
    zt_model_settings cfg; /* resolved: kv_heads, ffn_dim set */
    int head_dim;          /* d_model / heads */
    int qkv_dim;           /* (heads + 2 kv_heads) head_dim */
    int p_wte, p_norm_w, p_lm_head; /* p_lm_head < 0 when tied */
} zt_llama;

/* What one block keeps from forward for its backward, as byte offsets into
 * its activation buffer, each on a 4-byte boundary; N = B*T rows, act is
 * the compute dtype. */
typedef struct {
    size_t rn1;      /* [N,C] act: RMSNorm of the input */
    size_t rstd1;    /* [N] fp32 */
    size_t qkv;      /* [N,(NH+2NKV)HD] act: the projection, q and k rotated */
    size_t qkv_full; /* [N,3C] act: k, v expanded to every query head (== qkv without GQA) */
    size_t att;      /* [B,NH,T,T] act probabilities, or [B,NH,T] fp32 lse when fused */
    size_t atty;     /* [N,C] act: attention output */
    /* Sequence parallelism (P > 1): qkv, qkv_full and att above are the
     * head split's ([B*T_full, ./P], NH/P heads over T_full); attyh is its
     * output [B*T_full,C/P] (== atty when P = 1) and qkv_seq where the QKV
     * GEMM writes before the exchange (== qkv when P = 1). */
    size_t attyh, qkv_seq;
    size_t res2;     /* [N,C] act: x + attproj(atty) */
    size_t rn2;      /* [N,C] act */
    size_t rstd2;    /* [N] fp32 */
    size_t gu;       /* [N,2F] act: gate, up */
    size_t sw;       /* [N,F] act: silu(gate) * up */
    size_t res3;     /* [N,C] act: the block's output, res2 + down(sw) */
    size_t total;
} zt_llama_block_layout;

/* The head's activations: rnf [N,C] act, rstdf [N] fp32, probs [N,V] act
 * (logits, softmax, its gradient), losses [N] fp32. */
typedef struct {
    size_t rnf, rstdf, probs, losses, total;
} zt_llama_head_layout;

/* Fills in kv_heads (heads), ffn_dim (the multiple of 64 nearest 8/3
 * d_model) and checks the shapes; errors name the setting. */
/* The family's layers for the decoder scaffold (llama_layers.c). */
extern const zt_decoder_ops llama_decoder_ops;

zt_status zt_llama_resolve(zt_model_settings *s, zt_error *err);
zt_status zt_llama_create(zt_llama *m, const zt_model_settings *resolved, zt_error *err);
void zt_llama_destroy(zt_llama *m);
/* Initial parameter values, a zt_param_init_fn; arg is the zt_llama. */
void zt_llama_init_param(void *arg, int unit, int param, size_t first, size_t count, float *dst);

zt_llama_block_layout zt_llama_block_layout_for(const zt_model_settings *s, zt_act_shape sh, zt_dtype act);
zt_llama_head_layout zt_llama_head_layout_for(const zt_model_settings *s, int B, int T, zt_dtype act);
/* 1: grouped-query attention (fewer key/value heads than query heads). */
static inline int zt_llama_gqa(const zt_model_settings *s) { return s->kv_heads != s->heads; }
/* The kept GEMM outputs' bytes, in the order qkv, res2, gu, res3. */
void zt_llama_kept_sizes(const zt_model_settings *s, zt_act_shape sh, zt_dtype act, size_t n[4]);
/* Selective recomputation keeps the GEMM outputs: qkv (rotated), res2, gu, res3. */
size_t zt_llama_kept_bytes(const zt_model_settings *s, zt_act_shape sh, zt_dtype act);
/* The backward's workspace (byte offsets): dres, drn, datty [N,C];
 * dqkv_full [B*T_full,3C/P] (attention's gradient on the head split); dqkvh
 * [B*T_full,QKV/P] (reduced to the kv heads; GQA only, else == dqkv_full);
 * dqkv [N,QKV] (the sequence split; == dqkvh when P = 1); dattyh
 * [B*T_full,C/P] (== datty when P = 1); dsw [N,F], dgu [N,2F] (adjacent:
 * lent to attention as scratch); datt [B,NH/P,T_full] fp32. */
typedef struct {
    size_t dres, drn, datty, dqkv_full, dqkvh, dqkv, dattyh, dsw, datt, total;
} zt_llama_ws_layout;
zt_llama_ws_layout zt_llama_ws_layout_for(const zt_model_settings *s, zt_act_shape sh, zt_dtype act);
size_t zt_llama_backward_workspace_bytes(const zt_model_settings *s, zt_act_shape sh, zt_dtype act);

#endif
