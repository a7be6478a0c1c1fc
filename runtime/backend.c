/* Backend selection. */
#include "zt_backend.h"

zt_status zt_backend_create(zt_device device, int nthreads, zt_backend **out, zt_error *err) {
    *out = NULL;
    if (device == ZT_DEVICE_CPU) return zt_backend_cpu_create(nthreads, out, err);
    return ZT_FAIL(err, ZT_ERR_UNSUPPORTED,
                   "--device cuda: this build has no CUDA backend yet (it lands with the CUDA "
                   "issue); use --device cpu");
}

void zt_backend_destroy(zt_backend *be) {
    if (be && be->destroy) be->destroy(be);
}

zt_stream zt_backend_stream(zt_backend *be) {
    zt_stream s = {be, NULL, be->nthreads};
    return s;
}
