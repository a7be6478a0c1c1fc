/* The keys of a config file: zerotrain's options and the DeepSpeed keys with
 * a meaning here, in DeepSpeed's units (element counts where DeepSpeed
 * counts elements), numbers in any notation when whole, "auto" (as the
 * Hugging Face integration writes) taken from the flags and the model. Every
 * problem of a file is collected and reported together; keys DeepSpeed has
 * but zerotrain has no use for are accepted and named in one warning. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "train_config_internal.h"

typedef struct {
    zt_train_config *cfg;
    int problems;
    char text[1400];
    /* scheduler.type as zerotrain names it ("" when none); whether it sets
     * the peak lr itself (WarmupLR, WarmupDecayLR: warmup_max_lr), which
     * DeepSpeed then uses instead of optimizer.params.lr */
    char schedule[16];
    int lr_from_scheduler;
    /* optimizer.type (read first: it decides what optimizer.params mean) */
    enum { DS_ADAM, DS_SGD, DS_ADAFACTOR, DS_MUON } opt;
} reader;

static void note_problem(reader *r, const zt_error *e) {
    size_t len = strlen(r->text);
    snprintf(r->text + len, sizeof r->text - len, "%s%.300s", r->problems ? "\n  " : "", e->msg);
    r->problems++;
}

static void note_without_effect(reader *r, const char *key) {
    size_t len = strlen(r->cfg->config_warning);
    snprintf(r->cfg->config_warning + len, sizeof r->cfg->config_warning - len, "%s%s", len ? ", " : "", key);
}

static int is_auto(const json_t *v) { return json_is_string(v) && strcmp(json_string_value(v), "auto") == 0; }

/* Sets `option` from val unless it is "auto" (the flag or default stays). */
static void set(reader *r, const char *option, json_t *val, const char *key) {
    if (is_auto(val)) return;
    char where[300];
    snprintf(where, sizeof where, "key \"%s\"", key);
    zt_error e = {0};
    if (zt_config_set_named(r->cfg, option, val, where, &e) != ZT_OK) note_problem(r, &e);
}

static void refuse(reader *r, const char *key, const char *why) {
    zt_error e = {0};
    ZT_FAIL(&e, ZT_ERR_INVALID, "key \"%s\" is %s", key, why);
    note_problem(r, &e);
}

/* A DeepSpeed count of elements: scaled into `option` (bucket bytes: x 4). */
static void set_count(reader *r, const char *option, json_t *val, const char *key, double scale, int auto_bit) {
    if (is_auto(val)) {
        r->cfg->ds_auto |= auto_bit;
        return;
    }
    if (!json_whole(val) || json_number_value(val) < 0) {
        refuse(r, key, "not a whole number of elements (DeepSpeed counts elements here)");
        return;
    }
    json_t *scaled = json_integer((json_int_t)(json_number_value(val) * scale));
    set(r, option, scaled, key);
    json_decref(scaled);
}

/* A boolean that describes what zerotrain always does: false is refused. */
static void require_true(reader *r, json_t *val, const char *key, const char *why) {
    if (!json_is_boolean(val)) refuse(r, key, "not a boolean");
    else if (!json_is_true(val)) {
        zt_error e = {0};
        ZT_FAIL(&e, ZT_ERR_INVALID, "key \"%s\": false is not supported (%s)", key, why);
        note_problem(r, &e);
    }
}

typedef void (*key_fn)(reader *r, const char *key, json_t *val, const char *path);

/* Calls each(key, value, JSON path) for every key of the object at `prefix`. */
static void each_key(reader *r, json_t *obj, const char *prefix, key_fn each) {
    if (!json_is_object(obj)) return refuse(r, prefix, "not an object");
    const char *key;
    json_t *val;
    json_object_foreach(obj, key, val) {
        char path[200];
        int n = snprintf(path, sizeof path, "%s.%s", prefix, key);
        if (n < 0 || (size_t)n >= sizeof path) memcpy(path + sizeof path - 4, "...", 4); /* named by its start */
        each(r, key, val, path);
    }
}

