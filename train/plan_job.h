/* What zt-plan plans, and zt-train's --auto and its predicted step: the
 * engine's levers and the model's shape from the training options, and
 * the memory plan (shard/zt_plan.h) of one rank for a world and stage. */
#ifndef ZT_PLAN_JOB_H
#define ZT_PLAN_JOB_H

#include "train_config.h"
#include "zt_plan.h"
#include "zt_train_model.h"

/* A model from its totals instead of a family's layers (zt-plan --params). */
typedef struct {
    double params, largest_unit_params; /* 0: the family's model */
} zt_plan_synth;

/* What zt-plan plans: the engine's levers and the model's shape. */
typedef struct {
    zt_plan_input in;
    const zt_train_model *family; /* --model */
    zt_model_plan model;          /* the settings and unit indices the family's walk reads */
    zt_model_spec *spec;
    int rank; /* --rank (-1: the rank with the most optimizer state) */
    int shard_group; /* --shard-group G (0: the world): the state is a G-rank group's */
    int secondary;   /* --reshard-after-forward G' (hpZ; 0: none) */
    int async_save;  /* --async-save: the rank file staged in the host pool while it is written */
} zt_plan_job;

/* What the allocator reserves beyond the planned (allocated) peak: each
 * live block rounded up to zt_mem's 512 bytes, for at most this many
 * blocks at once (a step of the decoder families holds far fewer). */
#define ZT_PLAN_BLOCKS_MARGIN(nunits) ((size_t)(64 + 16 * (nunits)) * 512)

/* The units: the family's model, or one shaped like it from its totals
 * (j->family set; j->spec allocated here, freed by zt_plan_job_free). */
zt_status zt_plan_job_units(zt_plan_job *j, zt_train_config *c, const zt_plan_synth *pf, zt_error *err);
/* The engine's levers from the options. */
void zt_plan_job_levers(zt_plan_input *in, const zt_train_config *c, const zt_model_spec *spec);
/* Everything from the options: units, levers, sharding groups (nodes: the
 * world's nodes, 0 for one; --reshard-after-forward node needs them). */
zt_status zt_plan_job_init(zt_plan_job *j, zt_train_config *c, const zt_train_model *family,
                           const zt_plan_synth *synth, int world, int nodes, int rank, zt_error *err);
void zt_plan_job_free(zt_plan_job *j);
/* The same model under other levers (stage aside, which zt_plan_job_plan
 * takes): settings the spec does not depend on (micro-batch, recompute,
 * attention, sequence parallelism) and the engine's levers from c. */
zt_status zt_plan_job_retarget(zt_plan_job *j, zt_train_config *c, int world, int nodes, zt_error *err);
/* The plan of rank j->rank (-1: the rank with the most optimizer state) in
 * a world of `world` ranks at `stage`. */
void zt_plan_job_plan(zt_plan_job *j, int world, int stage, zt_plan *out);

#endif
