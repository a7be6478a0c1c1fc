/* NVML through dlopen (zt_nvml.h). The few types used are declared here
 * with NVML's documented layout, so building needs no NVML header. */
#include "zt_nvml.h"

#include <dlfcn.h>
#include <stdlib.h>

typedef int nvml_return;     /* nvmlReturn_t: 0 is success */
typedef void *nvml_device;   /* nvmlDevice_t */
#define NVML_SUCCESS 0
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_VALUE_NOT_AVAILABLE (~0ULL)

typedef struct { /* nvmlProcessInfo_t (the v2 layout), what _v3 of the call fills */
    unsigned int pid;
    unsigned long long used_gpu_memory;
    unsigned int gpu_instance_id, compute_instance_id;
} nvml_process_info;
/* Some R535 drivers wrote a 32-byte entry (with usedGpuCcProtectedMemory):
 * the buffer has room for that much per entry, so no driver writes past it. */
#define ENTRY_ROOM 32

typedef struct { /* nvmlMemory_t */
    unsigned long long total, free, used;
} nvml_memory;

struct zt_nvml {
    void *lib;
    nvml_return (*shutdown)(void);
    nvml_return (*by_pci_bus_id)(const char *, nvml_device *);
    nvml_return (*compute_processes)(nvml_device, unsigned int *, nvml_process_info *);
    nvml_return (*memory_info)(nvml_device, nvml_memory *);
    const char *(*error_string)(nvml_return);
};

static void *symbol(void *lib, const char *name, int *missing) {
    void *p = dlsym(lib, name);
    *missing |= p == NULL;
    return p;
}

zt_status zt_nvml_open(zt_nvml **out, zt_error *err) {
    *out = NULL;
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return ZT_FAIL(err, ZT_ERR_UNSUPPORTED, "NVML is not available (libnvidia-ml.so.1: %s)", dlerror());
    zt_nvml *n = calloc(1, sizeof *n);
    if (!n) {
        dlclose(lib);
        return ZT_FAIL(err, ZT_ERR_OOM, "NVML: no memory");
    }
    int missing = 0;
    nvml_return (*init)(void) = (nvml_return (*)(void))symbol(lib, "nvmlInit_v2", &missing);
    n->lib = lib;
    n->shutdown = (nvml_return (*)(void))symbol(lib, "nvmlShutdown", &missing);
    n->by_pci_bus_id = (nvml_return (*)(const char *, nvml_device *))symbol(lib, "nvmlDeviceGetHandleByPciBusId_v2",
                                                                              &missing);
    n->compute_processes = (nvml_return (*)(nvml_device, unsigned int *, nvml_process_info *))symbol(
        lib, "nvmlDeviceGetComputeRunningProcesses_v3", &missing);
    n->memory_info = (nvml_return (*)(nvml_device, nvml_memory *))symbol(lib, "nvmlDeviceGetMemoryInfo", &missing);
    n->error_string = (const char *(*)(nvml_return))symbol(lib, "nvmlErrorString", &missing);
    nvml_return rc = missing ? -1 : init();
    if (rc != NVML_SUCCESS) {
        zt_status st = ZT_FAIL(err, ZT_ERR_UNSUPPORTED, "NVML: %s", missing ? "a function this build needs is missing "
                               "(a driver older than R510, CUDA 11.6's)" : n->error_string(rc));
        dlclose(lib);
        free(n);
        return st;
    }
    *out = n;
    return ZT_OK;
}

void zt_nvml_close(zt_nvml *n) {
    if (!n) return;
    (void)n->shutdown();
    dlclose(n->lib);
    free(n);
}

/* The device's compute processes into *list (malloc'd, [*count]). */
static zt_status processes(zt_nvml *n, nvml_device dev, nvml_process_info **list, unsigned *count, zt_error *err) {
    unsigned cap = 16;
    for (;;) {
        nvml_process_info *p = calloc(cap, ENTRY_ROOM > sizeof *p ? ENTRY_ROOM : sizeof *p);
        if (!p) return ZT_FAIL(err, ZT_ERR_OOM, "NVML: no memory for %u processes", cap);
        unsigned got = cap;
        nvml_return rc = n->compute_processes(dev, &got, p);
        if (rc == NVML_SUCCESS) {
            *list = p;
            *count = got;
            return ZT_OK;
        }
        free(p);
        if (rc != NVML_ERROR_INSUFFICIENT_SIZE || cap >= 65536)
            return ZT_FAIL(err, ZT_ERR_UNSUPPORTED, "NVML: the device's processes: %s", n->error_string(rc));
        cap = got > cap ? got + 8 : 2 * cap; /* more started meanwhile: ask again */
    }
}

zt_status zt_nvml_usage_read(zt_nvml *n, const char *pci_bus_id, int pid, zt_nvml_usage *out, zt_error *err) {
    *out = (zt_nvml_usage){0};
    nvml_device dev = NULL;
    nvml_return rc = n->by_pci_bus_id(pci_bus_id, &dev);
    if (rc != NVML_SUCCESS)
        return ZT_FAIL(err, ZT_ERR_UNSUPPORTED, "NVML: no device at PCI bus id %s: %s", pci_bus_id, n->error_string(rc));
    nvml_memory mem;
    if ((rc = n->memory_info(dev, &mem)) != NVML_SUCCESS)
        return ZT_FAIL(err, ZT_ERR_UNSUPPORTED, "NVML: the device's memory: %s", n->error_string(rc));
    out->used_bytes = (size_t)mem.used;
    out->total_bytes = (size_t)mem.total;
    nvml_process_info *list = NULL;
    unsigned count = 0;
    ZT_TRY(processes(n, dev, &list, &count, err));
    out->processes = (int)count;
    for (unsigned i = 0; i < count; i++) {
        size_t bytes = list[i].used_gpu_memory == NVML_VALUE_NOT_AVAILABLE ? 0 : (size_t)list[i].used_gpu_memory;
        if ((int)list[i].pid == pid && list[i].used_gpu_memory != NVML_VALUE_NOT_AVAILABLE) {
            out->self_found = 1;
            out->self_bytes = bytes;
        } else if ((int)list[i].pid != pid) {
            out->others++;
            out->others_bytes += bytes;
        }
    }
    free(list);
    return ZT_OK;
}
