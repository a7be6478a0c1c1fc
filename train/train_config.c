#include "train_config.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "zt_fs.h"
#include "train_config_internal.h"
#include "zt_wire.h"
#include "zt_mem.h"
#include "zt_optim.h"
#include "zt_recompute.h"

#define CONFIG_FILE_MAX ((size_t)16 << 20) /* a --config file larger than this is refused */

typedef enum { OPT_INT, OPT_INT64, OPT_FLOAT, OPT_SIZE, OPT_STRING, OPT_CHOICE, OPT_BOOL } opt_kind;

typedef struct {
    const char *name; /* flag without "--"; the JSON key uses '_' for '-' */
    opt_kind kind;
    size_t offset;
    size_t cap; /* bytes, for strings */
    double min, max;
    const char *choices; /* '|'-separated, for OPT_CHOICE (NULL: the optimizer registry's names) */
    const char *help;
} opt_spec;

#define F(field) offsetof(zt_train_config, field)
#define S(field) offsetof(zt_train_config, field), sizeof(((zt_train_config *)0)->field)

static const opt_spec options[] = {
    {"config", OPT_STRING, S(config), 0, 0, NULL, "JSON file with any of these options (flags win)"},
    {"model", OPT_STRING, S(model), 0, 0, NULL, "the model family (gpt, llama: the families this program has)"},
    {"layers", OPT_INT, F(layers), 0, 0, 256, NULL, "transformer blocks"},
    {"d-model", OPT_INT, F(d_model), 0, 1, 65536, NULL, "model width (divisible by --heads)"},
    {"heads", OPT_INT, F(heads), 0, 1, 1024, NULL, "attention heads"},
    {"seq-len", OPT_INT, F(seq_len), 0, 1, 65536, NULL, "tokens per sequence"},
    {"vocab", OPT_INT, F(vocab), 0, 2, 1 << 20, NULL, "vocabulary size (256 with a data file)"},
    {"seq-len-jitter", OPT_FLOAT, F(seq_len_jitter), 0, 0, 0.999999, NULL,
     "F in [0,1): each rank's sequence length per step drawn in [(1-F) seq-len, seq-len]"},
    {"micro-batch", OPT_INT, F(micro_batch), 0, 1, 65536, NULL, "sequences per micro-batch per rank"},
    {"seq-parallel", OPT_INT, F(seq_parallel), 0, 1, 64, NULL,
     "sequence parallelism (DeepSpeed-Ulysses): groups of P consecutive ranks share each sequence, each holding "
     "its positions, and trade them for NH/P heads around attention (P divides the world and the heads)"},
    {"tied", OPT_BOOL, F(tied), 0, 0, 1, NULL, "tie the LM head to the token embedding"},
    {"kv-heads", OPT_INT, F(kv_heads), 0, 0, 1024, NULL,
     "llama: key/value heads of grouped-query attention, dividing --heads (0: --heads)"},
    {"ffn-dim", OPT_INT, F(ffn_dim), 0, 0, 1 << 20, NULL,
     "llama: the SwiGLU MLP's hidden width (0: the multiple of 64 nearest 8/3 d-model)"},
    {"norm-eps", OPT_FLOAT, F(norm_eps), 0, 1e-12, 1, NULL, "llama: RMSNorm's epsilon"},
    {"rope-theta", OPT_FLOAT, F(rope_theta), 0, 1, 1e12, NULL, "llama: the rotary position embedding's base"},
    {"data", OPT_STRING, S(data), 0, 0, NULL,
     "'markov' (seeded Markov source), a file read as bytes, or token files (a path or a glob, read in sorted order "
     "as one stream: llm.c .bin shards, flat uint16/uint32 arrays)"},
    {"data-dtype", OPT_CHOICE, S(data_dtype), 0, 0, "auto|bytes|uint16|uint32|llmc",
     "what --data and --val-data hold: llmc (llm.c's header, then uint16 or uint32 tokens), flat uint16 or uint32 "
     "tokens (nanoGPT's train.bin), bytes; auto: llmc when the first file has its header, else bytes"},
    {"val-data", OPT_STRING, S(val_data), 0, 0, NULL,
     "token files (or bytes) for an evaluation loss every --eval-every steps, read from their start each time"},
    {"eval-every", OPT_INT, F(eval_every), 0, 0, INT_MAX, NULL,
     "with --val-data: evaluate every K steps (0: after the last)"},
    {"eval-batches", OPT_INT, F(eval_batches), 0, 1, 1 << 20, NULL,
     "with --val-data: micro-batches per rank per evaluation"},
    {"markov-order", OPT_INT, F(markov_order), 0, 1, 8, NULL, "tokens of context of the Markov source"},
    {"markov-branch", OPT_INT, F(markov_branch), 0, 1, 1 << 20, NULL, "successors per context of the Markov source"},
    {"steps", OPT_INT, F(steps), 0, 0, INT_MAX, NULL, "optimizer steps to run"},
    {"warmup", OPT_INT, F(warmup), 0, 0, INT_MAX, NULL, "linear learning-rate warm-up steps"},
    {"grad-accum", OPT_INT, F(grad_accum), 0, 1, 65536, NULL, "micro-batches per optimizer step"},
    {"seed", OPT_INT64, F(seed), 0, 0, 9.2e18, NULL, "seed for parameters and data"},
    {"lr", OPT_FLOAT, F(lr), 0, 0, 10, NULL, "peak learning rate (cosine decay after warm-up)"},
    {"min-lr-frac", OPT_FLOAT, F(min_lr_frac), 0, 0, 1, NULL, "final learning rate as a fraction of --lr"},
    {"weight-decay", OPT_FLOAT, F(weight_decay), 0, 0, 10, NULL, "AdamW weight decay (matrices only)"},
    {"freeze", OPT_STRING, S(freeze), 0, 0, NULL,
     "units not trained: a list of embedding, head, blocks, blocks:K, blocks:A-B (params only: no grads, master "
     "or optimizer state)"},
    {"optimizer", OPT_CHOICE, S(optimizer), 0, 0, NULL,
     "adamw (exp_avg, exp_avg_sq: 8 bytes of state per parameter), sgd with momentum (4 bytes), adafactor (factored second "
     "moments: rows + cols per matrix), adam8bit (m, v block-wise in 8 bits: 2 bytes) or muon (Newton-Schulz "
     "orthogonalized momentum on the blocks' weight matrices: 4 bytes; AdamW on the rest)"},
    {"master-dtype", OPT_CHOICE, S(master_dtype), 0, 0, "fp32|none",
     "none: no fp32 master copy; the bf16 params (--dtype bf16) are stepped with stochastic rounding (adamw, sgd, "
     "muon; no offload)"},
    {"optim-state-dtype", OPT_CHOICE, S(optim_state_dtype), 0, 0, "fp32|bf16",
     "bf16: the optimizer's per-parameter state in bf16, updated in fp32 and stochastically rounded (adamw, sgd, "
     "muon; no offload)"},
    {"muon-momentum", OPT_FLOAT, F(muon_momentum), 0, 0, 0.999999, NULL, "muon: the momentum buffer's decay"},
    {"muon-nesterov", OPT_BOOL, F(muon_nesterov), 0, 0, 1, NULL, "muon: Nesterov blend of gradient and momentum"},
    {"muon-ns-steps", OPT_INT, F(muon_ns_steps), 0, 1, 100, NULL, "muon: Newton-Schulz iterations"},
    {"muon-ns-coefficients", OPT_STRING, S(muon_ns_coef_text), 0, 0, NULL,
     "muon: the quintic iteration's coefficients A,B,C"},
    {"muon-eps", OPT_FLOAT, F(muon_eps), 0, 1e-30, 1, NULL, "muon: the update's Frobenius norm is clamped at this"},
    {"muon-adjust-lr", OPT_CHOICE, S(muon_adjust_lr), 0, 0, "original|match_rms_adamw",
     "muon: per-matrix lr scale: original (sqrt(max(1, rows/cols))) or match_rms_adamw (0.2 sqrt(max(rows, cols)), "
     "so --lr suits both groups)"},
    {"muon-ns-device", OPT_CHOICE, S(muon_ns_device), 0, 0, "device|host",
     "muon: where Newton-Schulz runs (on the CPU backend both are the CPU; on a GPU host needs --offload cpu and "
     "keeps the momentum in pinned host memory)"},
    {"muon-adamw-lr", OPT_FLOAT, F(muon_adamw_lr), 0, -1, 10, NULL,
     "muon: the AdamW group's peak learning rate (-1: --lr), on the same schedule"},
    {"adafactor-beta1", OPT_FLOAT, F(adafactor_beta1), 0, 0, 0.999999, NULL,
     "adafactor: first-moment decay (0: no first moment, none kept)"},
    {"adafactor-decay", OPT_FLOAT, F(adafactor_decay), 0, -1, -0.000001, NULL,
     "adafactor: the second moment's decay at step t is 1 - t^this"},
    {"adafactor-clip", OPT_FLOAT, F(adafactor_clip), 0, 0.000001, 1e6, NULL,
     "adafactor: an update's RMS is scaled down to this where larger"},
    {"adafactor-eps", OPT_FLOAT, F(adafactor_eps), 0, 1e-38, 1, NULL, "adafactor: added to g^2 (> 0)"},
    {"momentum", OPT_FLOAT, F(momentum), 0, 0, 0.999999, NULL, "sgd: momentum"},
    {"nesterov", OPT_BOOL, F(nesterov), 0, 0, 1, NULL, "sgd: Nesterov momentum"},
    {"beta1", OPT_FLOAT, F(beta1), 0, 0, 0.999999, NULL, "Adam beta1"},
    {"beta2", OPT_FLOAT, F(beta2), 0, 0, 0.999999999, NULL, "Adam beta2"},
    {"eps", OPT_FLOAT, F(eps), 0, 1e-30, 1, NULL, "Adam epsilon"},
    {"lr-schedule", OPT_CHOICE, S(lr_schedule), 0, 0, "cosine|warmup|warmup-decay|warmup-cosine",
     "cosine: linear warm-up, cosine to --min-lr-frac; DeepSpeed's WarmupLR, WarmupDecayLR, WarmupCosineLR"},
    {"warmup-type", OPT_CHOICE, S(warmup_type), 0, 0, "log|linear", "DeepSpeed schedules: the warm-up's shape"},
    {"warmup-min-lr", OPT_FLOAT, F(warmup_min_lr), 0, 0, 10, NULL, "warmup, warmup-decay: where the warm-up starts"},
    {"warmup-min-ratio", OPT_FLOAT, F(warmup_min_ratio), 0, 0, 1, NULL,
     "warmup-cosine: where the warm-up starts, as a fraction of --lr"},
    {"cos-min-ratio", OPT_FLOAT, F(cos_min_ratio), 0, 0, 1, NULL, "warmup-cosine: where it ends, as a fraction of --lr"},
    {"schedule-steps", OPT_INT, F(schedule_steps), 0, 0, INT_MAX, NULL,
     "warmup-decay, warmup-cosine: DeepSpeed's total_num_steps (0: --steps)"},
    {"print-every", OPT_INT, F(print_every), 0, 1, INT_MAX, NULL,
     "print the step line every K steps (DeepSpeed's steps_per_print)"},
    {"wall-clock-breakdown", OPT_BOOL, F(wall_clock_breakdown), 0, 0, 1, NULL,
     "forward, backward and optimizer times in the step line (DeepSpeed's wall_clock_breakdown)"},
    {"grad-clip", OPT_FLOAT, F(grad_clip), 0, 0, 1e30, NULL, "global gradient-norm clipping (0: off)"},
    {"stage", OPT_INT, F(stage), 0, 0, 3, NULL, "ZeRO stage 0..3"},
    {"offload", OPT_CHOICE, S(offload), 0, 0, "none|cpu|nvme",
     "optimizer state offload: the fp32 master and optimizer state in the host pool (cpu) or in a swap file per rank "
     "under --nvme-path (nvme), stepped by the CPU optimizer"},
    {"shard-group", OPT_STRING, S(shard_group), 0, 0, NULL,
     "hybrid sharding (HSDP, MiCS): shard the state over groups of this many ranks (a number dividing the world, or "
     "node: a node's ranks) and replicate it across groups; world: one group (CPU backend)"},
    {"reshard-after-forward", OPT_STRING, S(reshard_after_forward), 0, 0, NULL,
     "stage 3 (hpZ, FSDP2's reshard_after_forward=G): after a unit's forward keep a 1/G part of it per rank in groups "
     "of G ranks (node: a node's ranks), so its backward all-gather stays in the group; none: free it whole"},
    {"collective-timeout", OPT_FLOAT, F(collective_timeout), 0, 0, 1e9, NULL,
     "seconds a collective may take before the job is aborted, naming it (as NCCL's watchdog; 0: wait for ever)"},
    {"nvme-path", OPT_STRING, S(nvme_path), 0, 0, NULL, "--offload nvme: the folder of the swap files"},
    {"nvme-buffers", OPT_INT, F(nvme_buffers), 0, 1, 1024, NULL,
     "--offload nvme: host buffers the state streams through (reads run buffers - 1 chunks ahead)"},
    {"nvme-block-size", OPT_SIZE, F(nvme_block_size), 0, 8192, 1e12, NULL,
     "--offload nvme: bytes of each fp32 state array one buffer holds, one I/O request (a multiple of 8KiB)"},
    {"nvme-queue-depth", OPT_INT, F(nvme_queue_depth), 0, 1, 4096, NULL, "--offload nvme: io_uring's queue depth"},
    {"nvme-io", OPT_CHOICE, S(nvme_io), 0, 0, "auto|io_uring|pread",
     "--offload nvme: asynchronous io_uring where the kernel allows it (auto), or plain pread/pwrite"},
    {"link", OPT_CHOICE, S(link), 0, 0, "none|pcie4|pcie5",
     "CPU backend: model a host-device link: pcie4 (26 GB/s each way, PCIe 4.0 x16 in practice), pcie5 (52 GB/s)"},
    {"link-gbs", OPT_STRING, S(link_gbs), 0, 0, NULL,
     "CPU backend: model a host-device link of H2D,D2H GB/s (e.g. 25,25): copies take bytes / bandwidth, "
     "overlapped on the copy streams"},
    {"offload-params", OPT_CHOICE, S(offload_params), 0, 0, "none|cpu|nvme",
     "stage 3 with --offload cpu|nvme: each gathered unit's parameter shard lives in the host pool (cpu) or the "
     "swap file (nvme, with --offload nvme), copied in before its all-gather and updated there by the CPU "
     "optimizer (DeepSpeed's offload_param)"},
    {"offload-delay", OPT_INT, F(offload_delay), 0, 0, 1, NULL,
     "1: delayed parameter update (experimental; with --offload cpu): the CPU Adam of a step overlaps the next "
     "step's forward and backward, which use the parameters from before it"},
    {"recompute", OPT_STRING, S(recompute), 0, 0, NULL,
     "activation recomputation: none, full (blocks keep their input), selective (their GEMM outputs), every-K "
     "(one block in K replays)"},
    {"offload-activations", OPT_CHOICE, S(offload_activations), 0, 0, "none|cpu",
     "with --recompute full: each block's kept input lives in the host pool from its forward to its backward, "
     "copied out and back on the copy streams (DeepSpeed's cpu_checkpointing)"},
    {"attention", OPT_CHOICE, S(attention), 0, 0, "materialized|fused",
     "keep attention's [B,NH,T,T] probabilities for backward, or only each row's log-sum-exp (fused)"},
    {"dtype", OPT_CHOICE, S(dtype), 0, 0, "fp32|bf16|fp16",
     "compute dtype: params, grads, gathered units, activations (fp32 master and optimizer state unless "
     "--master-dtype none, --optim-state-dtype bf16)"},
    {"reduce-dtype", OPT_CHOICE, S(reduce_dtype), 0, 0, "fp32|bf16|fp16",
     "dtype gradient buckets travel in (summed in fp32 either way)"},
    {"quantize-weights", OPT_CHOICE, S(quantize_weights), 0, 0, "none|int8",
     "stage 3 (ZeRO++ qwZ, DeepSpeed's zero_quantized_weights): each unit's all-gather carries block-wise int8 codes "
     "of the slices, decoded into the params dtype on every rank; the shards and the master stay exact"},
    {"quantize-grads", OPT_CHOICE, S(quantize_grads), 0, 0, "none|int8|int4",
     "(ZeRO++ qgZ, DeepSpeed's zero_quantized_gradients = int4): gradient buckets travel as block-wise codes, decoded "
     "inside the sum in rank order"},
    {"quant-block", OPT_INT, F(quant_block), 0, ZT_WIRE_BLOCK_MIN, ZT_WIRE_BLOCK_MAX, NULL,
     "values per fp32 scale of --quantize-weights/--quantize-grads (a multiple of 16); slices are padded to whole "
     "blocks"},
    {"quantize-grads-feedback", OPT_INT, F(quantize_grads_feedback), 0, 0, 1, NULL,
     "1: each rank keeps what its gradient codes lost (a full gradient per rank, not sharded) and adds it to its "
     "next contribution (error feedback)"},
    {"quantize-grads-feedback-dtype", OPT_CHOICE, S(quantize_grads_feedback_dtype), 0, 0, "fp32|bf16",
     "dtype of the error feedback"},
    {"loss-scale", OPT_FLOAT, F(loss_scale), 0, 0, 1e30, NULL, "fp16: a fixed loss scale (0: dynamic)"},
    {"initial-scale-power", OPT_INT, F(initial_scale_power), 0, 0, 64, NULL, "fp16 dynamic: the first scale is 2^this"},
    {"loss-scale-window", OPT_INT, F(loss_scale_window), 0, 1, INT_MAX, NULL,
     "fp16 dynamic: overflow-free steps before the scale doubles"},
    {"hysteresis", OPT_INT, F(hysteresis), 0, 1, INT_MAX, NULL, "fp16 dynamic: overflows tolerated before the scale halves"},
    {"min-loss-scale", OPT_FLOAT, F(min_loss_scale), 0, 1e-30, 1e30, NULL,
     "fp16 dynamic: an overflow at this scale stops the run (exit 1)"},
    {"max-skipped-steps", OPT_INT, F(max_skipped_steps), 0, 1, INT_MAX, NULL,
     "this many steps in a row with non-finite gradients stop the run (exit 1; fp16 dynamic: see --min-loss-scale)"},
    {"device", OPT_CHOICE, S(device), 0, 0, "cpu|cuda|auto", "compute device (auto: cuda when a GPU is visible, else cpu)"},
    {"bucket-size", OPT_SIZE, F(bucket_size), 0, 1, 1e15, NULL,
     "gradient reduction bucket size in bytes of fp32 gradients (DeepSpeed's reduce_bucket_size counts elements: x 4)"},
    {"prefetch", OPT_INT, F(prefetch), 0, 0, 16, NULL, "units gathered ahead at stage 3"},
    {"prefetch-bucket-size", OPT_INT64, F(prefetch_bucket_size), 0, 0, 9e18, NULL,
     "stage 3: parameters to gather ahead (sets --prefetch in units; 0: unused)"},
    {"persist-threshold", OPT_INT64, F(persist_threshold), 0, 0, 9e18, NULL,
     "stage 3: units of fewer parameters stay whole on every rank, never gathered (DeepSpeed's "
     "stage3_param_persistence_threshold; 0: none)"},
    {"max-live-params", OPT_INT64, F(max_live_params), 0, 0, 9e18, NULL,
     "stage 3: most gathered parameters at once; prefetches wait below it (stage3_max_live_parameters; 0: no cap)"},
    {"max-reuse-distance", OPT_INT64, F(max_reuse_distance), 0, 0, 9e18, NULL,
     "stage 3: a unit used again within this many parameters of other units' gathers stays gathered "
     "(stage3_max_reuse_distance; 0: released at once)"},
    {"sub-group-size", OPT_INT64, F(sub_group_size), 0, 1, 9e18, NULL,
     "elements the optimizer steps at a time, bounding its fp32 workspace (DeepSpeed's sub_group_size)"},
    {"overlap-comm", OPT_BOOL, F(overlap_comm), 0, 0, 1, NULL, "overlap collectives with compute (0: wait at once)"},
    {"mem-limit", OPT_SIZE, F(mem_limit), 0, 0, 1e18, NULL, "device memory cap, e.g. 512MiB (0: none)"},
    {"allocator", OPT_CHOICE, S(allocator), 0, 0, "simple|caching|expandable",
     "device allocator: caching (the default: segments split best-fit and coalesced, as GPU caching "
     "allocators: can fragment), simple (a system block per request, cached whole) or expandable (one growing segment "
     "per pool, memory mapped in 2 MiB granules under the blocks in use)"},
    {"metrics-file", OPT_STRING, S(metrics_file), 0, 0, NULL,
     "write each rank's memory and progress after every step to PATH with .rank<r> before its extension, in "
     "Prometheus' text format (for a textfile collector)"},
    {"max-split-size", OPT_SIZE, F(max_split_size), 0, 0, 1e18, NULL,
     "caching: free blocks at least this large are not split for smaller requests (0: none)"},
    {"leak-window", OPT_INT, F(leak_window), 0, 1, 1e6, NULL,
     "the leak watch: steps over which a part of the whole bill outside the allocator's live blocks is fitted "
     "(docs/memory.md, \"The leak watch\")"},
    {"leak-min-rate", OPT_SIZE, F(leak_min_rate), 0, 1, 1e18, NULL,
     "the leak watch: growth per step, e.g. 64KiB, above which a part is named as leaking"},
    {"threads", OPT_INT, F(threads), 0, 0, 1024, NULL, "threads per process (0: cores / ranks on this node)"},
    {"save-every", OPT_INT, F(save_every), 0, 0, INT_MAX, NULL, "save a sharded checkpoint every K steps (0: never)"},
    {"save-dir", OPT_STRING, S(save_dir), 0, 0, NULL, "directory for checkpoints (step-NNNNNN/ and 'latest')"},
    {"keep-checkpoints", OPT_INT, F(keep_checkpoints), 0, 1, INT_MAX, NULL,
     "complete checkpoints kept in --save-dir (older ones go once a newer one is complete)"},
    {"resume", OPT_STRING, S(resume), 0, 0, NULL,
     "checkpoint directory (its 'latest', else its newest complete step) or one step-N directory; auto: the "
     "newest complete checkpoint in --save-dir when there is one, else a fresh start (a directory named auto: ./auto)"},
    {"init-from", OPT_STRING, S(init_from), 0, 0, NULL,
     "a Hugging Face model directory (GPT2LMHeadModel or LlamaForCausalLM: config.json and safetensors) to start "
     "from; its config is checked against the model flags; each rank reads only the tensors its slices overlap"},
    {"save-every-minutes", OPT_FLOAT, F(save_every_minutes), 0, 0, 1e9, NULL,
     "also save when this many minutes of rank 0's clock have passed since the last save of either cadence (0: never)"},
    {"async-save", OPT_BOOL, F(async_save), 0, 0, 1, NULL,
     "1: copy the step's shards to host memory (checkpoint_staging) and write them on a thread while training goes "
     "on; the checkpoint appears once every rank's write is done"},
    {"save-failures", OPT_INT, F(save_failures), 0, 1, INT_MAX, NULL,
     "failed saves in a row (a full or failing disk) that stop the run with exit 1; fewer are reported and training "
     "goes on"},
    {"on-signal", OPT_CHOICE, S(on_signal), 0, 0, "save-exit|exit|ignore",
     "on SIGTERM, SIGINT, SIGUSR1 or SIGUSR2 every rank stops at the next step boundary, saves there (save-exit, with "
     "--save-dir) and exits; ignore: the signals are ignored. A second signal exits at once with 128 + its number"},
    {"log-dir", OPT_STRING, S(log_dir), 0, 0, NULL, "directory for rank<r>.jsonl and summary.json"},
    {"report-every", OPT_INT, F(report_every), 0, 0, INT_MAX, NULL,
     "every K steps (and at exit) rank 0 prints every rank's peaks and the imbalance (0: at exit only)"},
    {"trace", OPT_BOOL, F(trace), 0, 0, 1, NULL, "with --log-dir, write DIR/trace.json (Chrome trace format)"},
    {"trace-max-events", OPT_INT64, F(trace_max_events), 0, 0, 9e18, NULL, "per rank; later events are dropped (0: no cap)"},
    {"trace-per-rank", OPT_BOOL, F(trace_per_rank), 0, 0, 1, NULL,
     "with --log-dir and --trace: also DIR/rank_traces/trace_rank<r>.json per rank, with the fields Holistic Trace "
     "Analysis reads"},
    {"memory-snapshot", OPT_STRING, S(memory_snapshot), 0, 0, NULL,
     "a folder: each rank writes rank<r>.pickle there at exit and at an OOM, in the format of PyTorch's "
     "torch.cuda.memory._snapshot() (memory_viz)"},
    {"memory-snapshot-entries", OPT_INT64, F(memory_snapshot_entries), 0, 1, 9e18, NULL,
     "--memory-snapshot: the allocator trace events kept per rank (the last ones)"},
    {"quiet", OPT_BOOL, F(quiet), 0, 0, 1, NULL, "print only warnings and errors"},
    {"print-config", OPT_BOOL, F(print_config), 0, 0, 1, NULL,
     "print the resolved configuration as a --config file (JSON) and exit"},
    {"auto", OPT_BOOL, F(auto_config), 0, 0, 1, NULL,
     "choose stage, offload, recompute, attention, micro-batch and knobs for the fastest predicted step that fits "
     "--mem-limit (docs/auto.md)"},
    {"global-batch", OPT_INT, F(global_batch), 0, 0, 1 << 30, NULL,
     "--auto: sequences per optimizer step over the world (0: world x micro-batch x grad-accum)"},
    {"auto-axes", OPT_STRING, S(auto_axes), 0, 0, NULL,
     "--auto: the axes searched, comma-separated (default all: stage, offload, offload-params, recompute, attention, "
     "offload-activations, micro-batch, prefetch, bucket-size, reduce-dtype, reshard-after-forward, quantize-grads, "
     "seq-parallel); the others keep the value given"},
    {"profile", OPT_STRING, S(profile), 0, 0, NULL,
     "the step-time model's machine profile (zt-plan --calibrate writes one; default: the device's built-in table)"},
};
#define NOPTIONS ((int)(sizeof options / sizeof options[0]))
_Static_assert(sizeof options / sizeof options[0] <= sizeof(((zt_train_config *)0)->given), "grow zt_train_config.given");

