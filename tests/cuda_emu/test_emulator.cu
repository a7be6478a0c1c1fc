/* The CUDA emulator's own test: that it runs CUDA C++ the way a GPU does
 * where zerotrain's kernels depend on it, and that it reports what a GPU
 * would not survive.
 *   - thread and block indices, grid-stride loops, 2-D blocks;
 *   - warp shuffles (xor, down, up, idx), __syncwarp, and block
 *     reductions through __shared__ memory and __syncthreads;
 *   - a missing __syncthreads shows (threads run in both orders);
 *   - dynamic shared memory, and the 48 KiB limit without
 *     cudaFuncSetAttribute;
 *   - static shared memory starts as NaN bytes in every block, not with
 *     what the previous block left (one and two arrays per declaration);
 *   - launch configuration errors through cudaGetLastError;
 *   - streams run concurrently and are ordered only by events: a consumer
 *     that waits on the producer's event sees its data; one that does not
 *     wait runs ahead of a slow producer;
 *   - a full-mask shuffle after some lanes returned is a device fault,
 *     reported by the next synchronizing call (last: the fault is sticky);
 *   - in child processes (a fault is sticky for the process): a kernel given
 *     a pageable host pointer faults; a block with more than 48 KiB of
 *     static shared memory faults, and so does one whose static and dynamic
 *     shared memory together exceed 48 KiB without cudaFuncSetAttribute
 *     (with it, the same launch runs, and cudaFuncGetAttributes then
 *     reports the static size); two ranks whose NCCL operations do not
 *     match (an all-gather against a broadcast, and sizes that differ)
 *     fault instead of exchanging garbage.
 * Built only in emulator builds (ZT_CUDA=EMU). */
#include <cuda_runtime.h>
#include <nccl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static int failures = 0;
#define CHECK(cond, ...)                                                                                 \
    do {                                                                                                 \
        if (!(cond)) {                                                                                   \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                         \
            fprintf(stderr, __VA_ARGS__);                                                                \
            fprintf(stderr, "\n");                                                                       \
            failures++;                                                                                  \
        }                                                                                                \
    } while (0)

__global__ static void iota_kernel(int *out, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = i;
}

__global__ static void index_2d_kernel(int *out) {
    int t = threadIdx.y * blockDim.x + threadIdx.x;
    out[blockIdx.x * blockDim.x * blockDim.y + t] = (int)(blockIdx.x * 1000 + threadIdx.y * 10 + threadIdx.x);
}

/* out[w] = sum of lanes by xor butterfly; down/up/idx shuffles of lane ids */
__global__ static void shuffle_kernel(int *xor_sum, int *down, int *up, int *idx) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int v = lane;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) xor_sum[w] = v;
    down[threadIdx.x] = __shfl_down_sync(0xffffffffu, lane, 3);
    up[threadIdx.x] = __shfl_up_sync(0xffffffffu, lane, 5);
    idx[threadIdx.x] = __shfl_sync(0xffffffffu, lane * 2, 31 - lane);
}

/* Each lane stores its id in shared memory and, after a warp barrier, reads
 * its neighbour's: without the barrier, the lanes that run first would read
 * slots not yet written (NaN bytes in the emulator). */
__global__ static void syncwarp_kernel(int *out) {
    __shared__ int slot[64];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    slot[threadIdx.x] = (int)threadIdx.x;
    __syncwarp();
    out[threadIdx.x] = slot[w * 32 + (lane + 1) % 32];
}

/* Block sum of 0..n-1 through shared memory: a tree with barriers */
__global__ static void block_sum_kernel(long long *out) {
    __shared__ long long part[1024];
    part[threadIdx.x] = threadIdx.x;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = part[0] + blockIdx.x;
}

/* Reads a neighbour's shared slot without __syncthreads: a race */
__global__ static void racy_neighbour_kernel(int *out, int dir) {
    __shared__ int sh[64];
    int t = threadIdx.x, n = blockDim.x;
    sh[t] = t + 1000 * (int)blockIdx.x;
    out[blockIdx.x * n + t] = sh[(t + dir + n) % n];
}

/* Reverses a row through dynamic shared memory */
__global__ static void reverse_kernel(float *out, const float *in, int n) {
    extern __shared__ float row[];
    for (int i = threadIdx.x; i < n; i += blockDim.x) row[i] = in[i];
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = row[n - 1 - i];
}

