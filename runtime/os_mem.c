/* The operating system's view of this process, printed beside the tracked
 * counters because they differ (allocator caches, libraries, MPI buffers). */
#include <stdio.h>
#include <string.h>

#include "zt_mem.h"

zt_status zt_os_mem_read(zt_os_mem *out, zt_error *err) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return ZT_FAIL(err, ZT_ERR_IO, "cannot open /proc/self/status");
    char line[256];
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "VmRSS: %llu kB", &kb) == 1) out->vm_rss = (size_t)kb * 1024;
        else if (sscanf(line, "VmHWM: %llu kB", &kb) == 1) out->vm_hwm = (size_t)kb * 1024;
    }
    fclose(f);
    return ZT_OK;
}
