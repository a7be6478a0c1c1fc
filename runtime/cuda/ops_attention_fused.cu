/* Memory-efficient causal attention (--attention fused) on the GPU: the
 * forward keeps lse[B,NH,T] (each causal row's log softmax normaliser)
 * instead of the [B,NH,T,T] probabilities, and the backward recomputes every
 * probability it needs as exp(scale q.k - lse). qkv rows hold
 * [q (C) | k (C) | v (C)]; head h uses channels h*hs .. h*hs+hs-1.
 *
 * Tiled, as FlashAttention: a block owns one tile of FA_TILE rows of one
 * head (b, h) and walks the tiles of the other side through shared memory,
 * so each q, k, v row is read from global memory once per tile pair instead
 * of once per row pair, and shared-memory use no longer grows with T.
 *   forward   block = a query tile; for each key tile kt <= qt:
 *             S = scale Q K^T (masked), the online softmax per row (running
 *             max m and sum l; O rescaled when m grows), O += P V.
 *   backward  two kernels, so that every output element has one writer and
 *             no atomics are needed (deterministic, unlike FlashAttention-2's
 *             atomic dQ):
 *     dq      block = a query tile: D = dout . out per row (into datt);
 *             for each key tile kt <= qt: P, dS = P (dO V^T - D) scale,
 *             dQ += dS K.
 *     dkv     block = a key tile; for each query tile qt >= kt: P,
 *             dV += P^T dO, dS, dK += dS^T Q.
 * The tile products are small GEMMs in shared memory (fa_micro: 2x4 or 4x4
 * outputs per thread per step, a warp's threads on consecutive columns).
 * fp32 throughout, no tensor cores. Blocks are issued tile-major, longest
 * causal work first.
 *
 * Storage types. The kernels are templates over S (cuda_common.cuh): qkv,
 * out, dout and dqkv in S, lse and D (datt) fp32. Tiles are widened to fp32
 * as they are loaded into shared memory and every product and accumulator
 * is fp32; dq, dk, dv start from dqkv's value and are rounded once, when the
 * tile is stored (the CPU's fp32 gradient sums, then one rounding).
 *
 * Summation order, and so the bits. Every score is a sequential dot product
 * over the head channels (zero padding added at the end adds exact zeros),
 * and every accumulator starts from the value already in the output (dq, dk,
 * dv are +=) and adds its terms in increasing position order, tile after
 * tile: the CPU kernel's order (on the emulator, whose expf is the CPU's,
 * the backward matches the CPU bit for bit; a GPU's expf differs in the last
 * bits). Both backward kernels build P and dS from the same device code, so
 * they see the same bits. The forward's online softmax rescales once per
 * tile instead of once per new maximum, so out and lse differ from the
 * CPU's by float rounding only.
 *
 * Shared memory: with ld = hs rounded up to 4, plus 1 (the +1 spreads a
 * column's elements over banks), the forward needs 4 row tiles, the dq
 * kernel 5 and the dkv kernel 6, each FA_TILE x ld floats, plus one
 * FA_TILE x (FA_TILE + 1) score tile and 2-3 per-row vectors (fa_smem_bytes):
 * 53.25 KiB for the dkv kernel at hs = 64, whatever T. Head sizes above 292
 * exceed the H200's 227 KiB per block: the opt-in (cudaFuncSetAttribute)
 * fails, the sticky error reports it, and nothing is launched. */
#include <limits.h>

#include "cuda_common.cuh"

#define FA_TILE 32 /* rows per tile; also the warp size the row pass assumes */
#define FA_THREADS 128
#define FA_SLD (FA_TILE + 1) /* row stride of the score tile */

/* A matrix in shared memory: element (r, c) at p[r * rs + c * cs]. */
struct fa_view {
    const float *p;
    int rs, cs;
};

/* A thread's share of an R x N output tile (N a multiple of 4): MR
 * consecutive rows r0 .. r0 + MR - 1 and 4 columns c0 + j * cs, j < 4, the
 * columns N / 4 apart so that the threads of a warp touch consecutive
 * columns (distinct shared-memory banks). */