void zt_train_config_defaults(zt_train_config *c) {
    memset(c, 0, sizeof *c);
    c->layers = 2;
    snprintf(c->model, sizeof c->model, "gpt");
    c->d_model = 64;
    c->norm_eps = 1e-5;
    c->rope_theta = 10000.0;
    c->heads = 4;
    c->seq_len = 64;
    c->vocab = 64;
    c->micro_batch = 8;
    c->tied = 0;
    snprintf(c->data, sizeof c->data, "markov");
    snprintf(c->data_dtype, sizeof c->data_dtype, "auto");
    c->eval_batches = 8;
    c->seq_parallel = 1;
    c->markov_order = 1;
    c->markov_branch = 4;
    c->steps = 400;
    c->warmup = 20;
    snprintf(c->lr_schedule, sizeof c->lr_schedule, "cosine");
    snprintf(c->optimizer, sizeof c->optimizer, "adamw");
    c->momentum = 0.9;
    snprintf(c->allocator, sizeof c->allocator, "caching");
    snprintf(c->link, sizeof c->link, "none");
    snprintf(c->offload_params, sizeof c->offload_params, "none");
    c->nvme_block_size = (size_t)1 << 20;
    c->nvme_buffers = 4;
    c->nvme_queue_depth = 32;
    snprintf(c->nvme_io, sizeof c->nvme_io, "auto");
    c->adafactor_decay = -0.8;
    c->muon_momentum = 0.95; /* torch.optim.Muon's defaults */
    c->muon_nesterov = 1;
    c->muon_ns_steps = 5;
    snprintf(c->muon_ns_coef_text, sizeof c->muon_ns_coef_text, "3.4445,-4.7750,2.0315");
    c->muon_eps = 1e-7;
    snprintf(c->muon_adjust_lr, sizeof c->muon_adjust_lr, "match_rms_adamw");
    c->muon_adamw_lr = -1;
    snprintf(c->muon_ns_device, sizeof c->muon_ns_device, "device");
    snprintf(c->master_dtype, sizeof c->master_dtype, "fp32");
    snprintf(c->optim_state_dtype, sizeof c->optim_state_dtype, "fp32");
    c->adafactor_clip = 1.0;
    c->adafactor_eps = 1e-30;
    snprintf(c->warmup_type, sizeof c->warmup_type, "log"); /* DeepSpeed's defaults */
    c->cos_min_ratio = 0.0001;
    c->print_every = 1;
    c->leak_window = 50;
    c->leak_min_rate = 64u << 10;
    c->sub_group_size = 1 << 16;
    c->grad_accum = 1;
    c->seed = 1234;
    c->lr = 3e-3;
    c->min_lr_frac = 0.1;
    c->weight_decay = 0.0;
    c->beta1 = 0.9;
    c->beta2 = 0.95;
    c->eps = 1e-8;
    c->grad_clip = 1.0;
    c->stage = 0;
    c->prefetch = 1;
    c->threads = 0;
    snprintf(c->offload, sizeof c->offload, "none");
    snprintf(c->recompute, sizeof c->recompute, "none");
    snprintf(c->offload_activations, sizeof c->offload_activations, "none");
    snprintf(c->attention, sizeof c->attention, "materialized");
    snprintf(c->dtype, sizeof c->dtype, "fp32");
    snprintf(c->reduce_dtype, sizeof c->reduce_dtype, "fp32");
    snprintf(c->quantize_weights, sizeof c->quantize_weights, "none");
    snprintf(c->quantize_grads, sizeof c->quantize_grads, "none");
    snprintf(c->quantize_grads_feedback_dtype, sizeof c->quantize_grads_feedback_dtype, "fp32");
    c->quant_block = 256;
    c->quantize_grads_feedback = 0;
    c->loss_scale = 0.0; /* DeepSpeed's defaults */
    c->initial_scale_power = 16;
    c->loss_scale_window = 1000;
    c->hysteresis = 2;
    c->min_loss_scale = 1.0;
    c->max_skipped_steps = 10;
    snprintf(c->device, sizeof c->device, "cpu");
    c->bucket_size = 25u << 20;
    c->overlap_comm = 1;
    c->trace = 1;
    c->trace_max_events = 200000;
    c->memory_snapshot_entries = 100000;
    c->keep_checkpoints = 2;
    c->save_failures = 3;
    snprintf(c->on_signal, sizeof c->on_signal, "save-exit");
    c->collective_timeout = 300;
    snprintf(c->shard_group, sizeof c->shard_group, "world");
    snprintf(c->reshard_after_forward, sizeof c->reshard_after_forward, "none");
}

