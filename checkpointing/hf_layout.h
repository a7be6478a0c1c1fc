/* The Hugging Face layout of a checkpoint (not a public interface; zt-export
 * --format hf, docs/interop_export.md): which `transformers` tensor each
 * zerotrain parameter becomes, and the config.json that describes it.
 *
 * Everything comes from the checkpoint's manifest: the family and its
 * hyperparameters from run.model (the family's `describe`), the parameter
 * names and shapes from its unit list. The import (zt_import_hf.h) reads
 * the same tables backwards, from the run's describe and a unit list made
 * from its spec. A transformers tensor is a block of
 * rows of one zerotrain parameter (a fused qkv or gate_up is split by rows),
 * written as stored or transposed (GPT-2's Conv1D keeps [in, out]). No rows
 * are permuted: zerotrain's rotary kernel (runtime/cpu/ops_rope.inc) already
 * pairs element i with i + head_dim/2 within a head, as transformers'
 * rotate_half does. */
#ifndef ZT_HF_LAYOUT_H
#define ZT_HF_LAYOUT_H

#include <jansson.h>
#include <stdint.h>

#include "zt_checkpoint.h"

/* A family's hyperparameters as the manifest's run.model records them. */
typedef struct {
    int llama;                   /* 0: the GPT family, 1: the Llama family */
    int layers, d_model, heads, kv_heads, ffn_dim, seq_len, vocab, tied;
    double norm_eps, rope_theta; /* rope_theta: Llama only */
} hf_model;

/* One transformers tensor: rows [row0, row0 + rows) of the zerotrain
 * parameter (unit, param), a row-major [R, cols] matrix (a vector: cols 1),
 * written as those rows ([rows, cols], or [rows] for a vector) or, with
 * transpose, as their transpose [cols, rows]. */
typedef struct {
    char name[96];   /* transformers' name: "transformer.h.0.attn.c_attn.weight" */
    int unit, param; /* in the manifest's unit list */
    size_t offset;   /* of the parameter in its unit, in elements */
    int64_t row0, rows, cols;
    int vector, transpose;
} hf_tensor;

/* The family and hyperparameters of a run.model object (a family's
 * describe); one without them fails naming every missing key. `where`
 * names the source in messages ("DIR/manifest.json"). */
zt_status hf_model_parse(const json_t *model, const char *where, hf_model *m, zt_error *err);
/* The same for info's run.model, whose layers must fit its units. */
zt_status hf_model_read(const zt_ckpt_info *info, hf_model *m, zt_error *err);
/* Every tensor of the model in transformers' order into out[cap] (*n of
 * them); each zerotrain parameter is looked up by name and its shape
 * checked against the hyperparameters. */
zt_status hf_tensors(const zt_ckpt_info *info, const hf_model *m, hf_tensor *out, int cap, int *n, zt_error *err);
/* The same over a unit list shaped as a manifest's "units" ([{name,
 * params: [{name, shape, offset}]}]): the import builds one from the spec. */
zt_status hf_tensors_of(const json_t *units, const char *where, const hf_model *m, hf_tensor *out, int cap, int *n,
                        zt_error *err);
/* Upper bound of hf_tensors' count for m. */
int hf_tensor_count_max(const hf_model *m);
/* config.json for m with tensors of dtype (a new reference; NULL: out of memory). */
json_t *hf_config(const hf_model *m, zt_dtype dtype);

#endif