/* Keys of offload_optimizer and offload_param that tune DeepSpeed's own
 * swapper (its pipelining, its parameter buffers, what stays in host
 * memory): zerotrain's stream has no such choices. */
static const char *const swapper_without_effect[] = {"pipeline_read", "pipeline_write", "fast_init", "ratio",
                                                     "buffer_size", "max_in_cpu"};

/* A key of offload_optimizer or offload_param: its device sets `option`;
 * nvme_path (the same folder in both) sets --nvme-path; the optimizer's
 * buffer_count sets --nvme-buffers. */
static void offload_device_key(reader *r, const char *key, json_t *val, const char *path, const char *option) {
    const char *dev = json_string_value(val);
    int params = strcmp(option, "offload-params") == 0;
    if (strcmp(key, "pin_memory") == 0) return require_true(r, val, path, "the host pool is always page-locked");
    if (strcmp(key, "nvme_path") == 0) {
        const char *dir = json_string_value(val);
        if (dir && r->cfg->nvme_path[0] && strcmp(dir, r->cfg->nvme_path) == 0) return; /* named twice, alike */
        return set(r, "nvme-path", val, path);
    }
    if (strcmp(key, "buffer_count") == 0 && !params) return set(r, "nvme-buffers", val, path);
    for (size_t i = 0; i < sizeof swapper_without_effect / sizeof swapper_without_effect[0]; i++)
        if (strcmp(key, swapper_without_effect[i]) == 0) return note_without_effect(r, path);
    if (strcmp(key, "buffer_count") == 0) return note_without_effect(r, path);
    if (strcmp(key, "device") != 0) return refuse(r, path, "not supported by zerotrain");
    if (!dev || (strcmp(dev, "cpu") != 0 && strcmp(dev, "nvme") != 0 && strcmp(dev, "none") != 0))
        return refuse(r, path, "not \"cpu\", \"nvme\" or \"none\"");
    set(r, option, val, path);
}

/* aio: DeepSpeed's asynchronous I/O for the NVMe tier. Its request size and
 * queue depth map to ours; its threads and submission modes are libaio's
 * and GDS's, which zerotrain's io_uring stream does not have. */
static void aio_key(reader *r, const char *key, json_t *val, const char *path) {
    static const char *const no_effect[] = {"thread_count", "single_submit", "overlap_events", "use_gds",
                                            "intra_op_parallelism"};
    if (strcmp(key, "block_size") == 0) return set(r, "nvme-block-size", val, path);
    if (strcmp(key, "queue_depth") == 0) return set(r, "nvme-queue-depth", val, path);
    for (size_t i = 0; i < sizeof no_effect / sizeof no_effect[0]; i++)
        if (strcmp(key, no_effect[i]) == 0) return note_without_effect(r, path);
    refuse(r, path, "not supported by zerotrain");
}

static void offload_key(reader *r, const char *key, json_t *val, const char *path) {
    offload_device_key(r, key, val, path, "offload");
}

/* offload_param: the parameter shards (stage 3) in the host pool. */
static void offload_param_key(reader *r, const char *key, json_t *val, const char *path) {
    offload_device_key(r, key, val, path, "offload-params");
}

/* activation_checkpointing: cpu_checkpointing keeps the checkpointed inputs
 * in the host pool (--offload-activations). What is checkpointed is the
 * model's choice in DeepSpeed, not the file's, so --recompute full is not
 * implied: validation asks for it. The other keys shape partitioning over
 * model-parallel ranks, which zerotrain does not have. */
