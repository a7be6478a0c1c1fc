/* zt-train's configuration: one table of options drives the flag parser, the
 * JSON config reader and --help, so they cannot drift apart. Precedence:
 * defaults < --config FILE < flags. */
#ifndef ZT_TRAIN_CONFIG_H
#define ZT_TRAIN_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "zt_agree.h"
#include "zt_error.h"
#include "zt_model_settings.h"

typedef struct {
    /* model: the family (--model: one registered with the program) and its shape */
    char model[16];
    int layers, d_model, heads, seq_len, vocab, micro_batch, tied;
    int kv_heads, ffn_dim;        /* 0: the family's default */
    double norm_eps, rope_theta;  /* families with RMSNorm, RoPE */
    /* data */
    char data[512];
    int markov_order, markov_branch;
    /* token files: their format (token_files.h's names); validation data,
     * evaluated every eval_every steps (0: after the last) over
     * eval_batches micro-batches per rank */
    char data_dtype[8], val_data[512];
    int eval_every, eval_batches;
    int seq_parallel; /* ranks sharing each sequence (DeepSpeed-Ulysses; 1: none) */
    /* optimisation */
    int steps, warmup, grad_accum;
    int64_t seed;
    double lr, min_lr_frac, weight_decay, beta1, beta2, eps, grad_clip;
    /* the optimizer: adamw, sgd (momentum, nesterov), adafactor (its decay,
     * clip, eps and optional beta1) or adam8bit (AdamW's betas and eps) */
    char optimizer[16];
    double adafactor_beta1, adafactor_decay, adafactor_clip, adafactor_eps;
    /* muon: on the hidden matrices; AdamW (betas, eps) at muon_adamw_lr
     * (< 0: --lr) on the rest. muon_ns_coef_text "A,B,C" is parsed by
     * validation into muon_ns_coef. */
    double muon_momentum, muon_eps, muon_adamw_lr;
    int muon_nesterov, muon_ns_steps;
    char muon_ns_coef_text[64], muon_adjust_lr[24], muon_ns_device[8];
    /* low-memory state: --master-dtype fp32|none, --optim-state-dtype fp32|bf16 */
    char master_dtype[8], optim_state_dtype[8];
    double muon_ns_coef[3];
    char freeze[128]; /* --freeze: units not trained (train/decoder/decoder_freeze.c) */
    double momentum;
    int nesterov;
    /* the learning-rate schedule (shard/zt_lr_schedule.h) */
    char lr_schedule[16], warmup_type[8];
    double warmup_min_lr, warmup_min_ratio, cos_min_ratio;
    int schedule_steps;
    /* DeepSpeed's logging knobs */
    int print_every, wall_clock_breakdown;
    /* DeepSpeed's stage-3 knobs (parameters; 0: off) and sub_group_size (elements) */
    int64_t persist_threshold, max_live_params, max_reuse_distance, sub_group_size;
    /* runtime */
    int stage, prefetch, threads, quiet, overlap_comm, trace, report_every, offload_delay, print_config;
    /* --auto: the configuration chosen by the step-time model under
     * --mem-limit, for --global-batch sequences per step (0: as given); the
     * model's machine profile ("": the device's built-in table). */
    int auto_config, global_batch;
    char profile[512];
    char auto_axes[256]; /* --auto-axes: the axes searched ("": all) */
    double seq_len_jitter; /* each rank's T per step drawn in [(1 - F) seq_len, seq_len] */
    int64_t trace_max_events;
    /* Interop with users' tools: a folder for each rank's PyTorch
     * memory_viz snapshot ("": none) and its trace events kept; per-rank
     * traces with the fields Holistic Trace Analysis reads. */
    char memory_snapshot[512];
    int64_t memory_snapshot_entries;
    int trace_per_rank;
    int64_t prefetch_bucket_size; /* DeepSpeed's stage3_prefetch_bucket_size (parameters); 0: use prefetch */
    char offload_params[8]; /* none, cpu or nvme: stage 3's parameter shards in the host pool or the swap file */
    /* The NVMe tier (--offload nvme): the swap files' folder, the buffers'
     * block size and count, io_uring's queue depth, the I/O path. */
    char nvme_path[512];
    size_t nvme_block_size;
    int nvme_buffers, nvme_queue_depth;
    char nvme_io[12];
    char offload_activations[8]; /* none or cpu: with --recompute full, the blocks' kept inputs in the host pool */
    char offload[16], recompute[16], dtype[16], reduce_dtype[16], device[16], attention[16];
    /* ZeRO++'s quantized communication: stage 3's weight all-gathers
     * (none, int8), the gradients' reduce-scatters (none, int8, int4), the
     * values per scale, and error feedback (0/1, its dtype fp32 or bf16). */
    char quantize_weights[8], quantize_grads[8], quantize_grads_feedback_dtype[8];
    int quant_block, quantize_grads_feedback;
    /* fp16 loss scaling (DeepSpeed's fp16 block) and the non-finite guard */
    double loss_scale, min_loss_scale;
    int initial_scale_power, loss_scale_window, hysteresis, max_skipped_steps;
    size_t bucket_size, mem_limit;
    char allocator[12];    /* the device allocator's mode: simple, caching or expandable (zt_mem.h) */
    char link[8];          /* a modelled host-device link preset: none, pcie4, pcie5 */
    char link_gbs[64];     /* "H2D,D2H" in GB/s ("": none) */
    char metrics_file[1024]; /* Prometheus text per rank per step ("": none) */
    size_t max_split_size; /* caching: free blocks this large are not split for smaller requests (0: none) */
    int leak_window;       /* the leak watch's steps (leak_watch.h) */
    size_t leak_min_rate;  /* bytes per step a part must grow by to be named */
    char log_dir[512];
    int save_every;
    double save_every_minutes; /* a timed save cadence on rank 0's clock (0: none) */
    int async_save;            /* 1: stage to host memory, write on a thread (checkpointer.h) */
    int save_failures;         /* failed saves in a row that stop the run */
    char on_signal[16];        /* save-exit, exit or ignore (stop_signals.h) */
    char save_dir[512], resume[1024];
    char init_from[1024]; /* a Hugging Face model directory the run starts from ("": the family's init) */
    int resume_auto; /* --resume auto found a checkpoint (resume names it): a damaged one falls back to an older one */
    char config[512];
    int keep_checkpoints;
    /* From a DeepSpeed config: its train_batch_size (0: not given), checked
     * against micro-batch x grad-accum x world once the world is known; keys
     * given as "auto" that are resolved from the model (ZT_DS_AUTO_*); and
     * the keys accepted without effect, for one warning. */
    long long train_batch_size;
    int ds_auto;
    char config_warning[512];
    char config_note[512]; /* --config: keys read with another meaning than DeepSpeed's, said at start */
    double collective_timeout; /* --collective-timeout: the collective watchdog's seconds (0: none) */
    char shard_group[16];      /* --shard-group: world, node or G (hybrid sharding) */
    char reshard_after_forward[16]; /* hpZ: none, node or G' (the secondary group kept after forward) */
    /* which options were given (by flag or config file), by option index */
    unsigned char given[256];
} zt_train_config;

