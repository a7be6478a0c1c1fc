/* Sequence parallelism (DeepSpeed-Ulysses): a group of P consecutive ranks
 * shares each sequence. Outside attention every rank holds its own span of
 * positions; around attention two all-to-alls trade that split for a split
 * of the heads, so each rank runs full-length attention for NH/P heads
 * (docs/sequence_parallel.md). The trainer owns this; the model reads it. */
#ifndef ZT_SEQ_PARALLEL_H
#define ZT_SEQ_PARALLEL_H

struct zt_comm;

#define ZT_MAX_SP 64 /* ranks per group at most */

typedef struct {
    struct zt_comm *group; /* the P ranks sharing a sequence, in rank order */
    int P;                 /* ranks per group (1: no sequence parallelism) */
    int index;             /* this rank's place in its group */
    int T;                 /* the full length of the sequences in flight (set before each forward) */
} zt_seq_parallel;

/* The span of group member j over T positions: T/P each, the first T % P
 * one more (so the last ranks are the shorter ones). */
static inline void zt_seq_span(int T, int P, int j, int *t0, int *len) {
    int q = T / P, r = T % P;
    *len = q + (j < r);
    *t0 = j * q + (j < r ? j : r);
}

#endif
