#include "zt_error.h"

#include <stdio.h>
#include <string.h>

zt_status zt_error_set(zt_error *err, zt_status code, const char *file, int line,
                       const char *fmt, ...) {
    if (err == NULL || err->code != ZT_OK) return code;
    err->code = code;
    err->file = file;
    err->line = line;
    snprintf(err->where, sizeof err->where, "%s:%d", file ? file : "?", line);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return code;
}

void zt_error_clear(zt_error *err) { memset(err, 0, sizeof *err); }

void zt_error_adopt(zt_error *err, zt_status code, const char *where, const char *msg) {
    if (err == NULL || err->code != ZT_OK) return;
    err->code = code;
    err->file = NULL;
    err->line = 0;
    snprintf(err->where, sizeof err->where, "%s", where);
    snprintf(err->msg, sizeof err->msg, "%s", msg);
}

const char *zt_status_name(zt_status code) {
    switch (code) {
    case ZT_OK: return "ok";
    case ZT_ERR_INVALID: return "invalid";
    case ZT_ERR_OOM: return "out of memory";
    case ZT_ERR_IO: return "io";
    case ZT_ERR_UNSUPPORTED: return "unsupported";
    case ZT_ERR_COMM: return "communication";
    case ZT_ERR_INTERNAL: return "internal";
    case ZT_ERR_NUMERIC: return "numeric";
    case ZT_ERR_TIMEOUT: return "timeout";
    }
    return "unknown";
}
