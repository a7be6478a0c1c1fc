/* Activation recomputation as a runtime policy: which blocks keep what
 * between their forward and their backward, and what they replay. The model
 * declares what a block's buffer holds and which parts are GEMM outputs; the
 * policy decides per block:
 *   none       every block keeps everything
 *   full       every block keeps only its input (the previous block's
 *              output) and replays its whole forward before its backward
 *   selective  every block keeps its GEMM outputs and recomputes the cheap,
 *              memory-heavy rest (layernorm outputs and statistics, the
 *              attention probabilities and output, GELU), as Megatron's
 *              selective recomputation and PyTorch's SAC do
 *   every-K    block l replays fully when l % K == 0, the others keep
 *              everything (one block in K checkpointed)
 * Replays run the same kernels on the same inputs, so every policy gives
 * bitwise the results of none. */
#ifndef ZT_RECOMPUTE_H
#define ZT_RECOMPUTE_H

#include <stddef.h>

#include "zt_error.h"

typedef enum { ZT_RECOMPUTE_NONE = 0, ZT_RECOMPUTE_FULL, ZT_RECOMPUTE_SELECTIVE, ZT_RECOMPUTE_EVERY } zt_recompute_kind;

typedef struct {
    zt_recompute_kind kind;
    int every; /* K of every-K (>= 1) */
} zt_recompute_policy;

/* What one block keeps from its forward for its backward. */
typedef enum { ZT_KEEP_ALL = 0, ZT_KEEP_GEMM_OUTPUTS, ZT_KEEP_INPUT } zt_keep;

/* "none", "full", "selective" or "every-K" (K >= 1). */
zt_status zt_recompute_parse(const char *text, zt_recompute_policy *out, zt_error *err);
zt_keep zt_recompute_keep(const zt_recompute_policy *p, int block);
/* Does any block replay anything under p? */
int zt_recompute_any(const zt_recompute_policy *p);

#endif
