/* NVML (the library nvidia-smi reads), opened with dlopen when a CUDA run
 * asks for a device's processes: a CPU run and a machine without the
 * driver never load it. Only what the device bill needs: this process's
 * device memory, the other processes' on the same GPU, and the device's
 * used and total bytes. */
#ifndef ZT_NVML_H
#define ZT_NVML_H

#include <stddef.h>

#include "zt_error.h"

typedef struct zt_nvml zt_nvml;

/* NULL with ZT_ERR_UNSUPPORTED and why in err where NVML cannot be loaded
 * or initialised (no driver, the emulator). */
zt_status zt_nvml_open(zt_nvml **out, zt_error *err);
void zt_nvml_close(zt_nvml *n);

typedef struct {
    int processes;          /* compute processes on the device, this one included when listed */
    int self_found;         /* this PID among them (a container's PIDs may not match the host's) */
    size_t self_bytes;      /* its device memory */
    int others;             /* the other processes */
    size_t others_bytes;    /* their device memory (those that report it) */
    size_t used_bytes, total_bytes; /* the device's (nvmlDeviceGetMemoryInfo) */
} zt_nvml_usage;

/* The device whose PCI bus id is `pci_bus_id` ("0000:3B:00.0", as
 * cudaDeviceGetPCIBusId writes it, which names the same GPU under both
 * numberings), as seen from process `pid`. */
zt_status zt_nvml_usage_read(zt_nvml *n, const char *pci_bus_id, int pid, zt_nvml_usage *out, zt_error *err);

#endif
