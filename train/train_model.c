#include "zt_train_model.h"

#include <stdio.h>
#include <string.h>

const zt_train_model *zt_train_model_find(const zt_train_model *const *models, int n, const char *family) {
    for (int k = 0; k < n; k++)
        if (strcmp(models[k]->family, family) == 0) return models[k];
    return NULL;
}

int zt_train_model_spec_tensors(const zt_model_spec *spec, const char *matrix_layout, zt_model_tensor *out, int cap) {
    int n = 0;
    for (int u = 0; u < spec->nunits; u++) {
        const zt_unit_spec *usp = &spec->units[u];
        for (int p = 0; p < usp->nparams; p++, n++) {
            if (n >= cap) continue;
            const zt_param_spec *ps = &usp->params[p];
            zt_model_tensor *t = &out[n];
            memset(t, 0, sizeof *t);
            snprintf(t->name, sizeof t->name, "%s.%s", usp->name, ps->name);
            t->unit = u, t->param = p, t->ndim = ps->ndim;
            memcpy(t->shape, ps->shape, sizeof t->shape);
            snprintf(t->layout, sizeof t->layout, "%s", ps->ndim == 2 ? matrix_layout : "row-major");
        }
    }
    return n;
}
