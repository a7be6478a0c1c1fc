/* Which rank transforms each whole matrix of a matrix-hook optimizer
 * (Muon): logged once at start and written to summary.json as
 * muon_owners. */
#ifndef ZT_MATRIX_OWNERS_H
#define ZT_MATRIX_OWNERS_H

#include <jansson.h>

#include "zt_log.h"
#include "zt_optim.h"

/* [{"unit", "param", "part", "rows", "cols", "owner"}] of e's matrices
 * (NULL: its optimizer has no hook). */
json_t *zt_matrix_owners_json(const zt_engine *e);
/* One line on rank 0: the matrices, and each rank's count and share of
 * the transforms' work against the bound total / N + the largest. */
void zt_matrix_owners_log(const zt_engine *e, const zt_logger *log, int world);

#endif
