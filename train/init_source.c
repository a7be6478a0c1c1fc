/* The run's initial values: the family's, or a Hugging Face directory's
 * (init_source.h). */
#include "init_source.h"

zt_status zt_init_source_open(const zt_train_config *c, const zt_train_model *family, const zt_model_settings *s,
                              void *model, const zt_model_spec *spec, zt_comm *comm, zt_init_source *src,
                              zt_error *err) {
    *src = (zt_init_source){.fn = family->init_param, .arg = model};
    if (!c->init_from[0]) return ZT_OK;
    if (c->resume[0]) /* same outcome on every rank: no agreement needed */
        return ZT_FAIL(err, ZT_ERR_INVALID, "--init-from %s with --resume %s: a run starts from one of them (a "
                       "checkpoint holds the parameters and the optimizer state; drop --init-from to resume)",
                       c->init_from, c->resume);
    json_t *described = family->describe(s);
    if (!described) return ZT_FAIL(err, ZT_ERR_OOM, "--init-from: cannot describe the model");
    zt_status st = zt_hf_import_open(c->init_from, described, spec, &src->hf, err);
    json_decref(described);
    st = zt_comm_agree(comm, st, err); /* one rank may not see the directory */
    if (st != ZT_OK) {
        zt_hf_import_close(src->hf);
        src->hf = NULL;
        return st;
    }
    src->fn = zt_hf_import_init, src->arg = src->hf;
    return ZT_OK;
}

zt_status zt_init_source_close(zt_init_source *src, zt_status built, zt_ctx *ctx, zt_comm *comm) {
    if (!src->hf) return built;
    zt_status st = built;
    if (st == ZT_OK) st = zt_comm_agree(comm, zt_hf_import_result(src->hf, &ctx->err), &ctx->err);
    int tensors;
    size_t bytes, cache;
    zt_hf_import_counts(src->hf, &tensors, &bytes, &cache);
    if (st == ZT_OK) /* rank 0's counts: each rank reads only the tensors its slices overlap */
        zt_log_rank0(&ctx->log, "init: from %s (rank 0 read %d tensor(s), %zu bytes, through a cache of %zu bytes: "
                     "the largest tensor as stored and as fp32)", zt_hf_import_dir(src->hf), tensors, bytes, cache);
    zt_hf_import_close(src->hf);
    src->hf = NULL;
    return st;
}
