/* The CPU model kernels are written once, as templates over the compute
 * dtype, and compiled once per dtype (kernels_fp32.c, kernels_bf16.c,
 * kernels_fp16.c). Before including the ops_*.inc files a kernels_*.c
 * defines:
 *   ACT          the element type of activations and parameters
 *   ACT_LD(x)    ACT -> float
 *   ACT_ST(v)    float -> ACT (round to nearest even)
 *   ACT_IS_F32   1 for fp32: the code paths of the fp32-only backend, so
 *                fp32 results are bit for bit what they were
 *   KFN(name)    the kernel's name in this dtype
 * Every kernel reads and writes ACT and accumulates in fp32; parameter
 * gradients, layernorm and rmsnorm statistics, log-sum-exp and losses are fp32 in every
 * dtype (see zt_ops). Kernels never allocate; 16-bit tiles widened for a
 * GEMM live on the stack (ops_matmul.inc). */
#ifndef ZT_CPU_KERNELS_H
#define ZT_CPU_KERNELS_H

#include "cpu_ops.h"

/* The table of one dtype: the templates above plus the fp32 engine
 * operations shared by all three. */
#define ZT_CPU_OPS_TABLE(dt)                                                                       \
    {                                                                                              \
        .dtype = dt, .embedding_fwd = KFN(embedding_fwd), .embedding_bwd = KFN(embedding_bwd),     \
        .layernorm_fwd = KFN(layernorm_fwd), .layernorm_bwd = KFN(layernorm_bwd),                  \
        .matmul_fwd = KFN(matmul_fwd), .matmul_bwd = KFN(matmul_bwd),                              \
        .attention_fwd = KFN(attention_fwd), .attention_bwd = KFN(attention_bwd),                  \
        .attention_fused_fwd = KFN(attention_fused_fwd), .attention_fused_bwd = KFN(attention_fused_bwd), \
        .gelu_fwd = KFN(gelu_fwd), .gelu_bwd = KFN(gelu_bwd), .residual_fwd = KFN(residual_fwd),  \
        .residual_bwd = KFN(residual_bwd), .softmax_xent_fwd = KFN(softmax_xent_fwd),              \
        .softmax_xent_bwd = KFN(softmax_xent_bwd), .rmsnorm_fwd = KFN(rmsnorm_fwd),                \
        .rmsnorm_bwd = KFN(rmsnorm_bwd), .rope_fwd = KFN(rope_fwd), .rope_bwd = KFN(rope_bwd),     \
        .swiglu_fwd = KFN(swiglu_fwd), .swiglu_bwd = KFN(swiglu_bwd), .gqa_expand = KFN(gqa_expand), \
        .gqa_reduce = KFN(gqa_reduce), .adamw = zt_cpu_adamw, .sgd = zt_cpu_sgd, .cast = zt_cpu_cast,     \
        .adam8bit = zt_cpu_adam8bit, .factor_stats = zt_cpu_factor_stats,                          \
        .adafactor_precondition = zt_cpu_adafactor_precondition, .adafactor_apply = zt_cpu_adafactor_apply, \
        .scale = zt_cpu_scale, .scaled_store = zt_cpu_scaled_store, .sum_squares = zt_cpu_sum_squares, \
        .cast_sr = zt_cpu_cast_sr, .newton_schulz = zt_cpu_newton_schulz,                          \
        .wire_quantize = zt_cpu_wire_quantize, .wire_dequantize = zt_cpu_wire_dequantize,          \
    }

#endif
