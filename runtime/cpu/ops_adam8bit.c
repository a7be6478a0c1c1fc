/* 8-bit AdamW: per block, m and v dequantized, updated in fp32 as AdamW's,
 * p stepped with them, and m and sqrt(v) quantized again under the block's
 * new absolute maxima (zt_quant.h). Blocks are independent, one per thread. */
#include <math.h>

#include "cpu_ops.h"
#include "zt_quant.h"

/* One block of len <= ZT_QBLOCK values; mw, vw are fp32 scratch [len]
 * (the new m and sqrt(v)). */
static void adam8bit_block(const float *mmap, const float *vmap, float *p, const float *g, uint8_t *m8, uint8_t *v8,
                           float *mscale, float *vscale, size_t len, float lr, float beta1, float beta2, float eps,
                           float wd, float bc1, float bc2, float *mw, float *vw) {
    float mmax = 0.0f, vmax = 0.0f;
    for (size_t i = 0; i < len; i++) {
        float gi = g[i];
        float mi = beta1 * (mmap[m8[i]] * *mscale) + (1.0f - beta1) * gi;
        float rv = vmap[v8[i]] * *vscale; /* sqrt(v), as stored */
        float vi = beta2 * (rv * rv) + (1.0f - beta2) * gi * gi;
        float ri = sqrtf(vi);
        mw[i] = mi;
        vw[i] = ri;
        float mhat = mi / bc1;
        float vhat = vi / bc2;
        p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[i]);
        if (fabsf(mi) > mmax) mmax = fabsf(mi);
        if (ri > vmax) vmax = ri;
    }
    *mscale = mmax;
    *vscale = vmax;
    for (size_t i = 0; i < len; i++) {
        m8[i] = zt_qmap_encode(mmap, mmax > 0.0f ? mw[i] / mmax : 0.0f);
        v8[i] = zt_qmap_encode(vmap, vmax > 0.0f ? vw[i] / vmax : 0.0f);
    }
}

void zt_cpu_adam8bit(zt_stream *s, float *p, const float *g, uint8_t *m8, uint8_t *v8, float *mscale, float *vscale,
                     size_t n, float lr, float beta1, float beta2, float eps, float wd, int t) {
    float mmap[ZT_QMAP_LEN], vmap[ZT_QMAP_LEN];
    zt_qmap_fill(mmap, 1);
    zt_qmap_fill(vmap, 0);
    float bc1 = 1.0f - powf(beta1, (float)t);
    float bc2 = 1.0f - powf(beta2, (float)t);
    size_t nb = zt_qblocks(n);
#pragma omp parallel for num_threads(s->nthreads) schedule(static)
    for (size_t b = 0; b < nb; b++) {
        float mw[ZT_QBLOCK], vw[ZT_QBLOCK]; /* the block's new m, v before quantization */
        size_t lo = b * ZT_QBLOCK, len = n - lo < ZT_QBLOCK ? n - lo : ZT_QBLOCK;
        adam8bit_block(mmap, vmap, p + lo, g + lo, m8 + lo, v8 + lo, mscale + b, vscale + b, len, lr, beta1, beta2,
                       eps, wd, bc1, bc2, mw, vw);
    }
}
