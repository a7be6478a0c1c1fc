/* Training data sources. Every batch is a pure function of (seed, rank, step,
 * micro-batch): ranks read different data, and any step can be regenerated
 * (resume) without replaying the ones before it. */
#ifndef ZT_DATA_H
#define ZT_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "zt_error.h"

typedef enum { ZT_DATA_MARKOV = 0, ZT_DATA_FILE = 1 } zt_data_kind;

typedef struct {
    zt_data_kind kind;
    int vocab;
    /* Markov source of order k: the next token depends on the last k tokens
     * (a "context", one of V^k); each context has `branch` possible successors. */
    int order, branch;
    size_t ncontexts;    /* V^order */
    int32_t *succ;       /* [ncontexts, branch] successor tokens */
    double *succ_cdf;    /* [ncontexts, branch] cumulative probabilities */
    double *stationary;  /* [ncontexts] stationary distribution of contexts */
    double *stat_cdf;    /* [ncontexts] its cumulative sum, for sampling starts */
    double entropy_rate; /* nats per token */
    double start_entropy;      /* H(first k tokens) under the stationary law */
    double first_token_entropy; /* H(first token) */
    /* File source: the bytes, vocab 256. */
    uint8_t *bytes;
    size_t nbytes;
} zt_data;

zt_status zt_data_markov_create(zt_data *d, int vocab, int order, int branch, uint64_t seed, zt_error *err);
zt_status zt_data_file_create(zt_data *d, const char *path, zt_error *err);
void zt_data_destroy(zt_data *d);
/* What a data file holds, for the ranks to compare ("N bytes, xxh3 HEX"):
 * ranks may name it by different paths but must read the same bytes. */
zt_status zt_data_file_identity(const char *path, char *out, size_t cap, zt_error *err);

/* How each rank's batches and sequence lengths follow from the agreed seed;
 * part of what the ranks agree on, so a build that changed it is caught. */
#define ZT_DATA_RULE "batches keyed by (seed, rank, step, micro-batch); jitter by (seed, rank, step)"

/* B rows of T inputs and their next-token targets ([B,T] each). */
void zt_data_batch(const zt_data *d, uint64_t seed, int rank, int64_t step, int micro, int B, int T,
                   int32_t *tokens, int32_t *targets);

/* The lowest mean loss any model can reach on windows of T positions: the
 * entropy rate once k tokens of context are visible, the exact conditional
 * entropies before that. NaN for a file. */
double zt_data_loss_floor(const zt_data *d, int T);

#endif
