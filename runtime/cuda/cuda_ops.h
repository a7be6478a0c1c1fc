/* The CUDA backend: its private state, error plumbing, the kernel launchers
 * behind zt_ops (same semantics as the CPU kernels in runtime/cpu, in fp32,
 * bf16 and fp16: each launcher takes the compute dtype, and ops_table.c
 * binds them into one zt_ops table per dtype), and a bf16 GEMM that is not
 * part of zt_ops.
 *
 * Included from C (backend_cuda.c, tests) and from CUDA C++ (*.cu).
 *
 * Errors. zt_ops functions return void, so a failed launch or cuBLAS(Lt) call is
 * recorded as the backend's "sticky" error (first one wins, with file:line);
 * stream_sync reports it, and keeps reporting it: results computed after a
 * failure cannot be trusted.
 *
 * Determinism. No kernel uses atomics. Every reduction is either a loop in a
 * fixed order run by one thread, or a block reduction with a fixed launch
 * shape and a fixed combining tree (warp butterfly, then the warps in order),
 * so repeated runs give the same bits on the same GPU model. GEMMs go through
 * cuBLASLt with an algorithm chosen once per shape and cached, restricted to
 * reduction schemes with a fixed summation order (ops_matmul.cu explains the
 * mask). fp32 tables compute without TF32 unless zt_backend.matmul_bf16
 * asks for bf16 tensor-core math; the 16-bit tables pass 16-bit operands
 * with fp32 accumulation (CUBLAS_COMPUTE_32F). */
#ifndef ZT_CUDA_OPS_H
#define ZT_CUDA_OPS_H

/* System headers first, outside the extern "C" block below. */
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "zt_backend.h"

/* sum_squares: first-pass blocks (fixed: the summation order depends on it). */
#define ZT_CUDA_SUMSQ_BLOCKS 512
#define ZT_CUDA_SUMSQ_THREADS 256

/* cuBLASLt: the fixed workspace every Lt matmul may use, and the number of
 * cached GEMM plans (descriptors + algorithm per shape, LRU). */
#define ZT_CUDA_LT_WORKSPACE_BYTES ((size_t)32 << 20)
#define ZT_CUDA_LT_PLANS 64

/* What a cached plan is for. All int64 so the struct has no padding and two
 * keys compare with memcmp (built from a zeroed struct regardless). Row-major
 * terms: C[M,N] = alpha op(A)[M,K] op(B)[K,N] + beta C (+ bias[N]), `batch`
 * such products at the given element strides; align_* are the pointers'
 * alignments in bytes (capped at 256), which the algorithm choice depends on. */
typedef struct {
    int64_t trans_a, trans_b, m, n, k, lda, ldb, ldc;
    int64_t batch, stride_a, stride_b, stride_c;
    int64_t a_type, b_type, c_type, compute; /* cudaDataType, cublasComputeType_t */
    int64_t bias;                            /* 1: CUBLASLT_EPILOGUE_BIAS with a bias[N] of c_type */
    int64_t align_a, align_b, align_c, align_bias;
} zt_cuda_lt_key;

typedef struct {
    int used;                /* slot holds a key */
    int supported;           /* 0: the heuristic found no algorithm (cached, not retried) */
    uint64_t last_use;       /* LRU tick */
    zt_cuda_lt_key key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc; /* cuBLASLt's A, B and C = D (column-major view) */
    cublasLtMatmulAlgo_t algo;
    size_t workspace;        /* bytes the algorithm needs (<= ZT_CUDA_LT_WORKSPACE_BYTES) */
} zt_cuda_lt_plan;

