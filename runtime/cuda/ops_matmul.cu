/* Dense layers and every other GEMM of the backend, through cuBLASLt
 * (weights stored [OC, C], out = x W^T).
 *
 * Layout. cuBLAS(Lt) is column-major. A row-major [R, K] matrix with row
 * stride ld is, read column-major, its transpose: a [K, R] matrix with leading
 * dimension ld. So the row-major product C[M,N] = op(A) op(B) is computed as
 * the column-major C^T[N,M] = op(B)^T op(A)^T: swap the operands and M/N, keep
 * each operand's own transpose flag and leading dimension. A row-major bias
 * over the N columns is then a bias over the rows of the column-major D, which
 * is what CUBLASLT_EPILOGUE_BIAS broadcasts.
 *
 * Compute types. The fp32 kernels (matmul_fwd/bwd, attention) use
 * CUBLAS_COMPUTE_32F with fp32 A, B, C: no TF32, so results stay within float
 * rounding of the CPU's sgemm (NVIDIA_TF32_OVERRIDE=1 in the environment would
 * still force TF32). With zt_backend.matmul_bf16 set they use
 * CUBLAS_COMPUTE_32F_FAST_16BF with the same fp32 buffers: cuBLAS rounds the
 * operands to bf16 inside the kernel (tensor cores) and accumulates in fp32,
 * so no bf16 copies are needed and kernels still never allocate. The bf16
 * and fp16 tables pass their 16-bit activations and weights as A and B
 * (CUDA_R_16BF, CUDA_R_16F) with CUBLAS_COMPUTE_32F: products summed in
 * fp32, C in the activation dtype for the forward and dinp (rounded once,
 * the bias added in fp32 before the rounding) and fp32 for dw.
 * zt_cuda_gemm_bf16 takes bf16 A and B and uses CUBLAS_COMPUTE_32F.
 *
 * Plans. Descriptors, layouts and the algorithm (the top result of
 * cublasLtMatmulAlgoGetHeuristic) are built once per shape, types, compute
 * type, epilogue and pointer alignments, and kept in a small LRU table in the
 * impl (ZT_CUDA_LT_PLANS entries), so training steps do not rerun the
 * heuristic. The heuristic is a pure function of the key, so an evicted and
 * rebuilt plan picks the same algorithm again.
 *
 * Determinism. The heuristic only considers algorithms whose split-K
 * reduction, if any, has a fixed summation order (reduction_mask below). With
 * a fixed algorithm, and hence a fixed tile and split configuration, every
 * output element is summed in the same order on every run; the workspace is
 * this backend's own (no cuBLAS-internal per-stream workspace choice).
 *
 * Locking. The plan table, the descriptors (a bias pointer is set per call)
 * and the one workspace are shared: each Lt call runs under the impl lock. The
 * lock orders enqueues, not execution on the GPU, so a matmul that uses the
 * workspace on a different stream than the last one first waits for an event
 * recorded after that last use. */
#include "cuda_common.cuh"

/* ---- plans --------------------------------------------------------------- */

/* Reduction schemes the algorithm search may use (a mask of
 * cublasLtReductionScheme_t bits; CUBLASLT_REDUCTION_SCHEME_NONE is 0, so
 * algorithms without split-K always pass):
 *   NONE          no split-K: each output is one sequential dot product in a
 *                 fixed order. Deterministic.
 *   COMPUTE_TYPE  each K-split writes its partial tile to its own slice of
 *                 the workspace in fp32 (the compute type), and a separate
 *                 kernel adds the slices in a fixed order. No element has two
 *                 concurrent writers and the order does not depend on timing:
 *                 deterministic.
 * Excluded:
 *   INPLACE       the splits add into the output buffer itself, serialized by
 *                 counters in the workspace; the documentation guarantees
 *                 sequential, not ordered, accumulation, so the order may
 *                 depend on which split arrives first.
 *   OUTPUT_TYPE   as COMPUTE_TYPE but the partials are stored in the output
 *                 type: deterministic too, but for bf16 outputs it rounds each
 *                 partial to bf16; for fp32 outputs COMPUTE_TYPE is the same
 *                 thing, so nothing is lost by leaving it out. */
static const uint32_t reduction_mask = (uint32_t)CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;

