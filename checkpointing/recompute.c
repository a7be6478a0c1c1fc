/* The recomputation policy's parsing and its per-block decision. */
#include "zt_recompute.h"

#include <stdlib.h>
#include <string.h>

zt_status zt_recompute_parse(const char *text, zt_recompute_policy *out, zt_error *err) {
    out->every = 1;
    if (strcmp(text, "none") == 0) return out->kind = ZT_RECOMPUTE_NONE, ZT_OK;
    if (strcmp(text, "full") == 0) return out->kind = ZT_RECOMPUTE_FULL, ZT_OK;
    if (strcmp(text, "selective") == 0) return out->kind = ZT_RECOMPUTE_SELECTIVE, ZT_OK;
    if (strncmp(text, "every-", 6) == 0) {
        char *end = NULL;
        long k = strtol(text + 6, &end, 10);
        if (end != text + 6 && *end == '\0' && k >= 1 && k <= 1 << 20) {
            out->kind = ZT_RECOMPUTE_EVERY;
            out->every = (int)k;
            return ZT_OK;
        }
    }
    return ZT_FAIL(err, ZT_ERR_INVALID, "`recompute`: '%s' is not none, full, selective or every-K (K >= 1)", text);
}

zt_keep zt_recompute_keep(const zt_recompute_policy *p, int block) {
    switch (p->kind) {
    case ZT_RECOMPUTE_FULL: return ZT_KEEP_INPUT;
    case ZT_RECOMPUTE_SELECTIVE: return ZT_KEEP_GEMM_OUTPUTS;
    case ZT_RECOMPUTE_EVERY: return block % p->every == 0 ? ZT_KEEP_INPUT : ZT_KEEP_ALL;
    default: return ZT_KEEP_ALL;
    }
}

int zt_recompute_any(const zt_recompute_policy *p) { return p->kind != ZT_RECOMPUTE_NONE; }