static const opt_spec *find_option(const char *name, int json_key, int *index) {
    for (int i = 0; i < NOPTIONS; i++) {
        const char *a = options[i].name, *b = name;
        while (*a && *b && (*a == *b || (json_key && *a == '-' && *b == '_'))) a++, b++;
        if (*a == '\0' && *b == '\0') {
            *index = i;
            return &options[i];
        }
    }
    return NULL;
}

/* o's choices: its list, or (NULL) every registered optimizer's name, so an
 * optimizer added to optim/registry.c is accepted here unchanged. */
static const char *choices_of(const opt_spec *o, char *buf, size_t cap) {
    if (o->choices || o->kind != OPT_CHOICE) return o->choices;
    buf[0] = '\0';
    for (int i = 0; i < zt_optim_count(); i++) {
        size_t len = strlen(buf);
        snprintf(buf + len, cap - len, "%s%s", i ? "|" : "", zt_optim_at(i)->name);
    }
    return buf;
}

static int choice_ok(const char *choices, const char *v) {
    size_t n = strlen(v);
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, v, n) == 0) return 1;
        p += len + (bar ? 1 : 0);
    }
    return 0;
}

/* Sets one option from its text form; `where` names the source for messages. */
static zt_status set_from_text(zt_train_config *c, const opt_spec *o, const char *text, const char *where,
                               zt_error *err) {
    char *base = (char *)c + o->offset;
    char *end = NULL;
    errno = 0;
    switch (o->kind) {
    case OPT_INT:
    case OPT_INT64: {
        long long v = strtoll(text, &end, 10);
        if (end == text || *end != '\0' || errno != 0)
            return ZT_FAIL(err, ZT_ERR_INVALID, "%s: '%s' is not an integer", where, text);
        if ((double)v < o->min || (double)v > o->max)
            return ZT_FAIL(err, ZT_ERR_INVALID, "%s: %lld is out of range [%.0f, %.0f]", where, v, o->min, o->max);
        if (o->kind == OPT_INT) *(int *)base = (int)v;
        else *(int64_t *)base = (int64_t)v;
        return ZT_OK;
    }
    case OPT_FLOAT: {
        double v = strtod(text, &end);
        if (end == text || *end != '\0' || errno != 0 || !isfinite(v))
            return ZT_FAIL(err, ZT_ERR_INVALID, "%s: '%s' is not a number", where, text);
        if (v < o->min || v > o->max)
            return ZT_FAIL(err, ZT_ERR_INVALID, "%s: %g is out of range [%g, %g]", where, v, o->min, o->max);
        *(double *)base = v;
        return ZT_OK;
    }
    case OPT_SIZE: {
        size_t v;
        zt_error sub = {0};
        if (zt_parse_size(text, &v, &sub) != ZT_OK)
            return ZT_FAIL(err, ZT_ERR_INVALID, "%s: %s", where, sub.msg);
        if ((double)v < o->min || (double)v > o->max)
            return ZT_FAIL(err, ZT_ERR_INVALID, "%s: %zu bytes is out of range", where, v);
        *(size_t *)base = v;
        return ZT_OK;
    }
    case OPT_STRING:
        if (strlen(text) + 1 > o->cap)
            return ZT_FAIL(err, ZT_ERR_INVALID, "%s: value is longer than %zu characters", where, o->cap - 1);
        snprintf(base, o->cap, "%s", text);
        return ZT_OK;
    case OPT_CHOICE: {
        char names[256];
        const char *choices = choices_of(o, names, sizeof names);
        if (!choice_ok(choices, text))
            return ZT_FAIL(err, ZT_ERR_INVALID, "%s: '%s' is not one of %s", where, text, choices);
        snprintf(base, o->cap, "%s", text);
        return ZT_OK;
    }
    case OPT_BOOL:
        if (strcmp(text, "1") == 0 || strcmp(text, "true") == 0) *(int *)base = 1;
        else if (strcmp(text, "0") == 0 || strcmp(text, "false") == 0) *(int *)base = 0;
        else return ZT_FAIL(err, ZT_ERR_INVALID, "%s: '%s' is not a boolean (true/false)", where, text);
        return ZT_OK;
    }
    return ZT_FAIL(err, ZT_ERR_INTERNAL, "%s: unknown option kind", where);
}