struct fa_micro_tile {
    int r0, c0, cs;
};
__device__ __forceinline__ fa_micro_tile fa_tile_of(int m, int MR, int N) {
    fa_micro_tile t;
    t.cs = N / 4;
    t.r0 = (m / t.cs) * MR;
    t.c0 = m % t.cs;
    return t;
}
/* The micro-tiles of an R x N tile, dealt to the block's threads. */
#define FA_FOR_MICRO(m, MR, R, N) for (int m = threadIdx.x; m < ((R) / (MR)) * ((N) / 4); m += blockDim.x)
/* MR x 4 micro-tiles: 2 rows for the FA_TILE x FA_TILE score tiles (128
 * of them, one per thread), 4 for the FA_TILE x hp products. */
#define FA_MR_S 2
#define FA_MR_O 4

/* acc[i][j] += sum over k < K of A(r0 + i, k) B(k, c0 + j cs), k in order. */
template <int MR>
__device__ __forceinline__ void fa_micro(float (&acc)[MR][4], fa_view A, fa_view B, fa_micro_tile t, int K) {
    for (int k = 0; k < K; k++) {
        float a[MR], b[4];
#pragma unroll
        for (int i = 0; i < MR; i++) a[i] = A.p[(t.r0 + i) * A.rs + k * A.cs];
#pragma unroll
        for (int j = 0; j < 4; j++) b[j] = B.p[k * B.rs + (t.c0 + j * t.cs) * B.cs];
#pragma unroll
        for (int i = 0; i < MR; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) acc[i][j] += a[i] * b[j];
    }
}

/* Loads rows row0 .. row0 + FA_TILE - 1 (of a [.., T, ..] tensor whose row t
 * starts at src + t * stride) into dst[FA_TILE][ld], channels 0 .. hs - 1;
 * rows at or past T and channels hs .. hp - 1 become 0. */
template <typename S>
__device__ __forceinline__ void fa_load_rows(float *dst, int ld, const S *src, size_t stride, int row0, int T, int hs,
                                             int hp) {
    for (int e = threadIdx.x; e < FA_TILE * hp; e += blockDim.x) {
        int r = e / hp, i = e % hp, t = row0 + r;
        dst[r * ld + i] = (t < T && i < hs) ? zt_ld(src[(size_t)t * stride + i]) : 0.0f;
    }
}

/* Stores the valid rows and channels of src[FA_TILE][ld] back. */
template <typename S>
__device__ __forceinline__ void fa_store_rows(S *dst, size_t stride, const float *src, int ld, int row0, int T,
                                              int hs) {
    for (int e = threadIdx.x; e < FA_TILE * hs; e += blockDim.x) {
        int r = e / hs, i = e % hs, t = row0 + r;
        if (t < T) dst[(size_t)t * stride + i] = zt_st<S>(src[r * ld + i]);
    }
}

/* A FA_TILE x FA_TILE score tile: sc[r][c] = value(r, c, A(r, :) . B(:, c)),
 * the dot product over the hp channels in order. Called from device code
 * only, with a lambda for value. */
template <typename Value>
__device__ __forceinline__ void fa_score_tile(float *sc, fa_view A, fa_view B, int hp, Value value) {
    FA_FOR_MICRO(m, FA_MR_S, FA_TILE, FA_TILE) {
        fa_micro_tile mt = fa_tile_of(m, FA_MR_S, FA_TILE);
        float acc[FA_MR_S][4] = {{0.0f}};
        fa_micro(acc, A, B, mt, hp);
        for (int i = 0; i < FA_MR_S; i++)
            for (int j = 0; j < 4; j++) {
                int r = mt.r0 + i, c = mt.c0 + j * mt.cs;
                sc[r * FA_SLD + c] = value(r, c, acc[i][j]);
            }
    }
}

/* P for the tile pair (query tile at q0, key tile at k0): sc[r][j] =
 * exp(scale Q[r] . K[j] - lse[r]), 0 where the key is after the query or the
 * query is past T. Both backward kernels call this: the same bits. */
