/* The whole bill of a rank's GPU memory (zt_device_bill.h). */
#include "zt_device_bill.h"

#include <string.h>
#include <unistd.h>

static const char *const part_names[ZT_NUM_DPARTS] = {"allocator_reserved", "cuda_context", "cublas",
                                                       "backend_buffers", "nccl"};

const char *zt_device_part_name(zt_device_part p) {
    return p >= 0 && p < ZT_NUM_DPARTS ? part_names[p] : "?";
}

const char *zt_device_source_name(int source) {
    return source == ZT_DSRC_NVML         ? "NVML (this PID)"
           : source == ZT_DSRC_MEMGETINFO ? "cudaMemGetInfo (NVML cannot match this PID and lists no other process)"
                                          : "not measured";
}

void zt_device_bill_init(zt_device_bill *d, zt_backend *be) {
    memset(d, 0, sizeof *d);
    if (be->device != ZT_DEVICE_CUDA) return;
    d->active = 1;
    zt_error err = {0};
    if (zt_nvml_open(&d->nvml, &err) != ZT_OK) {
        snprintf(d->nvml_why, sizeof d->nvml_why, "%.250s", err.msg);
        return;
    }
    zt_nvml_usage u;
    if (zt_nvml_usage_read(d->nvml, be->setup.pci_bus_id, (int)getpid(), &u, &err) != ZT_OK) {
        snprintf(d->nvml_why, sizeof d->nvml_why, "%.250s", err.msg);
        return;
    }
    if (!u.self_found) {
        snprintf(d->nvml_why, sizeof d->nvml_why, "NVML does not list this process (PID %d) on the GPU: another PID "
                 "namespace", (int)getpid());
        return;
    }
    if (!be->setup.measured) return;
    size_t setup = be->setup.blas_bytes + be->setup.own_bytes;
    d->context_measured = u.self_bytes >= setup;
    d->context_bytes = d->context_measured ? u.self_bytes - setup : 0;
}

void zt_device_bill_exclude(zt_device_bill *d, size_t bytes) {
    if (!d->context_measured) return;
    d->context_measured = d->context_bytes >= bytes; /* more than the figure held: it was not in it */
    d->context_bytes = d->context_measured ? d->context_bytes - bytes : 0;
}

void zt_device_bill_destroy(zt_device_bill *d) {
    zt_nvml_close(d->nvml);
    d->nvml = NULL;
}

static void put(zt_device_sample *s, zt_device_part p, size_t bytes) {
    s->parts[p] = bytes;
    s->measured |= 1u << p;
}

/* The process's total: NVML's figure for this PID, or the device's used
 * bytes where NVML lists nobody else; the others beside it. */
static void total(zt_device_bill *d, zt_backend *be, zt_device_sample *s) {
    if (!d->nvml) return;
    zt_nvml_usage u;
    zt_error err = {0};
    if (zt_nvml_usage_read(d->nvml, be->setup.pci_bus_id, (int)getpid(), &u, &err) != ZT_OK) return;
    s->others_measured = 1;
    s->other_processes = u.others;
    s->other_bytes = u.others_bytes;
    if (u.self_found) {
        s->os_measured = 1;
        s->os_bytes = u.self_bytes;
        s->source = ZT_DSRC_NVML;
    } else if (u.others == 0 && s->device_total) {
        s->os_measured = 1;
        s->os_bytes = s->device_used;
        s->source = ZT_DSRC_MEMGETINFO;
    }
}

void zt_device_sample_take(zt_device_bill *d, zt_backend *be, const zt_mem *device, zt_device_sample *out) {
    memset(out, 0, sizeof *out);
    if (!d->active) return;
    zt_backend_driver_mem(be, &out->device_used, &out->device_total);
    put(out, ZT_DPART_ALLOCATOR_RESERVED, device->reserved.current);
    if (d->context_measured) put(out, ZT_DPART_CUDA_CONTEXT, d->context_bytes);
    if (be->setup.measured) {
        put(out, ZT_DPART_CUBLAS, be->setup.blas_bytes);
        put(out, ZT_DPART_BACKEND_BUFFERS, be->setup.own_bytes);
    }
    size_t nccl = 0;
    int nccl_measured = 0;
    if (d->nccl_bytes) d->nccl_bytes(d->nccl_arg, &nccl, &nccl_measured);
    if (nccl_measured) put(out, ZT_DPART_NCCL, nccl);
    total(d, be, out);
    if (!out->os_measured) return;
    long long rest = (long long)out->os_bytes;
    for (int p = 0; p < ZT_NUM_DPARTS; p++)
        if (out->measured & (1u << p)) rest -= (long long)out->parts[p];
    out->unexplained_bytes = rest;
}

void zt_device_sample_print(FILE *f, const zt_device_sample *s) {
    if (s->os_measured)
        fprintf(f, "device process (%s): %.2f MiB\n", zt_device_source_name(s->source),
                (double)s->os_bytes / 1048576.0);
    else
        fprintf(f, "device process: total not measured (NVML has no figure for this process)\n");
    for (int p = 0; p < ZT_NUM_DPARTS; p++) {
        if (s->measured & (1u << p))
            fprintf(f, "  %-20s %10.2f MiB\n", part_names[p], (double)s->parts[p] / 1048576.0);
        else
            fprintf(f, "  %-20s not measured\n", part_names[p]);
    }
    if (s->os_measured) fprintf(f, "  %-20s %10.2f MiB\n", "unexplained", (double)s->unexplained_bytes / 1048576.0);
    if (s->others_measured)
        fprintf(f, "  other processes on this GPU: %d holding %.2f MiB\n", s->other_processes,
                (double)s->other_bytes / 1048576.0);
    else
        fprintf(f, "  other processes on this GPU: not measured (no NVML)\n");
    if (s->device_total)
        fprintf(f, "  the device: %.2f MiB used of %.2f MiB (cudaMemGetInfo)\n", (double)s->device_used / 1048576.0,
                (double)s->device_total / 1048576.0);
}
