/* The whole bill of a rank's GPU memory (CUDA runs): the process's device
 * bytes as NVML counts them (what nvidia-smi shows), split into named
 * parts, each measured, never estimated:
 *   - allocator_reserved: the tracked allocator's reserved bytes (its
 *     counter: every block or granule it holds, live or cached);
 *   - cuda_context: this process's device bytes from NVML right after the
 *     context was made, less what the backend's setup added after it;
 *   - cublas: cuBLAS's and cuBLASLt's handles and the GEMM workspace, the
 *     device's used bytes around their creation;
 *   - backend_buffers: the backend's own buffers outside the allocator
 *     (the norm's scratch), measured the same way;
 *   - nccl: each NCCL communicator's bytes, around its init and its first
 *     collective of each kind (0, measured, when no NCCL communicator runs).
 * What they leave of the total is unexplained. The total is NVML's figure
 * for this PID; in a container whose PIDs NVML cannot match, the device's
 * used bytes (cudaMemGetInfo) when NVML lists no other process; else not
 * measured. Other processes on the GPU are reported beside it. */
#ifndef ZT_DEVICE_BILL_H
#define ZT_DEVICE_BILL_H

#include <stdio.h>

#include "zt_backend.h"
#include "zt_mem.h"
#include "zt_nvml.h"

typedef enum {
    ZT_DPART_ALLOCATOR_RESERVED = 0,
    ZT_DPART_CUDA_CONTEXT,
    ZT_DPART_CUBLAS,
    ZT_DPART_BACKEND_BUFFERS,
    ZT_DPART_NCCL,
    ZT_NUM_DPARTS
} zt_device_part;

const char *zt_device_part_name(zt_device_part p);

typedef enum { ZT_DSRC_NONE = 0, ZT_DSRC_NVML, ZT_DSRC_MEMGETINFO } zt_device_source;
const char *zt_device_source_name(int source);

typedef struct {
    int os_measured;
    size_t os_bytes;
    int source;                  /* how os_bytes was measured (when it was): zt_device_source */
    size_t parts[ZT_NUM_DPARTS]; /* only those with their bit in `measured` */
    unsigned measured;
    long long unexplained_bytes; /* os_bytes - the measured parts (when os_measured) */
    int others_measured;         /* NVML listed the device's processes */
    int other_processes;
    size_t other_bytes;
    size_t device_used, device_total; /* cudaMemGetInfo (0: not said) */
} zt_device_sample;

/* The device bill's state, in zt_ctx: NVML (or why not) and the context's
 * bytes measured at init. */
typedef struct {
    int active; /* a CUDA backend: samples mean something */
    zt_nvml *nvml;
    char nvml_why[256];
    int context_measured;
    size_t context_bytes;
    /* The NCCL communicators' bytes, read at each sample (the runtime
     * knows no communicator): set by their owner, unset before they go;
     * NULL: the part is not measured. */
    void (*nccl_bytes)(void *arg, size_t *bytes, int *measured);
    void *nccl_arg;
} zt_device_bill;

/* Right after the backend is made, before the first tracked allocation:
 * opens NVML (a failure is kept as why, not returned) and reads the
 * context's bytes. Nothing happens on another device. */
void zt_device_bill_init(zt_device_bill *d, zt_backend *be);
void zt_device_bill_destroy(zt_device_bill *d);
/* Bytes NVML's figure at init held that another part names: an NCCL
 * communicator made before the context (zt-train makes the world's first,
 * to pick the GPU), whose init the nccl part counts. */
void zt_device_bill_exclude(zt_device_bill *d, size_t bytes);
/* The bill now. */
void zt_device_sample_take(zt_device_bill *d, zt_backend *be, const zt_mem *device, zt_device_sample *out);
/* A few lines for a person (the OOM report, gpu_check.sh). */
void zt_device_sample_print(FILE *f, const zt_device_sample *s);

#endif