/* A producer held back by the host: spins until *go (pinned host memory)
 * is set, or gives up after about 10 s so that a broken emulator fails
 * rather than hangs. */
__global__ static void gated_fill_kernel(int *out, int n, int value, const volatile int *go) {
    for (long k = 0; k < 10000000L && !*go; k++) __nanosleep(1000);
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = value;
}

__global__ static void copy_kernel(int *dst, const int *src, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

/* Half of each warp leaves, the other half shuffles with a full mask: the
 * shuffle waits for lanes that are gone (undefined on a GPU, a hang or
 * garbage in practice). */
__global__ static void shuffle_after_exit_kernel(int *out, int n) {
    if ((int)(threadIdx.x & 31) >= n) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
}

/* Only block 0 writes the shared arrays; every block copies them out. On a
 * GPU the other blocks read garbage, here NaN bytes (all ones), whichever
 * order the blocks run in. out: [gridDim.x, 3, 32] ints. */
__global__ static void fresh_shared_kernel(int *out) {
    __shared__ int single[32];
    __shared__ int first[32], second[32];
    int t = threadIdx.x;
    if (blockIdx.x == 0) single[t] = 100 + t, first[t] = 200 + t, second[t] = 300 + t;
    __syncthreads();
    int *o = out + blockIdx.x * 96;
    o[t] = single[t], o[32 + t] = first[t], o[64 + t] = second[t];
}

/* 56 KiB of static shared memory: over the 48 KiB a block may declare. */
__global__ static void big_static_shared_kernel(int *out) {
    __shared__ char low[40 * 1024], high[16 * 1024];
    low[threadIdx.x] = (char)threadIdx.x, high[threadIdx.x] = (char)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = low[threadIdx.x] + high[threadIdx.x];
}

/* 132 bytes of static shared memory beside the dynamic: 48 KiB of dynamic
 * is over the limit without an opt-in (static and dynamic count together),
 * and fine with one. out: [32] floats. */
__global__ static void static_and_dynamic_kernel(float *out) {
    __shared__ float red[33];
    extern __shared__ float dyn[];
    dyn[threadIdx.x] = (float)threadIdx.x;
    red[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = dyn[threadIdx.x] + red[threadIdx.x];
}

/* ---- scenarios run in child processes -------------------------------------- */

static int fault_reported(void) { return cudaDeviceSynchronize() == cudaErrorLaunchFailure ? 0 : 1; }

static int child_host_pointer(void) {
    static int host_int[64];
    iota_kernel<<<1, 32>>>(host_int, 32);
    return fault_reported();
}

static int child_static_shared_limit(void) {
    int *d = NULL;
    if (cudaMalloc((void **)&d, 32 * sizeof(int)) != cudaSuccess) return 2;
    big_static_shared_kernel<<<1, 32>>>(d);
    return fault_reported();
}

static int child_static_plus_dynamic(void) {
    float *d = NULL;
    if (cudaMalloc((void **)&d, 32 * sizeof(float)) != cudaSuccess) return 2;
    static_and_dynamic_kernel<<<1, 32, 48 * 1024>>>(d); /* no cudaFuncSetAttribute */
    return fault_reported();
}

/* rank 0 all-gathers, rank 1 broadcasts (kind 0); or both all-gather with
 * different sizes (kind 1) */
static int child_nccl_mismatch(int rank, const char *id_text, int kind) {
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    snprintf(id.internal, sizeof id.internal, "%s", id_text);
    ncclComm_t comm;
    if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) return 2;
    float *buf = NULL;
    cudaStream_t st;
    if (cudaMalloc((void **)&buf, 64 * sizeof(float)) != cudaSuccess) return 2;
    if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess) return 2;
    ncclResult_t r;
    if (kind == 0 && rank == 1) r = ncclBroadcast(buf, buf, 8, ncclFloat, 0, comm, st);
    else r = ncclAllGather(buf, buf + 16, kind == 1 && rank == 1 ? 4 : 8, ncclFloat, comm, st);
    if (r != ncclSuccess) return 2;
    return fault_reported();
}

/* Runs this program again with `args`; returns its exit status. */
static int run_child(char **args) {
    pid_t pid;
    extern char **environ;
    if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, args, environ) != 0) return -1;
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
    return WEXITSTATUS(status);
}

