/* The emulated device's internals, shared by the emulator's own files.
 *
 * The CUDA emulator runs zerotrain's real CUDA kernels, backend and NCCL
 * communicator on the CPU, so that code written for a GPU is exercised on
 * machines that have none (tests/cuda_emu/README.md). It is test
 * infrastructure: nothing in a real CUDA build links it.
 *
 * Device model: every stream is a FIFO of operations executed by its own
 * worker thread, so streams really run concurrently with each other and with
 * the host, and the only ordering between them is what the program asks for
 * with events (plus NCCL's per-communicator issue order). Kernels run block
 * by block on the stream's worker; a block's threads are coroutines that
 * switch at __syncthreads and at warp shuffles. */
#ifndef ZT_CUDA_EMU_DEVICE_H
#define ZT_CUDA_EMU_DEVICE_H

#include <cuda_runtime_api.h>

#include <functional>

/* Shared memory per block on an H200 (sm_90): static alone may not exceed
 * the default; without cudaFuncSetAttribute static and dynamic together may
 * not exceed the default either; with it, static plus the attribute's value
 * may not exceed the opt-in maximum. */
constexpr size_t zt_emu_smem_default_max = 48 * 1024;
constexpr size_t zt_emu_smem_optin_max = 227 * 1024;

/* Runs op later, on the emulated device, after everything enqueued on
 * `stream` before it (stream 0 is the legacy default stream). */
void zt_emu_enqueue(cudaStream_t stream, std::function<void()> op);

/* An error found while a kernel ran (a divergent barrier, a shuffle with
 * missing lanes): sticky, reported by every later synchronizing call, as a
 * device fault is on a GPU. `what` is printed to stderr once. */
void zt_emu_device_fault(const char *what);

/* Whether [p, p + bytes) lies inside one device allocation. */
bool zt_emu_is_device_range(const void *p, size_t bytes);

/* Device memory for the driver's VMM calls (emu_vmm.cpp): bytes taken
 * against the emulated capacity (false: it is full) and given back; a
 * granule's mapping at p registered as device memory, or removed. */
bool zt_emu_take_device_bytes(size_t bytes);
void zt_emu_give_device_bytes(size_t bytes);
void zt_emu_note_mapping(void *p, size_t bytes, bool mapped);

/* The kernel's cudaFuncAttributeMaxDynamicSharedMemorySize, 0 if it was
 * never set (the default limits apply). */
size_t zt_emu_dynamic_smem_optin(const void *func);

/* Records that a block of kernel `func` declared `bytes` of static shared
 * memory (cudaFuncGetAttributes reports the largest). */
void zt_emu_note_static_smem(const void *func, size_t bytes);

/* Runs every block of a kernel; `body` runs one thread of the block
 * described by the emulator's current-thread state. Called on a stream
 * worker. `smem_optin` is the kernel's opt-in at launch
 * (zt_emu_dynamic_smem_optin); `func` is the kernel, `name` names it in
 * fault messages. */
void zt_emu_run_grid(dim3 grid, dim3 block, size_t dynamic_smem, size_t smem_optin, const void *func,
                     const std::function<void()> &body, const char *name);

#endif