static const char *kind_name(opt_kind k) {
    switch (k) {
    case OPT_INT: case OPT_INT64: return "an integer";
    case OPT_FLOAT: return "a number";
    case OPT_SIZE: return "a size (integer bytes or a string like \"512MiB\")";
    case OPT_STRING: case OPT_CHOICE: return "a string";
    case OPT_BOOL: return "a boolean";
    }
    return "?";
}

/* given[] while the keys of one config file are read (then 1, as for a flag). */
#define GIVEN_IN_THIS_FILE 2

static zt_status parse_json_keys(zt_train_config *c, const char *text, size_t len, const char *name, zt_error *err);

/* A JSON number in any notation (5e7, 5.0e7) that is a whole number. */
int json_whole(const json_t *val) {
    if (json_is_integer(val)) return 1;
    double v = json_number_value(val);
    return json_is_real(val) && isfinite(v) && v == floor(v) && fabs(v) < 9.0e15;
}

/* Sets option o (index idx) from a JSON value, checking its type. */
static zt_status set_from_json(zt_train_config *c, const opt_spec *o, int idx, json_t *val, const char *where,
                               zt_error *err) {
    char text[600];
    const char *value = text; /* strings as they are: a copy into text[] could cut them short */
    int ok = 1;
    switch (o->kind) {
    case OPT_INT:
    case OPT_INT64:
        ok = json_is_integer(val) || json_whole(val);
        if (json_is_integer(val)) snprintf(text, sizeof text, "%lld", (long long)json_integer_value(val));
        else if (ok) snprintf(text, sizeof text, "%.0f", json_number_value(val));
        break;
    case OPT_FLOAT:
        ok = json_is_number(val);
        if (ok) snprintf(text, sizeof text, "%.17g", json_number_value(val));
        break;
    case OPT_SIZE:
        ok = json_is_integer(val) || json_whole(val) || json_is_string(val);
        if (json_is_number(val)) {
            ok = ok && json_number_value(val) >= 0;
            snprintf(text, sizeof text, "%.0f", json_number_value(val));
        } else if (ok) value = json_string_value(val);
        break;
    case OPT_STRING:
    case OPT_CHOICE:
        ok = json_is_string(val);
        if (ok) value = json_string_value(val);
        break;
    case OPT_BOOL:
        ok = json_is_boolean(val);
        if (ok) snprintf(text, sizeof text, "%s", json_is_true(val) ? "true" : "false");
        break;
    }
    if (!ok) return ZT_FAIL(err, ZT_ERR_INVALID, "%s must be %s", where, kind_name(o->kind));
    /* Two keys of one file naming the same option ("save_dir" and "save-dir",
     * or a DeepSpeed alias and ours): which one wins would be arbitrary. */
    if (c->given[idx] == GIVEN_IN_THIS_FILE)
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s sets --%s, which another key of this file sets too", where, o->name);
    ZT_TRY(set_from_text(c, o, value, where, err));
    c->given[idx] = GIVEN_IN_THIS_FILE;
    return ZT_OK;
}

