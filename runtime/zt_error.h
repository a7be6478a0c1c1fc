/* Status codes with file:line context. Library code never exits: it records
 * what went wrong in a zt_error owned by the caller's context and returns the
 * code; only the CLI decides to exit. */
#ifndef ZT_ERROR_H
#define ZT_ERROR_H

#include <stdarg.h>

typedef enum {
    ZT_OK = 0,
    ZT_ERR_INVALID = 1,     /* bad argument or configuration */
    ZT_ERR_OOM = 2,         /* tracked allocator refused (cap or system) */
    ZT_ERR_IO = 3,          /* file system or data source */
    ZT_ERR_UNSUPPORTED = 4, /* named but not available in this build/issue */
    ZT_ERR_COMM = 5,        /* collective or MPI failure */
    ZT_ERR_INTERNAL = 6,    /* broken invariant */
    ZT_ERR_NUMERIC = 7,     /* training cannot go on: gradients not finite */
    ZT_ERR_TIMEOUT = 8,     /* a collective did not complete in time (the watchdog): peers unreachable */
} zt_status;

typedef struct {
    zt_status code;
    const char *file;
    int line;
    char where[160]; /* "file:line" (paths relative to the source tree), kept
                        when an error is handed to another rank */
    char msg[1024];
} zt_error;

/* Records (code, file, line, formatted message) into err and returns code.
 * A later error does not overwrite an earlier one, so the root cause wins. */
zt_status zt_error_set(zt_error *err, zt_status code, const char *file, int line,
                       const char *fmt, ...) __attribute__((format(printf, 5, 6)));
void zt_error_clear(zt_error *err);
/* Takes over another rank's error (code, where, message) when err holds none:
 * ranks that agree on a failure report the same one. */
void zt_error_adopt(zt_error *err, zt_status code, const char *where, const char *msg);
const char *zt_status_name(zt_status code);

#define ZT_FAIL(err, code, ...) zt_error_set((err), (code), __FILE__, __LINE__, __VA_ARGS__)

/* Propagate a non-OK status from a callee unchanged. */
#define ZT_TRY(expr)                     \
    do {                                 \
        zt_status zt_try_s_ = (expr);    \
        if (zt_try_s_ != ZT_OK) return zt_try_s_; \
    } while (0)

#endif
