/* The training loop of zt-train: data, model, engine, steps, logs. */
#ifndef ZT_TRAINER_H
#define ZT_TRAINER_H

#include "stop_signals.h"
#include "train_config.h"
#include "zt_comm.h"
#include "zt_ctx.h"
#include "zt_train_hooks.h"
#include "zt_train_model.h"

/* Runs the whole training described by cfg of a model of `family` on ctx,
 * this rank's part of it; `test` arms fault injection (tests only);
 * `signals` (NULL: none) is --on-signal's watcher, whose signal stops every
 * rank at one step boundary (*stop_signo gets it; 0: the run completed).
 * Collective: every rank of comm calls it. On error, ctx->err says
 * what failed; an OOM leaves ctx->device_mem as it was at the failure so the
 * caller can report it. */
zt_status zt_train_run(const zt_train_config *cfg, const zt_train_model *family, const zt_train_hooks *test,
                       zt_stop_signals *signals, zt_ctx *ctx, zt_comm *comm, int *stop_signo);

/* The engine's configuration from the options, for a model of `spec` (laid
 * out); host_threads for the offloaded optimizer; `test` arms the NVMe
 * tier's fault injection on `rank` (tests only). */
zt_status zt_train_engine_config(const zt_train_config *c, const zt_train_hooks *test, int host_threads, int rank,
                                 const zt_model_spec *spec, zt_engine_config *ec, zt_error *err);

/* The code bits of --quantize-weights/--quantize-grads' value: int8 8,
 * int4 4, none 0. */
int zt_train_code_bits(const char *value);

/* Lays spec out over `world` ranks: slices of whole --quant-block blocks
 * when a quantized communication is on (zt_spec_layout_aligned). */
void zt_train_layout(const zt_train_config *c, zt_model_spec *spec, int world);

/* The size of the group --shard-group or --reshard-after-forward (`flag`)
 * names by `value`: "world" (world ranks), "node" (ranks_per_node, whose
 * sameness across nodes the caller checks) or a number, which must divide
 * the world into groups of equal size. */
zt_status zt_train_group_size(const char *flag, const char *value, int world, int ranks_per_node, int *G,
                              zt_error *err);

#endif
