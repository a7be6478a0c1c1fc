/* Library messages name settings, not flags: `offload_params` in backquotes
 * (the key a config file uses). The command line shows them as the flags
 * its users type; this is that mapping, applied where the CLI prints. */
#include "train_config.h"

#include <stdio.h>
#include <string.h>

void zt_settings_as_flags(const char *msg, char *out, size_t cap) {
    size_t n = 0;
    for (const char *p = msg; *p && n + 1 < cap; p++) {
        const char *close = *p == '`' ? strchr(p + 1, '`') : NULL;
        size_t len = close ? (size_t)(close - p - 1) : 0;
        int setting = close && len > 0 && strspn(p + 1, "abcdefghijklmnopqrstuvwxyz0123456789_") == len;
        if (!setting) {
            out[n++] = *p;
            continue;
        }
        if (n + len + 3 >= cap) break;
        out[n++] = '-', out[n++] = '-';
        for (size_t i = 0; i < len; i++) out[n++] = p[1 + i] == '_' ? '-' : p[1 + i];
        p = close;
    }
    out[n < cap ? n : cap - 1] = '\0';
}