static cublasOperation_t op_of(int trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

/* Alignment in bytes of every batch's pointer x + i * stride (elements of
 * `elem` bytes): the lowest set bit of the address and of the stride, capped
 * at 256 (what the heuristic assumes by default). */
static int64_t align_of(const void *p, int64_t stride, size_t elem, int batch) {
    uint64_t a = (uint64_t)(uintptr_t)p | 256u;
    if (batch > 1) a |= (uint64_t)stride * elem;
    return (int64_t)(a & (~a + 1));
}

static size_t size_of_type(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

static const char *compute_name(int64_t c) {
    switch ((cublasComputeType_t)c) {
    case CUBLAS_COMPUTE_32F: return "32F";
    case CUBLAS_COMPUTE_32F_FAST_16BF: return "32F_FAST_16BF";
    case CUBLAS_COMPUTE_32F_FAST_TF32: return "32F_FAST_TF32";
    default: return "other";
    }
}

static void plan_release(zt_cuda_lt_plan *p) {
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    memset(p, 0, sizeof *p);
}

extern "C" void zt_cuda_lt_plans_destroy(zt_cuda_impl *im) {
    for (int i = 0; i < ZT_CUDA_LT_PLANS; i++) plan_release(&im->lt_plans[i]);
}

/* A layout of a column-major rows x cols matrix, batched when batch > 1. */
static cublasStatus_t layout_create(cublasLtMatrixLayout_t *l, cudaDataType t, int64_t rows, int64_t cols, int64_t ld,
                                    int64_t batch, int64_t stride) {
    cublasStatus_t st = cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld);
    if (st != CUBLAS_STATUS_SUCCESS || batch <= 1) return st;
    int32_t count = (int32_t)batch;
    st = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride);
    return st;
}

/* Fills p (descriptors and algorithm) for key k; bias is the pointer the
 * heuristic sees (it reads only its alignment). On a cuBLASLt failure returns
 * its status with *what naming the call; no algorithm is not a failure:
 * p->supported = 0. */