typedef struct {
    int device;              /* CUDA ordinal this backend runs on */
    cudaStream_t stream;     /* the default compute stream (non-blocking) */
    cublasHandle_t cublas;   /* one handle; calls serialize on `lock` */
    cudaStream_t cublas_stream; /* stream currently bound to `cublas` */
    int cublas_bound;           /* 0 until `cublas` has that stream and the workspace (first use) */
    /* ZT_CUDA_SUMSQ_BLOCKS partial sums, then one result slot. Shared by all
     * streams: sum_squares calls on different streams must be ordered by the
     * caller (the runtime issues them on the compute stream). */
    double *sumsq_scratch;
    /* cuBLASLt: the handle, its workspace (cudaMalloc'd at creation, outside
     * the tracked allocator, like the handles' own memory; the cuBLAS handle
     * uses it too), the plan cache, and an event marking the last use of the
     * workspace on lt_ws_stream, so a GEMM on another stream waits for it
     * (the lock orders the enqueues, not the GPU's execution). All under
     * `lock`. */
    cublasLtHandle_t lt;
    void *lt_workspace;
    zt_cuda_lt_plan lt_plans[ZT_CUDA_LT_PLANS];
    uint64_t lt_tick;
    cudaEvent_t lt_ws_event;
    cudaStream_t lt_ws_stream; /* NULL: the workspace has not been used yet */
    /* GEMM calls cuBLASLt had no algorithm for, or refused at run time: run
     * through the cuBLAS handle instead, or, with a bias, the bias added by a
     * separate kernel (a diagnostic: the tests expect 0 for aligned shapes). */
    uint64_t lt_fallback_calls;
    /* Address reservation and granule mapping for --allocator expandable;
     * NULL where the driver or device has none (vmm_why says why). */
    struct zt_cuda_vmm *vmm;
    char vmm_why[160];
    pthread_mutex_t lock;    /* guards `sticky`, the cuBLAS handle and the cuBLASLt state */
    zt_error sticky;         /* first asynchronous failure, reported by stream_sync */
} zt_cuda_impl;

/* The impl of s's backend. */
zt_cuda_impl *zt_cuda_impl_of(zt_stream *s);
/* Makes the backend's device current on this thread and returns s's
 * cudaStream_t (the compute stream when s->handle is NULL). */
