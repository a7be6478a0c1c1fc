/* Human-readable byte sizes, both directions. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "zt_mem.h"

zt_status zt_parse_size(const char *s, size_t *out, zt_error *err) {
    if (!s || !*s) return ZT_FAIL(err, ZT_ERR_INVALID, "empty size");
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || errno != 0 || !isfinite(v) || v < 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "'%s' is not a size (examples: 512MiB, 4GiB, 1000000)", s);
    while (*end == ' ') end++;
    static const struct {
        const char *suffix;
        double mult;
    } units[] = {
        {"", 1.0},          {"B", 1.0},          {"K", 1024.0},       {"KiB", 1024.0},
        {"KB", 1e3},        {"M", 1048576.0},    {"MiB", 1048576.0},  {"MB", 1e6},
        {"G", 1073741824.0}, {"GiB", 1073741824.0}, {"GB", 1e9},      {"T", 1099511627776.0},
        {"TiB", 1099511627776.0}, {"TB", 1e12},
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcasecmp(end, units[i].suffix) == 0) {
            double bytes = v * units[i].mult;
            if (bytes >= 9.0e18) /* beyond what llround and any machine can hold */
                return ZT_FAIL(err, ZT_ERR_INVALID, "size '%s' is too large", s);
            *out = (size_t)llround(bytes);
            return ZT_OK;
        }
    }
    return ZT_FAIL(err, ZT_ERR_INVALID, "size '%s' has an unknown unit '%s' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", s, end);
}

void zt_format_bytes(size_t bytes, char *buf, size_t cap) {
    static const char *const names[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0) snprintf(buf, cap, "%zu B", bytes);
    else snprintf(buf, cap, "%.2f %s", v, names[u]);
}