#define ZT_DS_AUTO_REDUCE_BUCKET 1   /* reduce_bucket_size "auto": d_model^2 elements */
#define ZT_DS_AUTO_PREFETCH_BUCKET 2 /* stage3_prefetch_bucket_size "auto": 0.9 d_model^2 */
#define ZT_DS_AUTO_PERSIST 4         /* stage3_param_persistence_threshold "auto": 10 d_model */

void zt_train_config_defaults(zt_train_config *cfg);
/* Parses argv (flags win over --config). Returns ZT_ERR_INVALID with a message
 * naming the flag or key on bad input. *want_help is set for --help. */
zt_status zt_train_config_parse(zt_train_config *cfg, int argc, char **argv, int *want_help, zt_error *err);
/* Applies a --config file's JSON text (len bytes; need not be NUL-terminated)
 * to cfg; `name` stands for the file's path in messages (line and column for
 * JSON errors, the key for bad values). zt_train_config_parse reads the file
 * named by --config and calls this. */
zt_status zt_train_config_parse_json(zt_train_config *cfg, const char *text, size_t len, const char *name,
                                     zt_error *err);
/* Rejects options that are named but not available yet, and cross-field
 * errors; resolves DeepSpeed's "auto" values from the model. */
zt_status zt_train_config_validate(zt_train_config *cfg, zt_error *err);
/* The modelled link's bandwidths, gbs[ZT_LINK_H2D], gbs[ZT_LINK_D2H] in
 * 1e9 bytes/s, from --link-gbs or --link; both 0 when neither is given. */
zt_status zt_train_config_link(const zt_train_config *cfg, double gbs[2], zt_error *err);
int zt_train_config_given(const zt_train_config *cfg, const char *name);
void zt_train_config_print_help(FILE *f, const char *prog);
/* A library message with its settings (`offload_params`, in backquotes)
 * shown as the command line's flags (--offload-params), into out[cap]. */
void zt_settings_as_flags(const char *msg, char *out, size_t cap);
/* The model's settings (the family resolves its own defaults) with the
 * data's vocabulary; refuses a recompute policy it cannot read. */
zt_status zt_train_config_model(const zt_train_config *cfg, int vocab, zt_model_settings *s, zt_error *err);
/* The vocabulary the data implies: 256 for a file read as bytes, else
 * --vocab (it may sniff --data's first file for an llm.c header; files
 * that are not there: --vocab). In data_cursor.c, beside the data. */
int zt_train_data_vocab(const zt_train_config *cfg);
/* The settings every rank must share (zt_agree_settings), resolved: every
 * option except the per-rank ones named in train_config.c. Options that name
 * files are compared by what they refer to, which identity(arg, option)
 * returns ("data", "val-data", "resume", "save-dir"). Returns the number of rows. */
int zt_train_config_settings(const zt_train_config *cfg, const char *(*identity)(void *arg, const char *option),
                             void *arg, zt_setting *rows, int cap);
/* The resolved configuration as a --config file: every option under its
 * JSON name, DeepSpeed's keys and "auto" resolved (malloc'd; NULL when out
 * of memory). Read back, it gives the same run. */
char *zt_train_config_json(const zt_train_config *cfg);
/* The resolved configuration as a table (rank 0 prints it at start). */
void zt_train_config_print(const zt_train_config *cfg, FILE *f);

#endif