static cublasStatus_t plan_build(zt_cuda_impl *im, const zt_cuda_lt_key *k, const void *bias, zt_cuda_lt_plan *p,
                                 const char **what) {
    memset(p, 0, sizeof *p);
    p->used = 1;
    p->key = *k;
    cublasStatus_t st;
#define LT_TRY(call)                          \
    do {                                      \
        st = (call);                          \
        if (st != CUBLAS_STATUS_SUCCESS) {    \
            *what = "cuBLASLt: " #call;       \
            return st;                        \
        }                                     \
    } while (0)
    cublasOperation_t ta = op_of((int)k->trans_b), tb = op_of((int)k->trans_a); /* operands swapped */
    LT_TRY(cublasLtMatmulDescCreate(&p->op, (cublasComputeType_t)k->compute, CUDA_R_32F));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (k->bias) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        int32_t bias_type = (int32_t)k->c_type; /* the bias has the output's type */
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type));
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    /* Lt's A is our B: column-major [N,K] (op N) or [K,N] (op T); Lt's B is
     * our A: [K,M] or [M,K]; D = C is [N,M]. */
    LT_TRY(layout_create(&p->la, (cudaDataType)k->b_type, k->trans_b ? k->k : k->n, k->trans_b ? k->n : k->k, k->ldb,
                         k->batch, k->stride_b));
    LT_TRY(layout_create(&p->lb, (cudaDataType)k->a_type, k->trans_a ? k->m : k->k, k->trans_a ? k->k : k->m, k->lda,
                         k->batch, k->stride_a));
    LT_TRY(layout_create(&p->lc, (cudaDataType)k->c_type, k->n, k->m, k->ldc, k->batch, k->stride_c));

    cublasLtMatmulPreference_t pref = NULL;
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = ZT_CUDA_LT_WORKSPACE_BYTES;
    uint32_t al_a = (uint32_t)k->align_b, al_b = (uint32_t)k->align_a, al_c = (uint32_t)k->align_c;
    cublasLtMatmulHeuristicResult_t res;
    memset(&res, 0, sizeof res);
    int found = 0;
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction_mask,
                                                  sizeof reduction_mask);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof al_c);
    if (st != CUBLAS_STATUS_SUCCESS) {
        *what = "cuBLASLt: cublasLtMatmulPreferenceSetAttribute";
    } else {
        st = cublasLtMatmulAlgoGetHeuristic(im->lt, p->op, p->la, p->lb, p->lc, p->lc, pref, 1, &res, &found);
        if (st == CUBLAS_STATUS_NOT_SUPPORTED) { /* no heuristic for this case: not an error */
            found = 0;
            st = CUBLAS_STATUS_SUCCESS;
        }
        if (st != CUBLAS_STATUS_SUCCESS) *what = "cuBLASLt: cublasLtMatmulAlgoGetHeuristic";
    }
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
#undef LT_TRY
    if (found >= 1 && res.state == CUBLAS_STATUS_SUCCESS && res.workspaceSize <= ZT_CUDA_LT_WORKSPACE_BYTES) {
        p->supported = 1;
        p->algo = res.algo;
        p->workspace = res.workspaceSize;
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* The plan for k: cached, or built into the least recently used slot. Under
 * the impl lock. NULL on a cuBLASLt failure (*st, *what say which). */
static zt_cuda_lt_plan *plan_get(zt_cuda_impl *im, const zt_cuda_lt_key *k, const void *bias, cublasStatus_t *st,
                                 const char **what) {
    zt_cuda_lt_plan *victim = &im->lt_plans[0];
    for (int i = 0; i < ZT_CUDA_LT_PLANS; i++) {
        zt_cuda_lt_plan *p = &im->lt_plans[i];
        if (p->used && memcmp(&p->key, k, sizeof *k) == 0) {
            p->last_use = ++im->lt_tick;
            return p;
        }
        if (!victim->used) continue;
        if (!p->used || p->last_use < victim->last_use) victim = p;
    }
    plan_release(victim);
    *st = plan_build(im, k, bias, victim, what);
    if (*st != CUBLAS_STATUS_SUCCESS) {
        plan_release(victim);
        return NULL;
    }
    victim->last_use = ++im->lt_tick;
    return victim;
}

/* ---- running a GEMM -------------------------------------------------------- */

/* A failed cuBLAS(Lt) call of GEMM g into err, at the caller's file:line. */
#define CUBLAS_FAIL(err, st, g, what)                                                                            \
    ZT_FAIL((err), (st) == CUBLAS_STATUS_ALLOC_FAILED ? ZT_ERR_OOM : ZT_ERR_INTERNAL,                           \
            "%s failed for GEMM M=%d N=%d K=%d trans_a=%d trans_b=%d batch=%d lda=%lld ldb=%lld ldc=%lld "      \
            "compute=%s bias=%d: %s (%s)",                                                                       \
            (what), (g)->M, (g)->N, (g)->K, (g)->trans_a, (g)->trans_b, (g)->batch, (long long)(g)->lda,         \
            (long long)(g)->ldb, (long long)(g)->ldc, compute_name((g)->compute), (g)->bias != NULL,             \
            cublasGetStatusString(st), cublasGetStatusName(st))

/* The backend's one GEMM workspace, under the impl lock: before a GEMM that
 * uses it on `stream`, wait for its last use if that was on another stream;
 * after the GEMM, mark this use (lt_ws_event, lt_ws_stream). */
static cudaError_t workspace_wait(zt_cuda_impl *im, cudaStream_t stream) {
    if (!im->lt_ws_stream || im->lt_ws_stream == stream) return cudaSuccess;
    return cudaStreamWaitEvent(stream, im->lt_ws_event, 0);
}
static cudaError_t workspace_used(zt_cuda_impl *im, cudaStream_t stream) {
    cudaError_t rc = cudaEventRecord(im->lt_ws_event, stream);
    if (rc == cudaSuccess) im->lt_ws_stream = stream;
    return rc;
}

/* The same GEMM through the cuBLAS handle, for cases cuBLASLt has no
 * algorithm for (and K = 0, where cuBLAS scales C by beta). The handle runs
 * with atomics disallowed and the default math mode, in the backend's one
 * workspace (ordered after its last use on another stream). No bias. */
static zt_status gemm_cublas(zt_stream *s, cudaStream_t stream, const zt_cuda_gemm_args *g, zt_error *err) {
    zt_cuda_impl *im = zt_cuda_impl_of(s);
    cublasHandle_t h = zt_cuda_cublas_acquire(s, stream); /* takes the impl lock */
    if (!h) return ZT_FAIL(err, ZT_ERR_INTERNAL, "cuBLAS: cannot bind the handle to the stream");
    cudaError_t rc = workspace_wait(im, stream);
    if (rc != cudaSuccess) {
        zt_cuda_cublas_release(s);
        (void)cudaGetLastError();
        return ZT_FAIL(err, zt_cuda_status_of(rc), "CUDA: cudaStreamWaitEvent (GEMM workspace) failed: %s",
                       cudaGetErrorString(rc));
    }
    int64_t lda = g->lda, ldb = g->ldb;
    if (g->K <= 0) {
        /* A and B are not read, but cuBLAS still checks their leading
         * dimensions, and packed operands with K = 0 have ld 0: N and M
         * satisfy the check whatever the transposes. */
        if (ldb < g->N) ldb = g->N;
        if (lda < g->M) lda = g->M;
    }
    cublasStatus_t st = cublasGemmStridedBatchedEx(
        h, op_of(g->trans_b), op_of(g->trans_a), g->N, g->M, g->K, &g->alpha, g->B, g->b_type, (int)ldb,
        (long long)g->stride_b, g->A, g->a_type, (int)lda, (long long)g->stride_a, &g->beta, g->C, g->c_type,
        (int)g->ldc, (long long)g->stride_c, g->batch, g->compute, CUBLAS_GEMM_DEFAULT);
    if (st == CUBLAS_STATUS_SUCCESS) rc = workspace_used(im, stream);
    zt_cuda_cublas_release(s);
    if (rc != cudaSuccess) {
        (void)cudaGetLastError();
        return ZT_FAIL(err, zt_cuda_status_of(rc), "CUDA: cudaEventRecord (GEMM workspace) failed: %s",
                       cudaGetErrorString(rc));
    }
    if (st != CUBLAS_STATUS_SUCCESS) return CUBLAS_FAIL(err, st, g, "cuBLAS: cublasGemmStridedBatchedEx");
    return ZT_OK;
}

/* The plan cache's key for g: shapes, strides, types and the alignments
 * the heuristic's choice depends on. */
static void key_of(const zt_cuda_gemm_args *g, zt_cuda_lt_key *k) {
    memset(k, 0, sizeof *k);
    k->trans_a = g->trans_a != 0;
    k->trans_b = g->trans_b != 0;
    k->m = g->M;
    k->n = g->N;
    k->k = g->K;
    k->lda = g->lda;
    k->ldb = g->ldb;
    k->ldc = g->ldc;
    k->batch = g->batch;
    if (g->batch > 1) {
        k->stride_a = g->stride_a;
        k->stride_b = g->stride_b;
        k->stride_c = g->stride_c;
    }
    k->a_type = g->a_type;
    k->b_type = g->b_type;
    k->c_type = g->c_type;
    k->compute = g->compute;
    k->bias = g->bias != NULL;
    k->align_a = align_of(g->A, g->stride_a, size_of_type(g->a_type), g->batch);
    k->align_b = align_of(g->B, g->stride_b, size_of_type(g->b_type), g->batch);
    k->align_c = align_of(g->C, g->stride_c, size_of_type(g->c_type), g->batch);
    k->align_bias = g->bias ? align_of(g->bias, 0, size_of_type(g->c_type), 1) : 0;
}

extern "C" zt_status zt_cuda_gemm(zt_stream *s, const zt_cuda_gemm_args *g, zt_error *err) {
    if (g->M <= 0 || g->N <= 0 || g->batch <= 0) return ZT_OK;
    zt_cuda_impl *im = zt_cuda_impl_of(s);
    cudaStream_t stream = zt_cuda_enter(s);
    if (g->K <= 0) {
        if (g->bias) return ZT_FAIL(err, ZT_ERR_UNSUPPORTED, "zt_cuda_gemm: K = 0 with a bias is not supported");
        return gemm_cublas(s, stream, g, err);
    }

    zt_cuda_lt_key k;
    key_of(g, &k);

    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    const char *what = "cuBLASLt";
    cudaError_t rc = cudaSuccess;
    const char *rc_what = NULL;
    int unsupported = 0;

    pthread_mutex_lock(&im->lock);
    zt_cuda_lt_plan *p = plan_get(im, &k, g->bias, &st, &what);
    if (!p) {
        /* st and what describe the failure */
    } else if (!p->supported) {
        unsupported = 1;
        im->lt_fallback_calls++;
    } else {
        if (g->bias) {
            st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias, sizeof g->bias);
            what = "cuBLASLt: cublasLtMatmulDescSetAttribute(BIAS_POINTER)";
        }
        if (st == CUBLAS_STATUS_SUCCESS && p->workspace) {
            rc = workspace_wait(im, stream);
            rc_what = "cudaStreamWaitEvent (cuBLASLt workspace)";
        }
        if (st == CUBLAS_STATUS_SUCCESS && rc == cudaSuccess) {
            st = cublasLtMatmul(im->lt, p->op, &g->alpha, g->B, p->la, g->A, p->lb, &g->beta, g->C, p->lc, g->C, p->lc,
                                &p->algo, p->workspace ? im->lt_workspace : NULL, p->workspace, stream);
            what = "cuBLASLt: cublasLtMatmul";
            if (st == CUBLAS_STATUS_NOT_SUPPORTED) {
                /* The algorithm the heuristic chose was refused at run time:
                 * the cuBLAS handle runs it instead (and the caller adds a
                 * bias); remember, so the next call goes there directly. */
                p->supported = 0;
                unsupported = 1;
                im->lt_fallback_calls++;
                st = CUBLAS_STATUS_SUCCESS;
            } else if (st == CUBLAS_STATUS_SUCCESS && p->workspace) {
                rc = workspace_used(im, stream);
                rc_what = "cudaEventRecord (cuBLASLt workspace)";
            }
        }
    }
    pthread_mutex_unlock(&im->lock);

    if (rc != cudaSuccess) {
        (void)cudaGetLastError();
        return ZT_FAIL(err, zt_cuda_status_of(rc), "CUDA: %s failed for GEMM M=%d N=%d K=%d: %s", rc_what, g->M, g->N,
                       g->K, cudaGetErrorString(rc));
    }
    if (st != CUBLAS_STATUS_SUCCESS) return CUBLAS_FAIL(err, st, g, what);
    if (unsupported) {
        if (g->bias)
            return ZT_FAIL(err, ZT_ERR_UNSUPPORTED, "zt_cuda_gemm: cuBLASLt has no algorithm for this GEMM with its bias");
        return gemm_cublas(s, stream, g, err);
    }
    return ZT_OK;
}