static void activation_key(reader *r, const char *key, json_t *val, const char *path) {
    static const char *const no_effect[] = {"partition_activations", "contiguous_memory_optimization",
                                            "number_checkpoints", "synchronize_checkpoint_boundary", "profile"};
    if (strcmp(key, "cpu_checkpointing") == 0) {
        if (is_auto(val)) return;
        if (!json_is_boolean(val)) return refuse(r, path, "not a boolean");
        json_t *v = json_string(json_is_true(val) ? "cpu" : "none");
        set(r, "offload-activations", v, path);
        json_decref(v);
        return;
    }
    for (size_t i = 0; i < sizeof no_effect / sizeof no_effect[0]; i++)
        if (strcmp(key, no_effect[i]) == 0) return note_without_effect(r, path);
    refuse(r, path, "not supported by zerotrain");
}

/* A group size: MiCS's shard size (--shard-group G; -1, DeepSpeed's
 * default, shards over the world) or hpZ's partition size
 * (--reshard-after-forward G; 1, its default, keeps nothing). `off` is the
 * value that means the option's default. */
static void group_key(reader *r, json_t *val, const char *path, const char *option, const char *none, int off) {
    if (!json_is_integer(val) || (json_integer_value(val) < 1 && json_integer_value(val) != off))
        return refuse(r, path, off == -1 ? "not -1 or a positive number of ranks" : "not a positive number of ranks");
    char text[24];
    if (json_integer_value(val) == off) snprintf(text, sizeof text, "%s", none);
    else snprintf(text, sizeof text, "%lld", (long long)json_integer_value(val));
    json_t *v = json_string(text);
    set(r, option, v, path);
    json_decref(v);
}

/* A ZeRO++ boolean: true sets `option` to `on`, false to none. */
static void quantized_key(reader *r, json_t *val, const char *path, const char *option, const char *on) {
    if (!json_is_boolean(val)) return refuse(r, path, "not a boolean");
    json_t *v = json_string(json_is_true(val) ? on : "none");
    set(r, option, v, path);
    json_decref(v);
}

static void zero_key(reader *r, const char *key, json_t *val, const char *path) {
    if (strcmp(key, "stage") == 0) set(r, "stage", val, path);
    else if (strcmp(key, "reduce_bucket_size") == 0)
        set_count(r, "bucket-size", val, path, 4.0, ZT_DS_AUTO_REDUCE_BUCKET); /* fp32 gradient bytes */
    else if (strcmp(key, "stage3_prefetch_bucket_size") == 0)
        set_count(r, "prefetch-bucket-size", val, path, 1.0, ZT_DS_AUTO_PREFETCH_BUCKET);
    else if (strcmp(key, "overlap_comm") == 0) set(r, "overlap-comm", val, path);
    else if (strcmp(key, "offload_optimizer") == 0) each_key(r, val, path, offload_key);
    else if (strcmp(key, "offload_param") == 0) each_key(r, val, path, offload_param_key);
    else if (strcmp(key, "reduce_scatter") == 0) require_true(r, val, path, "gradients are always reduce-scattered");
    else if (strcmp(key, "contiguous_gradients") == 0)
        require_true(r, val, path, "each unit's gradients are always one flat buffer");
    else if (strcmp(key, "stage3_param_persistence_threshold") == 0)
        set_count(r, "persist-threshold", val, path, 1.0, ZT_DS_AUTO_PERSIST);
    else if (strcmp(key, "stage3_max_live_parameters") == 0) set_count(r, "max-live-params", val, path, 1.0, 0);
    else if (strcmp(key, "stage3_max_reuse_distance") == 0) set_count(r, "max-reuse-distance", val, path, 1.0, 0);
    else if (strcmp(key, "sub_group_size") == 0) set_count(r, "sub-group-size", val, path, 1.0, 0);
    else if (strcmp(key, "mics_shard_size") == 0) group_key(r, val, path, "shard-group", "world", -1);
    else if (strcmp(key, "zero_hpz_partition_size") == 0) group_key(r, val, path, "reshard-after-forward", "none", 1);
    else if (strcmp(key, "zero_quantized_weights") == 0) quantized_key(r, val, path, "quantize-weights", "int8");
    else if (strcmp(key, "zero_quantized_gradients") == 0) quantized_key(r, val, path, "quantize-grads", "int4");
    else if (strcmp(key, "zero_quantized_nontrainable_weights") == 0 && json_is_true(val))
        refuse(r, path, "frozen units keep their shards in the params dtype; their gathers are quantized with the "
               "others' by zero_quantized_weights");
    else if (strcmp(key, "zero_quantized_nontrainable_weights") == 0 && json_is_boolean(val))
        note_without_effect(r, path);
    else if (strcmp(key, "zero_quantized_nontrainable_weights") == 0) refuse(r, path, "not a boolean");
    else if (strcmp(key, "allgather_bucket_size") == 0 || strcmp(key, "allgather_partitions") == 0 ||
             strcmp(key, "round_robin_gradients") == 0 || strcmp(key, "stage3_gather_16bit_weights_on_model_save") == 0)
        note_without_effect(r, path); /* zerotrain gathers whole units; rank order is fixed */
    else refuse(r, path, "not supported by zerotrain");
}

