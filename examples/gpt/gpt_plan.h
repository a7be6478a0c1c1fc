/* The toy GPT's half of the memory planner (shard/zt_plan.h): its
 * activations and workspaces at every moment of its forward and backward
 * where the peak can occur, in the order it gathers its units. */
#ifndef ZT_GPT_PLAN_H
#define ZT_GPT_PLAN_H

#include "gpt.h"
#include "zt_decoder_plan.h"
#include "zt_plan.h"

typedef struct {
    zt_gpt_config cfg; /* shape, recompute policy, attention */
    zt_act_shape sh;   /* the planned rank's micro-batch (its span under sequence parallelism) */
    int unit_embed, first_block, unit_head; /* indices in the planned spec */
} zt_gpt_plan_model;

/* --offload-activations cpu: the blocks' kept inputs in the host pool at
 * the end of forward (L of them, category activations), which is also
 * what crosses the link each way per micro-batch; 0 without it. */
size_t zt_gpt_plan_offloaded_bytes(const zt_gpt_plan_model *g, zt_dtype act);

/* The walk zt_plan_compute calls (arg: a zt_gpt_plan_model). */
void zt_gpt_plan_walk(void *arg, zt_plan_sim *S);

#endif