extern "C" cublasComputeType_t zt_cuda_matmul_compute(zt_stream *s) {
    return s->be->matmul_bf16 ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F;
}

static zt_cuda_gemm_args gemm_args(int trans_a, int trans_b, int M, int N, int K, float alpha, const void *A,
                                   cudaDataType a_type, int lda, const void *B, cudaDataType b_type, int ldb,
                                   float beta, void *C, cudaDataType c_type, int ldc, cublasComputeType_t compute) {
    zt_cuda_gemm_args g;
    memset(&g, 0, sizeof g);
    g.trans_a = trans_a;
    g.trans_b = trans_b;
    g.M = M;
    g.N = N;
    g.K = K;
    g.batch = 1;
    g.alpha = alpha;
    g.beta = beta;
    g.A = A;
    g.a_type = a_type;
    g.lda = lda;
    g.B = B;
    g.b_type = b_type;
    g.ldb = ldb;
    g.C = C;
    g.c_type = c_type;
    g.ldc = ldc;
    g.compute = compute;
    return g;
}

extern "C" zt_status zt_cuda_gemm_f32(zt_stream *s, int trans_a, int trans_b, int M, int N, int K, float alpha,
                                      const float *A, int lda, const float *B, int ldb, float beta, float *C,
                                      int ldc, zt_error *err) {
    zt_cuda_gemm_args g = gemm_args(trans_a, trans_b, M, N, K, alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb, beta,
                                    C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F);
    return zt_cuda_gemm(s, &g, err);
}

