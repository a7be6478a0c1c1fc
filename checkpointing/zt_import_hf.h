/* Import from a Hugging Face model directory (zt-train --init-from DIR;
 * docs/interop_export.md, "Import"): the reverse of zt-export --format hf.
 *
 * Opening checks everything before a value is read: config.json against
 * the model the run builds (every mismatch named at once), then every
 * safetensors header (model.safetensors, or the files that
 * model.safetensors.index.json names) against the tensors the family's
 * layout expects (checkpointing/hf_layout.h): missing and unknown tensors,
 * wrong shapes and dtypes other than F32, BF16 and F16 are all named.
 *
 * The import is then a zt_param_init_fn: the engine asks it for exactly
 * the elements this rank owns, and it answers from the one transformers
 * tensor those elements come from, read whole (a Conv1D transpose or a
 * fused qkv / gate_up split reorders it) into a cache of one tensor. So a
 * rank reads only the tensors its slices overlap, one at a time, and its
 * host memory during the load is O(largest tensor), never the whole file.
 * The values depend on the file alone (never on the run's seed). */
#ifndef ZT_IMPORT_HF_H
#define ZT_IMPORT_HF_H

#include <jansson.h>
#include <stddef.h>

#include "zt_error.h"
#include "zt_units.h"

typedef struct zt_hf_import zt_hf_import;

/* Opens dir for a model described by `model` (the family's describe:
 * family and hyperparameters) with unit spec `spec`. Fails (ZT_ERR_INVALID,
 * or ZT_ERR_IO for an unreadable file) naming every mismatch; messages name
 * the run's settings in backquotes (`layers`). No collective. */
zt_status zt_hf_import_open(const char *dir, const json_t *model, const zt_model_spec *spec, zt_hf_import **out,
                            zt_error *err);
/* A zt_param_init_fn (arg: the import). A read that fails leaves zeros and
 * is kept for zt_hf_import_result. */
void zt_hf_import_init(void *arg, int unit, int param, size_t first, size_t count, float *dst);
/* ZT_OK, or the first read error of zt_hf_import_init (into err). */
zt_status zt_hf_import_result(const zt_hf_import *imp, zt_error *err);
/* What this rank read: tensors, bytes, and the largest cache it held (bytes). */
void zt_hf_import_counts(const zt_hf_import *imp, int *tensors, size_t *bytes_read, size_t *peak_cache);
const char *zt_hf_import_dir(const zt_hf_import *imp);
void zt_hf_import_close(zt_hf_import *imp);

#endif
