/* The CPU model kernels in bf16 (see kernels.h). */
#include "kernels.h"

#define ACT zt_bf16
#define ACT_LD(x) zt_bf16_to_f32(x)
#define ACT_ST(v) zt_f32_to_bf16(v)
#define ACT_IS_F32 0
#define KFN(name) name##_bf16

#include "ops_embedding.inc"
#include "ops_layernorm.inc"
#include "ops_matmul.inc"
#include "ops_attention.inc"
#include "ops_attention_fused.inc"
#include "ops_gelu_residual.inc"
#include "ops_loss.inc"
#include "ops_rmsnorm.inc"
#include "ops_rope.inc"
#include "ops_swiglu.inc"
#include "ops_gqa.inc"

const zt_ops zt_cpu_ops_bf16 = ZT_CPU_OPS_TABLE(ZT_BF16);
