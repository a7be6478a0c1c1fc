/* Force-included (-include) into every kernel file the emulator compiles as
 * host C++: the device-side vocabulary of CUDA C++ (thread indices,
 * __syncthreads, warp shuffles, the intrinsics the kernels use) on top of the
 * emulated device. The kernel files themselves are translated only in two
 * mechanical ways (tests/cuda_emu/translate.cmake): `k<<<g, b, s, st>>>(...)`
 * becomes `zt_emu_launch(k, g, b, s, st)(...)`,
 * `extern __shared__ T name[];` becomes a pointer to the block's dynamic
 * shared memory, and each static `__shared__` declaration is followed by
 * ZT_EMU_SHARED_FRESH (below). */
#ifndef ZT_CUDA_EMU_KERNEL_H
#define ZT_CUDA_EMU_KERNEL_H

#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <tuple>
#include <utility>

#include "emu_device.h"

/* ---- thread and block coordinates of the running emulated thread -------- */
const uint3 &zt_emu_thread_idx(void);
const uint3 &zt_emu_block_idx(void);
const dim3 &zt_emu_block_dim(void);
const dim3 &zt_emu_grid_dim(void);
void *zt_emu_dynamic_shared(void);
void zt_emu_syncthreads(void);

#define threadIdx (zt_emu_thread_idx())
#define blockIdx (zt_emu_block_idx())
#define blockDim (zt_emu_block_dim())
#define gridDim (zt_emu_grid_dim())
#define __syncthreads() zt_emu_syncthreads()

/* Shared memory is per block. Blocks of one grid run one after another on
 * their stream's worker thread and a block's threads are coroutines of that
 * worker, so a thread_local static is exactly "one copy per running block";
 * two streams running the same kernel at once get separate copies. */
#undef __shared__
#define __shared__ static thread_local

/* Static shared memory holds garbage when a block starts on a GPU. The
 * translation puts ZT_EMU_SHARED_FRESH(name) after each static __shared__
 * declaration; the first thread of a block to get there fills the array with
 * NaN bytes (no thread can touch it before its declaration), so a read
 * before the first write, or a value left by the previous block, shows up
 * in the results. It also counts the bytes against the per-block limits.
 * zt_emu_static_shared_first_touch returns whether this block has not yet
 * touched the declaration whose marker is *seen. */
bool zt_emu_static_shared_first_touch(uint64_t *seen, size_t bytes);
template <typename T> static inline void zt_emu_shared_fresh(T &object, uint64_t *seen) {
    if (zt_emu_static_shared_first_touch(seen, sizeof object)) memset((void *)&object, 0xff, sizeof object);
}
#define ZT_EMU_SHARED_FRESH(name)                                                                                    \
    do {                                                                                                             \
        static thread_local uint64_t zt_emu_seen_;                                                                   \
        zt_emu_shared_fresh(name, &zt_emu_seen_);                                                                    \
    } while (0)

/* Occupancy hints mean nothing here; the launch checks enforce the limits */
#undef __launch_bounds__
#define __launch_bounds__(...)

/* ---- warp shuffles ---------------------------------------------------------
 * Every lane named in the mask must arrive; the emulator faults otherwise
 * (what CUDA leaves undefined). Values travel as their bits. */
enum { ZT_EMU_SHFL_IDX, ZT_EMU_SHFL_UP, ZT_EMU_SHFL_DOWN, ZT_EMU_SHFL_XOR };
uint64_t zt_emu_shfl(unsigned mask, uint64_t bits, int kind, int arg, int width);

template <typename T>
static inline T zt_emu_shfl_t(unsigned mask, T v, int kind, int arg, int width) {
    static_assert(sizeof(T) <= 8, "shuffle of a type wider than 64 bits");
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    bits = zt_emu_shfl(mask, bits, kind, arg, width);
    T out;
    memcpy(&out, &bits, sizeof out);
    return out;
}
template <typename T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    return zt_emu_shfl_t(mask, v, ZT_EMU_SHFL_IDX, src, width);
}
template <typename T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32) {
    return zt_emu_shfl_t(mask, v, ZT_EMU_SHFL_UP, (int)d, width);
}
template <typename T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32) {
    return zt_emu_shfl_t(mask, v, ZT_EMU_SHFL_DOWN, (int)d, width);
}
template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    return zt_emu_shfl_t(mask, v, ZT_EMU_SHFL_XOR, lane_mask, width);
}

