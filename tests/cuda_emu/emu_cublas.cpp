/* CPU emulation of the part of cuBLAS and cuBLASLt that zerotrain uses
 * (test-only; production links the real libcublas / libcublasLt).
 *
 * The definitions below take the prototypes of the real headers, so linking
 * this file instead of the libraries makes runtime/cuda (and bench) run on the
 * host. "Device pointers" are host pointers. Every GEMM is enqueued on the
 * stream with zt_emu_enqueue (emu_device.h) and runs later, in stream order,
 * on the emulated device thread; the op captures everything by value, so the
 * caller may change or destroy handles and descriptors right after the call,
 * as it may with the real library.
 *
 * Scope, and why it is narrow. The emulator must never compute something the
 * GPU would not: anything outside the configurations listed here returns
 * CUBLAS_STATUS_NOT_SUPPORTED (or INVALID_VALUE where the real library
 * documents that), so an unexpected use fails loudly instead of silently
 * producing different numbers.
 *   Types (A, B -> C = D; alpha/beta and the scale type are fp32):
 *     CUBLAS_COMPUTE_32F           fp32, fp32 -> fp32
 *                                  bf16, bf16 -> bf16 or fp32
 *                                  fp16, fp16 -> fp16 or fp32
 *     CUBLAS_COMPUTE_32F_PEDANTIC  same as 32F (plain fp32 math is pedantic)
 *     CUBLAS_COMPUTE_32F_FAST_16BF fp32, fp32 -> fp32, A and B rounded to bf16
 *   op(A), op(B): N, T (and C, which is T for real types).
 *   cuBLASLt epilogues: DEFAULT and BIAS (bias of D's type, length rows(D),
 *   16-byte aligned; optional CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE).
 *   cuBLASLt layouts: column order, strided batches, no planar complex.
 *
 * Arithmetic. Each output element is one sequential fp32 sum over k in
 * increasing order, starting from +0 (separate multiply and add, no FMA), then
 * D = alpha * sum (+ beta * C) (+ bias), rounded once to D's type
 * (round-to-nearest-even for bf16 and fp16; fp16 overflows to infinity and
 * rounds to subnormals below 2^-14, as the GPU's cvt.rn.f16.f32). 16-bit
 * operands are converted to fp32 exactly before they are multiplied. The blocking and threading below only
 * decide which elements are computed when, never the order of a sum, so the
 * same inputs give the same bits whatever the thread count.
 *
 * BLAS conventions kept: beta == 0 means C is not read (it may hold NaN);
 * alpha == 0 or k == 0 means A and B are not read and D = beta * C (+ bias). */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "emu_device.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <new>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

/* ---- scalar conversions ---------------------------------------------------- */

float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

/* Round to nearest even, as the GPU's cvt.rn.bf16.f32; every NaN becomes the
 * canonical 0x7fff, as both the device instruction and cuda_bf16.h's host
 * path produce. Overflow rounds to infinity through the carry. */
uint16_t f32_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float round_to_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

/* IEEE binary16 (1 sign, 5 exponent bits of bias 15, 10 fraction bits) to
 * fp32: every value is exact in fp32. */
float fp16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const int exp = (h >> 10) & 0x1f;
    const uint32_t frac = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (frac << 13); /* inf, NaN (payload kept) */
    } else if (exp != 0) {
        u = sign | ((uint32_t)(exp - 15 + 127) << 23) | (frac << 13);
    } else {
        /* zero or subnormal, frac x 2^-24: an integer below 2^10 times a
         * power of two, so the product is exact */
        float v = std::ldexp((float)frac, -24);
        std::memcpy(&u, &v, sizeof u);
        u |= sign;
    }
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

/* fp32 to binary16, round to nearest even. Magnitudes from 65520 on (half
 * an ulp above the largest finite value, 65504) become infinity; below 2^-14
 * the result is subnormal, rounded from the full 24-bit significand once;
 * every NaN becomes the canonical 0x7fff. */
uint16_t f32_to_fp16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t mag = u & 0x7fffffffu;
    if (mag > 0x7f800000u) return 0x7fffu;
    const int e = (int)(mag >> 23) - 127;           /* unbiased exponent */
    const uint32_t sig = (mag & 0x7fffffu) | 0x800000u; /* with the hidden bit */
    if (e > 15) return (uint16_t)(sign | 0x7c00u);  /* inf, or far past 65504 */
    if (e < -25) return sign;                        /* below half the smallest subnormal */
    /* The result's unit is 2^-10 of the exponent's power of two for normals
     * and 2^-24 for subnormals: drop `shift` bits of sig, rounding to even. */
    const int shift = e >= -14 ? 13 : -1 - e; /* 13 .. 24 */
    uint32_t q = sig >> shift;
    const uint32_t rem = sig & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    /* Normals: q is 2^10 .. 2^11 (a carry to 2^11 moves to the next
     * exponent, which the addition below does by itself). */
    uint32_t h = e >= -14 ? ((uint32_t)(e + 14) << 10) + q : q;
    if (h >= 0x7c00u) return (uint16_t)(sign | 0x7c00u);
    return (uint16_t)(sign | h);
}

