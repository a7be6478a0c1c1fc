/* The units' gradient side (shard/reduce.c), which owns these fields of
 * zt_unit_state and of the engine and is the only file that writes them:
 * grads' contents between zero_grads and the step, grad32, grad_open,
 * queued, feedback's values (shard/state_io.c restores them from a
 * checkpoint); the buckets `filling` and `in_flight`, and the hops'
 * groups hop_node, hop_cross (zt_engine_set_grad_hops). */
#ifndef ZT_REDUCE_H
#define ZT_REDUCE_H

#include "zt_engine.h"

/* Teardown: waits for the bucket in flight and frees both buckets. */
void zt_reduce_release(zt_engine *e);

#endif
