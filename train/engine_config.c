/* The engine's configuration and its groups from zt-train's options:
 * shared by the trainer and zt-plan's replay, so both build the same
 * engine. */
#include <stdlib.h>
#include <string.h>

#include "trainer.h"
#include "zt_optim.h"

zt_status zt_train_engine_config(const zt_train_config *c, const zt_train_hooks *test, int host_threads, int rank,
                                 const zt_model_spec *spec, zt_engine_config *ec, zt_error *err) {
    int prefetch = c->prefetch;
    if (c->prefetch_bucket_size > 0) /* DeepSpeed's knob counts parameters; ours counts units */
        prefetch = (int)(c->prefetch_bucket_size / (int64_t)spec->largest_unit_numel);
    zt_engine_config e = {.stage = c->stage,
                          .momentum = (float)c->momentum,
                          .nesterov = c->nesterov,
                          .adafactor_decay = (float)c->adafactor_decay,
                          .adafactor_clip = (float)c->adafactor_clip,
                          .adafactor_eps = (float)c->adafactor_eps,
                          .adafactor_beta1 = (float)c->adafactor_beta1,
                          .muon_momentum = (float)c->muon_momentum,
                          .muon_nesterov = c->muon_nesterov,
                          .muon_ns_steps = c->muon_ns_steps,
                          .muon_ns_coef = {(float)c->muon_ns_coef[0], (float)c->muon_ns_coef[1],
                                           (float)c->muon_ns_coef[2]},
                          .muon_eps = (float)c->muon_eps,
                          .muon_adjust_lr = strcmp(c->muon_adjust_lr, "original") == 0
                                                ? ZT_MUON_ADJUST_ORIGINAL
                                                : ZT_MUON_ADJUST_MATCH_RMS_ADAMW,
                          .master_none = strcmp(c->master_dtype, "none") == 0,
                          .state_bf16 = strcmp(c->optim_state_dtype, "bf16") == 0,
                          .sr_seed = (uint64_t)c->seed,
                          .muon_ns_host = strcmp(c->muon_ns_device, "host") == 0,
                          .muon_adamw_lr_scale = c->muon_adamw_lr < 0 ? 1.0f
                                                 : c->lr > 0 ? (float)(c->muon_adamw_lr / c->lr) : 0.0f,
                          .beta1 = (float)c->beta1,
                          .beta2 = (float)c->beta2,
                          .eps = (float)c->eps,
                          .weight_decay = (float)c->weight_decay,
                          .grad_clip = (float)c->grad_clip,
                          .bucket_bytes = c->bucket_size,
                          .prefetch = prefetch,
                          .overlap_comm = c->overlap_comm,
                          .offload = strcmp(c->offload, "none") != 0,
                          .offload_params = strcmp(c->offload_params, "none") != 0,
                          .nvme_optimizer = strcmp(c->offload, "nvme") == 0,
                          .nvme_params = strcmp(c->offload_params, "nvme") == 0,
                          .nvme = {c->nvme_path, c->nvme_block_size, c->nvme_buffers,
                                   {ZT_NVME_IO_AUTO, (unsigned)c->nvme_queue_depth, 0, 0}},
                          .offload_delay = c->offload_delay,
                          .persist_threshold = (size_t)c->persist_threshold,
                          .max_live_params = (size_t)c->max_live_params,
                          .max_reuse_distance = (size_t)c->max_reuse_distance,
                          .sub_group_size = (size_t)c->sub_group_size,
                          .quant_weights_bits = zt_train_code_bits(c->quantize_weights),
                          .quant_grads_bits = zt_train_code_bits(c->quantize_grads),
                          .quant_block = (unsigned)c->quant_block,
                          .quant_feedback = c->quantize_grads_feedback,
                          .feedback_dtype = strcmp(c->quantize_grads_feedback_dtype, "bf16") == 0 ? ZT_BF16 : ZT_FP32,
                          .host_threads = host_threads,
                          .loss = {c->loss_scale, c->initial_scale_power, c->loss_scale_window, c->hysteresis,
                                   c->min_loss_scale}};
    if (test->nvme_fail_rank < 0 || test->nvme_fail_rank == rank) {
        e.nvme.io.fail_read_at = test->nvme_fail_read;
        e.nvme.io.fail_write_at = test->nvme_fail_write;
    }
    if (!zt_dtype_parse(c->dtype, &e.dtype) || !zt_dtype_parse(c->reduce_dtype, &e.reduce_dtype) ||
        !(e.optimizer = zt_optim_find(c->optimizer)) || !zt_nvme_io_parse(c->nvme_io, &e.nvme.io.io))
        return ZT_FAIL(err, ZT_ERR_INTERNAL, "trainer: dtype %s / reduce dtype %s / optimizer %s", c->dtype,
                       c->reduce_dtype, c->optimizer);
    *ec = e;
    return ZT_OK;
}


int zt_train_code_bits(const char *value) {
    return strcmp(value, "int8") == 0 ? 8 : strcmp(value, "int4") == 0 ? 4 : 0;
}

void zt_train_layout(const zt_train_config *c, zt_model_spec *spec, int world) {
    int coded = strcmp(c->quantize_weights, "none") != 0 || strcmp(c->quantize_grads, "none") != 0;
    zt_spec_layout_aligned(spec, world, coded ? (size_t)c->quant_block : world > 1 ? 16 : 1);
}

zt_status zt_train_group_size(const char *flag, const char *value, int world, int ranks_per_node, int *G,
                              zt_error *err) {
    if (strcmp(value, "world") == 0) return *G = world, ZT_OK;
    if (strcmp(value, "node") == 0) return *G = ranks_per_node, ZT_OK;
    *G = atoi(value);
    if (*G < 1 || world % *G != 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s %s does not divide the %d rank(s) into groups of equal size", flag,
                       value, world);
    return ZT_OK;
}
