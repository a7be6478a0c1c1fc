/* Newton-Schulz orthogonalization, Muon's transform of a whole matrix's
 * update (torch.optim.Muon's definition, in fp32 here rather than its
 * bf16): X = G / max(||G||_F, eps), transposed so that it is wide
 * (rows <= cols), then `steps` times
 *   A = X X^T,  B = b A + c A A,  X = a X + B X
 * with (a, b, c) the quintic's coefficients, and transposed back. The
 * iteration drives every singular value of X towards 1 (to within the
 * band the coefficients leave, about 0.7 to 1.2 for the defaults), so the
 * result is close to U V^T of G = U S V^T.
 *
 * Here on the host through the CPU BLAS (sgemm), the CPU backend's
 * ops->newton_schulz; the CUDA backend's runs the same steps in fp32 GEMMs
 * on the device. The same input gives the same bits wherever it runs on
 * one backend, which is what makes the owner rank's result equal a single
 * process's. */
#ifndef ZT_NEWTON_SCHULZ_H
#define ZT_NEWTON_SCHULZ_H

#include <stddef.h>

/* fp32 elements of scratch for a [rows, cols] matrix: two copies of the
 * wide X, two [m, m] products (m = min(rows, cols)) and 2 for a double
 * (the norm, where a GPU computes it). */
size_t zt_newton_schulz_scratch(size_t rows, size_t cols);
/* Floating-point operations of one transform (the owners' balancing). */
double zt_newton_schulz_flops(size_t rows, size_t cols, int steps);
/* x[rows, cols] (row-major fp32) replaced by its orthogonalization;
 * scratch[zt_newton_schulz_scratch(rows, cols)]. */
void zt_newton_schulz(float *x, size_t rows, size_t cols, int steps, const float coef[3], float eps,
                      float *scratch);

#endif