/* bf16.enabled / fp16.enabled: true selects that dtype; false leaves the
 * dtype to the other block, the flags or the default (fp32). */
static void enable_dtype(reader *r, json_t *val, const char *path, const char *dtype) {
    if (is_auto(val)) return; /* the Hugging Face integration's: the flags decide */
    if (!json_is_boolean(val)) return refuse(r, path, "not a boolean");
    if (!json_is_true(val)) return;
    json_t *dt = json_string(dtype);
    set(r, "dtype", dt, path);
    json_decref(dt);
}

/* A boolean that, when true, sets `option` to `value` and says how
 * zerotrain's meaning differs from DeepSpeed's (note). */
static void true_sets(reader *r, json_t *val, const char *path, const char *option, const char *value,
                      const char *note) {
    if (is_auto(val)) return;
    if (!json_is_boolean(val)) return refuse(r, path, "not a boolean");
    if (!json_is_true(val)) return;
    json_t *v = json_string(value);
    set(r, option, v, path);
    json_decref(v);
    size_t len = strlen(r->cfg->config_note);
    snprintf(r->cfg->config_note + len, sizeof r->cfg->config_note - len, "%s%s", len ? "; " : "", note);
}

/* bf16.bf16_master_weights_and_grads and bf16.bf16_optimizer_states:
 * DeepSpeed rounds the bf16 master and moments to nearest; zerotrain
 * rounds stochastically (optim/lowmem.c), so small updates are not lost.
 * Its gradients are in --dtype already (bf16 here), reduced in fp32. */
static void bf16_key(reader *r, const char *key, json_t *val, const char *path) {
    if (strcmp(key, "bf16_master_weights_and_grads") == 0)
        return true_sets(r, val, path, "master-dtype", "none",
                         "bf16.bf16_master_weights_and_grads: no fp32 master (--master-dtype none), the bf16 params "
                         "stepped with stochastic rounding where DeepSpeed rounds to nearest");
    if (strcmp(key, "bf16_optimizer_states") == 0)
        return true_sets(r, val, path, "optim-state-dtype", "bf16",
                         "bf16.bf16_optimizer_states: the moments in bf16 (--optim-state-dtype bf16), stochastically "
                         "rounded where DeepSpeed rounds to nearest");
    if (strcmp(key, "enabled") != 0) return refuse(r, path, "not supported by zerotrain");
    enable_dtype(r, val, path, "bf16");
}

/* DeepSpeed's fp16 block: its loss-scaling knobs are ours under the same names. */
static void fp16_key(reader *r, const char *key, json_t *val, const char *path) {
    static const struct {
        const char *key, *option;
    } same[] = {{"loss_scale", "loss-scale"},     {"initial_scale_power", "initial-scale-power"},
                {"loss_scale_window", "loss-scale-window"}, {"hysteresis", "hysteresis"},
                {"min_loss_scale", "min-loss-scale"}};
    if (strcmp(key, "enabled") == 0) return enable_dtype(r, val, path, "fp16");
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
        if (strcmp(key, same[i].key) == 0) return set(r, same[i].option, val, path);
    if (strcmp(key, "consecutive_hysteresis") == 0 || strcmp(key, "fp16_master_weights_and_grads") == 0) {
        if (!json_is_boolean(val)) return refuse(r, path, "not a boolean");
        if (json_is_true(val))
            refuse(r, path, "true, which zerotrain does not support (fp32 master weights; hysteresis reset on growth)");
        return;
    }
    refuse(r, path, "not supported by zerotrain");
}