zt_status zt_config_set_named(zt_train_config *c, const char *option, json_t *val, const char *where, zt_error *err) {
    int idx;
    const opt_spec *o = find_option(option, 0, &idx);
    if (!o) return ZT_FAIL(err, ZT_ERR_INTERNAL, "%s: no option %s", where, option);
    return set_from_json(c, o, idx, val, where, err);
}

zt_status zt_train_config_parse_json(zt_train_config *c, const char *text, size_t len, const char *name,
                                     zt_error *err) {
    zt_status st = parse_json_keys(c, text, len, name, err);
    for (int i = 0; i < NOPTIONS; i++)
        if (c->given[i] == GIVEN_IN_THIS_FILE) c->given[i] = 1;
    return st;
}

static zt_status parse_json_keys(zt_train_config *c, const char *text, size_t len, const char *name, zt_error *err) {
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--config %s: line %d, column %d: %s", name, jerr.line, jerr.column,
                       jerr.text);
    zt_status st = json_is_object(root) ? zt_config_read_keys(c, root, name, err)
                                        : ZT_FAIL(err, ZT_ERR_INVALID, "--config %s: the top level must be a JSON object", name);
    json_decref(root);
    return st;
}

zt_status zt_config_set_option(zt_train_config *c, const char *key, json_t *val, const char *where, zt_error *err) {
    int idx;
    const opt_spec *o = find_option(key, 1, &idx);
    if (!o || strcmp(key, "config") == 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s is not a known option (see --help)", where);
    return set_from_json(c, o, idx, val, where, err);
}

static zt_status load_json(zt_train_config *c, const char *path, zt_error *err) {
    char *text = NULL;
    size_t n = 0;
    zt_error sub = {0};
    if (zt_read_file(path, CONFIG_FILE_MAX, &text, &n, &sub) != ZT_OK)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--config %s", sub.msg); /* sub.msg names the path */
    zt_status st = zt_train_config_parse_json(c, text, n, path, err);
    free(text);
    return st;
}

zt_status zt_train_config_parse(zt_train_config *c, int argc, char **argv, int *want_help, zt_error *err) {
    *want_help = 0;
    /* The config file first, wherever --config appears, so flags override it. */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            *want_help = 1;
            return ZT_OK;
        }
        const char *file = strncmp(argv[i], "--config=", 9) == 0 ? argv[i] + 9 : NULL;
        if (strcmp(argv[i], "--config") == 0) {
            if (i + 1 >= argc) return ZT_FAIL(err, ZT_ERR_INVALID, "--config needs a file name");
            file = argv[i + 1];
        }
        if (file) {
            if (strlen(file) >= sizeof c->config)
                return ZT_FAIL(err, ZT_ERR_INVALID, "--config: file name longer than %zu characters", sizeof c->config - 1);
            snprintf(c->config, sizeof c->config, "%s", file);
            ZT_TRY(load_json(c, file, err));
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) != 0)
            return ZT_FAIL(err, ZT_ERR_INVALID, "unexpected argument '%s' (options start with --; see --help)", arg);
        char name[64];
        const char *eq = strchr(arg + 2, '=');
        size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
        if (len >= sizeof name) return ZT_FAIL(err, ZT_ERR_INVALID, "unknown option '%s' (see --help)", arg);
        memcpy(name, arg + 2, len);
        name[len] = '\0';
        int idx;
        const opt_spec *o = find_option(name, 0, &idx);
        if (!o) return ZT_FAIL(err, ZT_ERR_INVALID, "unknown option '--%s' (see --help)", name);
        const char *value;
        if (eq) value = eq + 1;
        else if (o->kind == OPT_BOOL && (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0)) value = "true";
        else {
            if (i + 1 >= argc) return ZT_FAIL(err, ZT_ERR_INVALID, "option '--%s' needs a value", name);
            value = argv[++i];
        }
        if (strcmp(name, "config") == 0) continue; /* already loaded */
        char where[80];
        snprintf(where, sizeof where, "--%s", name);
        ZT_TRY(set_from_text(c, o, value, where, err));
        c->given[idx] = 1;
    }
    return ZT_OK;
}

