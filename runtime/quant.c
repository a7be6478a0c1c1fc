/* Block-wise quantization on the host: checkpoints and init place 8-bit
 * state through these, and read it back (zt_quant.h). */
#include <math.h>

#include "zt_quant.h"

/* The largest |x| of x[n]. */
static float absmax(const float *x, size_t n) {
    float most = 0.0f;
    for (size_t i = 0; i < n; i++)
        if (fabsf(x[i]) > most) most = fabsf(x[i]);
    return most;
}

void zt_quantize(const float *map, const float *x, size_t n, uint8_t *codes, float *scales) {
    for (size_t b = 0; b * ZT_QBLOCK < n; b++) {
        size_t lo = b * ZT_QBLOCK, len = n - lo < ZT_QBLOCK ? n - lo : ZT_QBLOCK;
        float s = absmax(x + lo, len);
        scales[b] = s;
        for (size_t i = lo; i < lo + len; i++) codes[i] = zt_qmap_encode(map, s > 0.0f ? x[i] / s : 0.0f);
    }
}

void zt_dequantize(const float *map, const uint8_t *codes, const float *scales, size_t n, float *x) {
    for (size_t i = 0; i < n; i++) x[i] = map[codes[i]] * scales[i / ZT_QBLOCK];
}
