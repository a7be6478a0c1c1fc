/* One BLAS call before training, so that the library's buffers and thread
 * pool exist before anything else runs (the whole-bill sampler watches
 * it: runtime/ctx.c). */
#ifndef ZT_BLAS_WARM_UP_H
#define ZT_BLAS_WARM_UP_H

void zt_cpu_blas_warm_up(void);

#endif
