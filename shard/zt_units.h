/* Parameter units: how a model declares its parameters. A unit (embedding, a
 * block, final norm + head) is the granularity of sharding, gathering and
 * gradient reduction: its parameters live in one flat buffer, padded so that
 * it splits into world_size equal contiguous slices (rank r owns slice r). The
 * model only names units and parameters; it never sees ranks. */
#ifndef ZT_UNITS_H
#define ZT_UNITS_H

#include <stddef.h>
#include <stdint.h>

#include "zt_error.h"

#define ZT_MAX_UNIT_PARAMS 32
#define ZT_MAX_UNITS 1024
#define ZT_MAX_PARAM_PARTS 3 /* logical matrices stacked in one fused matrix (q, k, v) */

typedef struct {
    char name[32];
    int ndim;
    int64_t shape[4];
    size_t numel;
    size_t offset; /* elements from the start of the unit's flat buffer */
    int decay;     /* 1: AdamW weight decay applies (matrices), 0: biases, norms */
    /* 1: a hidden layer's weight matrix [out, in] (a block's linear map),
     * not an embedding, a head, a norm or a bias: what whole-matrix
     * optimizers (Muon) transform. A fused matrix stacks nparts logical
     * matrices by rows (the GPT's q, k, v), part k of part_rows[k] rows;
     * each is transformed on its own. */
    uint8_t hidden, nparts;
    int32_t part_rows[ZT_MAX_PARAM_PARTS];
} zt_param_spec;

typedef struct {
    char name[32];
    int nparams;
    zt_param_spec params[ZT_MAX_UNIT_PARAMS];
    size_t numel;        /* sum of parameter sizes */
    size_t padded_numel; /* numel rounded up to a multiple of world_size * align */
    size_t shard_numel;  /* padded_numel / world_size */
    int frozen;          /* not trained: params only (no grads, master or optimizer state), never reduced */
} zt_unit_spec;

typedef struct {
    int nunits;
    zt_unit_spec units[ZT_MAX_UNITS];
    size_t total_numel;        /* the model's parameter count */
    size_t total_padded_numel; /* with padding */
    size_t largest_unit_numel; /* padded */
} zt_model_spec;

/* Declares a unit; returns its index in *unit. */
zt_status zt_spec_add_unit(zt_model_spec *spec, const char *name, int *unit, zt_error *err);
/* Declares a parameter of `unit` (appended to its flat buffer); index in *param. */
zt_status zt_spec_add_param(zt_model_spec *spec, int unit, const char *name, int ndim,
                            const int64_t *shape, int decay, int *param, zt_error *err);
/* Marks parameter `param` of `unit` (2-D) a hidden layer's weight matrix
 * made of nparts logical matrices of rows[k] rows each, stacked (nparts 1:
 * one matrix, rows may be NULL); the rows must add up to its first dim. */
zt_status zt_spec_set_hidden(zt_model_spec *spec, int unit, int param, int nparts, const int64_t *rows,
                             zt_error *err);
/* Part k of hidden parameter ps: its first element in the unit and its
 * rows (the columns are ps->shape[1]). */
void zt_param_part(const zt_param_spec *ps, int k, size_t *offset, size_t *rows);

/* Fixes the padding for world_size ranks. Slices start on 16-element (64-byte)
 * boundaries when the unit is split (world_size > 1); one rank needs none, so
 * at world size 1 padded == numel. */
void zt_spec_layout(zt_model_spec *spec, int world_size);
/* The same with every slice a multiple of `align` elements (a multiple of
 * 16: quantized communication's blocks, which then never straddle two
 * ranks, so a unit's codes do not depend on the world size). */
void zt_spec_layout_aligned(zt_model_spec *spec, int world_size, size_t align);

#endif