extern "C" zt_status zt_cuda_gemm_bf16(zt_stream *s, int trans_a, int trans_b, int M, int N, int K, float alpha,
                                       const zt_bf16 *A, int lda, const zt_bf16 *B, int ldb, float beta, void *C,
                                       zt_dtype c_dtype, int ldc, zt_error *err) {
    zt_cuda_gemm_args g = gemm_args(trans_a, trans_b, M, N, K, alpha, A, CUDA_R_16BF, lda, B, CUDA_R_16BF, ldb, beta,
                                    C, c_dtype == ZT_BF16 ? CUDA_R_16BF : CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F);
    return zt_cuda_gemm(s, &g, err);
}

/* ---- the dense layer --------------------------------------------------------- */

/* A GEMM inside a (void) zt_ops kernel: its error becomes the sticky one.
 * Returns the status (ZT_ERR_UNSUPPORTED, err untouched, only for a bias
 * cuBLASLt cannot fuse). */
static zt_status gemm_or_record(zt_stream *s, const zt_cuda_gemm_args *g) {
    zt_error e;
    zt_error_clear(&e);
    zt_status st = zt_cuda_gemm(s, g, &e);
    if (st != ZT_OK && !(st == ZT_ERR_UNSUPPORTED && g->bias))
        zt_cuda_record(zt_cuda_impl_of(s), e.code, e.file, e.line, "%s", e.msg);
    return st;
}