/* lr (the peak, unless the scheduler sets it) and Adam's betas, as Adam's
 * and Muon's params both name them; returns whether key was one of them. */
static int lr_or_betas_key(reader *r, const char *key, json_t *val, const char *path) {
    if (strcmp(key, "lr") == 0 && r->lr_from_scheduler) {
        if (!is_auto(val)) note_without_effect(r, path); /* the scheduler's warmup_max_lr is the peak */
    } else if (strcmp(key, "lr") == 0) set(r, "lr", val, path);
    else if (strcmp(key, "betas") != 0) return 0;
    else if (is_auto(val)) return 1;
    else if (json_is_array(val) && json_array_size(val) == 2) {
        set(r, "beta1", json_array_get(val, 0), path);
        set(r, "beta2", json_array_get(val, 1), path);
    } else refuse(r, path, "not a list of two numbers");
    return 1;
}

static void adam_key(reader *r, const char *key, json_t *val, const char *path) {
    if (lr_or_betas_key(r, key, val, path)) return;
    if (strcmp(key, "eps") == 0) set(r, "eps", val, path);
    else if (strcmp(key, "weight_decay") == 0) set(r, "weight-decay", val, path);
    else if (strcmp(key, "adam_w_mode") == 0) require_true(r, val, path, "zerotrain's Adam decouples weight decay");
    else if (strcmp(key, "torch_adam") == 0) note_without_effect(r, path);
    else refuse(r, path, "not supported by zerotrain");
}

/* optimizer.params of SGD (torch.optim.SGD's names). */
static void sgd_key(reader *r, const char *key, json_t *val, const char *path) {
    if (strcmp(key, "lr") == 0) set(r, "lr", val, path);
    else if (strcmp(key, "momentum") == 0) set(r, "momentum", val, path);
    else if (strcmp(key, "nesterov") == 0) set(r, "nesterov", val, path);
    else if (strcmp(key, "weight_decay") == 0) set(r, "weight-decay", val, path);
    else if (strcmp(key, "dampening") == 0) {
        if (!json_is_number(val) || json_number_value(val) != 0.0) refuse(r, path, "not 0 (zerotrain's SGD has no dampening)");
    } else refuse(r, path, "not supported by zerotrain");
}

/* optimizer.params of Adafactor (the names of transformers' Adafactor;
 * relative_step, scale_parameter and warmup_init only off: the learning
 * rate is the schedule's). */
static void adafactor_key(reader *r, const char *key, json_t *val, const char *path) {
    if (strcmp(key, "lr") == 0) set(r, "lr", val, path);
    else if (strcmp(key, "beta1") == 0 && json_is_null(val)) return; /* no first moment: the default */
    else if (strcmp(key, "beta1") == 0) set(r, "adafactor-beta1", val, path);
    else if (strcmp(key, "decay_rate") == 0) set(r, "adafactor-decay", val, path);
    else if (strcmp(key, "clip_threshold") == 0) set(r, "adafactor-clip", val, path);
    else if (strcmp(key, "weight_decay") == 0) set(r, "weight-decay", val, path);
    else if (strcmp(key, "eps") == 0 && json_is_array(val) && json_array_size(val) == 2)
        set(r, "adafactor-eps", json_array_get(val, 0), path); /* eps[1] scales by the parameter's RMS: off */
    else if (strcmp(key, "eps") == 0) set(r, "adafactor-eps", val, path);
    else if (strcmp(key, "relative_step") == 0 || strcmp(key, "scale_parameter") == 0 ||
             strcmp(key, "warmup_init") == 0) {
        if (!json_is_false(val)) refuse(r, path, "not false (zerotrain's Adafactor takes the schedule's lr)");
    } else refuse(r, path, "not supported by zerotrain");
}