int zt_train_config_given(const zt_train_config *c, const char *name) {
    int idx;
    return find_option(name, 0, &idx) ? c->given[idx] : 0;
}

/* The NVMe tier's options: where they apply and what they need. */
/* Quantized communication: weights at stage 3 (only its gathers carry
 * them), gradients at any stage but without replicas (their sum reuses
 * the bucket's buffers, which codes make too small). */
static zt_status validate_quantize(const zt_train_config *c, zt_error *err) {
    int weights = strcmp(c->quantize_weights, "none") != 0, grads = strcmp(c->quantize_grads, "none") != 0;
    if (c->quant_block % 16)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--quant-block %d is not a multiple of 16", c->quant_block);
    if (weights && c->stage != 3)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--quantize-weights %s needs --stage 3 (got --stage %d): only stage 3 "
                       "all-gathers parameters each pass", c->quantize_weights, c->stage);
    if (grads && strcmp(c->shard_group, "world") != 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--quantize-grads %s runs with world sharding (got --shard-group %s)",
                       c->quantize_grads, c->shard_group);
    if (c->quantize_grads_feedback && !grads)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--quantize-grads-feedback 1 needs --quantize-grads int8|int4");
    return ZT_OK;
}

static zt_status validate_nvme(const zt_train_config *c, zt_error *err) {
    int nvme = strcmp(c->offload, "nvme") == 0;
    if (strcmp(c->offload_params, "nvme") == 0 && !nvme)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--offload-params nvme needs --offload nvme (got --offload %s): the CPU "
                       "optimizer writes the shards in the swap file as it streams the state", c->offload);
    if (!nvme) return ZT_OK;
    if (!c->nvme_path[0]) return ZT_FAIL(err, ZT_ERR_INVALID, "--offload nvme needs --nvme-path DIR (the swap files' folder)");
    if (c->offload_delay)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--offload nvme cannot run with --offload-delay 1 (the delayed update's "
                       "thread does not stream the swap file)");
    if (strcmp(c->optimizer, "adamw") != 0 && strcmp(c->optimizer, "sgd") != 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--offload nvme runs --optimizer adamw or sgd, not %s: the state streams "
                       "in chunks, which 8-bit Adam's blocks and Adafactor's per-matrix statistics do not split into",
                       c->optimizer);
    if (c->nvme_block_size % 8192)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--nvme-block-size %zu is not a multiple of 8KiB (O_DIRECT's alignment "
                       "for the fp32 arrays and the 16-bit params of a chunk)", c->nvme_block_size);
    return ZT_OK;
}

