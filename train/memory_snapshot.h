/* --memory-snapshot DIR: each rank's device memory as a PyTorch memory_viz
 * snapshot, DIR/rank<r>.pickle, written at the end of a run and when it
 * stops out of memory (runtime/mem_snapshot.c writes the pickle;
 * docs/interop_memory_viz.md says how to open it). */
#ifndef ZT_MEMORY_SNAPSHOT_H
#define ZT_MEMORY_SNAPSHOT_H

#include "train_config.h"
#include "zt_ctx.h"

/* Before the model allocates: makes DIR (a bad DIR fails the run now, not
 * at its end) and starts recording the device's last
 * --memory-snapshot-entries events. A no-op without --memory-snapshot. */
zt_status zt_memory_snapshot_start(const zt_train_config *c, zt_ctx *ctx);

/* Writes DIR/rank<r>.pickle from the device memory as it is now. `run` is
 * how the run ended: a failed write is then its error when the run went
 * well, and only a warning beside the run's own error (an OOM's message in
 * ctx->err stays as it was). Returns the status the run ends with. */
zt_status zt_memory_snapshot_finish(const zt_train_config *c, zt_ctx *ctx, zt_status run);

#endif
