/* Sharded state checkpoints.
 *
 * Layout of a checkpoint directory D:
 *   D/latest                 name of the newest complete checkpoint ("step-000010")
 *   D/step-000010/manifest.json   written by rank 0 last: run info, world size,
 *                                  stage, dtype, unit layout, file sizes and XXH64s
 *   D/step-000010/rank<r>.bin     rank r's world slice of every unit: fp32 master
 *                                  values, Adam m, Adam v, compute-dtype params
 * A save is written under D/.tmp-step-N, each file fsynced and renamed, the
 * manifest last, then the directory is renamed into place and `latest`
 * replaced; older checkpoints are removed only after that. A save killed
 * midway leaves the previous checkpoint as `latest`.
 *
 * Files hold world slices (rank r: [r S, (r+1) S) of each padded unit), which
 * every rank has at every stage, so a checkpoint depends only on the world
 * size it was saved at. Loading reassembles each unit from the slices and
 * lets the engine keep its part: any world size and stage can load it. */
#ifndef ZT_CHECKPOINT_H
#define ZT_CHECKPOINT_H

#include <jansson.h>

#include "zt_comm.h"
#include "zt_engine.h"

/* Called on every rank once all rank files are written and before rank 0
 * writes the manifest (tests use it to kill a save midway). */
typedef void (*zt_ckpt_after_shards_fn)(void *arg, int rank, int step);

/* run_info: caller's description (model config, seed, data...) stored in the
 * manifest under "run"; its "model" member must match on load. after_shards
 * may be NULL. Collective. */
zt_status zt_ckpt_save(zt_engine *eng, zt_comm *comm, const char *dir, int step, const json_t *run_info,
                       zt_ckpt_after_shards_fn after_shards, void *hook_arg, zt_error *err);

/* Loads the newest complete checkpoint of dir (or dir itself when it holds a
 * manifest) into eng, after checking every file's size and checksum and that
 * the manifest's run.model equals expect_model. *step gets the checkpoint's
 * step. Collective. Nothing is written. */
zt_status zt_ckpt_load(zt_engine *eng, zt_comm *comm, const char *dir, const json_t *expect_model, int *step,
                       zt_error *err);

/* Shared with zt-export: a parsed manifest and its checkpoint directory. */
typedef struct {
    json_t *manifest;
    char dir[1024]; /* the step directory */
    int world_size, step;
    zt_dtype dtype;
} zt_ckpt_info;
zt_status zt_ckpt_open(const char *dir, zt_ckpt_info *info, zt_error *err);
void zt_ckpt_close(zt_ckpt_info *info);
/* Checks every rank file's size and XXH64 against the manifest. */
zt_status zt_ckpt_verify(const zt_ckpt_info *info, zt_error *err);
/* Reads unit u's fp32 master values, m or v (kind 0, 1, 2) for elements
 * [0, numel) into dst[numel], from every rank's slice. */
zt_status zt_ckpt_read_unit(const zt_ckpt_info *info, int u, int kind, float *dst, zt_error *err);

#endif
