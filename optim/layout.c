/* Where the 8-bit and Adafactor states of a unit's owned range live. The
 * owned range is whole world slices (all of them at stage 0), and both
 * optimizers work per segment: one parameter's part of one slice. So an
 * 8-bit block never straddles two ranks or two parameters, and a factored
 * statistic is summed per slice first, the same at every stage. */
#include "zt_optim_engine.h"
#include "zt_quant.h"

zt_segment_iter zt_segments(const zt_unit_spec *us, size_t lo, size_t hi) {
    zt_segment_iter it = {us, lo, hi, us->shard_numel ? (int)(lo / us->shard_numel) : 0, 0, 0};
    return it;
}

int zt_next_segment(zt_segment_iter *it, zt_segment *seg) {
    const zt_unit_spec *us = it->us;
    size_t S = us->shard_numel;
    while (S && (size_t)it->slice * S < it->hi) {
        size_t slo = (size_t)it->slice * S, shi = slo + S;
        while (it->param < us->nparams) {
            const zt_param_spec *ps = &us->params[it->param++];
            size_t a = ps->offset > slo ? ps->offset : slo, b = ps->offset + ps->numel < shi ? ps->offset + ps->numel : shi;
            if (a >= b) continue;
            seg->slice = it->slice;
            seg->param = it->param - 1;
            seg->a = a;
            seg->b = b;
            seg->block = it->blocks;
            it->blocks += zt_qblocks(b - a);
            return 1;
        }
        it->slice++;
        it->param = 0;
    }
    return 0;
}

size_t zt_owned_qblocks(const zt_unit_spec *us, size_t lo, size_t hi) {
    zt_segment_iter it = zt_segments(us, lo, hi);
    zt_segment seg;
    while (zt_next_segment(&it, &seg)) {
    }
    return it.blocks;
}

int zt_param_factored(const zt_param_spec *ps, size_t *rows, size_t *cols) {
    if (ps->ndim < 2) return 0;
    size_t c = (size_t)ps->shape[ps->ndim - 1];
    size_t r = c ? ps->numel / c : 0;
    if (r < 2 || c < 2) return 0; /* a row or a column: its own second moment is no larger */
    *rows = r;
    *cols = c;
    return 1;
}

size_t zt_factored_stats_offset(const zt_unit_spec *us, int i) {
    size_t off = 0, r, c;
    for (int k = 0; k < i && k < us->nparams; k++)
        if (zt_param_factored(&us->params[k], &r, &c)) off += r + c;
    return off;
}

/* Does parameter i overlap [lo, hi)? */
static int touches(const zt_param_spec *ps, size_t lo, size_t hi) {
    return ps->offset < hi && ps->offset + ps->numel > lo;
}

size_t zt_adafactor_v_offset(const zt_unit_spec *us, size_t lo, size_t hi, int i) {
    size_t off = 0, r, c;
    for (int k = 0; k < i && k < us->nparams; k++) {
        const zt_param_spec *ps = &us->params[k];
        if (!touches(ps, lo, hi)) continue;
        if (zt_param_factored(ps, &r, &c)) off += r + c;
        else {
            size_t a = ps->offset > lo ? ps->offset : lo, b = ps->offset + ps->numel < hi ? ps->offset + ps->numel : hi;
            off += b - a;
        }
    }
    return off;
}

void zt_adafactor_span(const zt_unit_spec *us, size_t lo, size_t hi, size_t *span_lo, size_t *span_hi) {
    size_t a = lo, b = hi, r, c;
    for (int k = 0; k < us->nparams; k++) {
        const zt_param_spec *ps = &us->params[k];
        if (!touches(ps, lo, hi) || !zt_param_factored(ps, &r, &c)) continue;
        if (ps->offset < a) a = ps->offset;
        if (ps->offset + ps->numel > b) b = ps->offset + ps->numel;
    }
    *span_lo = a;
    *span_hi = b;
}

size_t zt_adafactor_pieces(const zt_unit_spec *us, size_t lo, size_t hi, size_t chunk) {
    size_t pieces = 0;
    zt_segment_iter it = zt_segments(us, lo, hi);
    zt_segment seg;
    while (zt_next_segment(&it, &seg)) pieces += (seg.b - seg.a + chunk - 1) / chunk;
    return pieces;
}

size_t zt_adafactor_scratch_numel(const zt_unit_spec *us, size_t lo, size_t hi, size_t chunk) {
    size_t S = us->shard_numel, K = zt_factored_stats_offset(us, us->nparams);
    size_t slices = S ? (hi - lo) / S : 0;
    /* + 2: never empty, as every rank takes part in the sums */
    return 2 * zt_adafactor_pieces(us, lo, hi, chunk) + slices * K + K + 2;
}
