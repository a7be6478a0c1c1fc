/* Where a run's initial parameter values come from: the model family's
 * init_param (a pure function of the seed and the element), or, with
 * --init-from DIR, a Hugging Face directory (checkpointing/zt_import_hf.h),
 * read straight into each rank's shards. The trainer asks for the source
 * before the engine is built and closes it right after. */
#ifndef ZT_INIT_SOURCE_H
#define ZT_INIT_SOURCE_H

#include "train_config.h"
#include "zt_comm.h"
#include "zt_ctx.h"
#include "zt_import_hf.h"
#include "zt_train_model.h"

typedef struct {
    zt_param_init_fn fn; /* what the engine calls */
    void *arg;
    zt_hf_import *hf; /* --init-from's import, or NULL */
} zt_init_source;

/* The family's init (arg: model), or --init-from's import, checked against
 * the model settings s describes (every rank opens it; the ranks agree on
 * the outcome, so a bad directory fails all of them with one message
 * before anything is built). --init-from with --resume is refused: a
 * checkpoint already holds the parameters and the optimizer state.
 * Collective over comm when --init-from is given. */
zt_status zt_init_source_open(const zt_train_config *c, const zt_train_model *family, const zt_model_settings *s,
                              void *model, const zt_model_spec *spec, zt_comm *comm, zt_init_source *src,
                              zt_error *err);
/* After the engine's init returned `built`: the import's read errors,
 * agreed over comm (collective when built is ZT_OK and --init-from is
 * given), logged on rank 0; the import freed either way. */
zt_status zt_init_source_close(zt_init_source *src, zt_status built, zt_ctx *ctx, zt_comm *comm);

#endif