size_t elem_size(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

/* Element idx of a buffer of type t. memcpy, not a typed load: the caller's
 * pointers need not be aligned (tests offset them by one float, and nothing
 * stops a caller from passing worse), and a misaligned typed access would be
 * undefined behaviour rather than the GPU's clean fault. */
float load_elem(const unsigned char *base, cudaDataType t, int64_t idx) {
    if (t == CUDA_R_32F) {
        float v;
        std::memcpy(&v, base + idx * 4, 4);
        return v;
    }
    uint16_t h;
    std::memcpy(&h, base + idx * 2, 2);
    return t == CUDA_R_16F ? fp16_to_f32(h) : bf16_to_f32(h);
}

void store_elem(unsigned char *base, cudaDataType t, int64_t idx, float v) {
    if (t == CUDA_R_32F) {
        std::memcpy(base + idx * 4, &v, 4);
    } else {
        uint16_t h = t == CUDA_R_16F ? f32_to_fp16(v) : f32_to_bf16(v);
        std::memcpy(base + idx * 2, &h, 2);
    }
}

/* ---- the GEMM engine --------------------------------------------------------- */

/* One (strided-batched) column-major GEMM, everything by value: what an
 * enqueued op needs once the API call has returned. For batch b, matrix X
 * starts at X + b * stride_x elements.
 *   D[m,n] = alpha * op(A)[m,k] op(B)[k,n] + beta * C[m,n] (+ bias[m]) */
struct Gemm {
    int64_t m = 0, n = 0, k = 0, batch = 1;
    const void *a = nullptr;
    cudaDataType a_type = CUDA_R_32F;
    int64_t lda = 0, stride_a = 0;
    bool trans_a = false;
    const void *b = nullptr;
    cudaDataType b_type = CUDA_R_32F;
    int64_t ldb = 0, stride_b = 0;
    bool trans_b = false;
    const void *c = nullptr;
    cudaDataType c_type = CUDA_R_32F;
    int64_t ldc = 0, stride_c = 0;
    void *d = nullptr;
    cudaDataType d_type = CUDA_R_32F;
    int64_t ldd = 0, stride_d = 0;
    bool round_ab_to_bf16 = false; /* CUBLAS_COMPUTE_32F_FAST_16BF */
    /* Host pointer mode: the values, read at call time. Device pointer
     * mode: the pointers, read when the op runs (as the GPU would). */
    bool scalars_on_device = false;
    float alpha = 1.0f, beta = 0.0f;
    const float *alpha_ptr = nullptr, *beta_ptr = nullptr;
    const void *bias = nullptr; /* CUBLASLT_EPILOGUE_BIAS, of type d_type */
    int64_t bias_stride = 0;
};

/* Threads for one GEMM: ZT_EMU_BLAS_THREADS, else the hardware's (at most 8).
 * Only speed depends on it, never the result. */
int blas_threads() {
    static const int n = [] {
        const char *e = std::getenv("ZT_EMU_BLAS_THREADS");
        if (e && *e) {
            int v = std::atoi(e);
            return v < 1 ? 1 : (v > 64 ? 64 : v);
        }
        unsigned hc = std::thread::hardware_concurrency();
        return hc == 0 ? 1 : (int)std::min(hc, 8u);
    }();
    return n;
}

/* dst[r + c * dst_ld] = op(src)[r, c] for r < rows, c < cols, where op(src)
 * is src (column-major, src_ld) or its transpose; converted to float and, for
 * FAST_16BF, rounded to bf16 first. Transposed copies go in square tiles so
 * neither side is walked with a large stride for long. */
void pack(float *dst, int64_t dst_ld, int64_t rows, int64_t cols, const unsigned char *src, cudaDataType t,
          int64_t src_ld, bool trans, bool round) {
    auto get = [&](int64_t idx) {
        float v = load_elem(src, t, idx);
        return round ? round_to_bf16(v) : v;
    };
    if (!trans) {
        for (int64_t c = 0; c < cols; c++)
            for (int64_t r = 0; r < rows; r++) dst[r + c * dst_ld] = get(r + c * src_ld);
        return;
    }
    const int64_t T = 32;
    for (int64_t r0 = 0; r0 < rows; r0 += T)
        for (int64_t c0 = 0; c0 < cols; c0 += T) {
            int64_t r1 = std::min(rows, r0 + T), c1 = std::min(cols, c0 + T);
            for (int64_t r = r0; r < r1; r++)
                for (int64_t c = c0; c < c1; c++) dst[r + c * dst_ld] = get(c + r * src_ld);
        }
}

/* Four floats as one SIMD value (GCC/Clang vector extension). Arithmetic on
 * it is lane-wise IEEE fp32, exactly the scalar operations, just four rows at
 * a time; spelled out because -O2's cost model will not vectorize a loop of
 * unknown trip count. memcpy loads and stores: no alignment assumed. */
typedef float v4f __attribute__((vector_size(16)));

inline v4f load4(const float *p) {
    v4f v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

inline void store4(float *p, v4f v) { std::memcpy(p, &v, sizeof v); }

/* The inner kernel: four consecutive k steps (a0..a3 are columns of op(A),
 * bv[4 t + s] the matching op(B) values of output column t) into four output
 * columns c0..c3, over len rows (a multiple of 4). The parentheses keep each
 * element's sum strictly sequential in k. */
void madd_4x4(int64_t len, const float *a0, const float *a1, const float *a2, const float *a3, const float *bv,
              float *c0, float *c1, float *c2, float *c3) {
    const float b00 = bv[0], b01 = bv[1], b02 = bv[2], b03 = bv[3];
    const float b10 = bv[4], b11 = bv[5], b12 = bv[6], b13 = bv[7];
    const float b20 = bv[8], b21 = bv[9], b22 = bv[10], b23 = bv[11];
    const float b30 = bv[12], b31 = bv[13], b32 = bv[14], b33 = bv[15];
    for (int64_t i = 0; i < len; i += 4) {
        const v4f x0 = load4(a0 + i), x1 = load4(a1 + i), x2 = load4(a2 + i), x3 = load4(a3 + i);
        store4(c0 + i, (((load4(c0 + i) + x0 * b00) + x1 * b01) + x2 * b02) + x3 * b03);
        store4(c1 + i, (((load4(c1 + i) + x0 * b10) + x1 * b11) + x2 * b12) + x3 * b13);
        store4(c2 + i, (((load4(c2 + i) + x0 * b20) + x1 * b21) + x2 * b22) + x3 * b23);
        store4(c3 + i, (((load4(c3 + i) + x0 * b30) + x1 * b31) + x2 * b32) + x3 * b33);
    }
}

/* acc[mp, np] (+)= ap[mp, kp] bp[kp, np], column-major, all three dimensions
 * multiples of 4: the packed operands are zero-padded, and a padded step adds
 * 0 * 0 = +0, which changes no sum (a sum that starts at +0 is never -0);
 * padded rows and columns of acc are ignored.
 * Cache blocking: a KB-deep, IB-tall block of op(A) (128 KiB) stays in L2
 * while every column group streams past it; blocks over k are visited in
 * increasing order, so each element's sum is still sequential in k. Threads
 * take disjoint ranges of column groups. */
void multiply(const float *ap, const float *bp, float *acc, int64_t mp, int64_t np, int64_t kp) {
    const int64_t IB = 256, KB = 128;
    const int64_t groups = np / 4;
    auto work = [=](int64_t g0, int64_t g1) {
        for (int64_t p0 = 0; p0 < kp; p0 += KB) {
            const int64_t p1 = std::min(kp, p0 + KB);
            for (int64_t i0 = 0; i0 < mp; i0 += IB) {
                const int64_t len = std::min(mp, i0 + IB) - i0;
                for (int64_t g = g0; g < g1; g++) {
                    const int64_t j = 4 * g;
                    float *c0 = acc + j * mp + i0;
                    for (int64_t p = p0; p < p1; p += 4) {
                        float bv[16];
                        for (int t = 0; t < 4; t++)
                            for (int s = 0; s < 4; s++) bv[4 * t + s] = bp[(j + t) * kp + p + s];
                        const float *a0 = ap + p * mp + i0;
                        madd_4x4(len, a0, a0 + mp, a0 + 2 * mp, a0 + 3 * mp, bv, c0, c0 + mp, c0 + 2 * mp,
                                 c0 + 3 * mp);
                    }
                }
            }
        }
    };
    /* Threads only pay off on GEMMs of a few million multiply-adds. */
    const int64_t nt =
        (double)mp * (double)np * (double)kp >= 4.0e6 ? std::min<int64_t>(blas_threads(), groups) : 1;
    std::vector<std::thread> pool;
    for (int64_t t = 1; t < nt; t++) {
        const int64_t g0 = groups * t / nt, g1 = groups * (t + 1) / nt;
        try {
            pool.emplace_back(work, g0, g1);
        } catch (const std::system_error &) {
            work(g0, g1); /* no thread to be had: same result, just later */
        }
    }
    work(0, groups / std::max<int64_t>(nt, 1));
    for (auto &th : pool) th.join();
}

/* Runs g; called from the enqueued op. */
void run_gemm(const Gemm &g) {
    const float alpha = g.scalars_on_device ? *g.alpha_ptr : g.alpha;
    const float beta = g.scalars_on_device ? *g.beta_ptr : g.beta;
    if (g.m <= 0 || g.n <= 0 || g.batch <= 0) return;
    const bool product = alpha != 0.0f && g.k > 0;
    const int64_t mp = (g.m + 3) / 4 * 4, np = (g.n + 3) / 4 * 4, kp = (g.k + 3) / 4 * 4;
    std::vector<float> ap, bp, acc;
    for (int64_t bi = 0; bi < g.batch; bi++) {
        auto at = [bi](const void *p, int64_t stride, cudaDataType t) {
            return (const unsigned char *)p + bi * stride * (int64_t)elem_size(t);
        };
        if (product) {
            ap.assign((size_t)(mp * kp), 0.0f);
            bp.assign((size_t)(kp * np), 0.0f);
            acc.assign((size_t)(mp * np), 0.0f);
            pack(ap.data(), mp, g.m, g.k, at(g.a, g.stride_a, g.a_type), g.a_type, g.lda, g.trans_a,
                 g.round_ab_to_bf16);
            pack(bp.data(), kp, g.k, g.n, at(g.b, g.stride_b, g.b_type), g.b_type, g.ldb, g.trans_b,
                 g.round_ab_to_bf16);
            multiply(ap.data(), bp.data(), acc.data(), mp, np, kp);
        }
        const unsigned char *c = beta != 0.0f ? at(g.c, g.stride_c, g.c_type) : nullptr;
        const unsigned char *bias = g.bias ? at(g.bias, g.bias_stride, g.d_type) : nullptr;
        unsigned char *d = const_cast<unsigned char *>(at(g.d, g.stride_d, g.d_type));
        for (int64_t j = 0; j < g.n; j++)
            for (int64_t i = 0; i < g.m; i++) {
                float v = product ? alpha * acc[(size_t)(i + j * mp)] : 0.0f;
                if (c) {
                    float cv = beta * load_elem(c, g.c_type, i + j * g.ldc);
                    v = product ? v + cv : cv;
                }
                if (bias) v += load_elem(bias, g.d_type, i);
                store_elem(d, g.d_type, i + j * g.ldd, v);
            }
    }
}

/* Which (A/B type, C/D type, compute type) combinations are emulated; the
 * real table is much larger, everything else is NOT_SUPPORTED. */
bool types_supported(cudaDataType ab, cudaDataType cd, cublasComputeType_t compute, bool *round_ab) {
    *round_ab = false;
    switch (compute) {
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
        return (ab == CUDA_R_32F && cd == CUDA_R_32F) ||
               (ab == CUDA_R_16BF && (cd == CUDA_R_16BF || cd == CUDA_R_32F)) ||
               (ab == CUDA_R_16F && (cd == CUDA_R_16F || cd == CUDA_R_32F));
    case CUBLAS_COMPUTE_32F_FAST_16BF:
        *round_ab = true;
        return ab == CUDA_R_32F && cd == CUDA_R_32F;
    default: return false;
    }
}

/* cublasOperation_t for real data: C (conjugate transpose) is T. */
bool parse_op(int op, bool *trans) {
    if (op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C) {
        *trans = op != CUBLAS_OP_N;
        return true;
    }
    return false;
}

/* Alignment in bytes (capped at 256) that every batch's pointer p + i * stride
 * elements has. */
uint64_t alignment_of(const void *p, int64_t stride, size_t elem, int64_t batch) {
    uint64_t a = (uint64_t)(uintptr_t)p | 256u;
    if (batch > 1) a |= (uint64_t)stride * elem;
    return a & (~a + 1);
}

/* ---- handles ----------------------------------------------------------------- */

const uint32_t kHandleMagic = 0x7a74cb01u, kLtHandleMagic = 0x7a74cb02u;

} // namespace

struct cublasContext {
    uint32_t magic;
    cudaStream_t stream;
    cublasPointerMode_t pointer_mode;
    cublasMath_t math_mode;
    cublasAtomicsMode_t atomics_mode;
    void *workspace; /* user workspace (cublasSetWorkspace); null: the library's own pool */
    size_t workspace_bytes;
};

struct cublasLtContext {
    uint32_t magic;
};

namespace {

bool handle_ok(const cublasContext *h) { return h && h->magic == kHandleMagic; }
bool lt_handle_ok(const cublasLtContext *h) { return h && h->magic == kLtHandleMagic; }

/* The cublasGet* of one handle setting. */
template <class T> cublasStatus_t get_setting(const cublasContext *h, T cublasContext::*field, T *out) {
    if (!handle_ok(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!out) return CUBLAS_STATUS_INVALID_VALUE;
    *out = h->*field;
    return CUBLAS_STATUS_SUCCESS;
}

const char *status_name(cublasStatus_t st) {
    switch (st) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

const char *status_string(cublasStatus_t st) {
    switch (st) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "error detected trying to check the license";
    }
    return "unknown cuBLAS status";
}

/* The cuBLAS GEMMs (cublasGemmEx is the batch = 1 case). Checks in the order
 * of the cuBLAS documentation: handle, then argument values (INVALID_VALUE),
 * then what the implementation can do (NOT_SUPPORTED). */
cublasStatus_t gemm_ex(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int64_t m,
                       int64_t n, int64_t k, const void *alpha, const void *A, cudaDataType Atype, int64_t lda,
                       long long strideA, const void *B, cudaDataType Btype, int64_t ldb, long long strideB,
                       const void *beta, void *C, cudaDataType Ctype, int64_t ldc, long long strideC,
                       int64_t batch, cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    if (!handle_ok(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    Gemm g;
    if (!parse_op(transa, &g.trans_a) || !parse_op(transb, &g.trans_b)) return CUBLAS_STATUS_INVALID_VALUE;
    if (m < 0 || n < 0 || k < 0 || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (lda < std::max<int64_t>(1, g.trans_a ? k : m) || ldb < std::max<int64_t>(1, g.trans_b ? n : k) ||
        ldc < std::max<int64_t>(1, m))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    /* cublasGemmAlgo_t: any defined value (all are hints on current GPUs). */
    int al = (int)algo;
    if (!((al >= CUBLAS_GEMM_DEFAULT && al <= CUBLAS_GEMM_ALGO23) ||
          (al >= CUBLAS_GEMM_DEFAULT_TENSOR_OP && al <= CUBLAS_GEMM_ALGO15_TENSOR_OP) || al == CUBLAS_GEMM_AUTOTUNE))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (Atype != Btype || !types_supported(Atype, Ctype, compute, &g.round_ab_to_bf16))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    /* Math modes that would let fp32 math run as TF32 or emulated
     * (TF32_TENSOR_OP, the deprecated TENSOR_OP, FP32_EMULATED_BF16X9) are
     * not emulated; DEFAULT, PEDANTIC and the fp64-only mode are plain fp32
     * here. The DISALLOW_REDUCED_PRECISION_REDUCTION flag changes nothing:
     * the emulator always reduces in fp32. */
    int mm = (int)handle->math_mode & ~(int)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    if (mm != CUBLAS_DEFAULT_MATH && mm != CUBLAS_PEDANTIC_MATH && mm != CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
    /* The GPU would fault on these; say so instead of crashing the host. */
    if (!C || (k > 0 && (!A || !B))) return CUBLAS_STATUS_INVALID_VALUE;

    g.m = m, g.n = n, g.k = k, g.batch = batch;
    g.a = A, g.a_type = Atype, g.lda = lda, g.stride_a = strideA;
    g.b = B, g.b_type = Btype, g.ldb = ldb, g.stride_b = strideB;
    g.c = C, g.c_type = Ctype, g.ldc = ldc, g.stride_c = strideC;
    g.d = C, g.d_type = Ctype, g.ldd = ldc, g.stride_d = strideC;
    if (handle->pointer_mode == CUBLAS_POINTER_MODE_DEVICE) {
        g.scalars_on_device = true;
        g.alpha_ptr = (const float *)alpha;
        g.beta_ptr = (const float *)beta;
    } else {
        std::memcpy(&g.alpha, alpha, sizeof(float));
        std::memcpy(&g.beta, beta, sizeof(float));
    }
    zt_emu_enqueue(handle->stream, [g] { run_gemm(g); });
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- cuBLASLt descriptors -------------------------------------------------------
 * The real descriptor types are fixed-size structs of uint64_t (user code may
 * place them on the stack through the *Init helpers), so the emulator keeps
 * its own plain structs inside that storage, copied in and out with memcpy.
 * A magic word catches descriptors that were never initialized. Each field
 * has the C type the header documents for its attribute, so sizeof(field) is
 * exactly the sizeInBytes the real library insists on. */

struct LayoutData {
    static const uint32_t kMagic = 0x7a74ab01u;
    uint32_t magic;
    uint32_t type;        /* CUBLASLT_MATRIX_LAYOUT_TYPE: uint32_t */
    int32_t order;        /* ORDER: int32_t */
    int32_t batch_count;  /* BATCH_COUNT: int32_t */
    uint64_t rows, cols;  /* ROWS, COLS: uint64_t */
    int64_t ld;           /* LD: int64_t */
    int64_t batch_stride; /* STRIDED_BATCH_OFFSET: int64_t */
    int64_t plane_offset; /* PLANE_OFFSET: int64_t */
    uint32_t batch_mode;  /* BATCH_MODE: uint32_t */
};

struct DescData {
    static const uint32_t kMagic = 0x7a74ab02u;
    uint32_t magic;
    int32_t compute_type, scale_type, pointer_mode, transa, transb, transc, fill_mode; /* int32_t */
    uint32_t epilogue;                                                                 /* uint32_t */
    int32_t sm_count_target, aux_data_type, bias_data_type;                            /* int32_t */
    int32_t a_scale_mode, b_scale_mode, c_scale_mode, d_scale_mode, aux_scale_mode, d_out_scale_mode;
    int8_t fast_accum; /* int8_t */
    int64_t bias_batch_stride, aux_ld, aux_batch_stride, alpha_vector_batch_stride; /* int64_t */
    const void *bias, *aux, *a_scale, *b_scale, *c_scale, *d_scale, *amax_d, *aux_scale, *aux_amax, *d_out_scale;
    cublasLtEmulationDesc_t emulation;
};

struct PrefData {
    static const uint32_t kMagic = 0x7a74ab03u;
    uint32_t magic;
    uint32_t search_mode;                   /* SEARCH_MODE: uint32_t */
    uint32_t reduction_mask;                /* REDUCTION_SCHEME_MASK: uint32_t */
    uint32_t align_a, align_b, align_c, align_d; /* MIN_ALIGNMENT_*_BYTES: uint32_t */
    float max_waves;                        /* MAX_WAVES_COUNT: float */
    uint64_t max_workspace;                 /* MAX_WORKSPACE_BYTES: uint64_t */
    uint64_t impl_mask;                     /* IMPL_MASK: uint64_t */
};

static_assert(sizeof(LayoutData) <= sizeof(cublasLtMatrixLayoutOpaque_t), "layout storage");
static_assert(sizeof(DescData) <= sizeof(cublasLtMatmulDescOpaque_t), "matmul desc storage");
static_assert(sizeof(PrefData) <= sizeof(cublasLtMatmulPreferenceOpaque_t), "preference storage");
static_assert(std::is_trivially_copyable<LayoutData>::value && std::is_trivially_copyable<DescData>::value &&
                  std::is_trivially_copyable<PrefData>::value,
              "descriptor data is copied with memcpy");

template <class Data, class Opaque> bool load(const Opaque *o, Data *d) {
    if (!o) return false;
    std::memcpy(d, o, sizeof *d);
    return d->magic == Data::kMagic;
}

template <class Data, class Opaque> void store(Opaque *o, const Data &d) { std::memcpy(o, &d, sizeof d); }

/* The Init / Create / Destroy trio every descriptor kind has. */
template <class Data, class Opaque> cublasStatus_t init_opaque(Opaque *o, size_t size, const Data &d) {
    if (!o) return CUBLAS_STATUS_INVALID_VALUE;
    if (size < sizeof(Data)) return CUBLAS_STATUS_ALLOC_FAILED;
    store(o, d);
    return CUBLAS_STATUS_SUCCESS;
}
template <class Data, class Opaque> cublasStatus_t create_opaque(Opaque **out, const Data &d) {
    if (!out) return CUBLAS_STATUS_INVALID_VALUE;
    Opaque *o = new (std::nothrow) Opaque();
    if (!o) return CUBLAS_STATUS_ALLOC_FAILED;
    store(o, d);
    *out = o;
    return CUBLAS_STATUS_SUCCESS;
}
template <class Opaque> cublasStatus_t destroy_opaque(Opaque *o) {
    if (o) {
        std::memset(o, 0, sizeof *o); /* a stale use then fails the magic check */
        delete o;
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* Address and size of the field behind an attribute; nullptr for attributes
 * the header does not define. */
void *layout_field(LayoutData &l, int attr, size_t *size) {
#define ZT_F(a, f)           \
    case a:                  \
        *size = sizeof l.f; \
        return &l.f;
    switch (attr) {
        ZT_F(CUBLASLT_MATRIX_LAYOUT_TYPE, type)
        ZT_F(CUBLASLT_MATRIX_LAYOUT_ORDER, order)
        ZT_F(CUBLASLT_MATRIX_LAYOUT_ROWS, rows)
        ZT_F(CUBLASLT_MATRIX_LAYOUT_COLS, cols)
        ZT_F(CUBLASLT_MATRIX_LAYOUT_LD, ld)
        ZT_F(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, batch_count)
        ZT_F(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, batch_stride)
        ZT_F(CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET, plane_offset)
        ZT_F(CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, batch_mode)
    default: return nullptr;
    }
#undef ZT_F
}

void *desc_field(DescData &m, int attr, size_t *size) {
#define ZT_F(a, f)           \
    case a:                  \
        *size = sizeof m.f; \
        return &m.f;
    switch (attr) {
        ZT_F(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, compute_type)
        ZT_F(CUBLASLT_MATMUL_DESC_SCALE_TYPE, scale_type)
        ZT_F(CUBLASLT_MATMUL_DESC_POINTER_MODE, pointer_mode)
        ZT_F(CUBLASLT_MATMUL_DESC_TRANSA, transa)
        ZT_F(CUBLASLT_MATMUL_DESC_TRANSB, transb)
        ZT_F(CUBLASLT_MATMUL_DESC_TRANSC, transc)
        ZT_F(CUBLASLT_MATMUL_DESC_FILL_MODE, fill_mode)
        ZT_F(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue)
        ZT_F(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias)
        ZT_F(CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, bias_batch_stride)
        ZT_F(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux)
        ZT_F(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld)
        ZT_F(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, aux_batch_stride)
        ZT_F(CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE, alpha_vector_batch_stride)
        ZT_F(CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, sm_count_target)
        ZT_F(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, a_scale)
        ZT_F(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scale)
        ZT_F(CUBLASLT_MATMUL_DESC_C_SCALE_POINTER, c_scale)
        ZT_F(CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, d_scale)
        ZT_F(CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, amax_d)
        ZT_F(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, aux_data_type)
        ZT_F(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER, aux_scale)
        ZT_F(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER, aux_amax)
        ZT_F(CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast_accum)
        ZT_F(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_data_type)
        ZT_F(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, a_scale_mode)
        ZT_F(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, b_scale_mode)
        ZT_F(CUBLASLT_MATMUL_DESC_C_SCALE_MODE, c_scale_mode)
        ZT_F(CUBLASLT_MATMUL_DESC_D_SCALE_MODE, d_scale_mode)
        ZT_F(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_MODE, aux_scale_mode)
        ZT_F(CUBLASLT_MATMUL_DESC_D_OUT_SCALE_POINTER, d_out_scale)
        ZT_F(CUBLASLT_MATMUL_DESC_D_OUT_SCALE_MODE, d_out_scale_mode)
        ZT_F(CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR, emulation)
    default: return nullptr;
    }
#undef ZT_F
}

void *pref_field(PrefData &p, int attr, size_t *size) {
#define ZT_F(a, f)           \
    case a:                  \
        *size = sizeof p.f; \
        return &p.f;
    switch (attr) {
        ZT_F(CUBLASLT_MATMUL_PREF_SEARCH_MODE, search_mode)
        ZT_F(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, max_workspace)
        ZT_F(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, reduction_mask)
        ZT_F(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a)
        ZT_F(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b)
        ZT_F(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c)
        ZT_F(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d)
        ZT_F(CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT, max_waves)
        ZT_F(CUBLASLT_MATMUL_PREF_IMPL_MASK, impl_mask)
    default: return nullptr;
    }
#undef ZT_F
}

/* The shared Set/GetAttribute logic: sizeInBytes must equal the attribute's
 * storage size exactly (the real library's rule, and the check that catches
 * a caller passing an int64 where an int32 is documented, or the reverse). */
template <class Data, class Opaque, class FieldFn>
cublasStatus_t set_attr(Opaque *o, int attr, const void *buf, size_t size, FieldFn field) {
    Data d;
    if (!load(o, &d) || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    size_t want = 0;
    void *f = field(d, attr, &want);
    if (!f || size != want) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(f, buf, want);
    store(o, d);
    return CUBLAS_STATUS_SUCCESS;
}

template <class Data, class Opaque, class FieldFn>
cublasStatus_t get_attr(const Opaque *o, int attr, void *buf, size_t size, size_t *written, FieldFn field) {
    Data d;
    if (!load(o, &d)) return CUBLAS_STATUS_INVALID_VALUE;
    size_t want = 0;
    void *f = field(d, attr, &want);
    if (!f) return CUBLAS_STATUS_INVALID_VALUE;
    if (size == 0) { /* a size query */
        if (!written) return CUBLAS_STATUS_INVALID_VALUE;
        *written = want;
        return CUBLAS_STATUS_SUCCESS;
    }
    if (!buf || size != want) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(buf, f, want);
    if (written) *written = want;
    return CUBLAS_STATUS_SUCCESS;
}

LayoutData layout_defaults(cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld) {
    LayoutData l;
    std::memset(&l, 0, sizeof l);
    l.magic = LayoutData::kMagic;
    l.type = (uint32_t)type;
    l.order = CUBLASLT_ORDER_COL;
    l.batch_count = 1;
    l.rows = rows;
    l.cols = cols;
    l.ld = ld;
    l.batch_mode = CUBLASLT_BATCH_MODE_STRIDED;
    return l;
}

DescData desc_defaults(cublasComputeType_t compute, cudaDataType_t scale) {
    DescData m;
    std::memset(&m, 0, sizeof m);
    m.magic = DescData::kMagic;
    m.compute_type = (int32_t)compute;
    m.scale_type = (int32_t)scale;
    m.pointer_mode = CUBLASLT_POINTER_MODE_HOST;
    m.transa = m.transb = m.transc = CUBLAS_OP_N;
    m.fill_mode = CUBLAS_FILL_MODE_FULL;
    m.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    m.aux_data_type = -1;
    m.bias_data_type = -1;
    return m;
}

PrefData pref_defaults() {
    PrefData p;
    std::memset(&p, 0, sizeof p);
    p.magic = PrefData::kMagic;
    p.search_mode = CUBLASLT_SEARCH_BEST_FIT;
    p.reduction_mask = CUBLASLT_REDUCTION_SCHEME_MASK;
    p.align_a = p.align_b = p.align_c = p.align_d = 256;
    p.max_workspace = 0;
    p.impl_mask = ~(uint64_t)0;
    return p;
}

/* The emulator's one algorithm, as cublasLtMatmulAlgoGetHeuristic returns it:
 * data[0] identifies it, data[1..4] keep the minimum A/B/C/D alignments the
 * heuristic was promised, which cublasLtMatmul then holds the pointers to. */
const uint64_t kAlgoMagic = 0x7a74a160a160a160ull;

/* Everything about an Lt matmul that the descriptors decide, checked: g gets
 * the shape, types, transposes, batches and the epilogue (pointers and
 * scalars are the caller's). Shared by the heuristic and cublasLtMatmul, so
 * the heuristic offers an algorithm exactly when the matmul would run. */
cublasStatus_t lt_problem(cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t Ad, cublasLtMatrixLayout_t Bd,
                          cublasLtMatrixLayout_t Cd, cublasLtMatrixLayout_t Dd, Gemm *g, DescData *md_out) {
    DescData md;
    LayoutData la, lb, lc, ld;
    if (!load(op, &md) || !load(Ad, &la) || !load(Bd, &lb) || !load(Cd, &lc) || !load(Dd, &ld))
        return CUBLAS_STATUS_INVALID_VALUE;
    *md_out = md;

    /* Operation */
    if (!parse_op(md.transa, &g->trans_a) || !parse_op(md.transb, &g->trans_b)) return CUBLAS_STATUS_INVALID_VALUE;
    if (md.transc != CUBLAS_OP_N) return CUBLAS_STATUS_NOT_SUPPORTED; /* "currently only CUBLAS_OP_N" */
    if (md.fill_mode != CUBLAS_FILL_MODE_FULL) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (md.scale_type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (md.pointer_mode != CUBLASLT_POINTER_MODE_HOST && md.pointer_mode != CUBLASLT_POINTER_MODE_DEVICE)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    /* Scaling factors and amax outputs exist for fp8 (and block-scaled)
     * types only; the header says setting them for other types makes
     * cublasLtMatmul return INVALID_VALUE. */
    if (md.a_scale || md.b_scale || md.c_scale || md.d_scale || md.amax_d || md.aux_scale || md.aux_amax ||
        md.d_out_scale)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (md.a_scale_mode || md.b_scale_mode || md.c_scale_mode || md.d_scale_mode || md.aux_scale_mode ||
        md.d_out_scale_mode)
        return CUBLAS_STATUS_NOT_SUPPORTED;

    /* Layouts */
    for (const LayoutData *l : {&la, &lb, &lc, &ld}) {
        if (l->type != CUDA_R_32F && l->type != CUDA_R_16BF && l->type != CUDA_R_16F)
            return CUBLAS_STATUS_NOT_SUPPORTED;
        if (l->order != CUBLASLT_ORDER_COL || l->batch_mode != CUBLASLT_BATCH_MODE_STRIDED || l->plane_offset != 0)
            return CUBLAS_STATUS_NOT_SUPPORTED;
        if (l->ld < 1 || (uint64_t)l->ld < l->rows || l->batch_count < 1) return CUBLAS_STATUS_INVALID_VALUE;
    }
    /* op(A) is m x k, op(B) k x n, C and D m x n. */
    uint64_t m = g->trans_a ? la.cols : la.rows, k = g->trans_a ? la.rows : la.cols;
    uint64_t kb = g->trans_b ? lb.cols : lb.rows, n = g->trans_b ? lb.rows : lb.cols;
    if (k != kb || ld.rows != m || ld.cols != n || lc.rows != m || lc.cols != n) return CUBLAS_STATUS_INVALID_VALUE;
    if (la.batch_count != ld.batch_count || lb.batch_count != ld.batch_count || lc.batch_count != ld.batch_count)
        return CUBLAS_STATUS_INVALID_VALUE;

    /* Types */
    if (la.type != lb.type || lc.type != ld.type ||
        !types_supported((cudaDataType)la.type, (cudaDataType)ld.type, (cublasComputeType_t)md.compute_type,
                         &g->round_ab_to_bf16))
        return CUBLAS_STATUS_NOT_SUPPORTED;

    /* Epilogue */
    if (md.epilogue == CUBLASLT_EPILOGUE_BIAS) {
        /* Default (-1): the bias has D's type. Other bias types are only
         * documented for fp8/int8 kernels. */
        if (md.bias_data_type != -1 && md.bias_data_type != (int32_t)ld.type) return CUBLAS_STATUS_NOT_SUPPORTED;
    } else if (md.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }

    g->m = (int64_t)m, g->n = (int64_t)n, g->k = (int64_t)k, g->batch = ld.batch_count;
    g->a_type = (cudaDataType)la.type, g->lda = la.ld, g->stride_a = la.batch_stride;
    g->b_type = (cudaDataType)lb.type, g->ldb = lb.ld, g->stride_b = lb.batch_stride;
    g->c_type = (cudaDataType)lc.type, g->ldc = lc.ld, g->stride_c = lc.batch_stride;
    g->d_type = (cudaDataType)ld.type, g->ldd = ld.ld, g->stride_d = ld.batch_stride;
    g->bias_stride = md.bias_batch_stride;
    return CUBLAS_STATUS_SUCCESS;
}

/* Fused bias epilogues load the bias with 16-byte vector accesses: a bias
 * that is not 16-byte aligned (per batch, with a batch stride) faults on real
 * GPUs ("misaligned address"), although the documentation does not state the
 * requirement. The emulator refuses it with NOT_SUPPORTED instead. */
bool bias_aligned(const void *bias, int64_t stride, cudaDataType t, int64_t batch) {
    return alignment_of(bias, stride, elem_size(t), batch) >= 16;
}

} // namespace

extern "C" {

/* ---- cuBLAS: status and handle ------------------------------------------------ */

const char *CUBLASWINAPI cublasGetStatusName(cublasStatus_t status) { return status_name(status); }
const char *CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) { return status_string(status); }

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t *handle) {
    if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
    cublasContext *h = new (std::nothrow) cublasContext;
    if (!h) return CUBLAS_STATUS_ALLOC_FAILED;
    /* The documented defaults. */
    h->magic = kHandleMagic;
    h->stream = nullptr;
    h->pointer_mode = CUBLAS_POINTER_MODE_HOST;
    h->math_mode = CUBLAS_DEFAULT_MATH;
    h->atomics_mode = CUBLAS_ATOMICS_NOT_ALLOWED;
    h->workspace = nullptr;
    h->workspace_bytes = 0;
    *handle = h;
    return CUBLAS_STATUS_SUCCESS;
}

/* Enqueued GEMMs hold copies, never the handle, so destroying it while they
 * are pending is safe (the real library synchronizes instead). */
cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) {
    if (!handle_ok(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->magic = 0;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

/* As documented: setting the stream also resets the workspace to the
 * library's default pool. */
cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId) {
    if (!handle_ok(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->stream = streamId;
    handle->workspace = nullptr;
    handle->workspace_bytes = 0;
    return CUBLAS_STATUS_SUCCESS;
}

/* A user workspace must be device memory aligned to 256 bytes. The emulated
 * GEMMs need none; the setting is only checked and kept. */
cublasStatus_t CUBLASWINAPI cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace, size_t workspaceSizeInBytes) {
    if (!handle_ok(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (workspaceSizeInBytes &&
        (!workspace || ((uintptr_t)workspace & 255u) || !zt_emu_is_device_range(workspace, workspaceSizeInBytes)))
        return CUBLAS_STATUS_INVALID_VALUE;
    handle->workspace = workspace;
    handle->workspace_bytes = workspaceSizeInBytes;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasGetStream_v2(cublasHandle_t handle, cudaStream_t *streamId) {
    return get_setting(handle, &cublasContext::stream, streamId);
}

cublasStatus_t CUBLASWINAPI cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode) {
    if (!handle_ok(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE) return CUBLAS_STATUS_INVALID_VALUE;
    handle->pointer_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasGetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t *mode) {
    return get_setting(handle, &cublasContext::pointer_mode, mode);
}

/* Any defined mode is accepted here; the GEMMs refuse the ones whose fp32
 * arithmetic they do not emulate (TF32, BF16x9). */
cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
    if (!handle_ok(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    int base = (int)mode & ~(int)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    switch (base) {
    case CUBLAS_DEFAULT_MATH:
    case CUBLAS_TENSOR_OP_MATH:
    case CUBLAS_PEDANTIC_MATH:
    case CUBLAS_TF32_TENSOR_OP_MATH:
    case CUBLAS_FP32_EMULATED_BF16X9_MATH:
    case CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH: break;
    default: return CUBLAS_STATUS_INVALID_VALUE;
    }
    handle->math_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode) {
    return get_setting(handle, &cublasContext::math_mode, mode);
}

/* The emulator never uses atomics, so both modes give the same (always
 * reproducible) results; the mode is only validated and remembered. */
cublasStatus_t CUBLASWINAPI cublasSetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t mode) {
    if (!handle_ok(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode != CUBLAS_ATOMICS_NOT_ALLOWED && mode != CUBLAS_ATOMICS_ALLOWED) return CUBLAS_STATUS_INVALID_VALUE;
    handle->atomics_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasGetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t *mode) {
    return get_setting(handle, &cublasContext::atomics_mode, mode);
}

/* ---- cuBLAS: GEMMs ---------------------------------------------------------------- */

cublasStatus_t CUBLASWINAPI cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const void *alpha, const void *A, cudaDataType Atype,
                                         int lda, const void *B, cudaDataType Btype, int ldb, const void *beta,
                                         void *C, cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                                         cublasGemmAlgo_t algo) {
    return gemm_ex(handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0, beta, C, Ctype, ldc,
                   0, 1, computeType, algo);
}

cublasStatus_t CUBLASWINAPI cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                                       cublasOperation_t transb, int m, int n, int k,
                                                       const void *alpha, const void *A, cudaDataType Atype, int lda,
                                                       long long int strideA, const void *B, cudaDataType Btype,
                                                       int ldb, long long int strideB, const void *beta, void *C,
                                                       cudaDataType Ctype, int ldc, long long int strideC,
                                                       int batchCount, cublasComputeType_t computeType,
                                                       cublasGemmAlgo_t algo) {
    return gemm_ex(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB, beta, C,
                   Ctype, ldc, strideC, batchCount, computeType, algo);
}

/* ---- cuBLASLt: status and handle ------------------------------------------------- */

const char *CUBLASWINAPI cublasLtGetStatusName(cublasStatus_t status) { return status_name(status); }
const char *CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t status) { return status_string(status); }

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t *lightHandle) {
    if (!lightHandle) return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtContext *h = new (std::nothrow) cublasLtContext;
    if (!h) return CUBLAS_STATUS_ALLOC_FAILED;
    h->magic = kLtHandleMagic;
    *lightHandle = h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t lightHandle) {
    if (!lt_handle_ok(lightHandle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    lightHandle->magic = 0;
    delete lightHandle;
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- cuBLASLt: matrix layouts ------------------------------------------------------- */

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutInit_internal(cublasLtMatrixLayout_t matLayout, size_t size,
                                                              cudaDataType type, uint64_t rows, uint64_t cols,
                                                              int64_t ld) {
    return init_opaque(matLayout, size, layout_defaults(type, rows, cols, ld));
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType type,
                                                       uint64_t rows, uint64_t cols, int64_t ld) {
    return create_opaque(matLayout, layout_defaults(type, rows, cols, ld));
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
    return destroy_opaque(matLayout);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout,
                                                             cublasLtMatrixLayoutAttribute_t attr, const void *buf,
                                                             size_t sizeInBytes) {
    return set_attr<LayoutData>(matLayout, attr, buf, sizeInBytes, layout_field);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t matLayout,
                                                             cublasLtMatrixLayoutAttribute_t attr, void *buf,
                                                             size_t sizeInBytes, size_t *sizeWritten) {
    return get_attr<LayoutData>(matLayout, attr, buf, sizeInBytes, sizeWritten, layout_field);
}

/* ---- cuBLASLt: matmul descriptors ----------------------------------------------------- */

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescInit_internal(cublasLtMatmulDesc_t matmulDesc, size_t size,
                                                            cublasComputeType_t computeType,
                                                            cudaDataType_t scaleType) {
    return init_opaque(matmulDesc, size, desc_defaults(computeType, scaleType));
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc,
                                                     cublasComputeType_t computeType, cudaDataType_t scaleType) {
    return create_opaque(matmulDesc, desc_defaults(computeType, scaleType));
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
    return destroy_opaque(matmulDesc);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                                           cublasLtMatmulDescAttributes_t attr, const void *buf,
                                                           size_t sizeInBytes) {
    return set_attr<DescData>(matmulDesc, attr, buf, sizeInBytes, desc_field);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                                           cublasLtMatmulDescAttributes_t attr, void *buf,
                                                           size_t sizeInBytes, size_t *sizeWritten) {
    return get_attr<DescData>(matmulDesc, attr, buf, sizeInBytes, sizeWritten, desc_field);
}

/* ---- cuBLASLt: heuristic preferences ----------------------------------------------------- */

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceInit_internal(cublasLtMatmulPreference_t pref, size_t size) {
    return init_opaque(pref, size, pref_defaults());
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
    return create_opaque(pref, pref_defaults());
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    return destroy_opaque(pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                                 cublasLtMatmulPreferenceAttributes_t attr,
                                                                 const void *buf, size_t sizeInBytes) {
    return set_attr<PrefData>(pref, attr, buf, sizeInBytes, pref_field);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                                 cublasLtMatmulPreferenceAttributes_t attr, void *buf,
                                                                 size_t sizeInBytes, size_t *sizeWritten) {
    return get_attr<PrefData>(pref, attr, buf, sizeInBytes, sizeWritten, pref_field);
}

/* ---- cuBLASLt: heuristic and matmul ---------------------------------------------------------- */

/* One algorithm exists: no split-K (CUBLASLT_REDUCTION_SCHEME_NONE, which
 * every reduction mask admits), no workspace, fp32 FMA-class math, any
 * alignment. Unsupported problems give NOT_SUPPORTED with no results, as the
 * real heuristic does when nothing fits. */
cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle,
                                                           cublasLtMatmulDesc_t operationDesc,
                                                           cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                                           cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                                           cublasLtMatmulPreference_t preference,
                                                           int requestedAlgoCount,
                                                           cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                                           int *returnAlgoCount) {
    if (!lt_handle_ok(lightHandle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (requestedAlgoCount <= 0 || !heuristicResultsArray || !returnAlgoCount) return CUBLAS_STATUS_INVALID_VALUE;
    *returnAlgoCount = 0;
    PrefData pref;
    if (!load(preference, &pref)) return CUBLAS_STATUS_INVALID_VALUE;
    Gemm g;
    DescData md;
    cublasStatus_t st = lt_problem(operationDesc, Adesc, Bdesc, Cdesc, Ddesc, &g, &md);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (pref.search_mode != CUBLASLT_SEARCH_BEST_FIT) return CUBLAS_STATUS_NOT_SUPPORTED;
    /* The implementation flags the algorithm would report. */
    uint64_t impl = CUBLASLT_NUMERICAL_IMPL_FLAGS_FMA | CUBLASLT_NUMERICAL_IMPL_FLAGS_ACCUMULATOR_32F |
                    (g.a_type == CUDA_R_16BF || g.round_ab_to_bf16 ? CUBLASLT_NUMERICAL_IMPL_FLAGS_INPUT_16BF
                     : g.a_type == CUDA_R_16F                      ? CUBLASLT_NUMERICAL_IMPL_FLAGS_INPUT_16F
                                                                   : CUBLASLT_NUMERICAL_IMPL_FLAGS_INPUT_32F);
    if ((impl & pref.impl_mask) != impl) return CUBLAS_STATUS_NOT_SUPPORTED;
    /* The bias pointer set on the descriptor stands for the one the matmul
     * will get (only its alignment matters here, as for the real library). */
    if (md.epilogue == CUBLASLT_EPILOGUE_BIAS && md.bias && !bias_aligned(md.bias, g.bias_stride, g.d_type, g.batch))
        return CUBLAS_STATUS_NOT_SUPPORTED;

    cublasLtMatmulHeuristicResult_t &r = heuristicResultsArray[0];
    std::memset(&r, 0, sizeof r);
    r.algo.data[0] = kAlgoMagic;
    r.algo.data[1] = pref.align_a;
    r.algo.data[2] = pref.align_b;
    r.algo.data[3] = pref.align_c;
    r.algo.data[4] = pref.align_d;
    r.workspaceSize = 0;
    r.state = CUBLAS_STATUS_SUCCESS;
    r.wavesCount = 1.0f;
    *returnAlgoCount = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                                           const void *alpha, const void *A, cublasLtMatrixLayout_t Adesc,
                                           const void *B, cublasLtMatrixLayout_t Bdesc, const void *beta,
                                           const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                                           cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo,
                                           void *workspace, size_t workspaceSizeInBytes, cudaStream_t stream) {
    (void)workspace;
    (void)workspaceSizeInBytes; /* the one algorithm needs none */
    if (!lt_handle_ok(lightHandle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    /* ZT_EMU_LT_REFUSE set: every matmul is refused at run time, as the real
     * library may refuse an algorithm its heuristic returned, so the
     * caller's fallback runs. */
    if (getenv("ZT_EMU_LT_REFUSE")) return CUBLAS_STATUS_NOT_SUPPORTED;
    Gemm g;
    DescData md;
    cublasStatus_t st = lt_problem(computeDesc, Adesc, Bdesc, Cdesc, Ddesc, &g, &md);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (algo && algo->data[0] != kAlgoMagic) return CUBLAS_STATUS_INVALID_VALUE;

    if (md.pointer_mode == CUBLASLT_POINTER_MODE_DEVICE) {
        g.scalars_on_device = true;
        g.alpha_ptr = (const float *)alpha;
        g.beta_ptr = (const float *)beta;
    } else {
        std::memcpy(&g.alpha, alpha, sizeof(float));
        std::memcpy(&g.beta, beta, sizeof(float));
    }
    g.a = A, g.b = B, g.c = C, g.d = D;
    if (md.epilogue == CUBLASLT_EPILOGUE_BIAS) {
        if (!md.bias) return CUBLAS_STATUS_INVALID_VALUE;
        if (!bias_aligned(md.bias, g.bias_stride, g.d_type, g.batch)) return CUBLAS_STATUS_NOT_SUPPORTED;
        g.bias = md.bias;
    }
    /* An algorithm chosen for pointers aligned to N bytes may use vector
     * accesses of up to 16 bytes; less aligned pointers would fault on a GPU.
     * Hold the pointers to what the heuristic was told (capped at 16). */
    if (algo) {
        const void *ptr[4] = {A, B, C, D};
        const int64_t stride[4] = {g.stride_a, g.stride_b, g.stride_c, g.stride_d};
        const cudaDataType type[4] = {g.a_type, g.b_type, g.c_type, g.d_type};
        for (int i = 0; i < 4; i++) {
            uint64_t need = std::min<uint64_t>(algo->data[1 + i], 16);
            if (ptr[i] && alignment_of(ptr[i], stride[i], elem_size(type[i]), g.batch) < need)
                return CUBLAS_STATUS_INVALID_VALUE;
        }
    }
    if (g.m == 0 || g.n == 0) return CUBLAS_STATUS_SUCCESS;
    /* In place (C == D) is accepted when both layouts describe the same
     * storage; the same pointer with another ld or batch stride would make
     * D overwrite C elements still to be read (the emulator's own rule: the
     * documentation does not spell this case out). */
    if (C == D && (g.ldc != g.ldd || (g.batch > 1 && g.stride_c != g.stride_d)))
        return CUBLAS_STATUS_INVALID_VALUE;
    /* The GPU would fault on these; report instead of crashing the host. C
     * may be NULL only when it is certainly not read. */
    if (!D || (g.k > 0 && (!A || !B)) || (!C && (g.scalars_on_device || g.beta != 0.0f)))
        return CUBLAS_STATUS_INVALID_VALUE;
    zt_emu_enqueue(stream, [g] { run_gemm(g); });
    return CUBLAS_STATUS_SUCCESS;
}

} // extern "C"
