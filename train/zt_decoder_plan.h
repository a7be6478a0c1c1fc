/* The decoder scaffold's half of the memory planner (shard/zt_plan.h): its
 * activations and workspaces at every moment of forward and backward where
 * the peak can occur, in the order it gathers its units. A family gives
 * the sizes of its buffers for one micro-batch. */
#ifndef ZT_DECODER_PLAN_H
#define ZT_DECODER_PLAN_H

#include <stddef.h>

#include "zt_plan.h"
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
    size_t kept_before[ZT_MAX_UNITS + 1]; /* what blocks 0..k-1 keep together under the policy */
} zt_decoder_plan_bytes;

/* The walk over one micro-batch of the model m (its layers, tie, recompute
 * policy and unit indices) with the family's sizes b. */
void zt_decoder_plan_walk(const zt_model_plan *m, const zt_decoder_plan_bytes *b, zt_plan_sim *S);

#endif