/* out[n, o] = bias[o]; the GEMM then adds with beta = 1 (as the CPU does).
 * Used when the bias cannot be fused into the GEMM's epilogue. In 16 bits
 * the GEMM adds the exact bias value to its fp32 result and rounds once. */
template <typename S> __global__ static void fill_bias_kernel(S *out, const S *bias, size_t N, int OC) {
    size_t total = N * (size_t)OC;
    for (size_t i = zt_gtid(); i < total; i += zt_gstride()) out[i] = bias[i % (size_t)OC];
}

/* dbias[o] += sum_n dout[n, o]. A block per tile of 32 columns: lane l of
 * warp w sums rows w, w + 32, w + 64, ... of column tile + l in order (a warp
 * reads 32 consecutive elements of a row: coalesced), then warp 0 adds the 32
 * partial sums of its column in warp order. A fixed launch shape and fixed
 * order: the same bits every run, no atomics. fp32 sums in every dtype. */
#define DBIAS_COLS 32
#define DBIAS_WARPS 32
template <typename S>
__global__ static void __launch_bounds__(DBIAS_COLS * DBIAS_WARPS)
    bias_grad_kernel(float *dbias, const S *dout, int N, int OC) {
    __shared__ float part[DBIAS_WARPS][DBIAS_COLS + 1];
    int lane = threadIdx.x % DBIAS_COLS, w = threadIdx.x / DBIAS_COLS;
    int o = blockIdx.x * DBIAS_COLS + lane;
    float sum = 0.0f;
    if (o < OC) {
#pragma unroll 4
        for (int n = w; n < N; n += DBIAS_WARPS) sum += zt_ld(dout[(size_t)n * OC + o]);
    }
    part[w][lane] = sum;
    __syncthreads();
    if (w == 0 && o < OC) {
        float total = part[0][lane];
        for (int i = 1; i < DBIAS_WARPS; i++) total += part[i][lane];
        dbias[o] += total;
    }
}

/* The compute type of a dense layer's GEMMs in storage type S: fp32 follows
 * matmul_bf16; 16-bit operands accumulate in fp32 (CUBLAS_COMPUTE_32F). */
template <typename S> static cublasComputeType_t matmul_compute(zt_stream *s) { return zt_cuda_matmul_compute(s); }
template <> cublasComputeType_t matmul_compute<zt_dev_bf16>(zt_stream *) { return CUBLAS_COMPUTE_32F; }
template <> cublasComputeType_t matmul_compute<zt_dev_fp16>(zt_stream *) { return CUBLAS_COMPUTE_32F; }

/* out[N,OC] = inp[N,C] @ w[OC,C]^T (+ bias[OC]), all of type S, fp32
 * accumulation, one rounding to S. */
