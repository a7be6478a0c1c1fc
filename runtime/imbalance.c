#include "zt_imbalance.h"

zt_imbalance zt_imbalance_compute(const size_t *peaks, const size_t *cat_peaks, int nranks) {
    zt_imbalance im = {1.0, 0, 0, ZT_CAT_OTHER};
    if (nranks <= 0) return im;
    size_t mx = peaks[0], mn = peaks[0];
    double sum = 0.0;
    for (int r = 0; r < nranks; r++) {
        sum += (double)peaks[r];
        if (peaks[r] > mx) {
            mx = peaks[r];
            im.max_rank = r;
        }
        if (peaks[r] < mn) mn = peaks[r];
    }
    double mean = sum / nranks;
    im.peak_max_over_mean = mean > 0.0 ? (double)mx / mean : 1.0;
    im.peak_max_minus_min_bytes = mx - mn;
    size_t best_spread = 0, best_size = 0;
    int found_spread = 0;
    for (int c = 0; c < ZT_NUM_CATEGORIES; c++) {
        size_t cmax = 0, cmin = (size_t)-1;
        for (int r = 0; r < nranks; r++) {
            size_t v = cat_peaks[(size_t)r * ZT_NUM_CATEGORIES + c];
            if (v > cmax) cmax = v;
            if (v < cmin) cmin = v;
        }
        size_t spread = cmax - cmin;
        if (spread > best_spread) {
            best_spread = spread;
            im.top_category = (zt_category)c;
            found_spread = 1;
        }
    }
    if (!found_spread) {
        for (int c = 0; c < ZT_NUM_CATEGORIES; c++) {
            size_t v = cat_peaks[(size_t)im.max_rank * ZT_NUM_CATEGORIES + c];
            if (v > best_size) {
                best_size = v;
                im.top_category = (zt_category)c;
            }
        }
    }
    return im;
}
