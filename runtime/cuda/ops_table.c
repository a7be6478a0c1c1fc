/* The CUDA backend's kernel tables, one per compute dtype (fp32, bf16,
 * fp16): thin adapters from zt_ops's signatures to the launchers, which take
 * the dtype and instantiate their kernel templates for it (cuda_common.cuh).
 * The engine picks the table of --dtype (be->ops_for), so in bf16 and fp16
 * gathered units, activations and kernel inputs and outputs are 16-bit and
 * the GEMMs take 16-bit operands. */
#include "cuda_ops.h"

/* The adapters of one dtype: NAME##_SFX calls zt_cuda_NAME with DT. */
#define ZT_CUDA_ADAPTERS(SFX, DT)                                                                                    \
    static void embedding_fwd_##SFX(zt_stream *s, void *out, const int32_t *tokens, const void *wte,                \
                                    const void *wpe, int B, int T, int C) {                                         \
        zt_cuda_embedding_fwd(s, DT, out, tokens, wte, wpe, B, T, C);                                               \
    }                                                                                                                \
    static void embedding_bwd_##SFX(zt_stream *s, float *dwte, float *dwpe, const void *dout,                       \
                                    const int32_t *tokens, int B, int T, int C) {                                   \
        zt_cuda_embedding_bwd(s, DT, dwte, dwpe, dout, tokens, B, T, C);                                            \
    }                                                                                                                \
    static void layernorm_fwd_##SFX(zt_stream *s, void *out, float *mean, float *rstd, const void *inp,             \
                                    const void *w, const void *b, int N, int C) {                                   \
        zt_cuda_layernorm_fwd(s, DT, out, mean, rstd, inp, w, b, N, C);                                             \
    }                                                                                                                \
    static void layernorm_bwd_##SFX(zt_stream *s, void *dinp, float *dw, float *db, const void *dout,               \
                                    const void *inp, const void *w, const float *mean, const float *rstd, int N,    \
                                    int C) {                                                                         \
        zt_cuda_layernorm_bwd(s, DT, dinp, dw, db, dout, inp, w, mean, rstd, N, C);                                 \
    }                                                                                                                \
    static void matmul_fwd_##SFX(zt_stream *s, void *out, const void *inp, const void *w, const void *bias, int N,  \
                                 int C, int OC) {                                                                    \
        zt_cuda_matmul_fwd(s, DT, out, inp, w, bias, N, C, OC);                                                     \
    }                                                                                                                \
    static void matmul_bwd_##SFX(zt_stream *s, void *dinp, float *dw, float *dbias, const void *dout,               \
                                 const void *inp, const void *w, int N, int C, int OC) {                            \
        zt_cuda_matmul_bwd(s, DT, dinp, dw, dbias, dout, inp, w, N, C, OC);                                         \
    }                                                                                                                \
    static void attention_fwd_##SFX(zt_stream *s, void *out, void *att, const void *qkv, int B, int T, int C,       \
                                    int NH) {                                                                        \
        zt_cuda_attention_fwd(s, DT, out, att, qkv, B, T, C, NH);                                                   \
    }                                                                                                                \
    static void attention_bwd_##SFX(zt_stream *s, void *dqkv, float *datt, const void *dout, const void *qkv,       \
                                    const void *att, int B, int T, int C, int NH, void *scratch,                    \
                                    size_t scratch_bytes) {                                                          \
        zt_cuda_attention_bwd(s, DT, dqkv, datt, dout, qkv, att, B, T, C, NH, scratch, scratch_bytes);              \
    }                                                                                                                \
    static void attention_fused_fwd_##SFX(zt_stream *s, void *out, float *lse, const void *qkv, int B, int T,       \
                                          int C, int NH) {                                                           \
        zt_cuda_attention_fused_fwd(s, DT, out, lse, qkv, B, T, C, NH);                                             \
    }                                                                                                                \
    /* The tiled kernels sum each tile's gradients in fp32 in shared memory                                          \
     * and round once: no scratch needed. */                                                                         \
    static void attention_fused_bwd_##SFX(zt_stream *s, void *dqkv, float *datt, const void *dout,                  \
                                          const void *qkv, const void *out, const float *lse, int B, int T, int C,  \
                                          int NH, void *scratch, size_t scratch_bytes) {                            \
        (void)scratch, (void)scratch_bytes;                                                                          \
        zt_cuda_attention_fused_bwd(s, DT, dqkv, datt, dout, qkv, out, lse, B, T, C, NH);                           \
    }                                                                                                                \
    static void gelu_fwd_##SFX(zt_stream *s, void *out, const void *inp, size_t N) {                                \
        zt_cuda_gelu_fwd(s, DT, out, inp, N);                                                                        \
    }                                                                                                                \
    static void gelu_bwd_##SFX(zt_stream *s, void *dinp, const void *inp, const void *dout, size_t N) {             \
        zt_cuda_gelu_bwd(s, DT, dinp, inp, dout, N);                                                                 \
    }                                                                                                                \
    static void residual_fwd_##SFX(zt_stream *s, void *out, const void *a, const void *b, size_t N) {               \
        zt_cuda_residual_fwd(s, DT, out, a, b, N);                                                                   \
    }                                                                                                                \
    static void residual_bwd_##SFX(zt_stream *s, void *da, void *db, const void *dout, size_t N) {                  \
        zt_cuda_residual_bwd(s, DT, da, db, dout, N);                                                                \
    }                                                                                                                \
    static void softmax_xent_fwd_##SFX(zt_stream *s, float *losses, void *probs, const void *logits,                \
                                       const int32_t *targets, int N, int V) {                                      \
        zt_cuda_softmax_xent_fwd(s, DT, losses, probs, logits, targets, N, V);                                      \
    }                                                                                                                \
    static void softmax_xent_bwd_##SFX(zt_stream *s, void *dlogits, const void *probs, const int32_t *targets,      \
                                       int N, int V, float dloss) {                                                  \
        zt_cuda_softmax_xent_bwd(s, DT, dlogits, probs, targets, N, V, dloss);                                      \
    }                                                                                                                \
    static void rmsnorm_fwd_##SFX(zt_stream *s, void *out, float *rstd, const void *inp, const void *w, int N,       \
                                 int C, float eps) {                                                                 \
        zt_cuda_rmsnorm_fwd(s, DT, out, rstd, inp, w, N, C, eps);                                                    \
    }                                                                                                                \
    static void rmsnorm_bwd_##SFX(zt_stream *s, void *dinp, float *dw, const void *dout, const void *inp,            \
                                 const void *w, const float *rstd, int N, int C) {                                   \
        zt_cuda_rmsnorm_bwd(s, DT, dinp, dw, dout, inp, w, rstd, N, C);                                              \
    }                                                                                                                \
    static void rope_fwd_##SFX(zt_stream *s, void *qkv, int B, int T, int NH, int NKV, int HD, float theta) {        \
        zt_cuda_rope_fwd(s, DT, qkv, B, T, NH, NKV, HD, theta);                                                      \
    }                                                                                                                \
    static void rope_bwd_##SFX(zt_stream *s, void *dqkv, int B, int T, int NH, int NKV, int HD, float theta) {       \
        zt_cuda_rope_bwd(s, DT, dqkv, B, T, NH, NKV, HD, theta);                                                     \
    }                                                                                                                \
    static void swiglu_fwd_##SFX(zt_stream *s, void *out, const void *gate_up, int N, int F) {                       \
        zt_cuda_swiglu_fwd(s, DT, out, gate_up, N, F);                                                               \
    }                                                                                                                \
    static void swiglu_bwd_##SFX(zt_stream *s, void *dgate_up, const void *gate_up, const void *dout, int N, int F) {\
        zt_cuda_swiglu_bwd(s, DT, dgate_up, gate_up, dout, N, F);                                                    \
    }                                                                                                                \
    static void gqa_expand_##SFX(zt_stream *s, void *qkv_full, const void *qkv, int N, int NH, int NKV, int HD) {    \
        zt_cuda_gqa_expand(s, DT, qkv_full, qkv, N, NH, NKV, HD);                                                    \
    }                                                                                                                \
    static void gqa_reduce_##SFX(zt_stream *s, void *dqkv, const void *dqkv_full, int N, int NH, int NKV, int HD) {  \
        zt_cuda_gqa_reduce(s, DT, dqkv, dqkv_full, N, NH, NKV, HD);                                                  \
    }                                                                                                                \
    static const zt_ops cuda_ops_##SFX = {                                                                           \
        .dtype = DT,                                                                                                 \
        .embedding_fwd = embedding_fwd_##SFX,                                                                        \
        .embedding_bwd = embedding_bwd_##SFX,                                                                        \
        .layernorm_fwd = layernorm_fwd_##SFX,                                                                        \
        .layernorm_bwd = layernorm_bwd_##SFX,                                                                        \
        .matmul_fwd = matmul_fwd_##SFX,                                                                              \
        .matmul_bwd = matmul_bwd_##SFX,                                                                              \
        .attention_fwd = attention_fwd_##SFX,                                                                        \
        .attention_bwd = attention_bwd_##SFX,                                                                        \
        .attention_fused_fwd = attention_fused_fwd_##SFX,                                                            \
        .attention_fused_bwd = attention_fused_bwd_##SFX,                                                            \
        .gelu_fwd = gelu_fwd_##SFX,                                                                                  \
        .gelu_bwd = gelu_bwd_##SFX,                                                                                  \
        .residual_fwd = residual_fwd_##SFX,                                                                          \
        .residual_bwd = residual_bwd_##SFX,                                                                          \
        .softmax_xent_fwd = softmax_xent_fwd_##SFX,                                                                  \
        .softmax_xent_bwd = softmax_xent_bwd_##SFX,                                                                  \
        .rmsnorm_fwd = rmsnorm_fwd_##SFX,                                                                            \
        .rmsnorm_bwd = rmsnorm_bwd_##SFX,                                                                            \
        .rope_fwd = rope_fwd_##SFX,                                                                                  \
        .rope_bwd = rope_bwd_##SFX,                                                                                  \
        .swiglu_fwd = swiglu_fwd_##SFX,                                                                              \
        .swiglu_bwd = swiglu_bwd_##SFX,                                                                              \
        .gqa_expand = gqa_expand_##SFX,                                                                              \
        .gqa_reduce = gqa_reduce_##SFX,                                                                              \
        .adamw = zt_cuda_adamw, .sgd = zt_cuda_sgd,                                                                  \
        .adam8bit = zt_cuda_adam8bit, .factor_stats = zt_cuda_factor_stats,                                          \
        .adafactor_precondition = zt_cuda_adafactor_precondition,                                                    \
        .adafactor_apply = zt_cuda_adafactor_apply,                                                                  \
        .cast = zt_cuda_cast,                                                                                        \
        .scale = zt_cuda_scale,                                                                                      \
        .scaled_store = zt_cuda_scaled_store,                                                                        \
        .sum_squares = zt_cuda_sum_squares,                                                                          \
        .cast_sr = zt_cuda_cast_sr,                                                                                  \
        .newton_schulz = zt_cuda_newton_schulz,                                                                      \
        .wire_quantize = zt_cuda_wire_quantize,                                                                      \
        .wire_dequantize = zt_cuda_wire_dequantize,                                                                  \
    };

ZT_CUDA_ADAPTERS(fp32, ZT_FP32)
ZT_CUDA_ADAPTERS(bf16, ZT_BF16)
ZT_CUDA_ADAPTERS(fp16, ZT_FP16)

const zt_ops *zt_cuda_ops_for(zt_dtype dt) {
    switch (dt) {
    case ZT_BF16: return &cuda_ops_bf16;
    case ZT_FP16: return &cuda_ops_fp16;
    default: return &cuda_ops_fp32;
    }
}

const zt_ops *zt_cuda_ops(void) { return &cuda_ops_fp32; }
