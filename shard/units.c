#include "zt_units.h"

#include <stdio.h>
#include <stdint.h>
#include <string.h>

zt_status zt_spec_add_unit(zt_model_spec *spec, const char *name, int *unit, zt_error *err) {
    if (spec->nunits >= ZT_MAX_UNITS)
        return ZT_FAIL(err, ZT_ERR_INVALID, "too many units (max %d)", ZT_MAX_UNITS);
    zt_unit_spec *u = &spec->units[spec->nunits];
    memset(u, 0, sizeof *u);
    snprintf(u->name, sizeof u->name, "%s", name);
    *unit = spec->nunits++;
    return ZT_OK;
}

zt_status zt_spec_add_param(zt_model_spec *spec, int unit, const char *name, int ndim,
                            const int64_t *shape, int decay, int *param, zt_error *err) {
    if (unit < 0 || unit >= spec->nunits)
        return ZT_FAIL(err, ZT_ERR_INVALID, "parameter '%s': no unit %d", name, unit);
    zt_unit_spec *u = &spec->units[unit];
    if (u->nparams >= ZT_MAX_UNIT_PARAMS)
        return ZT_FAIL(err, ZT_ERR_INVALID, "unit '%s': too many parameters", u->name);
    if (ndim < 1 || ndim > 4)
        return ZT_FAIL(err, ZT_ERR_INVALID, "parameter '%s': %d dims", name, ndim);
    zt_param_spec *p = &u->params[u->nparams];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 0)
            return ZT_FAIL(err, ZT_ERR_INVALID, "parameter '%s': dim %d is %lld", name, i,
                           (long long)shape[i]);
        p->shape[i] = shape[i];
        p->numel *= (size_t)shape[i];
    }
    p->offset = u->numel;
    p->decay = decay;
    u->numel += p->numel;
    *param = u->nparams++;
    return ZT_OK;
}

zt_status zt_spec_set_hidden(zt_model_spec *spec, int unit, int param, int nparts, const int64_t *rows,
                             zt_error *err) {
    if (unit < 0 || unit >= spec->nunits || param < 0 || param >= spec->units[unit].nparams)
        return ZT_FAIL(err, ZT_ERR_INVALID, "hidden matrix: no parameter %d of unit %d", param, unit);
    zt_param_spec *p = &spec->units[unit].params[param];
    if (p->ndim != 2) return ZT_FAIL(err, ZT_ERR_INVALID, "hidden matrix '%s' has %d dims, not 2", p->name, p->ndim);
    if (nparts < 1 || nparts > ZT_MAX_PARAM_PARTS || (nparts > 1 && !rows))
        return ZT_FAIL(err, ZT_ERR_INVALID, "hidden matrix '%s': %d parts", p->name, nparts);
    int64_t sum = 0;
    for (int k = 0; k < nparts; k++) {
        int64_t r = nparts == 1 ? p->shape[0] : rows[k];
        if (r <= 0 || r > INT32_MAX)
            return ZT_FAIL(err, ZT_ERR_INVALID, "hidden matrix '%s': part %d has no rows", p->name, k);
        p->part_rows[k] = (int32_t)r;
        sum += r;
    }
    if (sum != p->shape[0])
        return ZT_FAIL(err, ZT_ERR_INVALID, "hidden matrix '%s': parts of %lld rows in all, not %lld", p->name,
                       (long long)sum, (long long)p->shape[0]);
    p->hidden = 1;
    p->nparts = (uint8_t)nparts;
    return ZT_OK;
}

void zt_param_part(const zt_param_spec *ps, int k, size_t *offset, size_t *rows) {
    size_t cols = (size_t)ps->shape[1], before = 0;
    for (int i = 0; i < k; i++) before += (size_t)ps->part_rows[i];
    *offset = ps->offset + before * cols;
    *rows = (size_t)ps->part_rows[k];
}

void zt_spec_layout(zt_model_spec *spec, int world_size) {
    zt_spec_layout_aligned(spec, world_size, world_size > 1 ? 16 : 1);
}

void zt_spec_layout_aligned(zt_model_spec *spec, int world_size, size_t align) {
    size_t quantum = (size_t)world_size * align;
    spec->total_numel = spec->total_padded_numel = spec->largest_unit_numel = 0;
    for (int i = 0; i < spec->nunits; i++) {
        zt_unit_spec *u = &spec->units[i];
        u->padded_numel = (u->numel + quantum - 1) / quantum * quantum;
        u->shard_numel = u->padded_numel / (size_t)world_size;
        spec->total_numel += u->numel;
        spec->total_padded_numel += u->padded_numel;
        if (u->padded_numel > spec->largest_unit_numel) spec->largest_unit_numel = u->padded_numel;
    }
}
