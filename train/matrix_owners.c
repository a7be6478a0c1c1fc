/* The matrix owners' log line and summary entry (matrix_owners.h). */
#include "matrix_owners.h"

#include <stdio.h>
#include <stdlib.h>

json_t *zt_matrix_owners_json(const zt_engine *e) {
    int n;
    const zt_matrix *ms = zt_engine_matrices(e, &n);
    if (!ms) return NULL;
    const zt_model_spec *spec = zt_engine_spec(e);
    json_t *a = json_array();
    for (int i = 0; i < n; i++) {
        const zt_matrix *m = &ms[i];
        json_array_append_new(a, json_pack("{s:s,s:s,s:i,s:I,s:I,s:i}", "unit", spec->units[m->unit].name, "param",
                                           spec->units[m->unit].params[m->param].name, "part", m->part, "rows",
                                           (json_int_t)m->rows, "cols", (json_int_t)m->cols, "owner", m->owner));
    }
    return a;
}

void zt_matrix_owners_log(const zt_engine *e, const zt_logger *log, int world) {
    int n;
    const zt_matrix *ms = zt_engine_matrices(e, &n);
    if (!ms || n == 0) return;
    double *work = calloc((size_t)world, sizeof *work), total = 0.0, largest = 0.0;
    int *count = calloc((size_t)world, sizeof *count);
    if (!work || !count) {
        free(work);
        free(count);
        return;
    }
    for (int i = 0; i < n; i++) {
        work[ms[i].owner] += ms[i].flops;
        count[ms[i].owner]++;
        total += ms[i].flops;
        if (ms[i].flops > largest) largest = ms[i].flops;
    }
    char line[1024];
    int at = 0;
    for (int r = 0; r < world && at < (int)sizeof line - 48; r++)
        at += snprintf(line + at, sizeof line - (size_t)at, "%s%d: %d (%.1f%%)", r ? ", " : "", r, count[r],
                       total > 0 ? 100.0 * work[r] / total : 0.0);
    zt_log_rank0(log, "matrix owners: %d whole matrices transformed by their owner rank, largest work first to the "
                 "least loaded; rank: matrices (share of the work) %s; bound per rank %.1f%% (1/N + the largest)",
                 n, line, total > 0 ? 100.0 * (total / world + largest) / total : 0.0);
    free(work);
    free(count);
}