/* --muon-ns-coefficients "A,B,C" into c->muon_ns_coef. */
static zt_status parse_muon_coefficients(zt_train_config *c, zt_error *err) {
    const char *at = c->muon_ns_coef_text;
    for (int k = 0; k < 3; k++) {
        char *end = NULL;
        c->muon_ns_coef[k] = strtod(at, &end);
        if (end == at || !isfinite(c->muon_ns_coef[k]) || (k < 2 ? *end != ',' : *end != '\0'))
            return ZT_FAIL(err, ZT_ERR_INVALID, "--muon-ns-coefficients '%s' is not three finite numbers A,B,C",
                           c->muon_ns_coef_text);
        at = end + 1;
    }
    return ZT_OK;
}

/* The low-memory state options' combinations (the engine checks them too,
 * for library users; here they fail before anything starts). */
static zt_status validate_low_memory_state(const zt_train_config *c, zt_error *err) {
    int none = strcmp(c->master_dtype, "none") == 0, bf16 = strcmp(c->optim_state_dtype, "bf16") == 0;
    if (none && strcmp(c->dtype, "bf16") != 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--master-dtype none needs --dtype bf16 (got %s): without an fp32 master "
                       "the bf16 params are stepped with stochastic rounding", c->dtype);
    if (!none && !bf16) return ZT_OK;
    const char *what = none ? "--master-dtype none" : "--optim-state-dtype bf16";
    if (strcmp(c->optimizer, "adamw") != 0 && strcmp(c->optimizer, "sgd") != 0 && strcmp(c->optimizer, "muon") != 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s runs --optimizer adamw, sgd or muon, not %s (its state is not one "
                       "value per parameter)", what, c->optimizer);
    if (strcmp(c->offload, "none") != 0 || c->offload_delay)
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s runs without --offload (got --offload %s): the CPU optimizer keeps its "
                       "fp32 master and state in host memory, which is not what this option saves", what, c->offload);
    return ZT_OK;
}

zt_status zt_train_config_validate(zt_train_config *c, zt_error *err) {
    ZT_TRY(parse_muon_coefficients(c, err));
    ZT_TRY(validate_low_memory_state(c, err));
    /* As the Hugging Face integration fills them in: from the hidden size. */
    double C = c->d_model;
    if ((c->ds_auto & ZT_DS_AUTO_REDUCE_BUCKET) && !zt_train_config_given(c, "bucket-size"))
        c->bucket_size = (size_t)(C * C) * 4;
    if ((c->ds_auto & ZT_DS_AUTO_PREFETCH_BUCKET) && !zt_train_config_given(c, "prefetch-bucket-size"))
        c->prefetch_bucket_size = (int64_t)(0.9 * C * C);
    if ((c->ds_auto & ZT_DS_AUTO_PERSIST) && !zt_train_config_given(c, "persist-threshold"))
        c->persist_threshold = (int64_t)(10 * C);
    zt_recompute_policy rp;
    ZT_TRY(zt_recompute_parse(c->recompute, &rp, err));
    int W = c->warmup > 2 ? c->warmup : 2, total = c->schedule_steps ? c->schedule_steps : c->steps;
    if (strcmp(c->lr_schedule, "warmup-cosine") == 0 && total <= W)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--lr-schedule warmup-cosine: its %d steps (--schedule-steps, else "
                       "--steps) must exceed the %d of its warm-up (--warmup, at least 2)", total, W);
    if (c->offload_delay && strcmp(c->offload, "cpu") != 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--offload-delay 1 needs --offload cpu (got --offload %s): the delayed "
                       "update overlaps the CPU Adam with the next step", c->offload);
    double gbs[2];
    ZT_TRY(zt_train_config_link(c, gbs, err));
    if (strcmp(c->offload_params, "none") != 0 && (c->stage != 3 || strcmp(c->offload, "none") == 0 || c->offload_delay))
        return ZT_FAIL(err, ZT_ERR_INVALID, "--offload-params %s needs --stage 3 and --offload cpu|nvme, without "
                       "--offload-delay (got --stage %d --offload %s --offload-delay %d): the CPU optimizer updates "
                       "the offloaded shards in place", c->offload_params, c->stage, c->offload, c->offload_delay);
    ZT_TRY(validate_nvme(c, err));
    ZT_TRY(validate_quantize(c, err));
    char *end = NULL;
    long g = strtol(c->shard_group, &end, 10);
    if (strcmp(c->shard_group, "world") != 0 && strcmp(c->shard_group, "node") != 0 && (end == c->shard_group || *end || g < 1))
        return ZT_FAIL(err, ZT_ERR_INVALID, "--shard-group '%s' is not world, node or a positive number of ranks",
                       c->shard_group);
    long h = strtol(c->reshard_after_forward, &end, 10);
    if (strcmp(c->reshard_after_forward, "none") != 0 && strcmp(c->reshard_after_forward, "node") != 0 &&
        (end == c->reshard_after_forward || *end || h < 1))
        return ZT_FAIL(err, ZT_ERR_INVALID, "--reshard-after-forward '%s' is not none, node or a positive number of "
                       "ranks", c->reshard_after_forward);
    if (strcmp(c->reshard_after_forward, "none") != 0 && (c->stage != 3 || strcmp(c->shard_group, "world") != 0))
        return ZT_FAIL(err, ZT_ERR_INVALID, "--reshard-after-forward %s needs --stage 3 with world sharding (got "
                       "--stage %d --shard-group %s)", c->reshard_after_forward, c->stage, c->shard_group);
    if (strcmp(c->offload_activations, "cpu") == 0 && rp.kind != ZT_RECOMPUTE_FULL)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--offload-activations cpu needs --recompute full (got --recompute %s): "
                       "only full recomputation keeps a single input per block, the tensor that goes to the host",
                       c->recompute);
    if (c->save_every > 0 && !c->save_dir[0])
        return ZT_FAIL(err, ZT_ERR_INVALID, "--save-every %d needs --save-dir", c->save_every);
    if (c->save_every_minutes > 0 && !c->save_dir[0])
        return ZT_FAIL(err, ZT_ERR_INVALID, "--save-every-minutes %g needs --save-dir", c->save_every_minutes);
    if (strcmp(c->resume, "auto") == 0 && !c->save_dir[0])
        return ZT_FAIL(err, ZT_ERR_INVALID, "--resume auto needs --save-dir: it resumes from the newest complete "
                       "checkpoint there (a directory named auto: --resume ./auto)");
    if (c->layers < 0) return ZT_FAIL(err, ZT_ERR_INVALID, "--layers must be >= 0");
    if (strcmp(c->data, "markov") == 0 && c->markov_branch > c->vocab)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--markov-branch %d exceeds --vocab %d", c->markov_branch, c->vocab);
    if (strcmp(c->data, "markov") != 0 && zt_train_config_given(c, "vocab") && c->vocab != 256 &&
        strcmp(c->data_dtype, "bytes") == 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--data FILE reads bytes, so --vocab must be 256 (got %d; token files: "
                       "--data-dtype llmc, uint16 or uint32)", c->vocab);
    if (c->seq_parallel > c->seq_len)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--seq-parallel %d is more than --seq-len %d: every rank of a group needs "
                       "at least one position", c->seq_parallel, c->seq_len);
    if (c->seq_parallel > 1 && c->heads % c->seq_parallel != 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--seq-parallel %d must divide --heads %d: each rank of a group runs "
                       "heads / P of them", c->seq_parallel, c->heads);
    if (c->seq_parallel > 1 && c->seq_len_jitter > 0 &&
        (int)ceil((1.0 - c->seq_len_jitter) * c->seq_len) < c->seq_parallel)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--seq-len-jitter %g can draw lengths below --seq-parallel %d",
                       c->seq_len_jitter, c->seq_parallel);
    if (strcmp(c->val_data, "markov") == 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--val-data takes files (token files or bytes), not the Markov source");
    if (c->eval_every > 0 && !c->val_data[0])
        return ZT_FAIL(err, ZT_ERR_INVALID, "--eval-every %d needs --val-data", c->eval_every);
    return ZT_OK;
}