/* ns_coefficients [a, b, c] as --muon-ns-coefficients' text "a,b,c", each
 * number in the shortest form that reads back to the same double, so
 * --print-config shows the file's numbers. */
static void ns_coefficients_key(reader *r, json_t *val, const char *path) {
    if (is_auto(val)) return;
    int ok = json_is_array(val) && json_array_size(val) == 3;
    char text[96] = "";
    for (size_t k = 0; ok && k < 3; k++) {
        json_t *x = json_array_get(val, k);
        ok = json_is_number(x);
        double v = json_number_value(x);
        char one[32];
        snprintf(one, sizeof one, "%.15g", v);
        if (strtod(one, NULL) != v) snprintf(one, sizeof one, "%.17g", v);
        size_t len = strlen(text);
        snprintf(text + len, sizeof text - len, "%s%s", k ? "," : "", one);
    }
    if (!ok) return refuse(r, path, "not a list of three numbers [a, b, c]");
    json_t *joined = json_string(text);
    set(r, "muon-ns-coefficients", joined, path);
    json_decref(joined);
}

/* optimizer.params of Muon (torch.optim.Muon's names, which set the
 * hidden matrices' step; betas set the AdamW group's, and adamw_lr, ours,
 * its peak lr). adjust_lr_fn null is torch's default, "original". */
static void muon_key(reader *r, const char *key, json_t *val, const char *path) {
    static const struct {
        const char *key, *option;
    } same[] = {{"momentum", "muon-momentum"}, {"nesterov", "muon-nesterov"}, {"ns_steps", "muon-ns-steps"},
                {"eps", "muon-eps"},           {"weight_decay", "weight-decay"}, {"adamw_lr", "muon-adamw-lr"}};
    if (lr_or_betas_key(r, key, val, path)) return;
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
        if (strcmp(key, same[i].key) == 0) return set(r, same[i].option, val, path);
    if (strcmp(key, "ns_coefficients") == 0) return ns_coefficients_key(r, val, path);
    if (strcmp(key, "adjust_lr_fn") == 0) {
        json_t *fn = json_is_null(val) ? json_string("original") : json_incref(val);
        set(r, "muon-adjust-lr", fn, path);
        json_decref(fn);
        return;
    }
    refuse(r, path, "not supported by zerotrain");
}

/* optimizer.type's names (case-insensitive) and what zerotrain calls them. */
static const struct {
    const char *type, *ours;
} optimizer_types[] = {{"adamw", "adamw"}, {"adam", "adamw"}, {"sgd", "sgd"}, {"adafactor", "adafactor"},
                       {"adam8bit", "adam8bit"}, {"adamw8bit", "adam8bit"}, {"muon", "muon"}};

/* optimizer.{type, params}: AdamW (Adam: the same, with adam_w_mode), SGD,
 * Adafactor, 8-bit AdamW (bitsandbytes' name; Adam's params) or Muon. */
static void optimizer_key(reader *r, const char *key, json_t *val, const char *path) {
    if (strcmp(key, "params") == 0)
        each_key(r, val, path,
                 r->opt == DS_SGD         ? sgd_key
                 : r->opt == DS_ADAFACTOR ? adafactor_key
                 : r->opt == DS_MUON      ? muon_key
                                          : adam_key);
    else if (strcmp(key, "type") != 0) refuse(r, path, "not supported by zerotrain");
    else {
        for (size_t i = 0; json_is_string(val) && i < sizeof optimizer_types / sizeof optimizer_types[0]; i++)
            if (strcasecmp(json_string_value(val), optimizer_types[i].type) == 0) {
                json_t *name = json_string(optimizer_types[i].ours);
                set(r, "optimizer", name, path);
                json_decref(name);
                return;
            }
        refuse(r, path, "not Adam, AdamW, SGD, Adafactor or Adam8bit, nor Muon (the optimizers zerotrain has)");
    }
}