template <typename S>
static void matmul_fwd(zt_stream *s, S *out, const S *inp, const S *w, const S *bias, int N, int C, int OC) {
    if (N <= 0 || OC <= 0) return;
    if (C <= 0 && !bias) { /* an empty sum */
        cudaStream_t st = zt_cuda_enter(s);
        ZT_CUDA_RT(s, cudaMemsetAsync(out, 0, (size_t)N * OC * sizeof(S), st));
        return;
    }
    const cudaDataType t = zt_cublas_type<S>::value;
    zt_cuda_gemm_args g =
        gemm_args(0, 1, N, OC, C, 1.0f, inp, t, C, w, t, C, 0.0f, out, t, OC, matmul_compute<S>(s));
    if (bias && C > 0 && ((uintptr_t)bias & 15u) == 0) {
        /* Fused: cuBLASLt adds bias[o] to the fp32 accumulator in its
         * epilogue and rounds once; the CPU adds the same two fp32 values
         * (its accumulator starts at the bias), so the results differ only
         * by the GEMM's summation order. */
        g.bias = bias;
        if (gemm_or_record(s, &g) != ZT_ERR_UNSUPPORTED) return;
        g.bias = NULL;
    }
    if (bias) {
        cudaStream_t st = zt_cuda_enter(s);
        void (*fill)(S *, const S *, size_t, int) = fill_bias_kernel<S>;
        fill<<<zt_ew_blocks((size_t)N * OC), ZT_EW_THREADS, 0, st>>>(out, bias, (size_t)N, OC);
        if (ZT_CUDA_LAUNCHED(s, "matmul_fwd (bias)")) return;
        g.beta = 1.0f;
    }
    if (C > 0) (void)gemm_or_record(s, &g);
}

/* dinp[N,C] (type S) = dout @ w (overwritten), rounded once; dw[OC,C]
 * (fp32) += dout^T @ inp; dbias[OC] (fp32) += column sums of dout. */
template <typename S>
static void matmul_bwd(zt_stream *s, S *dinp, float *dw, float *dbias, const S *dout, const S *inp, const S *w, int N,
                       int C, int OC) {
    if (N <= 0 || C <= 0 || OC <= 0) return;
    cublasComputeType_t compute = matmul_compute<S>(s);
    const cudaDataType t = zt_cublas_type<S>::value;
    if (dinp) { /* dinp[N,C] = dout[N,OC] @ w[OC,C] */
        zt_cuda_gemm_args g = gemm_args(0, 0, N, C, OC, 1.0f, dout, t, OC, w, t, C, 0.0f, dinp, t, C, compute);
        (void)gemm_or_record(s, &g);
    }
    { /* dw[OC,C] += dout[N,OC]^T @ inp[N,C] */
        zt_cuda_gemm_args g =
            gemm_args(1, 0, OC, C, N, 1.0f, dout, t, OC, inp, t, C, 1.0f, dw, CUDA_R_32F, C, compute);
        (void)gemm_or_record(s, &g);
    }
    if (dbias) {
        cudaStream_t st = zt_cuda_enter(s);
        unsigned int blocks = (unsigned int)((OC + DBIAS_COLS - 1) / DBIAS_COLS);
        void (*grad)(float *, const S *, int, int) = bias_grad_kernel<S>;
        grad<<<blocks, DBIAS_COLS * DBIAS_WARPS, 0, st>>>(dbias, dout, N, OC);
        ZT_CUDA_LAUNCHED(s, "matmul_bwd (dbias)");
    }
}

extern "C" void zt_cuda_matmul_fwd(zt_stream *s, zt_dtype dt, void *out, const void *inp, const void *w,
                                   const void *bias, int N, int C, int OC) {
    ZT_DISPATCH_DTYPE(dt, matmul_fwd<S>(s, (S *)out, (const S *)inp, (const S *)w, (const S *)bias, N, C, OC));
}

extern "C" void zt_cuda_matmul_bwd(zt_stream *s, zt_dtype dt, void *dinp, float *dw, float *dbias, const void *dout,
                                   const void *inp, const void *w, int N, int C, int OC) {
    ZT_DISPATCH_DTYPE(dt, matmul_bwd<S>(s, (S *)dinp, dw, dbias, (const S *)dout, (const S *)inp, (const S *)w, N, C,
                                        OC));
}