/* PCIe 4.0 x16 moves 24-28 GB/s in practice (32 in theory): the middle; 5.0 doubles it. */
#define ZT_LINK_PCIE4_GBS 26.0
#define ZT_LINK_PCIE5_GBS 52.0

zt_status zt_train_config_link(const zt_train_config *c, double gbs[2], zt_error *err) {
    gbs[0] = gbs[1] = 0;
    int preset = strcmp(c->link, "none") != 0;
    if (preset && c->link_gbs[0])
        return ZT_FAIL(err, ZT_ERR_INVALID, "--link %s and --link-gbs %s both set the link: give one", c->link,
                       c->link_gbs);
    if (preset) {
        gbs[0] = gbs[1] = strcmp(c->link, "pcie5") == 0 ? ZT_LINK_PCIE5_GBS : ZT_LINK_PCIE4_GBS;
        return ZT_OK;
    }
    if (!c->link_gbs[0]) return ZT_OK;
    char *end = NULL;
    double h = strtod(c->link_gbs, &end), d = h;
    if (end != c->link_gbs && *end == ',') d = strtod(end + 1, &end);
    if (*end || !(h > 0) || !(d > 0) || h > 1e6 || d > 1e6)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--link-gbs '%s': expected H2D,D2H bandwidths in GB/s, each in (0, 1e6] "
                       "(e.g. 25,25)", c->link_gbs);
    gbs[0] = h;
    gbs[1] = d;
    return ZT_OK;
}

/* Option o's value in c as text; floats with 17 digits when exact. */
static void value_text(const zt_train_config *c, const opt_spec *o, int exact, char *v, size_t cap) {
    const char *base = (const char *)c + o->offset;
    switch (o->kind) {
    case OPT_INT: case OPT_BOOL: snprintf(v, cap, "%d", *(const int *)base); break;
    case OPT_INT64: snprintf(v, cap, "%lld", (long long)*(const int64_t *)base); break;
    case OPT_FLOAT: { /* exact: the shortest text that reads back as the same double */
        double x = *(const double *)base;
        snprintf(v, cap, "%g", x);
        for (int digits = 7; exact && digits <= 17 && strtod(v, NULL) != x; digits++) snprintf(v, cap, "%.*g", digits, x);
        break;
    }
    case OPT_SIZE: snprintf(v, cap, "%zu", *(const size_t *)base); break;
    case OPT_STRING: case OPT_CHOICE: snprintf(v, cap, "%s", base[0] ? base : "-"); break;
    }
}

void zt_train_config_print_help(FILE *f, const char *prog) {
    zt_train_config d;
    zt_train_config_defaults(&d);
    fprintf(f, "usage: %s [--option value ...]\n\nTrains a model of a family this program has (--model; listed at the end).\n"
               "Options (JSON keys in --config use '_' for '-'):\n", prog);
    for (int i = 0; i < NOPTIONS; i++) {
        const opt_spec *o = &options[i];
        char def[96];
        value_text(&d, o, 0, def, sizeof def);
        char flag[64];
        char names[256];
        const char *choices = choices_of(o, names, sizeof names);
        snprintf(flag, sizeof flag, "--%s%s%s", o->name, choices ? " " : "", choices ? choices : "");
        fprintf(f, "  %-28s %s [default: %s]\n", flag, o->help, def);
    }
}

/* Options each rank may set for itself: per-rank paths and logging choices,
 * which shape no collective and no arithmetic. Every other option is agreed
 * on before the first collective. */
static const char *const per_rank_options[] = {
    "config",       "log-dir",        "quiet",           "threads",        "mem-limit",
    "trace",        "trace-max-events", "print-config",  "metrics-file",   "trace-per-rank",
    "memory-snapshot", "memory-snapshot-entries"};
/* Options naming files: compared by what they refer to, not by path. */
static const char *const identity_options[] = {"data", "val-data", "resume", "save-dir"};

static int listed(const char *name, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(list[i], name) == 0) return 1;
    return 0;
}

int zt_train_config_settings(const zt_train_config *c, const char *(*identity)(void *arg, const char *option),
                             void *arg, zt_setting *rows, int cap) {
    int n = 0;
    for (int i = 0; i < NOPTIONS && n < cap; i++) {
        const opt_spec *o = &options[i];
        if (listed(o->name, per_rank_options, sizeof per_rank_options / sizeof per_rank_options[0])) continue;
        snprintf(rows[n].name, sizeof rows[n].name, "--%s", o->name);
        if (listed(o->name, identity_options, sizeof identity_options / sizeof identity_options[0]))
            snprintf(rows[n].value, sizeof rows[n].value, "%s", identity(arg, o->name));
        else value_text(c, o, 1, rows[n].value, sizeof rows[n].value);
        n++;
    }
    return n;
}

void zt_train_config_print(const zt_train_config *c, FILE *f) {
    fprintf(f, "+----------------------+------------------------------+\n");
    for (int i = 0; i < NOPTIONS; i++) {
        const opt_spec *o = &options[i];
        char v[96];
        value_text(c, o, 0, v, sizeof v);
        fprintf(f, "| %-20s | %-28s |\n", o->name, v);
    }
    fprintf(f, "+----------------------+------------------------------+\n");
}

/* Option o's value in c as JSON (NULL for an empty string: not set). */
static json_t *value_json(const zt_train_config *c, const opt_spec *o) {
    const char *base = (const char *)c + o->offset;
    switch (o->kind) {
    case OPT_INT: return json_integer(*(const int *)base);
    case OPT_BOOL: return json_boolean(*(const int *)base);
    case OPT_INT64: return json_integer((json_int_t) * (const int64_t *)base);
    case OPT_FLOAT: return json_real(*(const double *)base);
    case OPT_SIZE: return json_integer((json_int_t) * (const size_t *)base);
    case OPT_STRING: case OPT_CHOICE: return base[0] ? json_string(base) : NULL;
    }
    return NULL;
}

char *zt_train_config_json(const zt_train_config *c) {
    json_t *o = json_object();
    for (int i = 0; o && i < NOPTIONS; i++) {
        const opt_spec *opt = &options[i];
        if (strcmp(opt->name, "config") == 0 || strcmp(opt->name, "print-config") == 0) continue;
        char key[64];
        snprintf(key, sizeof key, "%s", opt->name);
        for (char *k = key; *k; k++)
            if (*k == '-') *k = '_';
        json_t *v = value_json(c, opt);
        if (v) json_object_set_new(o, key, v);
    }
    char *text = o ? json_dumps(o, JSON_INDENT(2) | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(o);
    return text;
}

zt_status zt_train_config_model(const zt_train_config *c, int vocab, zt_model_settings *s, zt_error *err) {
    *s = (zt_model_settings){.layers = c->layers, .d_model = c->d_model, .heads = c->heads, .seq_len = c->seq_len,
                             .vocab = vocab, .micro_batch = c->micro_batch, .kv_heads = c->kv_heads,
                             .ffn_dim = c->ffn_dim, .tied = c->tied, .norm_eps = c->norm_eps,
                             .rope_theta = c->rope_theta, .seed = (uint64_t)c->seed,
                             .attention_fused = strcmp(c->attention, "fused") == 0,
                             .offload_activations = strcmp(c->offload_activations, "cpu") == 0};
    return zt_recompute_parse(c->recompute, &s->recompute, err);
}
