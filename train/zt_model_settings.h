/* A model's settings as the options give them (train/train_config.c fills
 * them, a family's resolve hook completes them): shared by the trainer,
 * the planner and every model family. */
#ifndef ZT_MODEL_SETTINGS_H
#define ZT_MODEL_SETTINGS_H

#include <stdint.h>

#include "zt_recompute.h"

/* The model's settings, from the options (train/train_config.h). Each
 * family reads the fields it has and resolves its own defaults (0 or a
 * negative value: "the family's default"). */
typedef struct {
    int layers, d_model, heads, seq_len, vocab, micro_batch;
    int kv_heads;         /* grouped-query attention: key/value heads (0: heads) */
    int ffn_dim;          /* the MLP's hidden width (0: the family's default) */
    int tied;             /* 1: the LM head reuses the token embedding */
    double norm_eps;      /* RMSNorm's epsilon (families with RMSNorm) */
    double rope_theta;    /* rotary embedding's base (families with RoPE) */
    uint64_t seed;
    zt_recompute_policy recompute; /* what each block keeps and replays */
    int attention_fused;  /* 1: attention keeps lse[B,NH,T] instead of the probabilities */
    int offload_activations; /* 1: full recompute's kept inputs live in the host pool */
} zt_model_settings;

#endif
