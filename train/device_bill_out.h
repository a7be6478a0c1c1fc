/* The GPU's whole bill during a run (runtime/zt_device_bill.h): a sample at
 * each step's end, the run's with the most os_bytes kept; its JSON, its
 * row in the rank table and rank 0's printed table. */
#ifndef ZT_DEVICE_BILL_OUT_H
#define ZT_DEVICE_BILL_OUT_H

#include <jansson.h>
#include <stdio.h>

#include "zt_comm.h"
#include "zt_ctx.h"
#include "zt_device_bill.h"

#define ZT_DEVICE_TRACK_COMMS 6

typedef struct {
    zt_device_sample latest, best;
    int have;
    zt_comm *comms[ZT_DEVICE_TRACK_COMMS]; /* whose NCCL bytes count (NULL or without ops: none) */
    int ncomms;
} zt_device_track;

/* Hooks the communicators comms[n] into ctx's device bill (their NCCL
 * bytes, read at every sample, the OOM report's too); zt_device_track_stop
 * unhooks them before they go. */
void zt_device_track_start(zt_device_track *t, zt_ctx *ctx, zt_comm *const *comms, int n);
void zt_device_track_stop(zt_ctx *ctx);
/* The step's end: a sample. Nothing off CUDA. */
void zt_device_track_step(zt_device_track *t, zt_ctx *ctx);

/* why: NVML's absence, said beside the parts it leaves unmeasured (NULL: none). */
json_t *zt_device_sample_json(const zt_device_sample *s, const char *why);

#define ZT_DEVICE_ROW (ZT_NUM_DPARTS + 11)
void zt_device_sample_pack(const zt_device_sample *s, int have, size_t *row);
int zt_device_sample_unpack(const size_t *row, zt_device_sample *s); /* 0: the row says none */
void zt_device_print_table(FILE *f, int N, const zt_device_sample *samples, const int *have);

#endif
