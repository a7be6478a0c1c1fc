/* The collectives the engine issues, in one place: the all-gathers of a
 * unit's parameters (over the shard group, hpZ's secondary group or the
 * replicas) and of updated slices, the bucketed reduce-scatter of
 * gradients and the replicas' sums, each ordered after the stream that
 * produced its input (an event, or a host wait for host buffers), labelled
 * for the watchdog, and waited for at once when overlap_comm is off.
 *
 * gather.c, reduce.c, the update and the checkpoint loads call down into
 * this file; it calls only comm/ and the backend, never back up. */
#ifndef ZT_COLLECTIVES_H
#define ZT_COLLECTIVES_H

#include "zt_engine.h"

/* The `ready` event for a collective that reads what `producer` wrote: an
 * event on it when the communicator orders itself after events, else NULL
 * after the host has waited for the producer (host buffers). */
zt_status zt_coll_ready_event(zt_engine *e, zt_stream *producer, void **ready);

/* Starts the all-gather of buf in place (this rank's part at rank x
 * bytes_per_rank) over comm after the work queued on `producer`; `what`
 * names it for the watchdog. Without overlap_comm it has completed on
 * return. */
zt_status zt_coll_all_gather_on(zt_engine *e, zt_comm *comm, void *buf, size_t bytes_per_rank, zt_stream *producer,
                                const char *what, zt_comm_handle *h);
/* The same for unit u's buffer over the shard group or `comm`, labelled
 * with the unit's name; each rank's part stands for uncompressed_per_rank
 * bytes (its wire codes: fewer; else bytes_per_rank). */
zt_status zt_coll_unit_gather_start(zt_engine *e, zt_comm *comm, int u, void *buf, size_t bytes_per_rank,
                                    size_t uncompressed_per_rank, zt_stream *producer, zt_comm_handle *h);
/* Compute waits for a unit gather started on comm (the host does not). */
zt_status zt_coll_unit_gather_join(zt_engine *e, zt_comm *comm, zt_comm_handle *h);
/* The host waits for it (a gather nobody will read). */
zt_status zt_coll_unit_gather_wait(zt_engine *e, zt_comm *comm, zt_comm_handle *h);
/* Start and compute's wait in one: unit u's buffer over the shard group. */
zt_status zt_coll_all_gather_after(zt_engine *e, void *buf, size_t bytes_per_rank, zt_stream *producer, int u);

/* What gradient buckets travel as: the reduce dtype, or its codes. */
zt_wire zt_engine_grad_wire(const zt_engine *e);

/* Starts bucket b's reduce-scatter (send -> staging, summed into reduced)
 * after everything queued on compute so far. */
zt_status zt_coll_reduce_scatter_start(zt_engine *e, zt_bucket *b);
/* Compute waits for it (and the host too without overlap_comm). */
zt_status zt_coll_reduce_scatter_join(zt_engine *e, zt_bucket *b);
/* Hybrid sharding: b's reduced slices summed over the replicas too, in
 * replica order (a no-op without replicas). */
zt_status zt_coll_sum_over_replicas(zt_engine *e, zt_bucket *b);

/* Lets every collective in flight advance (MPI only moves nonblocking
 * collectives inside MPI calls, so the engine pokes them at each API call). */
zt_status zt_coll_progress(zt_engine *e);

#endif
