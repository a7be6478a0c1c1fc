/* The trainer's side of sequence parallelism (--seq-parallel P,
 * zt_seq_parallel.h): the group of P consecutive ranks that share each
 * sequence, the data-parallel index batches are keyed by (rank / P: the
 * group's ranks read the same sequences), and each rank's span of them. */
#ifndef ZT_SEQ_GROUP_H
#define ZT_SEQ_GROUP_H

#include <stdint.h>

#include "zt_comm.h"
#include "zt_mem.h"
#include "zt_seq_parallel.h"
#include "zt_train_model.h"

typedef struct {
    zt_comm group;       /* the P ranks (unused when P = 1) */
    zt_seq_parallel sp;  /* what the model reads (sp.P = 1: none) */
    int dp_world, dp_rank; /* world / P and rank / P: what batches are keyed by */
    int32_t *tokens_full, *targets_full; /* host [B, seq_len] each: the group's rows before the split (P > 1) */
} zt_seq_group;

/* P = 1: no group, dp_* are the world's. Else P must divide the world; the
 * family must take a group (set_seq_parallel). Collective over world. */
zt_status zt_seq_group_open(zt_seq_group *g, int P, zt_comm *world, const zt_train_model *family, void *model,
                            int B, int seq_len, zt_error *err);
void zt_seq_group_close(zt_seq_group *g);

/* Where a step's rows go before the split: the full buffers (P > 1) or
 * the model's own (P = 1). */
int32_t *zt_seq_group_rows(zt_seq_group *g, int32_t *own);
int32_t *zt_seq_group_targets(zt_seq_group *g, int32_t *own);

/* This rank's span of the B rows of T_full positions just read into the
 * full buffers, into tokens/targets [B, len]; sets sp.T. Returns len
 * (T_full when P = 1, and nothing is copied). */
int zt_seq_group_split(zt_seq_group *g, int B, int T_full, int32_t *tokens, int32_t *targets);

/* This rank's share of the sequence's mean loss, per unit of its own mean:
 * len x P / T_full (1 when P = 1). The ranks' means times it, averaged
 * over the world, give the mean over every position. */
double zt_seq_group_loss_weight(const zt_seq_group *g, int T_full);

/* The cause of a memory imbalance across ranks that the configuration
 * explains, or NULL: "seq_split" when the ranks' peaks differ
 * (max_minus_min > 0), sequences split unevenly over a group (seq_len not
 * a multiple of P, or jittered lengths) and the category that differs most
 * scales with a rank's positions. detail gets the spans in words. */
const char *zt_seq_split_cause(int P, int seq_len, double jitter, zt_category top, size_t max_minus_min,
                               char *detail, size_t cap);

#endif
