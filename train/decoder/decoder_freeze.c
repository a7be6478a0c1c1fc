/* freeze: which of a decoder's units are not trained. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zt_decoder.h"

/* "blocks", "blocks:K" or "blocks:A-B" (inclusive) into [*lo, *hi]; 0 when malformed. */
static int block_range(const char *item, int layers, int *lo, int *hi) {
    if (strcmp(item, "blocks") == 0) return *lo = 0, *hi = layers - 1, 1;
    if (strncmp(item, "blocks:", 7) != 0) return 0;
    char *end;
    long a = strtol(item + 7, &end, 10), b = a;
    if (end == item + 7) return 0;
    if (*end == '-') {
        const char *from = end + 1;
        b = strtol(from, &end, 10);
        if (end == from) return 0;
    }
    if (*end || a < 0 || b < a) return 0;
    *lo = (int)a, *hi = (int)b;
    return 1;
}

/* One item of the list. */
static zt_status freeze_item(zt_decoder *d, const char *item, zt_error *err) {
    int L = d->cfg.layers, lo, hi;
    if (strcmp(item, "embedding") == 0) {
        d->spec->units[d->unit_embed].frozen = 1;
        return ZT_OK;
    }
    if (strcmp(item, "head") == 0) {
        d->spec->units[d->unit_head].frozen = 1;
        return ZT_OK;
    }
    if (!block_range(item, L, &lo, &hi))
        return ZT_FAIL(err, ZT_ERR_INVALID, "`freeze`: '%s' is not embedding, head, blocks, blocks:K or blocks:A-B",
                       item);
    if (hi >= L)
        return ZT_FAIL(err, ZT_ERR_INVALID, "`freeze`: '%s' names block %d; the model has blocks 0-%d", item, hi,
                       L - 1);
    for (int k = lo; k <= hi; k++) d->spec->units[d->first_block + k].frozen = 1;
    return ZT_OK;
}

zt_status zt_decoder_freeze(zt_decoder *d, const char *list, zt_error *err) {
    char buf[256];
    if (!list || !list[0] || strcmp(list, "none") == 0) return ZT_OK;
    if (snprintf(buf, sizeof buf, "%s", list) >= (int)sizeof buf)
        return ZT_FAIL(err, ZT_ERR_INVALID, "`freeze`: the list is longer than %zu characters", sizeof buf - 1);
    for (char *save = NULL, *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save))
        ZT_TRY(freeze_item(d, item, err));
    int trained = 0;
    for (int u = 0; u < d->spec->nunits; u++) trained += !d->spec->units[u].frozen;
    if (!trained) return ZT_FAIL(err, ZT_ERR_INVALID, "`freeze` %s leaves nothing to train", list);
    return ZT_OK;
}