/* scheduler.params: DeepSpeed's names of our schedule options. */
static void scheduler_param(reader *r, const char *key, json_t *val, const char *path) {
    int cosine = strcmp(r->schedule, "warmup-cosine") == 0, plain = strcmp(r->schedule, "warmup") == 0;
    if (strcmp(key, "warmup_num_steps") == 0) set(r, "warmup", val, path);
    else if (strcmp(key, "warmup_type") == 0) set(r, "warmup-type", val, path);
    else if (strcmp(key, "total_num_steps") == 0 && !plain) set(r, "schedule-steps", val, path);
    else if (strcmp(key, "warmup_min_lr") == 0 && !cosine) set(r, "warmup-min-lr", val, path);
    else if (strcmp(key, "warmup_max_lr") == 0 && !cosine) set(r, "lr", val, path);
    else if (strcmp(key, "warmup_min_ratio") == 0 && cosine) set(r, "warmup-min-ratio", val, path);
    else if (strcmp(key, "cos_min_ratio") == 0 && cosine) set(r, "cos-min-ratio", val, path);
    else if (strcmp(key, "last_batch_iteration") == 0) {
        if (!json_is_integer(val) || json_integer_value(val) != -1)
            refuse(r, path, "not -1 (a run continues its schedule from a checkpoint: --resume)");
    } else refuse(r, path, "not a parameter of this scheduler");
}

/* DeepSpeed's default for each parameter the file leaves out (what
 * DeepSpeed's scheduler would use), so the schedule means the same. */
static void scheduler_defaults(reader *r, json_t *params) {
    static const struct {
        const char *key, *option, *which; /* which: the schedules it belongs to */
        double value;
    } defaults[] = {{"warmup_num_steps", "warmup", "warmup warmup-decay warmup-cosine", 1000},
                    {"warmup_max_lr", "lr", "warmup warmup-decay", 0.001}};
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++) {
        if (json_object_get(params, defaults[i].key) || !strstr(defaults[i].which, r->schedule)) continue;
        json_t *v = json_real(defaults[i].value);
        set(r, defaults[i].option, v, "scheduler.params (DeepSpeed's default)");
        json_decref(v);
    }
    if (strcmp(r->schedule, "warmup") != 0 && !json_object_get(params, "total_num_steps"))
        refuse(r, "scheduler.params.total_num_steps", "missing (DeepSpeed requires it for this scheduler)");
}

/* scheduler.{type, params}: DeepSpeed's warm-up schedules. */
static void read_scheduler(reader *r, json_t *val) {
    if (!json_is_object(val)) return refuse(r, "scheduler", "not an object");
    const char *key;
    json_t *v;
    json_object_foreach(val, key, v) if (strcmp(key, "type") != 0 && strcmp(key, "params") != 0)
        refuse(r, "scheduler", "an object with keys other than type and params");
    if (!r->schedule[0]) return refuse(r, "scheduler.type", "missing, or not WarmupLR, WarmupDecayLR or WarmupCosineLR "
                                       "(the schedules zerotrain has)");
    json_t *name = json_string(r->schedule), *params = json_object_get(val, "params");
    set(r, "lr-schedule", name, "scheduler.type");
    json_decref(name);
    if (params) each_key(r, params, "scheduler.params", scheduler_param);
    scheduler_defaults(r, params);
}

/* Which schedule the file's scheduler.type names (read before the other
 * keys: it decides what optimizer.params.lr means). */
static void find_schedule(reader *r, json_t *root) {
    static const struct {
        const char *deepspeed, *ours;
    } names[] = {{"WarmupLR", "warmup"}, {"WarmupDecayLR", "warmup-decay"}, {"WarmupCosineLR", "warmup-cosine"}};
    const char *type = json_string_value(json_object_get(json_object_get(root, "scheduler"), "type"));
    for (size_t i = 0; type && i < sizeof names / sizeof names[0]; i++)
        if (strcmp(type, names[i].deepspeed) == 0) snprintf(r->schedule, sizeof r->schedule, "%s", names[i].ours);
    r->lr_from_scheduler = r->schedule[0] && strcmp(r->schedule, "warmup-cosine") != 0;
}

