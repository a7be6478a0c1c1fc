/* How unequal memory is across ranks, from every rank's peaks. */
#ifndef ZT_IMBALANCE_H
#define ZT_IMBALANCE_H

#include <stddef.h>

#include "zt_mem.h"

typedef struct {
    double peak_max_over_mean;     /* max_r peak_r / mean_r peak_r (1 when equal) */
    size_t peak_max_minus_min_bytes;
    int max_rank;                  /* the rank with the highest peak */
    zt_category top_category;      /* the category whose peak differs most across ranks,
                                      or the largest one on max_rank when all are equal */
} zt_imbalance;

/* peaks[r] is rank r's total peak; cat_peaks[r * ZT_NUM_CATEGORIES + c] its peak of c. */
zt_imbalance zt_imbalance_compute(const size_t *peaks, const size_t *cat_peaks, int nranks);

#endif