/* A warp barrier: like a shuffle, it completes once every lane in the mask
 * has arrived (the emulator already orders memory at that point). */
static inline void __syncwarp(unsigned mask = 0xffffffffu) { (void)zt_emu_shfl(mask, 0, ZT_EMU_SHFL_IDX, 0, 32); }

/* ---- intrinsics (round-to-nearest forms are plain IEEE operations; the
 * emulator builds with -ffp-contract=off, so nothing is fused) ----------- */
/* A GPU's arithmetic returns its one canonical NaN (0x7fffffff), where x86
 * keeps a NaN operand's sign and payload: the emulator does as the GPU, so
 * code that relies on NaN bits differs here as it would on a GPU. */
static inline float zt_emu_gpu_nan(float r) {
    if (r == r) return r;
    unsigned int u = 0x7fffffffu;
    memcpy(&r, &u, sizeof r);
    return r;
}
static inline float __fadd_rn(float a, float b) { return zt_emu_gpu_nan(a + b); }
static inline float __fmul_rn(float a, float b) { return zt_emu_gpu_nan(a * b); }
static inline void __nanosleep(unsigned ns) {
    struct timespec ts = {0, (long)ns};
    nanosleep(&ts, NULL);
}
static inline unsigned int __float_as_uint(float x) {
    unsigned int u;
    memcpy(&u, &x, sizeof u);
    return u;
}
static inline float __uint_as_float(unsigned int u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* cuda_runtime.h's C++ overload for kernel pointers exists only under nvcc */
template <typename T> static inline cudaError_t cudaFuncSetAttribute(T *func, enum cudaFuncAttribute attr, int value) {
    return ::cudaFuncSetAttribute((const void *)func, attr, value);
}

/* ---- launches --------------------------------------------------------------
 * The arguments are converted to the kernel's parameter types and copied at
 * launch, as CUDA does; the grid runs later on the stream's worker. */
bool zt_emu_check_launch(dim3 grid, dim3 block, size_t dynamic_smem, cudaStream_t stream, size_t smem_optin);

/* A kernel's pointer arguments must be null or point into device or pinned
 * memory (one past the end included): a GPU faults on anything else. */
bool zt_emu_check_kernel_pointer(const void *p, int index, const char *kernel);
template <typename T> static inline bool zt_emu_check_arg(const T &, int, const char *) { return true; }
template <typename T> static inline bool zt_emu_check_arg(T *const &p, int index, const char *kernel) {
    return zt_emu_check_kernel_pointer((const void *)p, index, kernel);
}

template <typename... P> struct zt_emu_launcher {
    void (*kernel)(P...);
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    const char *name;
    template <typename... A> void operator()(A &&...a) const {
        const void *func = (const void *)kernel;
        size_t optin = zt_emu_dynamic_smem_optin(func); /* read once: checked and carried */
        if (!zt_emu_check_launch(grid, block, smem, stream, optin)) return;
        std::tuple<P...> args(std::forward<A>(a)...);
        int index = 0;
        bool pointers_ok = true;
        std::apply([&](const auto &...x) { ((pointers_ok = zt_emu_check_arg(x, index++, name) && pointers_ok), ...); },
                   args);
        if (!pointers_ok) return;
        void (*k)(P...) = kernel;
        dim3 g = grid, b = block;
        size_t s = smem;
        const char *n = name;
        zt_emu_enqueue(stream, [=]() {
            std::function<void()> body = [&]() { std::apply(k, args); };
            zt_emu_run_grid(g, b, s, optin, func, body, n);
        });
    }
};
template <typename... P>
static inline zt_emu_launcher<P...> zt_emu_make_launcher(void (*k)(P...), const char *name, dim3 grid, dim3 block,
                                                         size_t smem = 0, cudaStream_t stream = 0) {
    return zt_emu_launcher<P...>{k, grid, block, smem, stream, name};
}
/* shared memory bytes and stream are optional, as between <<< >>> */
#define zt_emu_launch(k, ...) zt_emu_make_launcher(k, #k, __VA_ARGS__)

#endif