__device__ __forceinline__ void fa_probs(float *sc, const float *Qs, const float *Ks, const float *lse_s, int ld,
                                         int hp, int q0, int k0, int T, float scale) {
    fa_view Q = {Qs, ld, 1}, Kt = {Ks, 1, ld};
    fa_score_tile(sc, Q, Kt, hp, [=](int r, int c, float dot) {
        int q = q0 + r, k = k0 + c;
        return (k > q || q >= T) ? 0.0f : expf(dot * scale - lse_s[r]);
    });
}

/* dS in place of P: sc[r][j] = P (dO[r] . V[j] - D[r]) scale (each element
 * read and rewritten by the same thread). */
__device__ __forceinline__ void fa_dscores(float *sc, const float *dOs, const float *Vs, const float *D_s, int ld,
                                           int hp, float scale) {
    fa_view dO = {dOs, ld, 1}, Vt = {Vs, 1, ld};
    fa_score_tile(sc, dO, Vt, hp,
                  [=](int r, int c, float dot) { return sc[r * FA_SLD + c] * (dot - D_s[r]) * scale; });
}

/* C[FA_TILE][hp] (row stride ld) = C row_scale[r] (if given) + A B, A
 * FA_TILE x FA_TILE, B FA_TILE x hp; each element's terms added in order. */
__device__ __forceinline__ void fa_accumulate(float *Cs, int ld, const float *row_scale, fa_view A, fa_view B,
                                              int hp) {
    FA_FOR_MICRO(m, FA_MR_O, FA_TILE, hp) {
        fa_micro_tile mt = fa_tile_of(m, FA_MR_O, hp);
        float acc[FA_MR_O][4];
        for (int i = 0; i < FA_MR_O; i++)
            for (int j = 0; j < 4; j++) {
                float c = Cs[(mt.r0 + i) * ld + mt.c0 + j * mt.cs];
                acc[i][j] = row_scale ? c * row_scale[mt.r0 + i] : c;
            }
        fa_micro(acc, A, B, mt, FA_TILE);
        for (int i = 0; i < FA_MR_O; i++)
            for (int j = 0; j < 4; j++) Cs[(mt.r0 + i) * ld + mt.c0 + j * mt.cs] = acc[i][j];
    }
}

/* The launch geometry shared by the three kernels. */
struct fa_geom {
    int hs, hp, ld, ntiles;
    size_t C3, row0, hoff, bh;
    int tile; /* this block's tile index */
};
__device__ __forceinline__ fa_geom fa_geom_of(int T, int C, int NH, int heavy_first) {
    fa_geom g;
    g.hs = C / NH;
    g.hp = (g.hs + 3) & ~3;
    g.ld = g.hp + 1;
    g.ntiles = (T + FA_TILE - 1) / FA_TILE;
    /* Tile-major: blocks with the same tile index (the same amount of
     * causal work) are adjacent for every (b, h), and the grid issues the
     * longest tiles first, so the short ones fill the tail. */
    unsigned int nbh = gridDim.x / (unsigned int)g.ntiles;
    g.bh = blockIdx.x % nbh;
    int i = (int)(blockIdx.x / nbh);
    g.tile = heavy_first ? g.ntiles - 1 - i : i;
    g.C3 = (size_t)C * 3;
    g.row0 = (g.bh / (size_t)NH) * (size_t)T;
    g.hoff = (g.bh % (size_t)NH) * (size_t)g.hs;
    return g;
}

/* A kernel's shared memory: its row tiles ([FA_TILE][ld] each, tile i at
 * fa_row_tile(sm, ld, i)), then the score tile ([FA_TILE][FA_SLD], at
 * fa_row_tile(sm, ld, row_tiles)), then up to 3 per-row vectors. */
#define FA_FWD_ROW_TILES 4 /* Q, K, V, O */
#define FA_DQ_ROW_TILES 5  /* Q, dO, K, V, dQ */
#define FA_DKV_ROW_TILES 6 /* K, V, Q, dO, dK, dV */
__device__ __forceinline__ float *fa_row_tile(float *sm, int ld, int i) { return sm + i * FA_TILE * ld; }

