/* The CUDA communicators, compiled into the CUDA module (libzt_cuda.so) and
 * reached through zt_comm_create_nccl / zt_comm_create_staged (zt_comm.h),
 * which open it. */
#ifndef ZT_COMM_CUDA_H
#define ZT_COMM_CUDA_H

#include "zt_comm.h"

/* NCCL, one GPU per rank (comm_nccl.c); ZT_ERR_UNSUPPORTED in a module
 * built without NCCL. */
zt_status zt_comm_nccl_create(zt_comm *c, zt_error *err);
/* MPI with host staging through pinned buffers (comm_staged.c). */
zt_status zt_comm_staged_create(zt_comm *c, size_t pool_floor_bytes, zt_error *err);

#endif
