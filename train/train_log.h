/* zt-train's outputs: one JSON object per step in DIR/rank<r>.jsonl and the
 * run's DIR/summary.json. Reals are written with 17 significant digits, so
 * equal text means bitwise-equal values. */
#ifndef ZT_TRAIN_LOG_H
#define ZT_TRAIN_LOG_H

#include <jansson.h>
#include <stdio.h>

#include "train_config.h"
#include "zt_ctx.h"
#include "zt_fs.h"

typedef struct {
    int step;
    double loss, lr, grad_norm, step_time_s, tokens_per_s;
} zt_step_record;

/* Memory view of one step (window peaks since the last reset) as JSON;
 * driver_used/driver_total from zt_backend_driver_mem (0: left out). */
json_t *zt_mem_step_json(const zt_mem *dev, const zt_mem *host, size_t driver_used, size_t driver_total);

/* The modelled link's step (zt_backend_set_link): per direction its
 * bandwidth and, since `before`, the bytes, the link's time on them and
 * the part of it the host waited for. */
json_t *zt_link_step_json(const zt_link_stats *now, const zt_link_stats *before);

typedef struct {
    const zt_train_config *cfg;
    int world_size;
    size_t params;
    int steps;       /* --steps */
    int start_step;  /* the step it started from (a resumed checkpoint's, else 0) */
    int stop_step;   /* the step it stopped at: steps, or earlier on a signal */
    const char *stop_reason; /* "completed", or the signal's name ("SIGTERM", ...) */
    const double *losses; /* [stop_step - start_step] */
    double data_entropy;   /* NaN: unknown */
    double tokens_per_s, step_time_median_s;
    const char *params_digest;
    /* per rank [world_size]: total peak, per-category peaks, host and OS peaks */
    const size_t *rank_peak, *rank_cat_peak, *rank_host_peak, *rank_os_peak;
    const size_t *rank_host_cat_peak; /* [world_size x categories] */
    /* per rank: its node's index, its local rank there, its host's name
     * ([world_size][ZT_HOST_NAME]); the number of nodes */
    const int *rank_node, *rank_local;
    const char *rank_host;
    int nnodes;
    json_t *model; /* the family and its hyperparameters (zt_train_model.describe) */
    json_t *rank_process; /* [world_size]: each rank's whole bill (proc_bill.h), or null */
    const size_t *rank_node_limit; /* [world_size]: its node's memory limit (zt_node_mem_limit_read; 0: unknown) */
    double process_sampling_overhead; /* this rank's sampling time over its run's */
    json_t *rank_device_process; /* [world_size]: each rank's GPU bill (device_bill_out.h), or null */
    json_t *muon_owners; /* each whole matrix's owner rank (matrix_owners.h), or NULL: none */
    double val_loss; /* the last evaluation's (--val-data), NaN: none */
    int val_step;    /* the step it followed */
    double predicted_step_s;       /* the step-time model's (plan_time.h) for this run, NaN: none */
    const char *predicted_profile; /* the rates it used */
} zt_summary;

/* Writes DIR/summary.json (via a temporary file and a rename). */
zt_status zt_summary_write(const zt_summary *s, const char *dir, zt_error *err);
/* Writes DIR/labels_rank<r>.json: for the device and the host pool, every
 * allocation label with its category and peak bytes (zt_mem.labels). */
zt_status zt_labels_write(const char *dir, int rank, const zt_mem *device, const zt_mem *host, zt_error *err);
/* Opens DIR/rank<r>.jsonl for writing, creating DIR. */
zt_status zt_jsonl_open(const char *dir, int rank, FILE **out, zt_error *err);


#endif
