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

/* This process's memory cgroup's limit in bytes, or 0 where none is set:
 * v2 ("0::/path" in /proc/self/cgroup, its memory.max) or v1 ("N:memory:/path",
 * its memory.limit_in_bytes; no limit reads as a huge number, which the
 * caller's MemTotal bounds). */
static size_t cgroup_memory_limit(void) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return 0;
    char line[1024], v2[1200] = "", v1[1200] = "";
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *memory = strstr(line, ":memory:");
        if (strncmp(line, "0::", 3) == 0) snprintf(v2, sizeof v2, "/sys/fs/cgroup%s/memory.max", line + 3);
        else if (memory)
            snprintf(v1, sizeof v1, "/sys/fs/cgroup/memory%s/memory.limit_in_bytes", memory + strlen(":memory:"));
    }
    fclose(f);
    size_t best = 0;
    const char *paths[2] = {v2, v1};
    for (int i = 0; i < 2; i++) {
        if (!paths[i][0] || !(f = fopen(paths[i], "r"))) continue;
        unsigned long long bytes = 0;
        int got = fscanf(f, "%llu", &bytes); /* v2's "max": no number */
        fclose(f);
        if (got == 1 && bytes > 0 && (best == 0 || bytes < best)) best = (size_t)bytes;
    }
    return best;
}

zt_status zt_node_mem_limit_read(zt_node_mem_limit *out, zt_error *err) {
    out->bytes = 0;
    out->source = "MemTotal";
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return ZT_FAIL(err, ZT_ERR_IO, "cannot open /proc/meminfo");
    char line[256];
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) out->bytes = (size_t)kb * 1024;
    }
    fclose(f);
    size_t cg = cgroup_memory_limit();
    if (cg > 0 && (out->bytes == 0 || cg < out->bytes)) {
        out->bytes = cg;
        out->source = "the cgroup's memory limit";
    }
    return out->bytes ? ZT_OK : ZT_FAIL(err, ZT_ERR_IO, "/proc/meminfo has no MemTotal");
}
