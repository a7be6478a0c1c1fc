/* The stage-3 gather schedule's decisions (zt_schedule.h). */
#include "zt_schedule.h"

#include <string.h>

int zt_sched_persistent(const zt_unit_spec *usp, const zt_sched_knobs *k) {
    return k->stage == 3 && usp->numel < k->persist_threshold;
}

int zt_sched_on_demand(const zt_unit_spec *usp, const zt_sched_knobs *k) {
    return k->stage == 3 && !zt_sched_persistent(usp, k);
}

static int chosen(const int *out, int n, int v) {
    for (int i = 0; i < n; i++)
        if (out[i] == v) return 1;
    return 0;
}

int zt_sched_prefetch(const zt_model_spec *spec, const zt_sched_knobs *k, const zt_sched_ahead *a,
                      const unsigned char *sharded, size_t live, int *out) {
    int n = 0;
    for (int i = 0; i < k->prefetch && a->pos + i < a->n; i++) {
        int v = a->order[a->pos + i];
        const zt_unit_spec *usp = &spec->units[v];
        if (!zt_sched_on_demand(usp, k) || !sharded[v] || chosen(out, n, v)) continue;
        if (k->max_live_params && live + usp->padded_numel > k->max_live_params) break;
        live += usp->padded_numel; /* every gathered buffer is [padded] */
        out[n++] = v;
    }
    return n;
}

int zt_sched_keep(const zt_model_spec *spec, const zt_sched_knobs *k, const zt_sched_ahead *a, int u,
                  unsigned char *seen) {
    if (!k->max_reuse_distance || !zt_sched_on_demand(&spec->units[u], k)) return 0;
    const int *ahead[2] = {a->order, a->next};
    int from[2] = {a->pos, 0}, len[2] = {a->n, a->next ? a->next_n : 0};
    size_t dist = 0;
    memset(seen, 0, (size_t)spec->nunits);
    for (int s = 0; s < 2; s++)
        for (int i = from[s]; i < len[s]; i++) {
            int v = ahead[s][i];
            if (v == u) return 1;
            if (seen[v] || !zt_sched_on_demand(&spec->units[v], k)) continue;
            seen[v] = 1;
            dist += spec->units[v].padded_numel;
            if (dist > k->max_reuse_distance) return 0;
        }
    return 0; /* not used again before the step */
}