static void check_nccl_mismatch(const char *kind) {
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) != ncclSuccess) {
        CHECK(0, "ncclGetUniqueId");
        return;
    }
    pid_t pids[2];
    extern char **environ;
    for (int r = 0; r < 2; r++) {
        char rank[4];
        snprintf(rank, sizeof rank, "%d", r);
        char *args[] = {(char *)"test_cuda_emulator", (char *)"nccl-mismatch", rank, id.internal, (char *)kind, NULL};
        if (posix_spawn(&pids[r], "/proc/self/exe", NULL, NULL, args, environ) != 0) pids[r] = -1;
    }
    for (int r = 0; r < 2; r++) {
        int status = 0;
        int ok = pids[r] > 0 && waitpid(pids[r], &status, 0) == pids[r] && WIFEXITED(status) && !WEXITSTATUS(status);
        CHECK(ok, "NCCL mismatch (kind %s) not reported as a device fault on rank %d", kind, r);
    }
}

int main(int argc, char **argv) {
    /* A child runs its scenario and nothing else (never the whole test again). */
    if (argc > 1) {
        if (strcmp(argv[1], "host-pointer") == 0) return child_host_pointer();
        if (strcmp(argv[1], "static-shared-limit") == 0) return child_static_shared_limit();
        if (strcmp(argv[1], "static-plus-dynamic") == 0) return child_static_plus_dynamic();
        if (argc == 5 && strcmp(argv[1], "nccl-mismatch") == 0)
            return child_nccl_mismatch(atoi(argv[2]), argv[3], atoi(argv[4]));
        fprintf(stderr, "usage: %s [host-pointer | static-shared-limit | static-plus-dynamic | nccl-mismatch RANK ID KIND]\n",
                argv[0]);
        return 2;
    }

    char *host_pointer_args[] = {(char *)"test_cuda_emulator", (char *)"host-pointer", NULL};
    CHECK(run_child(host_pointer_args) == 0, "a kernel writing pageable host memory is not reported as a device fault");
    char *static_shared_args[] = {(char *)"test_cuda_emulator", (char *)"static-shared-limit", NULL};
    CHECK(run_child(static_shared_args) == 0, "56 KiB of static shared memory is not reported as a device fault");
    char *static_dynamic_args[] = {(char *)"test_cuda_emulator", (char *)"static-plus-dynamic", NULL};
    CHECK(run_child(static_dynamic_args) == 0,
          "132 bytes static + 48 KiB dynamic without cudaFuncSetAttribute is not reported as a device fault");
    {
        /* the same launch with the opt-in runs */
        float *d = NULL, h[32];
        CHECK(cudaMalloc((void **)&d, sizeof h) == cudaSuccess, "cudaMalloc");
        CHECK(cudaFuncSetAttribute(static_and_dynamic_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 48 * 1024) ==
                  cudaSuccess,
              "cudaFuncSetAttribute");
        static_and_dynamic_kernel<<<1, 32, 48 * 1024>>>(d);
        CHECK(cudaDeviceSynchronize() == cudaSuccess, "static + dynamic shared memory with the opt-in failed");
        CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess, "cudaMemcpy");
        int bad = 0;
        for (int i = 0; i < 32; i++) bad += h[i] != (float)i + 1.0f;
        CHECK(bad == 0, "static + dynamic shared memory: %d wrong values", bad);
        /* the kernel has run: its static size is known, as a GPU knows it */
        struct cudaFuncAttributes fa;
        CHECK(cudaFuncGetAttributes(&fa, (const void *)static_and_dynamic_kernel) == cudaSuccess &&
                  fa.sharedSizeBytes == 33 * sizeof(float),
              "cudaFuncGetAttributes: %zu static bytes, want %zu", fa.sharedSizeBytes, 33 * sizeof(float));
        cudaFree(d);
    }
    check_nccl_mismatch("0");
    check_nccl_mismatch("1");

    int *d = NULL;
    CHECK(cudaMalloc((void **)&d, 4096 * sizeof(int)) == cudaSuccess, "cudaMalloc");

    /* indices and grid-stride loops */
    iota_kernel<<<3, 64>>>(d, 1000);
    int h[4096];
    CHECK(cudaMemcpy(h, d, 1000 * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess, "copy back");
    for (int i = 0; i < 1000; i++) CHECK(h[i] == i, "iota[%d] = %d", i, h[i]);

    index_2d_kernel<<<2, dim3(4, 3)>>>(d);
    CHECK(cudaMemcpy(h, d, 24 * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess, "copy back");
    for (int b = 0; b < 2; b++)
        for (int y = 0; y < 3; y++)
            for (int x = 0; x < 4; x++)
                CHECK(h[b * 12 + y * 4 + x] == b * 1000 + y * 10 + x, "2-D index (%d,%d,%d)", b, y, x);

    /* warp shuffles */
    int *xs = d, *down = d + 64, *up = d + 128, *idx = d + 192;
    shuffle_kernel<<<1, 64>>>(xs, down, up, idx);
    CHECK(cudaMemcpy(h, d, 256 * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess, "copy back");
    CHECK(h[0] == 496 && h[1] == 496, "xor butterfly sums: %d %d (want 496)", h[0], h[1]);
    for (int t = 0; t < 64; t++) {
        int lane = t & 31;
        CHECK(h[64 + t] == (lane + 3 < 32 ? lane + 3 : lane), "shfl_down lane %d: %d", t, h[64 + t]);
        CHECK(h[128 + t] == (lane >= 5 ? lane - 5 : lane), "shfl_up lane %d: %d", t, h[128 + t]);
        CHECK(h[192 + t] == 2 * (31 - lane), "shfl idx lane %d: %d", t, h[192 + t]);
    }

    /* a warp barrier orders the lanes' shared-memory stores before the loads */
    syncwarp_kernel<<<1, 64>>>(d);
    CHECK(cudaMemcpy(h, d, 64 * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess, "copy back");
    for (int t = 0; t < 64; t++)
        CHECK(h[t] == (t & ~31) + ((t & 31) + 1) % 32, "syncwarp lane %d read %d", t, h[t]);

    /* shared memory and barriers */
    long long *sums = (long long *)d;
    block_sum_kernel<<<3, 1024>>>(sums);
    long long hs[3];
    CHECK(cudaMemcpy(hs, sums, sizeof hs, cudaMemcpyDeviceToHost) == cudaSuccess, "copy back");
    for (int b = 0; b < 3; b++) CHECK(hs[b] == 1023LL * 1024 / 2 + b, "block %d sum %lld", b, hs[b]);

    /* static shared memory is fresh garbage in every block: block 1 never
     * sees block 0's values, in either block order (launches alternate it) */
    for (int launch = 0; launch < 2; launch++) {
        fresh_shared_kernel<<<2, 32>>>(d);
        CHECK(cudaMemcpy(h, d, 192 * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess, "copy back");
        for (int t = 0; t < 32; t++) {
            for (int a = 0; a < 3; a++) {
                CHECK(h[a * 32 + t] == 100 * (a + 1) + t, "launch %d block 0 array %d [%d] = %d", launch, a, t,
                      h[a * 32 + t]);
                CHECK(h[96 + a * 32 + t] == -1, "launch %d: block 1 read %d from static shared array %d [%d], not "
                      "fresh NaN bytes", launch, h[96 + a * 32 + t], a, t);
            }
        }
    }

    /* a missing __syncthreads gives wrong values in one direction or the
     * other: even blocks run threads first to last, odd ones last to first */
    for (int dir = -1; dir <= 1; dir += 2) {
        racy_neighbour_kernel<<<2, 64>>>(d, dir);
        CHECK(cudaMemcpy(h, d, 128 * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess, "copy back");
        int wrong = 0;
        for (int b = 0; b < 2; b++)
            for (int t = 0; t < 64; t++) wrong += h[b * 64 + t] != (t + dir + 64) % 64 + 1000 * b;
        CHECK(wrong > 0, "a missing __syncthreads (neighbour %+d) went unnoticed", dir);
    }

    /* dynamic shared memory, and its limit */
    float *fin = NULL, *fout = NULL;
    int n = 20000; /* 80 000 bytes: over the 48 KiB default */
    CHECK(cudaMalloc((void **)&fin, n * sizeof(float)) == cudaSuccess, "cudaMalloc");
    CHECK(cudaMalloc((void **)&fout, n * sizeof(float)) == cudaSuccess, "cudaMalloc");
    float *hf = (float *)malloc(n * sizeof(float));
    for (int i = 0; i < n; i++) hf[i] = (float)i;
    CHECK(cudaMemcpy(fin, hf, n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess, "copy in");
    reverse_kernel<<<1, 256, n * sizeof(float)>>>(fout, fin, n);
    CHECK(cudaGetLastError() == cudaErrorInvalidValue, "80 000 bytes of dynamic shared memory without opting in");
    CHECK(cudaFuncSetAttribute(reverse_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, n * (int)sizeof(float)) ==
              cudaSuccess,
          "opt in");
    reverse_kernel<<<1, 256, n * sizeof(float)>>>(fout, fin, n);
    CHECK(cudaGetLastError() == cudaSuccess, "launch after opting in");
    CHECK(cudaMemcpy(hf, fout, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess, "copy back");
    for (int i = 0; i < n; i++) CHECK(hf[i] == (float)(n - 1 - i), "reverse[%d]", i);

    /* launch configuration errors */
    iota_kernel<<<1, 2048>>>(d, 10);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "2048 threads per block");
    iota_kernel<<<0, 32>>>(d, 10);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "empty grid");
    CHECK(cudaGetLastError() == cudaSuccess, "cudaGetLastError resets");

    /* copies check their direction and their range */
    CHECK(cudaMemcpy(h, d, sizeof(int), cudaMemcpyHostToDevice) == cudaErrorInvalidValue, "H2D into host memory");
    CHECK(cudaMemcpy(h, d, 8192 * sizeof(int), cudaMemcpyDeviceToHost) == cudaErrorInvalidValue,
          "copy past the allocation's end");
    (void)cudaGetLastError();

    /* streams: event ordering, and its absence */
    cudaStream_t producer, consumer;
    cudaEvent_t produced;
    CHECK(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking) == cudaSuccess, "stream");
    CHECK(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking) == cudaSuccess, "stream");
    CHECK(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming) == cudaSuccess, "event");
    int *src = d, *dst = d + 1024;
    CHECK(cudaMemset(d, 0, 2048 * sizeof(int)) == cudaSuccess, "memset");
    int *go = NULL;
    CHECK(cudaHostAlloc((void **)&go, sizeof *go, cudaHostAllocDefault) == cudaSuccess, "pinned flag");
    *go = 1;
    gated_fill_kernel<<<1, 128, 0, producer>>>(src, 1024, 7, go);
    cudaEventRecord(produced, producer);
    cudaStreamWaitEvent(consumer, produced, 0);
    copy_kernel<<<1, 128, 0, consumer>>>(dst, src, 1024);
    CHECK(cudaStreamSynchronize(consumer) == cudaSuccess, "sync");
    CHECK(cudaMemcpy(h, dst, 1024 * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess, "copy back");
    int seen = 0;
    for (int i = 0; i < 1024; i++) seen += h[i] == 7;
    CHECK(seen == 1024, "a consumer that waits on the event sees all of the producer's data (%d of 1024)", seen);

    CHECK(cudaMemset(d, 0, 2048 * sizeof(int)) == cudaSuccess, "memset");
    *go = 0;
    gated_fill_kernel<<<1, 32, 0, producer>>>(src, 1024, 9, go);
    copy_kernel<<<1, 128, 0, consumer>>>(dst, src, 1024); /* no wait: runs while the producer is held */
    CHECK(cudaStreamSynchronize(consumer) == cudaSuccess, "sync");
    *go = 1;
    CHECK(cudaMemcpy(h, dst, 1024 * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess, "copy back");
    seen = 0;
    for (int i = 0; i < 1024; i++) seen += h[i] == 9;
    CHECK(seen == 0, "a consumer without the event wait ran after the held producer: streams are not concurrent");
    CHECK(cudaStreamSynchronize(producer) == cudaSuccess, "sync");
    CHECK(cudaEventQuery(produced) == cudaSuccess, "event done");

    /* a shuffle whose lanes have left: a device fault, sticky */
    shuffle_after_exit_kernel<<<1, 64>>>(d, 32); /* every lane stays: fine */
    CHECK(cudaDeviceSynchronize() == cudaSuccess, "full warps shuffle");
    shuffle_after_exit_kernel<<<1, 64>>>(d, 16);
    cudaError_t rc = cudaDeviceSynchronize();
    CHECK(rc == cudaErrorLaunchFailure, "shuffle with exited lanes reported as a device fault (got %s)",
          cudaGetErrorName(rc));
    CHECK(cudaStreamSynchronize(consumer) == cudaErrorLaunchFailure, "the fault is sticky");

    free(hf);
    cudaEventDestroy(produced);
    cudaStreamDestroy(producer);
    cudaStreamDestroy(consumer);
    cudaFreeHost(go);
    cudaFree(fin);
    cudaFree(fout);
    cudaFree(d);
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("cuda emulator: all checks passed\n");
    return 0;
}
