/* Automatic configuration (zt-plan --auto, zt-train --auto): the fastest
 * predicted step (plan_time.h) among the configurations whose memory plan
 * (shard/zt_plan.h) fits the budget, at a fixed global batch. */
#ifndef ZT_PLAN_AUTO_H
#define ZT_PLAN_AUTO_H

#include "plan_job.h"
#include "plan_time.h"

typedef struct {
    size_t device_mem;  /* the device's memory per rank (zt-plan --device-mem), or */
    size_t mem_limit;   /* the allocator's cap (zt-train --mem-limit); the smaller counts */
    size_t host_mem;    /* host memory per node (0: not checked) */
    int world, nodes;   /* nodes: 0 or 1 for one */
    int global_batch;   /* sequences per step over the world (0: the base's) */
    int top;            /* candidates to keep, best first (>= 1) */
    int replay;         /* 1: confirm the best by replaying the allocator (a family's model) */
    const char *nvme_path; /* "" or NULL: no NVMe tier in the space */
    zt_plan_synth synth;   /* zt-plan --params: a model from its totals */
    const char *axes;      /* comma-separated axes to search (NULL or "": all); the rest keep the base's value */
} zt_auto_setup;

/* The axes' names as --auto-axes takes them, comma-separated. */
extern const char zt_auto_axis_names[];

#define ZT_AUTO_FLAGS_LEN 512
typedef struct {
    zt_train_config cfg;            /* the base with this candidate's levers */
    char flags[ZT_AUTO_FLAGS_LEN];  /* the explicit flags, space-separated */
    size_t peak_bytes, reserved_bytes, host_bytes, budget;
    int fits, replayed;
    zt_time_pred time;
    unsigned char axes[16]; /* its value on each axis of the search */
} zt_auto_candidate;

#define ZT_AUTO_REASONS 14
typedef struct {
    zt_auto_candidate *best; /* [nbest], fastest first (ties: the lower peak) */
    int nbest;
    char reasons[ZT_AUTO_REASONS][320];
    int nreasons;
    int evaluated, fitting, replays;
    double seconds;
    char none_fits[ZT_AUTO_FLAGS_LEN + 200]; /* when nothing fits: the smallest configuration and what it needs */
} zt_auto_result;

/* Checks an --auto-axes list: every name an axis (message naming it if not). */
zt_status zt_auto_axes_check(const char *axes, zt_error *err);
/* --profile's file, else the device's built-in table. */
zt_status zt_auto_profile(const zt_train_config *c, zt_time_profile *p, zt_error *err);
/* The step-time model's input for the job's current plan. */
void zt_auto_time_input(const zt_plan_job *j, const zt_train_config *c, int world, int nodes, zt_time_input *t);
/* The prediction for one configuration (its memory plan in *plan). */
zt_status zt_auto_predict(zt_train_config *c, const zt_train_model *family, int world, int nodes,
                          const zt_time_profile *prof, zt_plan *plan, zt_time_pred *out, zt_error *err);
/* The search. Nothing fitting is not an error: r->nbest is 0 and
 * r->none_fits says why. */
zt_status zt_auto_search(const zt_train_config *base, const zt_train_model *family, const zt_auto_setup *s,
                         const zt_time_profile *prof, zt_auto_result *r, zt_error *err);
void zt_auto_result_free(zt_auto_result *r);
/* Applies a candidate's levers to cfg (the run's other options stay). */
void zt_auto_apply(const zt_auto_candidate *c, zt_train_config *cfg);

#endif
