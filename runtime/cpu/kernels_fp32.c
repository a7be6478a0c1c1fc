/* The CPU model kernels in fp32 (see kernels.h). */
#include "kernels.h"

#define ACT float
#define ACT_LD(x) (x)
#define ACT_ST(v) (v)
#define ACT_IS_F32 1
#define KFN(name) name##_fp32

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

const zt_ops zt_cpu_ops_fp32 = ZT_CPU_OPS_TABLE(ZT_FP32);