static size_t fa_smem_bytes(int C, int NH, int row_tiles) {
    int hp = ((C / NH) + 3) & ~3;
    return ((size_t)row_tiles * FA_TILE * (hp + 1) + (size_t)FA_TILE * FA_SLD + 3 * FA_TILE) * sizeof(float);
}

/* Forward: one block per (b, h, query tile). */
template <typename S>
__global__ static void attention_fused_fwd_kernel(S *out,       /* [B,T,C] */
                                                  float *lse,   /* [B,NH,T] */
                                                  const S *qkv, /* [B,T,3C] */
                                                  int T, int C, int NH, float scale) {
    extern __shared__ float sm[];
    fa_geom g = fa_geom_of(T, C, NH, 1);
    int ld = g.ld, hp = g.hp, q0 = g.tile * FA_TILE;
    float *Qs = fa_row_tile(sm, ld, 0), *Ks = fa_row_tile(sm, ld, 1); /* [FA_TILE][ld] */
    float *Vs = fa_row_tile(sm, ld, 2), *Os = fa_row_tile(sm, ld, 3); /* [FA_TILE][ld] */
    float *sc = fa_row_tile(sm, ld, FA_FWD_ROW_TILES);                  /* [FA_TILE][FA_SLD] */
    float *m_s = sc + FA_TILE * FA_SLD, *l_s = m_s + FA_TILE, *alpha_s = l_s + FA_TILE;       /* [FA_TILE] */
    const S *base = qkv + g.row0 * g.C3 + g.hoff;

    fa_load_rows(Qs, ld, base, g.C3, q0, T, g.hs, hp);
    for (int e = threadIdx.x; e < FA_TILE * ld; e += blockDim.x) Os[e] = 0.0f;
    for (int r = threadIdx.x; r < FA_TILE; r += blockDim.x) {
        m_s[r] = -INFINITY;
        l_s[r] = 0.0f;
    }
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    for (int kt = 0; kt <= g.tile; kt++) {
        int k0 = kt * FA_TILE;
        fa_load_rows(Ks, ld, base + C, g.C3, k0, T, g.hs, hp);
        fa_load_rows(Vs, ld, base + 2 * (size_t)C, g.C3, k0, T, g.hs, hp);
        __syncthreads();
        /* S = scale Q K^T, -inf where masked */
        fa_view Q = {Qs, ld, 1}, Kt = {Ks, 1, ld};
        fa_score_tile(sc, Q, Kt, hp, [=](int r, int c, float dot) {
            int q = q0 + r, k = k0 + c;
            return (k > q || q >= T) ? -INFINITY : dot * scale;
        });
        __syncthreads();
        /* The online softmax, a warp per row, lane j on key j: the new max,
         * P = exp(S - max) in place, and the factor that rescales the old
         * sum and output. A row past T is all -inf: P = 0, nothing rescaled. */
        for (int r = warp; r < FA_TILE; r += nwarps) {
            float s = sc[r * FA_SLD + lane];
            float m_old = m_s[r], m_new = fmaxf(m_old, zt_warp_max(s));
            float p = s == -INFINITY ? 0.0f : expf(s - m_new);
            sc[r * FA_SLD + lane] = p;
            float psum = zt_warp_sum(p);
            /* Every lane has read m_s[r] above; lane 0 overwrites it below.
             * Shuffles do not order shared-memory accesses, a warp barrier
             * does (without it, racecheck reports a hazard). */
            __syncwarp();
            if (lane == 0) {
                float alpha = m_new == -INFINITY ? 1.0f : expf(m_old - m_new);
                l_s[r] = l_s[r] * alpha + psum;
                m_s[r] = m_new;
                alpha_s[r] = alpha;
            }
        }
        __syncthreads();
        /* O = alpha O + P V */
        fa_view P = {sc, FA_SLD, 1}, V = {Vs, ld, 1};
        fa_accumulate(Os, ld, alpha_s, P, V, hp);
        __syncthreads(); /* before the next tile overwrites K, V and the scores */
    }
    for (int e = threadIdx.x; e < FA_TILE * g.hs; e += blockDim.x) {
        int r = e / g.hs, i = e % g.hs, t = q0 + r;
        if (t < T) out[(g.row0 + t) * C + g.hoff + i] = zt_st<S>(Os[r * ld + i] / l_s[r]);
    }
    for (int r = threadIdx.x; r < FA_TILE; r += blockDim.x)
        if (q0 + r < T) lse[g.bh * T + q0 + r] = m_s[r] + logf(l_s[r]);
}

