/* What the offload files of shard/ (offload_step.c, nvme_state.c,
 * delayed_update.c, state_io.c) include; optim/ reads the engine through
 * zt_optim_engine.h. The engine's own files include only the headers they use:
 *   placement.h    where a unit's buffers live, what this rank owns
 *   unit_mem.h     allocation (unit_mem.c)
 *   collectives.h  the engine's collectives (collectives.c)
 *   zt_schedule.h  the stage-3 gather schedule, pure (schedule.c)
 *   gather.h       the units' parameter state machine (gather.c)
 *   reduce.h       gradient buffers and buckets (reduce.c)
 *   tier.h         the offload tiers behind one hook (tier.c)
 *   zt_optim_engine.h the engine's half of the optimizer interface (optim/)
 *   offload.h      the tiers' entry points (offload_step.c, nvme_state.c,
 *                  delayed_update.c) */
#ifndef ZT_ENGINE_INTERNAL_H
#define ZT_ENGINE_INTERNAL_H

#include "collectives.h"
#include "offload.h"
#include "zt_optim_engine.h"
#include "placement.h"
#include "unit_mem.h"

#endif
