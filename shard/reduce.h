/* The units' gradient side (shard/reduce.c), which owns these fields of
 * zt_unit_state and of the engine and is the only file that writes them:
 * grads' contents between zero_grads and the step, grad32, grad_open,
 * queued; the buckets `filling` and `in_flight`. */
#ifndef ZT_REDUCE_H
#define ZT_REDUCE_H

#include "zt_engine.h"

/* Teardown: waits for the bucket in flight and frees both buckets. */
void zt_reduce_release(zt_engine *e);

#endif