/* Per-row inputs of the backward for the query tile at q0: lse, and D =
 * dout . out (sequential over the channels, as the CPU); rows past T get 0.
 * With datt_out set, D is also stored there (the dq kernel). */
template <typename S>
__device__ __forceinline__ void fa_row_stats(float *lse_s, float *D_s, const float *lse, const float *datt_in,
                                             float *datt_out, const S *dout, const S *out, const fa_geom &g, int q0,
                                             int T, int C) {
    for (int r = threadIdx.x; r < FA_TILE; r += blockDim.x) {
        int t = q0 + r;
        float l = 0.0f, D = 0.0f;
        if (t < T) {
            l = lse[g.bh * T + t];
            if (datt_in) {
                D = datt_in[g.bh * T + t];
            } else {
                const S *dy = dout + (g.row0 + t) * C + g.hoff, *y = out + (g.row0 + t) * C + g.hoff; /* [hs] */
                for (int i = 0; i < g.hs; i++) D += zt_ld(dy[i]) * zt_ld(y[i]);
                datt_out[g.bh * T + t] = D;
            }
        }
        lse_s[r] = l;
        D_s[r] = D;
    }
}

/* Backward, dq: one block per (b, h, query tile). */
template <typename S>
__global__ static void attention_fused_bwd_dq_kernel(S *dqkv,          /* [B,T,3C], += */
                                                     float *datt,      /* [B,NH,T], D out */
                                                     const S *dout,    /* [B,T,C] */
                                                     const S *qkv,     /* [B,T,3C] */
                                                     const S *out,     /* [B,T,C] */
                                                     const float *lse, /* [B,NH,T] */
                                                     int T, int C, int NH, float scale) {
    extern __shared__ float sm[];
    fa_geom g = fa_geom_of(T, C, NH, 1);
    int ld = g.ld, hp = g.hp, q0 = g.tile * FA_TILE;
    float *Qs = fa_row_tile(sm, ld, 0), *dOs = fa_row_tile(sm, ld, 1), *Ks = fa_row_tile(sm, ld, 2); /* [FA_TILE][ld] */
    float *Vs = fa_row_tile(sm, ld, 3), *dQs = fa_row_tile(sm, ld, 4);                               /* [FA_TILE][ld] */
    float *sc = fa_row_tile(sm, ld, FA_DQ_ROW_TILES);             /* [FA_TILE][FA_SLD] */
    float *lse_s = sc + FA_TILE * FA_SLD, *D_s = lse_s + FA_TILE; /* [FA_TILE] */
    const S *base = qkv + g.row0 * g.C3 + g.hoff;
    S *dq = dqkv + g.row0 * g.C3 + g.hoff;

    fa_load_rows(Qs, ld, base, g.C3, q0, T, g.hs, hp);
    fa_load_rows(dOs, ld, dout + g.row0 * C + g.hoff, C, q0, T, g.hs, hp);
    fa_load_rows(dQs, ld, dq, g.C3, q0, T, g.hs, hp);
    fa_row_stats(lse_s, D_s, lse, NULL, datt, dout, out, g, q0, T, C);
    for (int kt = 0; kt <= g.tile; kt++) {
        int k0 = kt * FA_TILE;
        fa_load_rows(Ks, ld, base + C, g.C3, k0, T, g.hs, hp);
        fa_load_rows(Vs, ld, base + 2 * (size_t)C, g.C3, k0, T, g.hs, hp);
        __syncthreads();
        fa_probs(sc, Qs, Ks, lse_s, ld, hp, q0, k0, T, scale);
        __syncthreads();
        fa_dscores(sc, dOs, Vs, D_s, ld, hp, scale);
        __syncthreads();
        fa_view dS = {sc, FA_SLD, 1}, K = {Ks, ld, 1};
        fa_accumulate(dQs, ld, NULL, dS, K, hp); /* dQ += dS K */
        __syncthreads();                   /* before the next tile overwrites K, V and the scores */
    }
    fa_store_rows(dq, g.C3, dQs, ld, q0, T, g.hs);
}

