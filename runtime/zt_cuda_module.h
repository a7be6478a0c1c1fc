/* The CUDA module (libzt_cuda.so): the CUDA backend and the CUDA
 * communicators, opened with dlopen the first time a run asks for a GPU.
 *
 * Why a module: a CPU-only run of a CUDA build must map no CUDA library
 * (cudart, cuBLAS, cuBLASLt, NCCL); linked into the programs, their
 * initialisers and pages cost every CPU rank ~150 MiB of RSS (the whole
 * bill, docs/memory.md). One build still serves both: the programs find
 * the module beside them (../lib/libzt_cuda.so from build/examples/zt-train)
 * or where ZT_CUDA_MODULE points. */
#ifndef ZT_CUDA_MODULE_H
#define ZT_CUDA_MODULE_H

#include <stddef.h>

#include "zt_backend.h"
#include "zt_error.h"

struct zt_comm;

/* Bumped whenever the table below or a type it passes changes shape: the
 * module and the program must come from the same build. */
#define ZT_CUDA_MODULE_ABI 1
#define ZT_CUDA_MODULE_ENTRY "zt_cuda_module_entry"
#define ZT_CUDA_MODULE_FILE "libzt_cuda.so"

typedef struct zt_cuda_module {
    int abi;           /* ZT_CUDA_MODULE_ABI of the module's build */
    size_t table_size; /* sizeof(zt_cuda_module) there */
    const char *flavour; /* "on" (the CUDA runtime) or "emulated" (tests/cuda_emu) */
    zt_status (*backend_create)(int nthreads, int device, zt_backend **out, zt_error *err);
    int (*device_count)(void);
    zt_status (*comm_create_nccl)(struct zt_comm *c, zt_error *err);
    zt_status (*comm_create_staged)(struct zt_comm *c, size_t pool_floor_bytes, zt_error *err);
} zt_cuda_module;

/* The module's entry: a function, so that its table is read-only data. */
typedef const zt_cuda_module *(*zt_cuda_module_entry_fn)(void);

/* Opens the module (once per process in effect: dlopen counts references
 * and the module is never closed, as backends and communicators it made
 * may live to exit) and checks its ABI. ZT_ERR_UNSUPPORTED in a build
 * without CUDA or when the module is missing, naming where it looked. */
zt_status zt_cuda_module_open(const zt_cuda_module **out, zt_error *err);

/* Whether an NVIDIA driver is present (its device nodes or /proc entry):
 * without one no GPU can be visible, and the module is not opened just to
 * learn that. Always 1 in an emulator build. */
int zt_cuda_driver_present(void);

#endif
