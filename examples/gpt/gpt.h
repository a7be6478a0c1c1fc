/* The toy GPT: a GPT-2-style decoder (token + position embedding, L pre-LN
 * blocks of causal self-attention and a GELU MLP, final LayerNorm, LM head,
 * tied or untied). It declares its parameters in units (embedding, each
 * block, final norm + head) and gives the decoder scaffold
 * (train/zt_decoder.h) its layers; it knows nothing of ranks or stages. */
#ifndef ZT_GPT_H
#define ZT_GPT_H

#include <stdint.h>

#include "zt_decoder.h"
#include "zt_engine.h"
#include "zt_recompute.h"

typedef struct {
    int layers, d_model, heads, seq_len, vocab, micro_batch;
    int tied; /* 1: the LM head reuses the token embedding */
    uint64_t seed;
    zt_recompute_policy recompute; /* what each block keeps and replays (zt_recompute.h) */
    /* 1: attention keeps lse[B,NH,T] (each row's log softmax normaliser) and
     * recomputes the probabilities in backward, instead of keeping them
     * ([B,NH,T,T]): --attention fused */
    int attention_fused;
    /* 1: under full recomputation each block's kept input lives in the host
     * pool between its forward and its backward (--offload-activations cpu,
     * DeepSpeed's cpu_checkpointing); zt_gpt_create refuses it with any
     * other policy, since only full keeps one input per block */
    int offload_activations;
} zt_gpt_config;

/* Parameter indices inside each block unit (declared in this order). */
enum {
    GPT_LN1_W, GPT_LN1_B, GPT_QKV_W, GPT_QKV_B, GPT_ATTPROJ_W, GPT_ATTPROJ_B,
    GPT_LN2_W, GPT_LN2_B, GPT_FC_W, GPT_FC_B, GPT_FCPROJ_W, GPT_FCPROJ_B, GPT_BLOCK_NPARAMS
};

/* What one block keeps from forward for its backward, as byte offsets into
 * the block's single activation buffer, each array on a 4-byte boundary.
 * Activations are in the compute dtype; the layernorm statistics
 * (*_mean, *_rstd) are fp32, and so is lse. `att` holds the probabilities
 * [B,NH,T,T] (compute dtype), or lse [B,NH,T] (fp32) when attention_fused.
 * Under sequence parallelism (zt_act_shape's P > 1) attention's tensors are
 * the head split's: qkv [B,T_full,3C/P], att over NH/P heads and T_full,
 * attyh [B,T_full,C/P] (its output; == atty when P = 1); qkv_seq is where
 * the QKV GEMM writes before the exchange (fch's space, free until the
 * MLP; == qkv when P = 1). */
typedef struct {
    size_t ln1, ln1_mean, ln1_rstd, qkv, att, atty, attyh, res2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu, res3;
    size_t qkv_seq;
    size_t total;
} zt_gpt_block_layout;

typedef struct {
    zt_decoder dec; /* the scaffold: spec, units, activations, losses (train/zt_decoder.h) */
    zt_gpt_config cfg;
    int p_wte, p_wpe, p_lnf_w, p_lnf_b, p_lm_head; /* parameter indices; p_lm_head < 0 when tied */
} zt_gpt;

/* The GPT's layers for the decoder scaffold (gpt_layers.c). */
extern const zt_decoder_ops gpt_decoder_ops;

zt_status zt_gpt_create(zt_gpt *gpt, const zt_gpt_config *cfg, zt_error *err);
void zt_gpt_destroy(zt_gpt *gpt);
/* Initial parameter values (GPT-2 style), a zt_param_init_fn; arg is the zt_gpt. */
void zt_gpt_init_param(void *arg, int unit, int param, size_t first, size_t count, float *dst);
zt_gpt_block_layout zt_gpt_block_layout_for(const zt_gpt_config *cfg, zt_act_shape sh, zt_dtype act);

