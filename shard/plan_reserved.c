/* The planner's expected reserved bytes per allocator mode (zt_plan.h).
 * The planner predicts allocated bytes exactly; what an allocator reserves
 * beyond them depends on the order and sizes of every request, which the
 * planner's moments do not keep. So each mode's figure is its mechanism's
 * first-order cost, with coefficients fitted to, and the error band
 * measured on, the runs bench/bench_reserved.py makes (docs/memory.md):
 *  - simple caches freed blocks by exact size, so the sizes a step no
 *    longer uses stay reserved beside the ones in use: a fraction of the
 *    peak;
 *  - caching carves large requests from 20 MiB segments (and small ones
 *    from 2 MiB segments): about one segment's slack on small models, a
 *    fraction of the peak once the peak spans many segments;
 *  - expandable maps 2 MiB granules under the blocks in use, one pool for
 *    large and one for small requests: the peak rounded up, plus the small
 *    pool's granule. Free blocks between live ones stay mapped, hence its
 *    upper band. */
#include "zt_plan.h"

#define MIB ((size_t)1 << 20)

size_t zt_plan_expected_reserved(size_t peak_bytes, zt_alloc_mode mode) {
    switch (mode) {
    case ZT_ALLOC_CACHING: {
        size_t slack = peak_bytes + 16 * MIB, share = peak_bytes + peak_bytes * 35 / 100;
        return slack > share ? slack : share;
    }
    case ZT_ALLOC_EXPANDABLE:
        return (peak_bytes + ZT_MEM_GRANULE - 1) / ZT_MEM_GRANULE * ZT_MEM_GRANULE + ZT_MEM_GRANULE;
    case ZT_ALLOC_SIMPLE:
    default:
        return peak_bytes + peak_bytes / 4;
    }
}

zt_plan_band zt_plan_reserved_band(zt_alloc_mode mode) {
    switch (mode) {
    case ZT_ALLOC_CACHING: return (zt_plan_band){-0.25, 0.30};
    case ZT_ALLOC_EXPANDABLE: return (zt_plan_band){-0.15, 0.30};
    case ZT_ALLOC_SIMPLE:
    default: return (zt_plan_band){-0.25, 0.30};
    }
}