/* Backward, dk and dv: one block per (b, h, key tile), after the dq kernel
 * (which wrote D into datt) on the same stream. */
template <typename S>
__global__ static void attention_fused_bwd_dkv_kernel(S *dqkv,           /* [B,T,3C], += */
                                                      const float *datt, /* [B,NH,T], D from the dq kernel */
                                                      const S *dout,     /* [B,T,C] */
                                                      const S *qkv,      /* [B,T,3C] */
                                                      const float *lse,  /* [B,NH,T] */
                                                      int T, int C, int NH, float scale) {
    extern __shared__ float sm[];
    fa_geom g = fa_geom_of(T, C, NH, 0); /* key tile 0 meets every query tile: first */
    int ld = g.ld, hp = g.hp, k0 = g.tile * FA_TILE;
    float *Ks = fa_row_tile(sm, ld, 0), *Vs = fa_row_tile(sm, ld, 1), *Qs = fa_row_tile(sm, ld, 2); /* [FA_TILE][ld] */
    float *dOs = fa_row_tile(sm, ld, 3), *dKs = fa_row_tile(sm, ld, 4), *dVs = fa_row_tile(sm, ld, 5);
    float *sc = fa_row_tile(sm, ld, FA_DKV_ROW_TILES);            /* [FA_TILE][FA_SLD] */
    float *lse_s = sc + FA_TILE * FA_SLD, *D_s = lse_s + FA_TILE; /* [FA_TILE] */
    const S *base = qkv + g.row0 * g.C3 + g.hoff;
    S *dk = dqkv + g.row0 * g.C3 + g.hoff + C, *dv = dk + C;

    fa_load_rows(Ks, ld, base + C, g.C3, k0, T, g.hs, hp);
    fa_load_rows(Vs, ld, base + 2 * (size_t)C, g.C3, k0, T, g.hs, hp);
    fa_load_rows(dKs, ld, dk, g.C3, k0, T, g.hs, hp);
    fa_load_rows(dVs, ld, dv, g.C3, k0, T, g.hs, hp);
    for (int qt = g.tile; qt < g.ntiles; qt++) {
        int q0 = qt * FA_TILE;
        fa_load_rows(Qs, ld, base, g.C3, q0, T, g.hs, hp);
        fa_load_rows(dOs, ld, dout + g.row0 * C + g.hoff, C, q0, T, g.hs, hp);
        fa_row_stats<S>(lse_s, D_s, lse, datt, NULL, NULL, NULL, g, q0, T, C);
        __syncthreads();
        fa_probs(sc, Qs, Ks, lse_s, ld, hp, q0, k0, T, scale);
        __syncthreads();
        fa_view Pt = {sc, 1, FA_SLD}, dO = {dOs, ld, 1};
        fa_accumulate(dVs, ld, NULL, Pt, dO, hp); /* dV += P^T dO */
        __syncthreads();                    /* P is read above, replaced by dS below */
        fa_dscores(sc, dOs, Vs, D_s, ld, hp, scale);
        __syncthreads();
        fa_view dSt = {sc, 1, FA_SLD}, Q = {Qs, ld, 1};
        fa_accumulate(dKs, ld, NULL, dSt, Q, hp); /* dK += dS^T Q */
        __syncthreads();                    /* before the next tile overwrites Q, dO and the scores */
    }
    fa_store_rows(dk, g.C3, dKs, ld, k0, T, g.hs);
    fa_store_rows(dv, g.C3, dVs, ld, k0, T, g.hs);
}

/* The grid is one block per (b, h, tile): 1 after recording an error if
 * that exceeds the grid's x limit (2^31 - 1). */
