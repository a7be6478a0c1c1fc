/* The decoder scaffold's half of the memory planner (shard/zt_plan.h): its
 * activations and workspaces at every moment of forward and backward where
 * the peak can occur, in the order it gathers its units. A family gives
 * the sizes of its buffers for one micro-batch. */
#ifndef ZT_DECODER_PLAN_H
#define ZT_DECODER_PLAN_H

#include <stddef.h>

#include "zt_plan.h"
#include "zt_decoder.h"
#include "zt_train_model.h"

/* Bytes per micro-batch of the buffers the scaffold allocates. */
typedef struct {
    size_t enc;      /* the embedding's output [B,T,C] */
    size_t in;       /* a block's kept input [B,T,C] (offload: one moved to the host and back) */
    int offload;     /* activation offload: at most two kept inputs on the device */
    size_t blk_full; /* one block's activations, everything kept */
    size_t head;     /* the head's activations */
    size_t tokens;   /* tokens and targets [B,T] int32 (other) */
    size_t ws_bwd;   /* backward's workspace */
    size_t exchange; /* sequence parallelism: the largest send and receive buffers of an exchange in a block */
    size_t kept_before[ZT_MAX_UNITS + 1]; /* what blocks 0..k-1 keep together under the policy */
} zt_decoder_plan_bytes;

/* The planned rank's micro-batch shape (zt_decoder.h): B sequences of
 * seq_len positions, its span of them under sequence parallelism. */
zt_act_shape zt_model_plan_shape(const zt_model_plan *m);

/* An exchange's send and receive buffers (decoder_sp.c) for a part of
 * width W elements of the sequence split: [B,T,W] out, [B,T_full,W/P] in
 * (or back), each in whole 4-byte words; 0 without sequence parallelism. */
size_t zt_decoder_exchange_bytes(zt_act_shape sh, size_t W, zt_dtype act);

/* The walk over one micro-batch of the model m (its layers, tie, recompute
 * policy and unit indices) with the family's sizes b. */
void zt_decoder_plan_walk(const zt_model_plan *m, const zt_decoder_plan_bytes *b, zt_plan_sim *S);

#endif
