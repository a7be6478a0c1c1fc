/* The units' parameter side (shard/gather.c), which owns these fields of
 * zt_unit_state and is the only file that writes them: phase, gathered,
 * view32, secondary, wire, wire_pending, gather_handle, gather_comm. Each
 * change of phase is one function there that checks where it comes from
 * (zt_engine.h draws the machine). */
#ifndef ZT_GATHER_H
#define ZT_GATHER_H

#include "zt_engine.h"

/* Every unit's first phase: GATHERED where its params are full, SHARDED
 * where it is gathered on demand. Init, after the buffers exist. */
void zt_gather_init(zt_engine *e);

/* Before the optimizer step: every unit must be released (else an error
 * naming it); stage 3 frees prefetches no pass used and units kept for a
 * reuse (they would hold parameters from before the step); the pass in
 * progress is recorded. */
zt_status zt_engine_end_passes(zt_engine *e);

/* Teardown: waits for every gather still in flight. */
void zt_gather_quiesce(zt_engine *e);

#endif