static int fa_grid_too_large(zt_stream *s, size_t blocks, const char *what) {
    if (blocks <= (size_t)INT_MAX) return 0;
    zt_cuda_record(zt_cuda_impl_of(s), ZT_ERR_INVALID, __FILE__, __LINE__,
                   "%s: %zu blocks of %d query rows exceed the grid limit (2^31 - 1)", what, blocks, FA_TILE);
    return 1;
}

template <typename S>
static void attention_fused_fwd(zt_stream *s, S *out, float *lse, const S *qkv, int B, int T, int C, int NH) {
    size_t blocks = (size_t)B * NH * ((T + FA_TILE - 1) / FA_TILE);
    if (blocks == 0 || C <= 0 || fa_grid_too_large(s, blocks, "attention_fused_fwd")) return;
    cudaStream_t st = zt_cuda_enter(s);
    float scale = 1.0f / sqrtf((float)(C / NH));
    size_t smem = fa_smem_bytes(C, NH, FA_FWD_ROW_TILES);
    void (*k)(S *, float *, const S *, int, int, int, float) = attention_fused_fwd_kernel<S>;
    if (ZT_ALLOW_SMEM(s, k, smem)) return;
    k<<<(unsigned int)blocks, FA_THREADS, smem, st>>>(out, lse, qkv, T, C, NH, scale);
    ZT_CUDA_LAUNCHED(s, "attention_fused_fwd");
}

template <typename S>
static void attention_fused_bwd(zt_stream *s, S *dqkv, float *datt, const S *dout, const S *qkv, const S *out,
                                const float *lse, int B, int T, int C, int NH) {
    size_t blocks = (size_t)B * NH * ((T + FA_TILE - 1) / FA_TILE);
    if (blocks == 0 || C <= 0 || fa_grid_too_large(s, blocks, "attention_fused_bwd")) return;
    cudaStream_t st = zt_cuda_enter(s);
    float scale = 1.0f / sqrtf((float)(C / NH));
    size_t smem_q = fa_smem_bytes(C, NH, FA_DQ_ROW_TILES), smem_kv = fa_smem_bytes(C, NH, FA_DKV_ROW_TILES);
    void (*kq)(S *, float *, const S *, const S *, const S *, const float *, int, int, int, float) =
        attention_fused_bwd_dq_kernel<S>;
    if (ZT_ALLOW_SMEM(s, kq, smem_q)) return;
    kq<<<(unsigned int)blocks, FA_THREADS, smem_q, st>>>(dqkv, datt, dout, qkv, out, lse, T, C, NH, scale);
    if (ZT_CUDA_LAUNCHED(s, "attention_fused_bwd (dq)")) return;
    void (*kkv)(S *, const float *, const S *, const S *, const float *, int, int, int, float) =
        attention_fused_bwd_dkv_kernel<S>;
    if (ZT_ALLOW_SMEM(s, kkv, smem_kv)) return;
    kkv<<<(unsigned int)blocks, FA_THREADS, smem_kv, st>>>(dqkv, datt, dout, qkv, lse, T, C, NH, scale);
    ZT_CUDA_LAUNCHED(s, "attention_fused_bwd (dk, dv)");
}

extern "C" void zt_cuda_attention_fused_fwd(zt_stream *s, zt_dtype dt, void *out, float *lse, const void *qkv, int B,
                                            int T, int C, int NH) {
    ZT_DISPATCH_DTYPE(dt, attention_fused_fwd<S>(s, (S *)out, lse, (const S *)qkv, B, T, C, NH));
}

extern "C" void zt_cuda_attention_fused_bwd(zt_stream *s, zt_dtype dt, void *dqkv, float *datt, const void *dout,
                                            const void *qkv, const void *out, const float *lse, int B, int T, int C,
                                            int NH) {
    ZT_DISPATCH_DTYPE(dt, attention_fused_bwd<S>(s, (S *)dqkv, datt, (const S *)dout, (const S *)qkv, (const S *)out,
                                                 lse, B, T, C, NH));
}