/* DeepSpeed's top-level names of our options. */
static const struct {
    const char *deepspeed, *option;
} aliases[] = {
    {"train_micro_batch_size_per_gpu", "micro-batch"},
    {"gradient_accumulation_steps", "grad-accum"},
    {"gradient_clipping", "grad-clip"},
    {"communication_data_type", "reduce-dtype"},
    {"steps_per_print", "print-every"},
    {"wall_clock_breakdown", "wall-clock-breakdown"},
    {"sequence_parallel_size", "seq-parallel"},
};

/* Top-level DeepSpeed keys that change nothing here (logging, checks). */
static const char *const without_effect[] = {"zero_allow_untested_optimizer", "prescale_gradients", "dump_state"};

static void read_key(reader *r, const char *key, json_t *val) {
    if (strcmp(key, "zero_optimization") == 0) return each_key(r, val, key, zero_key);
    if (strcmp(key, "activation_checkpointing") == 0) return each_key(r, val, key, activation_key);
    if (strcmp(key, "aio") == 0) return each_key(r, val, key, aio_key);
    if (strcmp(key, "bf16") == 0) return each_key(r, val, key, bf16_key);
    if (strcmp(key, "fp16") == 0) return each_key(r, val, key, fp16_key);
    if (strcmp(key, "optimizer") == 0 && json_is_string(val)) return set(r, "optimizer", val, key); /* ours: a name */
    if (strcmp(key, "optimizer") == 0) { /* DeepSpeed's: an object */
        if (json_is_object(val) && !json_object_get(val, "type")) refuse(r, "optimizer.type", "missing");
        return each_key(r, val, key, optimizer_key);
    }
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcmp(key, aliases[i].deepspeed) == 0) return set(r, aliases[i].option, val, key);
    for (size_t i = 0; i < sizeof without_effect / sizeof without_effect[0]; i++)
        if (strcmp(key, without_effect[i]) == 0) return note_without_effect(r, key);
    if (strcmp(key, "scheduler") == 0) return read_scheduler(r, val);
    if (strcmp(key, "amp") == 0) return refuse(r, key, "not supported by zerotrain (use bf16 or fp16)");
    if (strcmp(key, "train_batch_size") == 0) {
        if (is_auto(val)) return;
        if (!json_whole(val) || json_number_value(val) < 1) return refuse(r, key, "not a positive whole number");
        r->cfg->train_batch_size = (long long)json_number_value(val);
        return;
    }
    char where[300];
    snprintf(where, sizeof where, "key \"%s\"", key);
    zt_error e = {0};
    if (zt_config_set_option(r->cfg, key, val, where, &e) != ZT_OK) note_problem(r, &e);
}

zt_status zt_config_read_keys(zt_train_config *c, json_t *root, const char *path, zt_error *err) {
    reader r = {c, 0, "", "", 0, 0};
    const char *key;
    json_t *val;
    find_schedule(&r, root);
    const char *opt_type = json_string_value(json_object_get(json_object_get(root, "optimizer"), "type"));
    r.opt = !opt_type                                ? DS_ADAM
            : strcasecmp(opt_type, "sgd") == 0       ? DS_SGD
            : strcasecmp(opt_type, "adafactor") == 0 ? DS_ADAFACTOR
            : strcasecmp(opt_type, "muon") == 0      ? DS_MUON
                                                     : DS_ADAM;
    json_object_foreach(root, key, val) read_key(&r, key, val);
    if (r.problems == 1) return ZT_FAIL(err, ZT_ERR_INVALID, "--config %s: %s", path, r.text);
    if (r.problems > 1) return ZT_FAIL(err, ZT_ERR_INVALID, "--config %s: %d problems:\n  %s", path, r.problems, r.text);
    return ZT_OK;
}
