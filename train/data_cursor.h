/* The trainer's side of token-file data (--data with token files): where
 * each step reads in the stream, the epochs it enters, and what a
 * checkpoint keeps so that a resume at any world size goes on with the
 * same stream. A step reads world x grad_accum x micro_batch x seq_len
 * tokens from its position (data.h: zt_data_stream_batch), so positions
 * follow from one (step, position) pair and the tokens per step. */
#ifndef ZT_DATA_CURSOR_H
#define ZT_DATA_CURSOR_H

#include <jansson.h>
#include <stdint.h>

#include "data.h"
#include "train_config.h"
#include "zt_error.h"
#include "zt_log.h"

typedef struct {
    int active;                /* --data is token files */
    uint64_t epoch_tokens;     /* the stream's length */
    int base_step;             /* a step whose position is known: the run's first */
    uint64_t base_position;    /* the stream index its first row starts at */
    uint64_t tokens_per_step;  /* world x grad_accum x micro_batch x seq_len */
} zt_data_cursor;

/* A fresh stream: step 0 at position 0. Inactive unless d is token files. */
void zt_data_cursor_init(zt_data_cursor *k, const zt_data *d, const zt_train_config *c, int world);

/* The stream position step (0-based) starts at. */
uint64_t zt_data_cursor_at(const zt_data_cursor *k, int step);

/* What the run records (run_info's "data_stream"): the base pair and the
 * tokens per step. */
json_t *zt_data_cursor_json(const zt_data_cursor *k);

/* Resuming at `step` from a checkpoint whose run record is `run`: its
 * data_stream gives the position (at its own world size); a checkpoint
 * without one (trained on other data) starts the stream at 0, said. */
zt_status zt_data_cursor_resume(zt_data_cursor *k, const json_t *run, int step, const zt_logger *log, zt_error *err);

/* Rank 0's lines: the stream at the run's start, and the step that wraps
 * into a new epoch. */
void zt_data_cursor_log_start(const zt_data_cursor *k, const zt_data *d, const zt_logger *log);
void zt_data_cursor_log_step(const zt_data_cursor *k, int step, const zt_logger *log);

#endif
