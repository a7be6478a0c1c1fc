/* Backend selection. */
#include <stdlib.h>

#include "zt_backend.h"

#ifdef ZT_HAVE_CUDA
/* The CUDA ordinal for this process: ZT_CUDA_DEVICE, else the launcher's
 * local rank (as the NCCL communicator picks its device), else 0. */
static int cuda_device_index(void) {
    static const char *vars[] = {"ZT_CUDA_DEVICE", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                 "SLURM_LOCALID", "LOCAL_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) {
            char *end = NULL;
            long d = strtol(v, &end, 10);
            if (*end == '\0' && d >= 0 && d < 1 << 20) return (int)d;
        }
    }
    return 0;
}
#endif

zt_status zt_backend_create(zt_device device, int nthreads, zt_backend **out, zt_error *err) {
    *out = NULL;
    if (device == ZT_DEVICE_CPU) return zt_backend_cpu_create(nthreads, out, err);
#ifdef ZT_HAVE_CUDA
    if (device == ZT_DEVICE_CUDA) return zt_backend_cuda_create(nthreads, cuda_device_index(), out, err);
    return ZT_FAIL(err, ZT_ERR_INVALID, "unknown device %d", (int)device);
#else
    return ZT_FAIL(err, ZT_ERR_UNSUPPORTED,
                   "--device cuda: this build has no CUDA backend (configure with -DZT_CUDA=ON on a "
                   "machine with the CUDA toolkit); use --device cpu");
#endif
}

void zt_backend_destroy(zt_backend *be) {
    if (be && be->destroy) be->destroy(be);
}

zt_stream zt_backend_stream(zt_backend *be) {
    zt_stream s = {be, be->default_stream, be->nthreads};
    return s;
}
