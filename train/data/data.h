/* Training data sources. The Markov source and a file read as bytes give
 * batches that are pure functions of (seed, rank, step, micro-batch): ranks
 * read different data, and any step can be regenerated (resume) without
 * replaying the ones before it. Token files (token_files.h) are read as one
 * sequential stream instead, from a position the trainer keeps. */
#ifndef ZT_DATA_H
#define ZT_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "token_files.h"
#include "zt_error.h"

typedef enum { ZT_DATA_MARKOV = 0, ZT_DATA_FILE = 1, ZT_DATA_TOKENS = 2 } zt_data_kind;

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
    /* Token files: the stream, vocab from --vocab. */
    zt_token_files files;
} zt_data;

zt_status zt_data_markov_create(zt_data *d, int vocab, int order, int branch, uint64_t seed, zt_error *err);
zt_status zt_data_file_create(zt_data *d, const char *path, zt_error *err);
/* Token files behind a pattern (flag names it in messages). */
zt_status zt_data_tokens_create(zt_data *d, const char *flag, const char *pattern, zt_token_format f, int vocab,
                                zt_error *err);
void zt_data_destroy(zt_data *d);
/* What a data file holds, for the ranks to compare ("N bytes, xxh3 HEX"):
 * ranks may name it by different paths but must read the same bytes. */
zt_status zt_data_file_identity(const char *path, char *out, size_t cap, zt_error *err);
/* The same for any --data or --val-data value: "markov", a file read as
 * bytes (every byte hashed), token files (sampled: token_files.h). */
zt_status zt_data_identity(const char *flag, const char *value, zt_token_format f, char *out, size_t cap,
                           zt_error *err);

/* How each rank's batches and sequence lengths follow from the agreed seed;
 * part of what the ranks agree on, so a build that changed it is caught. */
#define ZT_DATA_RULE "batches keyed by (seed, rank, step, micro-batch); jitter by (seed, rank, step); token files: " \
                     "row b of micro-batch m of rank r at p + ((m world + r) B + b) T"

/* B rows of T inputs and their next-token targets ([B,T] each). */
void zt_data_batch(const zt_data *d, uint64_t seed, int rank, int64_t step, int micro, int B, int T,
                   int32_t *tokens, int32_t *targets);

/* What a step read, as sums mod 2^32 of zt_data_token_hash terms:
 * `inputs` over every input (i, token) (summed over ranks: which tokens the
 * step read, whatever the split); `rows` over this rank's inputs and its
 * targets (i + 1 | 2^63, token), so a row read at the wrong place or a
 * target off by one shows. */
typedef struct {
    uint32_t inputs, rows;
} zt_data_digests;

/* Token files: the B rows of micro-batch m of rank r of a step whose stream
 * position is p: row b's T inputs start at p + ((m x world + r) x B + b) x
 * stride (stride: the configured seq-len; T <= stride under jitter) and its
 * targets one token later. dg (may be NULL) gains the rows' terms. */
zt_status zt_data_stream_batch(zt_data *d, uint64_t p, int world, int rank, int micro, int B, int stride,
                               int T, int32_t *tokens, int32_t *targets, zt_data_digests *dg, zt_error *err);

/* The step's tokens digest term of the input at stream index i: the upper
 * half of splitmix64's finalizer of i ^ (token x 0xD1B54A32D192ED03).
 * Summed mod 2^32 over a step's inputs (over every rank), it names which
 * tokens the step read whatever the world size and however they are split. */
uint32_t zt_data_token_hash(uint64_t index, int32_t token);

/* The lowest mean loss any model can reach on windows of T positions: the
 * entropy rate once k tokens of context are visible, the exact conditional
 * entropies before that. NaN for a file. */
double zt_data_loss_floor(const zt_data *d, int T);

#endif