cudaStream_t zt_cuda_enter(zt_stream *s);
/* Records the first failure into the sticky error (thread-safe). */
void zt_cuda_record(zt_cuda_impl *im, zt_status code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* After a kernel launch: records cudaGetLastError() if it is not success;
 * returns 1 on failure, 0 on success. */
int zt_cuda_check_launch(zt_stream *s, const char *what, const char *file, int line);
/* Records a failed CUDA runtime call; returns 1 on failure, 0 on success. */
int zt_cuda_check_rt(zt_stream *s, cudaError_t rc, const char *what, const char *file, int line);
/* The status a CUDA error maps to (out of memory -> ZT_ERR_OOM, else internal). */
zt_status zt_cuda_status_of(cudaError_t rc);
const char *zt_cublas_status_string(cublasStatus_t st);

/* Locks the backend's cuBLAS handle, binds it to `stream`, and returns it;
 * NULL (error recorded, lock released) if binding failed. Release with
 * zt_cuda_cublas_release. */
cublasHandle_t zt_cuda_cublas_acquire(zt_stream *s, cudaStream_t stream);
void zt_cuda_cublas_release(zt_stream *s);

#define ZT_CUDA_LAUNCHED(s, what) zt_cuda_check_launch((s), (what), __FILE__, __LINE__)
#define ZT_CUDA_RT(s, call) zt_cuda_check_rt((s), (call), #call, __FILE__, __LINE__)

/* ---- zt_ops kernels (shapes and semantics: zt_ops in zt_backend.h) ---- */
/* The model kernels in compute dtype `dt`: the `void *` tensors are fp32,
 * bf16 or fp16 as dt says, the `float *` ones fp32 in every dtype (zt_ops).
 * ops_table.c binds them into one zt_ops table per dtype. */
void zt_cuda_embedding_fwd(zt_stream *s, zt_dtype dt, void *out, const int32_t *tokens, const void *wte,
                           const void *wpe, int B, int T, int C);
void zt_cuda_embedding_bwd(zt_stream *s, zt_dtype dt, float *dwte, float *dwpe, const void *dout,
                           const int32_t *tokens, int B, int T, int C);
void zt_cuda_layernorm_fwd(zt_stream *s, zt_dtype dt, void *out, float *mean, float *rstd, const void *inp,
                           const void *w, const void *b, int N, int C);
void zt_cuda_layernorm_bwd(zt_stream *s, zt_dtype dt, void *dinp, float *dw, float *db, const void *dout,
                           const void *inp, const void *w, const float *mean, const float *rstd, int N, int C);
void zt_cuda_matmul_fwd(zt_stream *s, zt_dtype dt, void *out, const void *inp, const void *w, const void *bias,
                        int N, int C, int OC);
void zt_cuda_matmul_bwd(zt_stream *s, zt_dtype dt, void *dinp, float *dw, float *dbias, const void *dout,
                        const void *inp, const void *w, int N, int C, int OC);
void zt_cuda_attention_fwd(zt_stream *s, zt_dtype dt, void *out, void *att, const void *qkv, int B, int T, int C,
                           int NH);
void zt_cuda_attention_bwd(zt_stream *s, zt_dtype dt, void *dqkv, float *datt, const void *dout, const void *qkv,
                           const void *att, int B, int T, int C, int NH, void *scratch, size_t scratch_bytes);
void zt_cuda_attention_fused_fwd(zt_stream *s, zt_dtype dt, void *out, float *lse, const void *qkv, int B, int T,
                                 int C, int NH);
void zt_cuda_attention_fused_bwd(zt_stream *s, zt_dtype dt, void *dqkv, float *datt, const void *dout,
                                 const void *qkv, const void *out, const float *lse, int B, int T, int C, int NH);
void zt_cuda_gelu_fwd(zt_stream *s, zt_dtype dt, void *out, const void *inp, size_t N);
void zt_cuda_gelu_bwd(zt_stream *s, zt_dtype dt, void *dinp, const void *inp, const void *dout, size_t N);
void zt_cuda_residual_fwd(zt_stream *s, zt_dtype dt, void *out, const void *a, const void *b, size_t N);
void zt_cuda_residual_bwd(zt_stream *s, zt_dtype dt, void *da, void *db, const void *dout, size_t N);
void zt_cuda_softmax_xent_fwd(zt_stream *s, zt_dtype dt, float *losses, void *probs, const void *logits,
                              const int32_t *targets, int N, int V);
void zt_cuda_softmax_xent_bwd(zt_stream *s, zt_dtype dt, void *dlogits, const void *probs, const int32_t *targets,
                              int N, int V, float dloss);
void zt_cuda_rmsnorm_fwd(zt_stream *s, zt_dtype dt, void *out, float *rstd, const void *inp, const void *w, int N,
                         int C, float eps);
void zt_cuda_rmsnorm_bwd(zt_stream *s, zt_dtype dt, void *dinp, float *dw, const void *dout, const void *inp,
                         const void *w, const float *rstd, int N, int C);
void zt_cuda_rope_fwd(zt_stream *s, zt_dtype dt, void *qkv, int B, int T, int NH, int NKV, int HD, float theta);
void zt_cuda_rope_bwd(zt_stream *s, zt_dtype dt, void *dqkv, int B, int T, int NH, int NKV, int HD, float theta);
void zt_cuda_swiglu_fwd(zt_stream *s, zt_dtype dt, void *out, const void *gate_up, int N, int F);
void zt_cuda_swiglu_bwd(zt_stream *s, zt_dtype dt, void *dgate_up, const void *gate_up, const void *dout, int N,
                        int F);
void zt_cuda_gqa_expand(zt_stream *s, zt_dtype dt, void *qkv_full, const void *qkv, int N, int NH, int NKV, int HD);
void zt_cuda_gqa_reduce(zt_stream *s, zt_dtype dt, void *dqkv, const void *dqkv_full, int N, int NH, int NKV,
                        int HD);
/* The engine's operations, the same in every table. */
void zt_cuda_adamw(zt_stream *s, float *p, const float *g, float *m, float *v, size_t n, float lr,
                   float beta1, float beta2, float eps, float wd, int t);
void zt_cuda_sgd(zt_stream *s, float *p, const float *g, float *m, size_t n, float lr, float momentum,
                 int nesterov, float wd);
void zt_cuda_adam8bit(zt_stream *s, float *p, const float *g, uint8_t *m8, uint8_t *v8, float *mscale,
                      float *vscale, size_t n, float lr, float beta1, float beta2, float eps, float wd, int t);
void zt_cuda_factor_stats(zt_stream *s, float *row, float *col, const float *g, size_t n, size_t at, size_t cols,
                          float eps1);
void zt_cuda_adafactor_precondition(zt_stream *s, float *u, const float *g, float *v, const float *rfac,
                                    const float *cfac, size_t n, size_t at, size_t cols, float beta2t, float eps1,
                                    int store_v);
void zt_cuda_adafactor_apply(zt_stream *s, float *p, const float *u, float *m, size_t n, float step, float beta1,
                             float decay);
void zt_cuda_cast(zt_stream *s, void *dst, zt_dtype dst_dtype, const void *src, zt_dtype src_dtype, size_t n);
void zt_cuda_cast_sr(zt_stream *s, uint16_t *dst, const float *src, size_t n, zt_sr_key key);
void zt_cuda_wire_quantize(zt_stream *s, uint8_t *codes, float *scales, const void *x, zt_dtype x_dtype, void *feedback,
                           zt_dtype fb_dtype, size_t n, int bits, unsigned block);
void zt_cuda_wire_dequantize(zt_stream *s, void *out, zt_dtype dtype, const uint8_t *codes, const float *scales,
                             size_t n, int bits, unsigned block);
void zt_cuda_newton_schulz(zt_stream *s, float *x, size_t rows, size_t cols, int steps, const float *coef, float eps,
                           float *scratch);
void zt_cuda_scale(zt_stream *s, float *x, float alpha, size_t n);
void zt_cuda_scaled_store(zt_stream *s, void *dst, zt_dtype dtype, const float *src, float alpha, int accumulate,
                          size_t n);
/* `out` may be device memory (written asynchronously, like every other
 * output) or host memory (pageable or pinned): then the call waits for the
 * stream so *out is valid on return, as the CPU backend's is (the optimizer
 * reads it at once). On a failure *out is NaN and the sticky error is set. */
void zt_cuda_sum_squares(zt_stream *s, double *out, const float *x, size_t n);

/* The kernel table of dtype dt (ZT_FP32, ZT_BF16, ZT_FP16); zt_cuda_ops()
 * is the fp32 one. */
const zt_ops *zt_cuda_ops_for(zt_dtype dt);
const zt_ops *zt_cuda_ops(void);

/* ---- GEMMs ----------------------------------------------------------------- */
/* A row-major (strided-batched) GEMM through cuBLASLt, as the kernels use it:
 * for i < batch,
 *   C_i[M,N] = alpha op(A_i) @ op(B_i) + beta C_i (+ bias[N] on every row)
 * with X_i = X + i * stride_x elements, op(X) = X^T when trans_x; A is [M,K]
 * ([K,M] when trans_a), B is [K,N] ([N,K] when trans_b); lda, ldb, ldc are
 * row strides in elements. bias (may be NULL) has C's type (c_type).
 * Falls back to cuBLAS (cublasGemmStridedBatchedEx, atomics off) when
 * cuBLASLt has no algorithm for the case, except with a bias: then it returns
 * ZT_ERR_UNSUPPORTED with err untouched, and the caller adds the bias itself.
 * Enqueued on s; returns launch-time errors (not asynchronous ones). */
typedef struct {
    int trans_a, trans_b, M, N, K, batch;
    float alpha, beta;
    const void *A;
    cudaDataType a_type;
    int64_t lda, stride_a;
    const void *B;
    cudaDataType b_type;
    int64_t ldb, stride_b;
    void *C;
    cudaDataType c_type;
    int64_t ldc, stride_c;
    const void *bias;
    cublasComputeType_t compute;
} zt_cuda_gemm_args;
zt_status zt_cuda_gemm(zt_stream *s, const zt_cuda_gemm_args *g, zt_error *err);
/* The compute type of the kernels' fp32 GEMMs on s's backend: 32F, or
 * 32F_FAST_16BF when zt_backend.matmul_bf16 is set. */
cublasComputeType_t zt_cuda_matmul_compute(zt_stream *s);
/* Destroys the cached cuBLASLt plans (backend destroy). */
void zt_cuda_lt_plans_destroy(zt_cuda_impl *im);

/* ---- GEMM outside zt_ops ---------------------------------------------- */
/* Row-major C[M,N] = alpha * op(A) @ op(B) + beta * C, with op(X) = X or X^T
 * (trans_x != 0). A is [M,K] (or [K,M] when trans_a), B is [K,N] (or [N,K]
 * when trans_b); lda, ldb, ldc are row strides in elements. A and B are bf16,
 * accumulation is fp32 (CUBLAS_COMPUTE_32F), C is fp32 or bf16 (c_dtype).
 * Enqueued on s; returns launch-time errors (not asynchronous ones).
 *   matmul_fwd:  out = inp @ w^T      -> (0, 1, N, OC, C,  inp, C,  w,   C, out,  OC)
 *   dinp        += dout @ w           -> (0, 0, N, C,  OC, dout, OC, w,   C, dinp, C)  beta 1
 *   dw          += dout^T @ inp       -> (1, 0, OC, C, N,  dout, OC, inp, C, dw,   C)  beta 1 */
zt_status zt_cuda_gemm_bf16(zt_stream *s, int trans_a, int trans_b, int M, int N, int K, float alpha,
                            const zt_bf16 *A, int lda, const zt_bf16 *B, int ldb, float beta, void *C,
                            zt_dtype c_dtype, int ldc, zt_error *err);
/* The same in fp32 (CUBLAS_COMPUTE_32F, no TF32), as matmul_fwd/bwd use it
 * when matmul_bf16 is 0; both go through zt_cuda_gemm. */
zt_status zt_cuda_gemm_f32(zt_stream *s, int trans_a, int trans_b, int M, int N, int K, float alpha,
                           const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc,
                           zt_error *err);

#ifdef __cplusplus
}
#endif

#endif
