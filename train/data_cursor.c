/* Stream positions of token-file data across steps and resumes (data_cursor.h). */
#include "data_cursor.h"

#include <string.h>

int zt_train_data_vocab(const zt_train_config *c) {
    /* files not here (zt-plan on another machine): --vocab, as given */
    if (strcmp(c->data, "markov") == 0 || !zt_token_pattern_matches(c->data)) return c->vocab;
    zt_token_format f = ZT_TOKENS_AUTO;
    zt_token_format_parse(c->data_dtype, &f);
    return zt_token_format_resolve(c->data, f) == ZT_TOKENS_BYTES ? 256 : c->vocab;
}

void zt_data_cursor_init(zt_data_cursor *k, const zt_data *d, const zt_train_config *c, int world) {
    memset(k, 0, sizeof *k);
    k->active = d->kind == ZT_DATA_TOKENS;
    k->epoch_tokens = d->files.ntokens;
    k->tokens_per_step = (uint64_t)world * (uint64_t)c->grad_accum * (uint64_t)c->micro_batch * (uint64_t)c->seq_len;
}

uint64_t zt_data_cursor_at(const zt_data_cursor *k, int step) {
    return k->base_position + (uint64_t)(step - k->base_step) * k->tokens_per_step;
}

json_t *zt_data_cursor_json(const zt_data_cursor *k) {
    return json_pack("{s:i,s:I,s:I}", "base_step", k->base_step, "base_position", (json_int_t)k->base_position,
                     "tokens_per_step", (json_int_t)k->tokens_per_step);
}

zt_status zt_data_cursor_resume(zt_data_cursor *k, const json_t *run, int step, const zt_logger *log, zt_error *err) {
    const json_t *ds = json_object_get(run, "data_stream");
    k->base_step = step;
    k->base_position = 0;
    if (!ds) {
        zt_log_rank0(log, "data: the checkpoint records no token stream (its run read other data): the stream starts "
                     "at its first token");
        return ZT_OK;
    }
    const json_t *bs = json_object_get(ds, "base_step"), *bp = json_object_get(ds, "base_position"),
                 *tps = json_object_get(ds, "tokens_per_step");
    if (!json_is_integer(bs) || !json_is_integer(bp) || !json_is_integer(tps) || json_integer_value(bs) < 0 ||
        json_integer_value(bs) > step || json_integer_value(bp) < 0 || json_integer_value(tps) < 1)
        return ZT_FAIL(err, ZT_ERR_INVALID, "the checkpoint's run.data_stream is damaged: base_step, base_position "
                       "and tokens_per_step must be integers with 0 <= base_step <= its step %d", step);
    k->base_position = (uint64_t)json_integer_value(bp) +
                       (uint64_t)(step - json_integer_value(bs)) * (uint64_t)json_integer_value(tps);
    zt_log_rank0(log, "data: resuming the token stream at token %llu (epoch %llu), where step %d of the checkpoint's "
                 "run left it; %llu tokens per step now", (unsigned long long)k->base_position,
                 (unsigned long long)(k->base_position / k->epoch_tokens), step,
                 (unsigned long long)k->tokens_per_step);
    return ZT_OK;
}

void zt_data_cursor_log_start(const zt_data_cursor *k, const zt_data *d, const zt_logger *log) {
    const zt_token_files *f = &d->files;
    zt_log_rank0(log, "data: %d file(s) of %s tokens (%d bytes each), %llu tokens an epoch, read as one stream: %llu "
                 "tokens per step (%.2f steps an epoch), vocab %d", f->nfiles, zt_token_format_name(f->format),
                 f->width, (unsigned long long)k->epoch_tokens, (unsigned long long)k->tokens_per_step,
                 (double)k->epoch_tokens / (double)k->tokens_per_step, d->vocab);
}

void zt_data_cursor_log_step(const zt_data_cursor *k, int step, const zt_logger *log) {
    uint64_t p = zt_data_cursor_at(k, step), end = p + k->tokens_per_step; /* the last target is token end */
    uint64_t e0 = p / k->epoch_tokens, e1 = end / k->epoch_tokens;
    for (uint64_t e = e0 + 1; e <= e1; e++)
        zt_log_rank0(log, "data: epoch %llu begins in step %d: the stream wraps to its first token at token %llu",
                     (unsigned long long)e, step + 1, (unsigned long long)(e * k->epoch_tokens));
}
