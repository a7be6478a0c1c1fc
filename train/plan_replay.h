/* zt-plan's replay: a rank's run (init and its first two steps) through
 * the real model, engine and allocator, over the dry backend and a dry
 * communicator, so the allocator's reserved bytes, which depend on the
 * order and size of every request, are counted rather than estimated. The
 * cap (--mem-limit) is applied, so a refusal, with its release of the
 * cache and retry, happens as in the run. */
#ifndef ZT_PLAN_REPLAY_H
#define ZT_PLAN_REPLAY_H

#include "train_config.h"
#include "zt_backend.h"
#include "zt_train_model.h"

/* Ranks replayed at most: a larger world's are sampled evenly, the last
 * one (the shortest shards) always among them. */
#define ZT_REPLAY_MAX_RANKS 64

typedef struct {
    int world, ranks_per_node; /* the world replayed and its nodes' size */
    size_t cap;                /* the device allocator's cap (0: none) */
    zt_device like;            /* the backend the run would use */
} zt_replay_setup;

typedef struct {
    int rank;                 /* the rank this is (zt_plan_replay: the one with the most reserved) */
    size_t reserved_peak;     /* device: the allocator's reserved bytes at most over init and two steps */
    size_t allocated_peak;    /* device: allocated bytes at most */
    size_t host_reserved_peak;
    int host_replayed;        /* 0 under the NVMe tier, replayed as the host tier (its device bytes) */
    size_t system_allocs;     /* blocks or granules taken from the system */
    int oom;                  /* the cap refused a request: the run ends with exit 3 */
    char oom_msg[1024];       /* the refusal, as the run would print it */
    int ranks_replayed;
    double seconds;           /* wall time of the replays */
} zt_replay_result;

/* One rank. A refusal under the cap is a result (oom = 1), not an error;
 * errors are options the replay cannot run and failures of the host. The
 * NVMe tier is replayed as the host tier, whose device buffers it shares:
 * its swap files are not written. */
zt_status zt_plan_replay_rank(const zt_train_config *c, const zt_train_model *family, const zt_replay_setup *w,
                              int rank, zt_replay_result *out, zt_error *err);
/* Every rank of the world (or ZT_REPLAY_MAX_RANKS of them): the one with
 * the most reserved, or the first that the cap refused. */
zt_status zt_plan_replay(const zt_train_config *c, const zt_train_model *family, const zt_replay_setup *w,
                         zt_replay_result *out, zt_error *err);

#endif