/* What a block keeps under selective recomputation: its GEMM outputs, packed
 * (byte offsets): qkv [B*T,3C] (the head split's [B*T_full,3C/P] under
 * sequence parallelism), res2 [B*T,C] (attproj + residual), fch
 * [B*T,4C], res3 [B*T,C] (fcproj + residual, the block's output), all act.
 * The rest of zt_gpt_block_layout is recomputed from them and the input. */
typedef struct {
    size_t qkv, res2, fch, res3, total;
} zt_gpt_kept_layout;
zt_gpt_kept_layout zt_gpt_kept_layout_for(const zt_gpt_config *cfg, zt_act_shape sh, zt_dtype act);
/* Bytes one block holds from its forward to its backward when it keeps
 * `keep` (everything, its GEMM outputs, or only its output for the next
 * block: the input it replays from). */
size_t zt_gpt_block_kept_bytes(const zt_gpt_config *cfg, zt_act_shape sh, zt_dtype act, zt_keep keep);

/* The head's activations, as byte offsets: lnf [B*T,C] act, lnf_mean and
 * lnf_rstd [B*T] fp32, probs [B*T,V] act (the logits, then the softmax, then
 * its gradient), losses [B*T] fp32. */
typedef struct {
    size_t lnf, lnf_mean, lnf_rstd, probs, losses, total;
} zt_gpt_head_layout;
zt_gpt_head_layout zt_gpt_head_layout_for(const zt_gpt_config *cfg, int B, int T, zt_dtype act);

/* Bytes of the backward's workspace for a [B,T] micro-batch: six gradients
 * of activations in the compute dtype (14 x [B*T,C]) and the fp32 attention
 * scratch [B,NH/P,T_full]; under sequence parallelism also the head split's
 * dqkv [B,T_full,3C/P] and datty [B,T_full,C/P]. */
size_t zt_gpt_backward_workspace_bytes(const zt_gpt_config *cfg, zt_act_shape sh, zt_dtype act);

/* Forward over tokens/targets (host arrays of B*T ids, T <= seq_len): keeps
 * activations for backward. With mean_loss, waits and returns the mean loss
 * over the B*T positions; with NULL, the losses stay pending for
 * zt_gpt_take_losses and the host does not wait. */
zt_status zt_gpt_forward(zt_gpt *gpt, zt_engine *eng, const int32_t *tokens, const int32_t *targets,
                         int B, int T, float *mean_loss);
/* Waits for the compute stream and returns the sum over pending micro-batches
 * of their mean losses (each the float mean of its positions added in
 * order, as zt_gpt_forward returns it), then forgets them. */
zt_status zt_gpt_take_losses(zt_gpt *gpt, zt_ctx *ctx, double *sum_of_means);
/* Backward of the last forward; the loss gradient per position is dloss
 * (1/(B*T*grad_accum) for a mean). Frees the activations as it goes. */
zt_status zt_gpt_backward(zt_gpt *gpt, zt_engine *eng, float dloss);
/* --freeze: marks the listed units frozen in the spec (a comma-separated
 * list of embedding, head, blocks, blocks:K, blocks:A-B; "none" or empty:
 * nothing). A tied head's weights are the embedding's: freezing the
 * embedding freezes them. Refuses names it does not know and a list that
 * leaves nothing to train. */
zt_status zt_gpt_freeze(zt_gpt *gpt, const char *list, zt_error *err);

/* Bytes of one block's kept input [B,T,C] in the compute dtype (4-byte
 * words): what --offload-activations cpu copies out and back per block per
 * micro-batch, and holds in the host pool (all L blocks' at the end of
 * forward). */
size_t zt_gpt_input_bytes(const zt_gpt_config *cfg, int B, int T, zt_dtype act);

/* Frees any activations still held (after an error, or forward without backward). */
void zt_gpt_free_activations(zt_gpt *gpt, zt_engine *eng);

#endif
