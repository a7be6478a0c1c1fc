/* Finding and opening the CUDA module (zt_cuda_module.h). */
#include "zt_cuda_module.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef ZT_HAVE_CUDA

/* The directory of the running program, without a trailing slash. */
static int program_dir(char *out, size_t cap) {
    ssize_t n = readlink("/proc/self/exe", out, cap - 1);
    if (n <= 0) return 0;
    out[n] = '\0';
    char *slash = strrchr(out, '/');
    if (!slash) return 0;
    *slash = '\0';
    return 1;
}

/* Candidates in order: ZT_CUDA_MODULE, beside the program, ../lib from it
 * (build/lib for build/examples, build/tests, build/bench and the GPU kit's
 * copy of that tree), then where this build put it. */
static int candidates(char paths[][PATH_MAX], int cap) {
    int n = 0;
    const char *forced = getenv("ZT_CUDA_MODULE");
    if (forced && *forced) {
        snprintf(paths[n++], PATH_MAX, "%s", forced);
        return n; /* an explicit path is the only one tried */
    }
    char dir[PATH_MAX - 64];
    if (program_dir(dir, sizeof dir)) {
        snprintf(paths[n++], PATH_MAX, "%s/%s", dir, ZT_CUDA_MODULE_FILE);
        snprintf(paths[n++], PATH_MAX, "%s/../lib/%s", dir, ZT_CUDA_MODULE_FILE);
    }
#ifdef ZT_CUDA_MODULE_BUILD_PATH
    if (n < cap) snprintf(paths[n++], PATH_MAX, "%s", ZT_CUDA_MODULE_BUILD_PATH);
#endif
    return n;
}

static zt_status check_table(const zt_cuda_module *m, const char *path, zt_error *err) {
    if (!m) return ZT_FAIL(err, ZT_ERR_UNSUPPORTED, "the CUDA module %s returned no entry table", path);
    if (m->abi != ZT_CUDA_MODULE_ABI || m->table_size != sizeof *m)
        return ZT_FAIL(err, ZT_ERR_UNSUPPORTED,
                       "the CUDA module %s is from another build (ABI %d, table %zu bytes; this program "
                       "expects ABI %d, %zu bytes): rebuild, or point ZT_CUDA_MODULE at this build's module",
                       path, m->abi, m->table_size, ZT_CUDA_MODULE_ABI, sizeof *m);
    return ZT_OK;
}

zt_status zt_cuda_module_open(const zt_cuda_module **out, zt_error *err) {
    *out = NULL;
    char paths[4][PATH_MAX];
    int n = candidates(paths, 4);
    char tried[2048] = "";
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        if (access(paths[i], R_OK) != 0) {
            if (used < sizeof tried) {
                int w = snprintf(tried + used, sizeof tried - used, "%s%s: absent", i ? "; " : "", paths[i]);
                used += w > 0 ? (size_t)w : 0;
            }
            continue;
        }
        /* RTLD_LOCAL: the module's copy of the runtime stays its own. */
        void *handle = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
        if (!handle) {
            const char *why = dlerror();
            return ZT_FAIL(err, ZT_ERR_UNSUPPORTED, "`device` cuda: cannot open the CUDA module %s: %s", paths[i],
                           why ? why : "unknown dlopen error");
        }
        zt_cuda_module_entry_fn entry = NULL;
        *(void **)&entry = dlsym(handle, ZT_CUDA_MODULE_ENTRY);
        if (!entry)
            return ZT_FAIL(err, ZT_ERR_UNSUPPORTED, "the CUDA module %s has no %s: not a zerotrain module",
                           paths[i], ZT_CUDA_MODULE_ENTRY);
        const zt_cuda_module *m = entry();
        ZT_TRY(check_table(m, paths[i], err));
        *out = m;
        return ZT_OK;
    }
    return ZT_FAIL(err, ZT_ERR_UNSUPPORTED,
                   "`device` cuda: the CUDA module %s was not found (%s); set ZT_CUDA_MODULE to its path",
                   ZT_CUDA_MODULE_FILE, tried);
}

int zt_cuda_driver_present(void) {
#ifdef ZT_CUDA_EMULATED
    return 1;
#else
    return access("/dev/nvidiactl", F_OK) == 0 || access("/proc/driver/nvidia/version", F_OK) == 0;
#endif
}

#else /* a build without the CUDA backend */

zt_status zt_cuda_module_open(const zt_cuda_module **out, zt_error *err) {
    *out = NULL;
    return ZT_FAIL(err, ZT_ERR_UNSUPPORTED,
                   "`device` cuda: this build has no CUDA backend (configure with -DZT_CUDA=ON on a machine with "
                   "the CUDA toolkit); use `device` cpu");
}

int zt_cuda_driver_present(void) { return 0; }

#endif
