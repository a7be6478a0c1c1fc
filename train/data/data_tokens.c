/* Token files as training data: a sequential stream every rank reads its
 * rows of (data.h). */
#include <stdio.h>
#include <string.h>

#include "data.h"

zt_status zt_data_tokens_create(zt_data *d, const char *flag, const char *pattern, zt_token_format f, int vocab,
                                zt_error *err) {
    memset(d, 0, sizeof *d);
    d->kind = ZT_DATA_TOKENS;
    d->vocab = vocab;
    return zt_token_files_open(&d->files, flag, pattern, f, err);
}

uint32_t zt_data_token_hash(uint64_t index, int32_t token) {
    uint64_t z = index ^ ((uint64_t)(uint32_t)token * 0xD1B54A32D192ED03ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (uint32_t)(z >> 32);
}

zt_status zt_data_stream_batch(zt_data *d, uint64_t p, int world, int rank, int micro, int B, int stride,
                               int T, int32_t *tokens, int32_t *targets, zt_data_digests *dg, zt_error *err) {
    for (int b = 0; b < B; b++) {
        uint64_t row = ((uint64_t)micro * (uint64_t)world + (uint64_t)rank) * (uint64_t)B + (uint64_t)b;
        uint64_t at = p + row * (uint64_t)stride;
        int32_t *in = tokens + (size_t)b * T, *out = targets + (size_t)b * T; /* [T] each */
        ZT_TRY(zt_token_files_read(&d->files, at, (size_t)T, d->vocab, in, err));
        if (T > 1) memcpy(out, in + 1, (size_t)(T - 1) * sizeof *out);
        ZT_TRY(zt_token_files_read(&d->files, at + (uint64_t)T, 1, d->vocab, out + T - 1, err));
        for (int t = 0; dg && t < T; t++) {
            uint32_t term = zt_data_token_hash(at + (uint64_t)t, in[t]);
            dg->inputs += term;
            dg->rows += term + zt_data_token_hash((at + (uint64_t)t + 1) | (1ull << 63), out[t]);
        }
    }
    return ZT_OK;
}

zt_status zt_data_identity(const char *flag, const char *value, zt_token_format f, char *out, size_t cap,
                           zt_error *err) {
    if (strcmp(value, "markov") == 0) {
        snprintf(out, cap, "markov (the seeded source)");
        return ZT_OK;
    }
    f = zt_token_format_resolve(value, f);
    int files = zt_token_pattern_matches(value);
    if (f == ZT_TOKENS_BYTES && strcmp(flag, "--data") == 0 && files > 1)
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s %s: %d files read as bytes; bytes are sampled from one file (token "
                       "files: --data-dtype llmc, uint16 or uint32)", flag, value, files);
    if (f == ZT_TOKENS_BYTES && strcmp(flag, "--data") == 0 && files == 1)
        return zt_data_file_identity(value, out, cap, err); /* a path: the trainer opens it as given */
    zt_token_files s;
    ZT_TRY(zt_token_files_open(&s, flag, value, f, err));
    zt_status st = zt_token_files_identity(&s, out, cap, err);
    zt_token_files_close(&s);
    return st;
}
