#!/usr/bin/env python3
"""Ablation sweep of a model family (the toy GPT by default): ZeRO stage x
optimizer offload x recompute (x optimizer x frozen units x allocator x dtype
x quantized communication x sequence parallelism).

    python3 launch/ablate.py [--model gpt|llama] [--preset zero] [--np 2] [--steps 30] [--out out/ablation]
                             [--offload none,cpu[,params,nvme,nvme-params,activations]]
                             [--recompute none,full[,selective,every-K]]
                             [--optimizer adamw[,sgd,...]] [--freeze LIST [--freeze LIST ...]]
                             [--allocator simple[,caching,expandable]]
                             [--dtype fp32[,bf16,fp16]] [--quantize none[,w8,g4,w8g4,g8,w8g8]] [--stages 0,1,2,3]
                             [--seq-parallel 1[,2,4,...]]
                             [--predict [PROFILE]]
                             [--dry-run] [--build build | --zt-train PATH] [--zt-run PATH]
                             [-- EXTRA ZT-TRAIN FLAGS ...]

Runs the configurations stage {0,1,2,3} x each --offload (default none,cpu;
params and nvme-params, the parameter shards offloaded too, run at stage 3
only; activations, the kept block inputs, with --recompute full only)
x each policy of --recompute (default none,full: 16 configurations) for
each frozen-unit list of --freeze, each optimizer of --optimizer, each
device allocator of --allocator, each dtype of --dtype, each setting of
--quantize and each group size of --seq-parallel (defaults: none, adamw,
simple, fp32, none, 1; w8, the int8 all-gather of stage 3's weights, runs
at stage 3 only), each as

    launch/zt-run -np NP zt-train --model M --stage S --offload O --recompute R --dtype D
                  --optimizer OPT --freeze F --allocator A [QUANTIZE FLAGS] [--seq-parallel P]
                  --steps K EXTRA... --log-dir OUT/runs/NAME --quiet

(M: --model, one family for the whole sweep, recorded in the CSV's
`model` column and the Markdown's opening line) and reads OUT/runs/NAME/summary.json, labels_rank0.json and every rank's
rank<r>.jsonl. A configuration that fails (out of memory: exit 3 or an
oom_rank<r>.txt report; an optimizer or allocator zt-train does not know;
any other exit status) is recorded as a failed row and the sweep goes on.
Writes

    OUT/ablation.csv                  one row per configuration, bytes and seconds
    OUT/ablation.md                   the same in MiB as a Markdown table, and the commands run
    OUT/ablation_memory.png           stacked per-category peaks (mean over ranks) per configuration
    OUT/ablation_throughput.png       tokens/s against mean per-rank peak memory
    OUT/ablation_bytes_per_param.png  model state (params + grads + master_params + optimizer
                                      peaks) per parameter on each rank against the stage, beside
                                      the ZeRO paper's 16, 4 + 12/N, 2 + 14/N, 16/N

(with the gnuplot data files and scripts beside them, so the plots can be
redrawn with `cd OUT && gnuplot ablation_memory.gp`). Every run's console
output is kept in OUT/runs/NAME/console.log.

Predictions. With --predict [PROFILE], each configuration is also planned,
before it runs, by the zt-plan beside the zt-train the sweep uses:

    zt-plan ZT-TRAIN FLAGS OF THE RUN --world NP --json [--profile PROFILE]

(zt-plan takes every zt-train option, the run-only ones such as --steps,
--log-dir and --quiet included, and ignores those; without PROFILE it uses
its built-in table for the --device). Its JSON gives three more columns,
each beside what it predicts: predicted_peak_bytes, zt-plan's `peak_bytes`
(the allocated peak of the rank it plans, the one with the most optimizer
state), beside the measured peak_max_bytes; predicted_reserved_bytes, its
`expected_reserved.bytes` (the allocator's replayed reserved bytes, what
--mem-limit caps), beside reserved_peak_max_bytes; predicted_step_s, its
`time.predicted_step_s`, beside step_time_median_s. A configuration
zt-plan refuses or fails on keeps those cells empty (a plan that does not
fit a --mem-limit still predicts, and is kept). Over the configurations
that ran, the sweep prints and writes in ablation.md the Spearman rank
correlation and the median absolute relative error, |predicted -
measured| / measured, of the step times, and plots them:

    OUT/ablation_predicted.png        predicted against measured step time, log-log, beside y = x

Without --predict nothing of this is run or written.

Axes. --optimizer and --allocator names go to zt-train as they are
(zt-train refuses the ones it does not have; that configuration is then a
failed row). The allocator axis compares how the device allocator gets
memory (simple, caching, expandable: see README.md): the CSV has, per
configuration, the reserved peak (the highest over ranks and steps of each
step's reserved_peak_bytes), and from each rank's last step the highest
fragmentation_at_peak ((reserved - allocated) / reserved at the step's
peak) and the smallest largest_free_block_bytes (at the end of the step);
the Markdown table shows the reserved peak and the fragmentation at peak.
zt-train's --freeze value is itself a comma-separated list
(`embedding,head`), so the freeze axis is a repeatable flag:
`--freeze none --freeze embedding,head` sweeps two settings. The quantize
axis compresses the collectives ZeRO++-style (model state is unchanged):
w8 is --quantize-weights int8 (stage 3's all-gathers carry int8 codes), g4
and g8 are --quantize-grads int4 and int8 (the gradient reduce-scatters),
w8g4 and w8g8 both; none passes neither flag (zt-train's default). The
seq-parallel axis is zt-train's --seq-parallel P (DeepSpeed-Ulysses, see
docs/sequence_parallel.md; 1, the default, passes no flag): groups of P
ranks share each sequence, so activations per rank fall about as 1/P and
each block adds all-to-all exchanges (the CSV's all_to_all_bytes_per_step).
The ranks then form NP/P data-parallel replicas, so a row at P trains on
1/P of the tokens per step of P = 1; its tokens/s is zt-train's, which
counts them so. Model state is sharded over all NP ranks whatever P is,
so the bytes-per-parameter formula keeps N = NP. A P that does not divide
NP or the model's --heads (Llama: --kv-heads too; zt-train's default of 4
when not given after `--`) is left out of the sweep, with a note on
stderr and in the Markdown; the sweep is refused when none is left.

Presets. `--preset NAME` sets defaults for --np, --steps, --dtype and the
axes, and puts model flags first among the extra zt-train flags; flags
given on the command line still win (zt-train takes the last value of a
flag given twice, so `-- --layers 4` overrides the preset's model too):

    zero  bf16 at np 4; stages 0-3 x offload none,cpu x recompute none,full x
          optimizer adamw,sgd (32 runs of 20 steps); a 2-block GPT of 1.72M
          parameters (d_model 256, vocab 256) at micro-batch 2 x 32 tokens and
          1 MiB gradient buckets, where model state (16 bytes/param at stage
          0) is about two thirds of the stage-0 peak, so stages 1-3 visibly
          cut the peak as they cut model state to the ZeRO paper's 4 + 12/N,
          2 + 14/N and 16/N bytes/param.

Flags after `--` go to every run (model size, --mem-limit, --threads, ...);
the flags the sweep sets itself (--model among them: the family a row
records must be the one that ran) are refused there. --dry-run prints each
configuration's command (with --predict, its zt-plan command on a second
`NAME (zt-plan): COMMAND` line) and runs none. The exit status is 0 when the sweep
ran, whatever the configurations did; 2 for bad arguments or a missing
program; 1 when writing the results or plotting fails.

Only the Python standard library and gnuplot (pngcairo terminal) are used.
"""
import argparse
import csv
import json
import math
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time

CATEGORIES = ["params", "grads", "master_params", "optimizer", "activations",
              "gathered_params", "comm_buffers", "workspace", "checkpoint_staging", "other"]
# The persistent categories: what the ZeRO paper calls model states.
MODEL_STATE = ["params", "grads", "master_params", "optimizer"]
STAGES = [0, 1, 2, 3]
OFFLOADS = ["none", "cpu"]     # the default --offload
# Offload tiers the axis accepts: params is --offload cpu --offload-params cpu
# (stage 3 only); nvme the optimizer state in a swap file (--offload nvme,
# under OUT/nvme-swap), nvme-params the shards too (stage 3 only);
# activations the kept block inputs in the host pool (--offload-activations
# cpu, with --recompute full only).
OFFLOAD_TIERS = OFFLOADS + ["params", "nvme", "nvme-params", "activations"]
TIER_SUFFIX = {"cpu": "-offload", "params": "-offload-params", "nvme": "-nvme", "nvme-params": "-nvme-params",
               "activations": "-offload-acts"}


def tier_flags(offload, out):
    """zt-train's flags for an offload tier."""
    swap = ["--nvme-path", os.path.join(out, "nvme-swap")]
    return {"none": ["--offload", "none"], "cpu": ["--offload", "cpu"],
            "params": ["--offload", "cpu", "--offload-params", "cpu"], "nvme": ["--offload", "nvme"] + swap,
            "nvme-params": ["--offload", "nvme", "--offload-params", "nvme"] + swap,
            "activations": ["--offload-activations", "cpu"]}[offload]


def tier_applies(offload, stage, recompute):
    """Stage 3's tiers at stage 3 only; activation offload with full recompute only."""
    if offload in ("params", "nvme-params"):
        return stage == 3
    return offload != "activations" or recompute == "full"
RECOMPUTES = ["none", "full"]  # the default --recompute
# Flags whose value the sweep decides; passing them after `--` would silently
# turn the ablation into 16 runs of one configuration (or mix their logs).
AXIS_FLAGS = ["--stage", "--offload", "--offload-params", "--offload-activations", "--nvme-path", "--recompute", "--dtype", "--optimizer", "--freeze", "--allocator",
              "--quantize-weights", "--quantize-grads", "--seq-parallel", "--steps"]
# zt-train's flags that ablate.py's --quantize sets, for the hint of the refusal.
QUANTIZE_AXIS_FLAGS = {"--quantize-weights": "--quantize", "--quantize-grads": "--quantize"}
# Flags of the sweep's own that hold for every run: one value, recorded in each row.
SWEEP_FLAGS = ["--model"]
OWNED_FLAGS = AXIS_FLAGS + SWEEP_FLAGS + ["--log-dir"]
DTYPES = ["fp32", "bf16", "fp16"]
# Settings of the --quantize axis and zt-train's flags for each: w = stage
# 3's weight all-gathers (qwZ), g = the gradient reduce-scatters (qgZ), with
# the code width in bits. none passes no flag: zt-train quantizes nothing
# by default.
QUANTIZE = {"none": [], "w8": ["--quantize-weights", "int8"], "g4": ["--quantize-grads", "int4"],
            "w8g4": ["--quantize-weights", "int8", "--quantize-grads", "int4"],
            "g8": ["--quantize-grads", "int8"], "w8g8": ["--quantize-weights", "int8", "--quantize-grads", "int8"]}


def quantize_applies(quantize, stage):
    """Weight quantization at stage 3 only: its codes travel in stage 3's
    per-unit all-gathers, and zt-train refuses the flag at other stages."""
    return "--quantize-weights" not in QUANTIZE[quantize] or stage == 3


# zt-train's --heads when the flags after `--` do not set it
# (train/train_config.c); both families take it, and Llama's --kv-heads 0
# means --heads.
ZT_TRAIN_DEFAULT_HEADS = 4


def seq_parallel_obstacle(P, world_size, model, extra):
    """Why zt-train would refuse --seq-parallel P for this sweep, or None when
    it runs: a group is P consecutive ranks, so P divides the world; each rank
    of a group runs heads / P attention heads (Llama: kv_heads / P key/value
    heads too). A --heads or --kv-heads that is not a number is left for
    zt-train to refuse."""
    if P == 1:
        return None
    if world_size % P != 0:
        return f"does not divide --np {world_size}"
    try:
        heads = int(flag_value(extra, "--heads") or ZT_TRAIN_DEFAULT_HEADS)
        kv_heads = int(flag_value(extra, "--kv-heads") or 0) or heads
    except ValueError:
        return None
    if heads % P != 0:
        return f"does not divide --heads {heads}"
    if model == "llama" and kv_heads % P != 0:
        return f"does not divide --kv-heads {kv_heads}"
    return None


MIB = 1024.0 * 1024.0

# Bytes of optimizer state per owned parameter, for the optimizers whose
# closed form is known here (docs/memory.md); others get no formula column.
OPTIMIZER_STATE_BYTES = {"adamw": 8, "sgd": 4}

# Presets: explicit defaults for the sweep's own flags, and model flags put
# before the command line's extra flags (zt-train keeps a flag's last value,
# so flags after `--` override them). See the module docstring for why.
PRESETS = {
    "zero": {
        "np": 4, "steps": 20, "dtype": "bf16", "offload": "none,cpu", "recompute": "none,full",
        "optimizer": "adamw,sgd", "freeze": ["none"],
        "model": ["--layers", "2", "--d-model", "256", "--heads", "4", "--vocab", "256",
                  "--seq-len", "32", "--micro-batch", "2", "--bucket-size", "1MiB"],
    },
}

COLUMNS = (["name", "model", "stage", "offload", "recompute", "optimizer", "freeze", "allocator", "dtype", "quantize",
            "seq_parallel", "status",
            "peak_mean_bytes", "peak_max_bytes", "imbalance_max_over_mean"]
           + [f"peak_{c}_mean_bytes" for c in CATEGORIES]
           + ["host_peak_mean_bytes", "host_peak_max_bytes", "reserved_peak_max_bytes",
              "fragmentation_at_peak_last_step_max", "largest_free_block_last_step_min_bytes", "os_peak_max_bytes",
              "model_params", "units", "model_state_by_rank_bytes", "model_state_min_bytes",
              "model_state_max_bytes", "formula_bytes_per_param",
              "step_time_median_s", "tokens_per_s", "final_loss", "comm_bytes_per_step",
              "all_to_all_bytes_per_step", "wall_s", "exit_code", "run_dir", "detail"])
# --predict's columns, each put right after the measured column it predicts.
PREDICTED_AFTER = {"peak_max_bytes": "predicted_peak_bytes", "reserved_peak_max_bytes": "predicted_reserved_bytes",
                   "step_time_median_s": "predicted_step_s"}


def columns(predict):
    """The CSV's columns: COLUMNS, with the predicted ones under --predict."""
    if not predict:
        return COLUMNS
    return [x for c in COLUMNS for x in ([c, PREDICTED_AFTER[c]] if c in PREDICTED_AFTER else [c])]

# Colours of the categories in the memory plot (same order as CATEGORIES).
CATEGORY_COLOURS = ["#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c",
                    "#98df8a", "#d62728", "#9467bd", "#c49c94", "#8c564b"]
STAGE_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"]
SERIES_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]


class ToolError(Exception):
    """A failure of the sweep itself (not of a configuration)."""


def config_name(stage, offload, recompute, dtype="fp32", optimizer="adamw", freeze="none", allocator="simple",
                quantize="none", seq_parallel=1):
    """sS[-offload][-recompute|-selective|-everyK][-OPTIMIZER][-frz-UNITS][-ALLOCATOR][-QUANTIZE][-spP][-DTYPE]:
    the parts at zt-train's defaults (no offload, no recompute, adamw, nothing
    frozen, the simple allocator, no quantization, no sequence parallelism,
    fp32) are left out."""
    name = f"s{stage}"
    if offload != "none":
        name += TIER_SUFFIX[offload]
    if recompute == "full":
        name += "-recompute"
    elif recompute != "none":
        name += "-" + recompute.replace("-", "")  # -selective, -every2
    if optimizer != "adamw":
        name += "-" + re.sub(r"[^A-Za-z0-9]+", "", optimizer)
    if freeze != "none":
        name += "-frz-" + re.sub(r"[^A-Za-z0-9-]+", "_", freeze)  # embedding,head: embedding_head
    if allocator != "simple":
        name += "-" + re.sub(r"[^A-Za-z0-9]+", "", allocator)
    if quantize != "none":
        name += "-" + quantize
    if seq_parallel != 1:
        name += f"-sp{seq_parallel}"
    if dtype != "fp32":
        name += f"-{dtype}"
    return name


def model_state_formula(stage, world_size, dtype, optimizer):
    """Bytes of model state per parameter on each rank, unpadded: the ZeRO
    paper's (2 + 2 + K) psi split by stage, with zerotrain's sizes: d bytes
    of params and of grads (the --dtype), K = the fp32 master (16-bit dtypes
    only) + the optimizer's state. Mixed-precision Adam (d = 2, K = 12) gives
    the paper's 16, 4 + 12/N, 2 + 14/N, 16/N. N is the world size at any
    --seq-parallel: sequence groups share activations, while model state is
    sharded over every rank (docs/sequence_parallel.md, Composition). None for
    an optimizer whose state is not a fixed number of bytes per parameter here."""
    if optimizer not in OPTIMIZER_STATE_BYTES:
        return None
    d = 4 if dtype == "fp32" else 2
    k = (0 if dtype == "fp32" else 4) + OPTIMIZER_STATE_BYTES[optimizer]
    n = world_size
    return {0: 2 * d + k, 1: 2 * d + k / n, 2: d + (d + k) / n, 3: (2 * d + k) / n}[stage]


def parse_size(text):
    """zt-train's size syntax (runtime/size.c): a number with an optional unit
    among B, K/KiB, KB, M/MiB, MB, G/GiB, GB, T/TiB, TB (case-insensitive).
    Returns bytes, or None when the text is not a size."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    if not m:
        return None
    units = {"": 1, "b": 1, "k": 1024, "kib": 1024, "kb": 1e3, "m": 1024 ** 2, "mib": 1024 ** 2,
             "mb": 1e6, "g": 1024 ** 3, "gib": 1024 ** 3, "gb": 1e9, "t": 1024 ** 4, "tib": 1024 ** 4,
             "tb": 1e12}
    mult = units.get(m.group(2).lower())
    return None if mult is None else round(float(m.group(1)) * mult)


def flag_value(extra, flag):
    """The last value given to FLAG in the extra arguments (`--f v` or `--f=v`)."""
    value = None
    for i, a in enumerate(extra):
        if a == flag and i + 1 < len(extra):
            value = extra[i + 1]
        elif a.startswith(flag + "="):
            value = a[len(flag) + 1:]
    return value


def comma_list(text):
    return [v.strip() for v in text.split(",") if v.strip()]


def build_parser(here):
    p = argparse.ArgumentParser(
        prog="ablate.py",
        description="Sweep ZeRO stage {0,1,2,3} x offload x recompute policies (x optimizers x frozen units "
                    "x allocators x dtypes x quantized communication x sequence parallelism) on a model family "
                    "(--model) and tabulate and plot memory and throughput.",
        epilog="Flags after `--` are passed to every zt-train run, e.g. "
               "`-- --layers 4 --d-model 128 --mem-limit 8MiB`.")
    p.add_argument("--preset", choices=sorted(PRESETS),
                   help="defaults for the flags below and model flags before those after `--` "
                        "(zero: bf16, np 4, a model whose state is most of the stage-0 peak; "
                        "see the module docstring); explicit flags still win")
    p.add_argument("--model", default="gpt",
                   help="the model family every run trains, passed to zt-train's --model as it is (gpt, llama: "
                        "the families zt-train has; zt-train refuses another, and every row then fails) "
                        "[default: gpt]")
    p.add_argument("--np", type=int, default=2, help="ranks per run [default: 2]")
    p.add_argument("--steps", type=int, default=30, help="optimizer steps per run [default: 30]")
    p.add_argument("--out", default=os.path.join("out", "ablation"),
                   help="output directory [default: out/ablation]")
    p.add_argument("--build", default="build",
                   help="build directory holding examples/zt-train [default: build]")
    p.add_argument("--zt-train", default=None, help="path of zt-train (overrides --build)")
    p.add_argument("--zt-run", default=os.path.join(here, "zt-run"),
                   help="path of the mpirun wrapper [default: zt-run beside this script]")
    p.add_argument("--offload", default=",".join(OFFLOADS),
                   help="comma-separated offload tiers to sweep: none, cpu (optimizer state), params (and stage 3's "
                        "parameter shards: stage 3 only), nvme (optimizer state in a swap file), nvme-params (the "
                        "shards too: stage 3 only), activations (kept block inputs: --recompute full only) "
                        "[default: none,cpu]")
    p.add_argument("--recompute", default=",".join(RECOMPUTES),
                   help="comma-separated recompute policies to sweep (none, full, selective, every-K) "
                        "[default: none,full]")
    p.add_argument("--optimizer", default="adamw",
                   help="comma-separated optimizers to sweep, passed to zt-train's --optimizer as they are "
                        "[default: adamw]")
    p.add_argument("--freeze", action="append", default=None, metavar="LIST",
                   help="one setting of zt-train's --freeze (itself a comma-separated list, e.g. "
                        "embedding,head; none: nothing frozen); repeat the flag to sweep several "
                        "[default: none]")
    p.add_argument("--allocator", default="simple",
                   help="comma-separated device allocators to sweep (simple, caching, expandable), passed to "
                        "zt-train's --allocator as they are [default: simple]")
    p.add_argument("--dtype", default="fp32",
                   help="comma-separated dtypes to sweep (fp32, bf16, fp16) [default: fp32]")
    p.add_argument("--quantize", default="none",
                   help="comma-separated quantized-communication settings to sweep: none, w8 (--quantize-weights "
                        "int8: stage 3 only), g4 (--quantize-grads int4), w8g4 (both), g8 (--quantize-grads "
                        "int8), w8g8 [default: none]")
    p.add_argument("--stages", default="0,1,2,3",
                   help="comma-separated ZeRO stages to sweep [default: 0,1,2,3]")
    p.add_argument("--seq-parallel", default="1",
                   help="comma-separated sequence-parallel group sizes to sweep, passed to zt-train's --seq-parallel "
                        "(DeepSpeed-Ulysses: P ranks share each sequence, so a step trains on 1/P of the tokens; "
                        "1: off); a P that does not divide --np or the model's heads is left out [default: 1]")
    p.add_argument("--predict", nargs="?", const="", default=None, metavar="PROFILE",
                   help="also plan each configuration with the zt-plan beside zt-train (--world NP --json, "
                        "--profile PROFILE when given) and tabulate and plot its predicted step time and peaks "
                        "beside the measured ones")
    p.add_argument("--dry-run", action="store_true",
                   help="print each configuration's command (and zt-plan command, with --predict) and run nothing")
    p.add_argument("--gnuplot", default="gnuplot", help="gnuplot program [default: gnuplot]")
    p.add_argument("--timeout", type=float, default=1800.0,
                   help="seconds one configuration may run before it is stopped and marked failed "
                        "[default: 1800]")
    return p


def distinct_list(p, flag, values, allowed_text, valid=lambda v: True):
    if not values or len(set(values)) != len(values) or not all(valid(v) for v in values):
        p.error(f"{flag} {values}: give distinct values among {allowed_text}")
    return values


def parse_args(argv):
    if "--" in argv:
        cut = argv.index("--")
        own, extra = argv[:cut], argv[cut + 1:]
    else:
        own, extra = argv, []
    here = os.path.dirname(os.path.abspath(__file__))
    p = build_parser(here)
    args = p.parse_args(own)
    preset = PRESETS.get(args.preset, {})
    if preset:
        # Parse again with the preset's values as defaults: what the command
        # line gives explicitly still wins.
        p.set_defaults(**{k: v for k, v in preset.items() if k not in ("model", "freeze")})
        args = p.parse_args(own)
    if args.np < 1:
        p.error("--np must be at least 1")
    if args.steps < 1:
        p.error("--steps must be at least 1")
    if args.timeout <= 0:
        p.error("--timeout must be positive")
    args.offloads = distinct_list(p, "--offload", comma_list(args.offload), ", ".join(OFFLOAD_TIERS),
                                  lambda o: o in OFFLOAD_TIERS)
    args.recomputes = distinct_list(
        p, "--recompute", comma_list(args.recompute), "none, full, selective, every-K",
        lambda r: r in ("none", "full", "selective") or re.fullmatch(r"every-[1-9][0-9]*", r))
    args.optimizers = distinct_list(p, "--optimizer", comma_list(args.optimizer), "zt-train's --optimizer names")
    args.allocators = distinct_list(p, "--allocator", comma_list(args.allocator), "zt-train's --allocator names")
    # append's list is only the command line's: a default list would be appended to.
    args.freezes = distinct_list(p, "--freeze", [f.strip() for f in (args.freeze or preset.get("freeze", ["none"]))],
                                 "zt-train's --freeze lists", lambda f: f != "")
    args.dtypes = distinct_list(p, "--dtype", comma_list(args.dtype), ", ".join(DTYPES), lambda d: d in DTYPES)
    args.quantizes = distinct_list(p, "--quantize", comma_list(args.quantize), ", ".join(QUANTIZE),
                                   lambda q: q in QUANTIZE)
    seq_parallels = [int(v) for v in distinct_list(p, "--seq-parallel", comma_list(args.seq_parallel),
                                                   "positive integers", lambda v: re.fullmatch(r"[1-9][0-9]*", v))]
    for a in extra:
        for f in OWNED_FLAGS:
            if a == f or a.startswith(f + "="):
                p.error(f"{f} is set by the sweep; it cannot be passed after `--`"
                        + (f" (use ablate.py {QUANTIZE_AXIS_FLAGS.get(f, f)})"
                           if f in AXIS_FLAGS + SWEEP_FLAGS and f != "--stage" else ""))
    args.user_extra = extra
    args.extra = preset.get("model", []) + extra
    # A group size zt-train would refuse is refused for every configuration
    # alike: left out (and said so), not run as a column of failed rows.
    args.seq_parallels_left_out = [(P, why) for P in seq_parallels
                                   if (why := seq_parallel_obstacle(P, args.np, args.model, args.extra))]
    args.seq_parallels = [P for P in seq_parallels if P not in dict(args.seq_parallels_left_out)]
    if not args.seq_parallels:
        p.error("--seq-parallel " + ", ".join(f"{P} {why}" for P, why in args.seq_parallels_left_out)
                + ": no group size is left to sweep")
    stages = distinct_list(p, "--stages", comma_list(args.stages), "0, 1, 2, 3", lambda v: v in ("0", "1", "2", "3"))
    args.configs = [(s, o, r, d, opt, fr, al, q, sp) for d in args.dtypes for al in args.allocators
                    for q in args.quantizes for sp in args.seq_parallels
                    for opt in args.optimizers for fr in args.freezes for s in [int(x) for x in stages]
                    for o in args.offloads
                    for r in args.recomputes if tier_applies(o, s, r) and quantize_applies(q, s)]
    names = [config_name(*c) for c in args.configs]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        p.error(f"configurations share a name (and a run directory): {', '.join(clash)}; "
                "give --optimizer, --freeze and --allocator values that differ in letters or digits")
    args.zt_train = os.path.abspath(args.zt_train or os.path.join(args.build, "examples", "zt-train"))
    args.zt_run = os.path.abspath(args.zt_run)
    args.zt_plan = os.path.join(os.path.dirname(args.zt_train), "zt-plan") if args.predict is not None else None
    programs = [("zt-train", args.zt_train), ("zt-run", args.zt_run)]
    if args.predict is not None:
        programs.append(("zt-plan (for --predict: the one beside zt-train)", args.zt_plan))
        if args.predict:
            args.predict = os.path.abspath(args.predict)
            if not os.path.isfile(args.predict):
                p.error(f"--predict: profile not found: {args.predict}")
    for what, path in programs:
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            p.error(f"{what} not found or not executable: {path}")
    return args


def read_jsonl(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return rows


def oom_detail(run_dir, output):
    """What ran out of memory: the first line of the lowest rank's non-empty
    OOM report (a rank can be ended by another rank's MPI_Abort while it
    writes its own, leaving it empty), else the console's report line.
    None when there is no sign of an OOM."""
    reports = []
    if os.path.isdir(run_dir):
        reports = sorted((int(m.group(1)), f) for f in os.listdir(run_dir)
                         if (m := re.fullmatch(r"oom_rank(\d+)\.txt", f)))
    for rank, f in reports:
        try:
            with open(os.path.join(run_dir, f)) as fh:
                first = fh.readline().strip()
        except OSError:
            continue
        if first:
            return f"rank {rank}: {first}"
    for line in output.splitlines():
        if "out of device memory" in line:
            return line.strip()
    return "(empty OOM report)" if reports else None


def last_error_line(text):
    lines = [l.strip() for l in text.splitlines() if "error" in l.lower()]
    return lines[-1] if lines else ""


def metrics(run_dir):
    """Everything the table needs from a successful run's logs."""
    with open(os.path.join(run_dir, "summary.json")) as f:
        s = json.load(f)
    ranks = s["ranks"]
    peaks = [r["peak_bytes"] for r in ranks]
    hosts = [r.get("host_peak_bytes", 0) for r in ranks]
    row = {
        "peak_mean_bytes": statistics.fmean(peaks),
        "peak_max_bytes": max(peaks),
        "imbalance_max_over_mean": s["imbalance"]["peak_max_over_mean"],
        "host_peak_mean_bytes": statistics.fmean(hosts),
        "host_peak_max_bytes": max(hosts),
        "os_peak_max_bytes": max(r.get("os_peak_bytes", 0) for r in ranks),
        "step_time_median_s": s["step_time_s"],
        "tokens_per_s": s["tokens_per_s"],
        "final_loss": s["final_loss"],
    }
    for c in CATEGORIES:
        row[f"peak_{c}_mean_bytes"] = statistics.fmean(r["peak_by_category"].get(c, 0) for r in ranks)
    # Model state on the device, per rank in rank order: the persistent
    # categories' peaks (with offload, master_params and optimizer are 0 here).
    state = [sum(r["peak_by_category"].get(c, 0) for c in MODEL_STATE)
             for r in sorted(ranks, key=lambda r: r["rank"])]
    row["model_params"] = s["params"]
    row["model_state_by_rank"] = state
    row["model_state_by_rank_bytes"] = " ".join(str(b) for b in state)
    row["model_state_min_bytes"] = min(state)
    row["model_state_max_bytes"] = max(state)
    # Parameter units (each padded on its own): one `params` label per unit.
    with open(os.path.join(run_dir, "labels_rank0.json")) as f:
        labels = json.load(f)
    row["units"] = sum(1 for e in labels["device"] if e["category"] == "params")
    steps = read_jsonl(os.path.join(run_dir, "rank0.jsonl"))
    if steps:
        row["comm_bytes_per_step"] = statistics.fmean(
            sum(k.get("bytes", 0) for k in st.get("comm", {}).values()) for st in steps)
        # --seq-parallel's exchanges; a kind without calls in a step is absent from its comm.
        row["all_to_all_bytes_per_step"] = statistics.fmean(
            st.get("comm", {}).get("all_to_all", {}).get("bytes", 0) for st in steps)
    # Reserved bytes (what --mem-limit caps), highest over ranks and steps;
    # from each rank's last step, the fragmentation at the step's peak (the
    # highest over ranks) and the largest free block at its end (the
    # smallest), where the zt-train that wrote the logs reports them.
    reserved, frag_peak, largest_free = [], [], []
    for r in range(s["world_size"]):
        path = os.path.join(run_dir, f"rank{r}.jsonl")
        if os.path.exists(path):
            steps = read_jsonl(path)
            reserved += [st["memory"].get("reserved_peak_bytes", 0) for st in steps]
            last = steps[-1]["memory"] if steps else {}
            if "fragmentation_at_peak" in last:
                frag_peak.append(last["fragmentation_at_peak"])
            if "largest_free_block_bytes" in last:
                largest_free.append(last["largest_free_block_bytes"])
    if reserved:
        row["reserved_peak_max_bytes"] = max(reserved)
    if frag_peak:
        row["fragmentation_at_peak_last_step_max"] = max(frag_peak)
    if largest_free:
        row["largest_free_block_last_step_min_bytes"] = min(largest_free)
    return row


def seq_parallel_flags(seq_parallel):
    """P = 1 passes no flag: it is zt-train's default, and a zt-train without
    sequence parallelism still runs the rest of the sweep."""
    return [] if seq_parallel == 1 else ["--seq-parallel", str(seq_parallel)]


def train_flags(args, out, config, run_dir):
    """zt-train's flags for one configuration (after the program's name)."""
    stage, offload, recompute, dtype, optimizer, freeze, allocator, quantize, seq_parallel = config
    return (["--model", args.model, "--stage", str(stage)] + tier_flags(offload, out)
            + ["--recompute", recompute, "--dtype", dtype,
               "--optimizer", optimizer, "--freeze", freeze, "--allocator", allocator] + QUANTIZE[quantize]
            + seq_parallel_flags(seq_parallel) + ["--steps", str(args.steps)]
            + args.extra + ["--log-dir", run_dir, "--quiet"])


def config_command(args, out, config):
    name = config_name(*config)
    run_dir = os.path.join(out, "runs", name)
    cmd = [args.zt_run, "-np", str(args.np), args.zt_train] + train_flags(args, out, config, run_dir)
    return name, run_dir, cmd


def plan_command(args, out, config):
    """--predict: zt-plan on the run's own flags (it takes every zt-train
    option and ignores the run-only ones) at the sweep's world size."""
    run_dir = os.path.join(out, "runs", config_name(*config))
    return ([args.zt_plan] + train_flags(args, out, config, run_dir) + ["--world", str(args.np), "--json"]
            + (["--profile", args.predict] if args.predict else []))


def predict(args, out, config):
    """zt-plan's prediction for one configuration: the predicted_* cells, or
    none and `predict_detail` when zt-plan failed. A plan that does not fit
    a --mem-limit among the flags is zt-plan's exit 1, with the plan: kept."""
    cmd = plan_command(args, out, config)
    row = {"plan_command": shlex.join(cmd)}
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return dict(row, predict_detail=f"zt-plan stopped after {args.timeout:g} s")
    except OSError as e:
        raise ToolError(f"cannot run {cmd[0]}: {e}")
    try:
        if p.returncode not in (0, 1):
            raise ValueError("no plan")
        plan = json.loads(p.stdout)
        cells = {"predicted_step_s": float(plan["time"]["predicted_step_s"]),
                 "predicted_peak_bytes": int(plan["peak_bytes"])}
        reserved = (plan.get("expected_reserved") or {}).get("bytes")
        if reserved is not None:
            cells["predicted_reserved_bytes"] = int(reserved)
        return dict(row, predicted_profile=str(plan["time"].get("profile", "")), **cells)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        why = last_error_line(p.stderr) or p.stderr.strip()[-200:] or f"{type(e).__name__}: {e}"
        return dict(row, predict_detail=f"zt-plan exit {p.returncode}: {why}")


def run_config(args, out, config, index, total):
    stage, offload, recompute, dtype, optimizer, freeze, allocator, quantize, seq_parallel = config
    name, run_dir, cmd = config_command(args, out, config)
    if os.path.exists(run_dir):
        shutil.rmtree(run_dir)  # a stale summary.json must not pass for this run's
    row = {"name": name, "model": args.model, "stage": stage, "offload": offload, "recompute": recompute, "dtype": dtype,
           "optimizer": optimizer, "freeze": freeze, "allocator": allocator, "quantize": quantize,
           "seq_parallel": seq_parallel, "run_dir": run_dir, "command": shlex.join(cmd), "mpirun": ""}
    # The closed form holds for the device's model state without offload and
    # with every unit trained (frozen units keep params only).
    if offload == "none" and freeze == "none":
        row["formula_bytes_per_param"] = model_state_formula(stage, args.np, dtype, optimizer)
    print(f"[{index:2d}/{total}] {name:<30s} ", end="", flush=True)
    if args.predict is not None:
        row.update(predict(args, out, config))
    t0 = time.monotonic()
    try:
        # A session of its own, so that a run past --timeout is ended with
        # every process it started (mpirun and its ranks), not mpirun alone.
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", start_new_session=True)
    except OSError as e:
        raise ToolError(f"cannot run {cmd[0]}: {e}")
    try:
        output, _ = proc.communicate(timeout=args.timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        # SIGTERM first: mpirun then ends its ranks (which sit in process
        # groups of their own); SIGKILL whatever is left after 10 s.
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, None)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                output, _ = proc.communicate(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        rc = None
    row["wall_s"] = time.monotonic() - t0
    row["exit_code"] = "" if rc is None else rc
    for line in output.splitlines():
        if line.startswith("zt-run: mpirun"):
            row["mpirun"] = line[len("zt-run: "):]
            break
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "console.log"), "w") as f:
        f.write("$ " + row["command"] + "\n" + output)

    oom = oom_detail(run_dir, output)
    if rc is None:
        row["status"] = "failed: timeout"
        row["detail"] = f"stopped after {args.timeout:g} s"
    elif rc == 3 or (rc != 0 and oom):
        row["status"] = "failed: oom"
        row["detail"] = oom or last_error_line(output)
    elif rc != 0:
        row["status"] = f"failed: exit {rc}"
        row["detail"] = last_error_line(output)
    elif not os.path.exists(os.path.join(run_dir, "summary.json")):
        row["status"] = "failed: no summary"
        row["detail"] = "exit 0 but no summary.json"
    else:
        try:
            row.update(metrics(run_dir))
            row["status"] = "ok"
            row["detail"] = ""
        except (OSError, ValueError, KeyError, TypeError, statistics.StatisticsError) as e:
            row["status"] = "failed: bad logs"
            row["detail"] = f"{type(e).__name__}: {e}"
    forecast = ""
    if "predicted_step_s" in row:
        forecast = f"  predicted {row['predicted_step_s'] * 1e3:.2f} ms/step"
    elif "predict_detail" in row:
        forecast = f"  no prediction: {row['predict_detail'][:100]}"
    if row["status"] == "ok":
        measured = f"  {row['step_time_median_s'] * 1e3:.2f} ms/step" if forecast else ""
        print(f"ok      peak {row['peak_mean_bytes'] / MIB:9.3f} MiB  {row['tokens_per_s']:12.0f} tok/s  "
              f"({row['wall_s']:.1f} s)" + measured + forecast)
    else:
        print(f"{row['status']}  ({row['wall_s']:.1f} s)  {row['detail'][:120]}" + forecast)
    return row


# ---------------------------------------------------------------- output files

def csv_value(v):
    if v is None or v == "":
        return ""
    if isinstance(v, float):
        if v.is_integer() and abs(v) < 1e18:
            return str(int(v))
        return repr(v)
    return str(v)


def write_csv(path, rows, predict=False):
    cols = columns(predict)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in rows:
            w.writerow([csv_value(r.get(c)) for c in cols])


# ---------------------------------------------------------------- predicted against measured

def ranks(values):
    """1-based ranks of the values, ties given the mean of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    result = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            result[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return result


def spearman(xs, ys):
    """Spearman's rank correlation: Pearson's correlation of the ranks (so
    ties count as they should); None for fewer than 2 pairs or a constant side."""
    if len(xs) != len(ys) or len(xs) < 2:
        return None
    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    return None if sxx == 0 or syy == 0 else sxy / math.sqrt(sxx * syy)


def predicted_pairs(rows):
    """(row, predicted, measured step time) for the configurations that ran and were predicted."""
    return [(r, r["predicted_step_s"], r["step_time_median_s"]) for r in rows
            if r["status"] == "ok" and r.get("predicted_step_s") is not None and r["step_time_median_s"] > 0]


def prediction_stats(rows):
    """How many configurations compare, the Spearman rank correlation of
    predicted and measured step times, and the median of |predicted -
    measured| / measured (None where undefined)."""
    pairs = predicted_pairs(rows)
    rho = spearman([p for _, p, _ in pairs], [m for _, _, m in pairs])
    mdre = statistics.median(abs(p - m) / m for _, p, m in pairs) if pairs else None
    return len(pairs), rho, mdre


def stats_text(stats):
    n, rho, mdre = stats
    return ("Spearman rank correlation " + ("-" if rho is None else f"{rho:.3f}")
            + ", median absolute relative error " + ("-" if mdre is None else f"{mdre * 100:.1f}%")
            + f" (over the {n} configuration(s) that ran and were predicted)")


def log_tics(lo, hi):
    """gnuplot tics at 1, 2, 3, 5 x 10^k between lo and hi: a log axis
    spanning less than a decade gets a labelled tic or two otherwise."""
    tics = [m * 10.0 ** k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
            for m in (1, 2, 3, 5)]
    return "(" + ", ".join(f"'{t:g}' {t:g}" for t in tics if lo <= t <= hi) + ")"


def mib(v, digits=3):
    return "" if v is None or v == "" else f"{v / MIB:.{digits}f}"


def md_escape(text):
    return str(text).replace("|", "\\|")


def bytes_per_param(r):
    """Measured model state per parameter, the highest over ranks."""
    return r["model_state_max_bytes"] / r["model_params"]


def write_markdown(path, rows, args, invocation, plot_cmds, cap):
    ok = [r for r in rows if r["status"] == "ok"]
    lines = ["# Ablation: ZeRO stage x optimizer offload x activation recompute "
             "(x optimizer x frozen units x allocator x dtype)",
             ""]
    if args.preset:
        preset = PRESETS[args.preset]
        lines.append(f"Preset `{args.preset}`: model flags `{shlex.join(preset['model'])}`"
                     + (f", then `{shlex.join(args.user_extra)}` from the command line" if args.user_extra else "")
                     + ".")
        lines.append("")
    lines.append(f"Model family `{args.model}`, {args.np} rank(s), {args.steps} steps per configuration, "
                 "extra zt-train flags: "
                 + (f"`{shlex.join(args.extra)}`" if args.extra else f"none (the default {args.model})")
                 + f"; {len(ok)} of {len(rows)} configurations ran to the end.")
    lines.append("")
    lines.append("Memory is the tracked device memory of each rank (MiB = 2^20 bytes): *peak* is the "
                 "mean (and max) over ranks of each rank's peak; per category, the mean over ranks of "
                 "each category's own peak (these peaks need not coincide, so they can add up to more "
                 "than the peak). *host* is the offload pool's peak (mean over ranks). Step time is "
                 "the median over steps; comm is the bytes of all collectives per step on rank 0 "
                 "(mean over steps).")
    lines.append("")
    lines.append("*reserved peak* is the device allocator's reserved bytes (live + cached: what `--mem-limit` "
                 "caps) at their peak, the highest over ranks and steps; *frag at peak* is the fragmentation "
                 "at the peak of the last step, (reserved - allocated) / reserved, the highest over ranks "
                 "(the CSV also has the smallest largest free block at the end of the last step).")
    lines.append("")
    lines.append("*state B/param* is the device's model state (params + grads + master_params + optimizer "
                 "peaks) per model parameter, the highest over ranks; *formula* is the same unpadded, in "
                 "closed form: (2d + K), (2d + K/N), (d + (d + K)/N), (2d + K)/N bytes at stages 0-3 for N "
                 "ranks, d bytes per param and grad (the dtype), K = fp32 master (16-bit only) + optimizer "
                 "state (adamw 8, sgd 4): the ZeRO paper's 16, 4 + 12/N, 2 + 14/N, 16/N for bf16 AdamW; "
                 "shown without offload and frozen units only.")
    if cap is not None:
        lines.append("")
        lines.append(f"`--mem-limit` = {cap} bytes ({cap / MIB:.3f} MiB); the cap applies to *reserved* "
                     "bytes (live + cached), so a run can fail with a peak below it.")
    lines.append("")
    # The quantize part of the legend only where the sweep has one, so that a
    # sweep without --quantize writes the text it always wrote.
    quantized = any(r["quantize"] != "none" for r in rows)
    seq_split = any(r["seq_parallel"] != 1 for r in rows)
    lines.append("Config `sS[-offload][-recompute|-selective|-everyK][-OPTIMIZER][-frz-UNITS][-ALLOCATOR]"
                 + ("[-QUANTIZE]" if quantized else "") + ("[-spP]" if seq_split else "") + "[-DTYPE]`: "
                 "ZeRO stage S, `--offload cpu`, `--recompute full|selective|every-K`, `--optimizer OPTIMIZER` "
                 "(adamw when absent), `--freeze UNITS` (nothing frozen when absent), `--allocator ALLOCATOR` "
                 "(simple when absent), "
                 + ("QUANTIZE: w8 `--quantize-weights int8` (stage 3 only), g4 / g8 `--quantize-grads int4|int8`, "
                    "w8g4 / w8g8 both (neither when absent), " if quantized else "")
                 + ("`--seq-parallel P` (1 when absent), " if seq_split else "")
                 + "`--dtype DTYPE` (fp32 when absent).")
    lines.append("")
    if seq_split:
        lines.append(f"*seq-parallel* P: groups of P ranks share each sequence (DeepSpeed-Ulysses), so a rank "
                     f"holds about 1/P of the activations, and the {args.np} ranks form {args.np}/P data-parallel "
                     "replicas: a step at P trains on 1/P of the tokens of a step at 1, and tokens/s counts those. "
                     "*a2a* is the bytes of the all-to-all exchanges around attention per step on rank 0 (part of "
                     "comm). Model state is sharded over all ranks at any P, so the formula's N stays the rank "
                     "count.")
        lines.append("")
    if args.seq_parallels_left_out:
        lines.append("Left out: " + "; ".join(f"`--seq-parallel {P}` {why}"
                                             for P, why in args.seq_parallels_left_out) + ".")
        lines.append("")
    head = (["config", "status", "optimizer", "freeze", "allocator", "quantize", "seq-parallel", "peak mean",
             "peak max", "max/mean"]
            + CATEGORIES + ["host peak", "reserved peak", "frag at peak", "state B/param", "formula B/param",
                            "step ms", "tokens/s", "final loss", "comm MiB/step", "a2a MiB/step"])
    text_cols = 7  # config .. seq-parallel, left-aligned; the rest are numbers
    predict = args.predict is not None
    shown = with_predicted(head, head, ["predicted peak", "predicted reserved", "predicted step ms"]) \
        if predict else head
    lines.append("| " + " | ".join(shown) + " |")
    lines.append("|" + "|".join(["---"] * text_cols + ["---:"] * (len(shown) - text_cols)) + "|")
    for r in rows:
        good = r["status"] == "ok"
        cells = [r["name"], r["status"], r["optimizer"], r["freeze"], r["allocator"], r["quantize"],
                 str(r["seq_parallel"])]
        formula = r.get("formula_bytes_per_param")
        if good:
            cells += [mib(r["peak_mean_bytes"]), mib(r["peak_max_bytes"]),
                      f"{r['imbalance_max_over_mean']:.4f}"]
            cells += [mib(r[f"peak_{c}_mean_bytes"]) for c in CATEGORIES]
            frag = r.get("fragmentation_at_peak_last_step_max")
            cells += [mib(r["host_peak_mean_bytes"]), mib(r.get("reserved_peak_max_bytes")) or "-",
                      "-" if frag is None else f"{frag:.4f}", f"{bytes_per_param(r):.3f}",
                      "-" if formula is None else f"{formula:.3f}",
                      f"{r['step_time_median_s'] * 1e3:.2f}",
                      f"{r['tokens_per_s']:.0f}", f"{r['final_loss']:.4f}",
                      mib(r.get("comm_bytes_per_step")), mib(r.get("all_to_all_bytes_per_step"))]
        else:
            cells += ["-"] * (len(head) - text_cols)
        if predict:  # a run that failed may still have been predicted
            step = r.get("predicted_step_s")
            cells = with_predicted(head, cells, [mib(r.get("predicted_peak_bytes")) or "-",
                                           mib(r.get("predicted_reserved_bytes")) or "-",
                                           "-" if step is None else f"{step * 1e3:.2f}"])
        lines.append("| " + " | ".join(md_escape(c) for c in cells) + " |")
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        lines += ["", "Failed configurations:", ""]
        for r in failed:
            detail = r["detail"].split("; by category:")[0]  # the breakdown is in the run's oom_rank<r>.txt
            lines.append(f"- `{r['name']}`: {r['status']}" + (f" — {md_escape(detail)}" if detail else "")
                         + f" (console output: `{os.path.join(r['run_dir'], 'console.log')}`)")
    if predict:
        lines += ["", prediction_markdown(rows, args)]
    lines += ["", "Plots: `ablation_memory.png` (stacked per-category peaks per configuration, dot = "
              "mean per-rank peak), `ablation_throughput.png` (tokens/s against mean peak)"
              + ("," if predict else "") + " and "
              "`ablation_bytes_per_param.png` (model state per parameter on each rank against the stage, "
              "beside the closed form)"
              + (" and `ablation_predicted.png` (predicted against measured step time, log-log, beside y = x)"
                 if predict else "") + ".", ""]
    lines += ["## Commands", "", "The sweep:", "", "```sh", invocation, "```", "",
              "Each configuration:", "", "```sh"]
    lines += [r["command"] for r in rows]
    lines += ["```", ""]
    if predict:
        lines += ["Each prediction:", "", "```sh"] + [r["plan_command"] for r in rows if "plan_command" in r]
        lines += ["```", ""]
    first = next((r for r in rows if r["mpirun"]), None)
    if first:
        lines += [f"zt-run ran each under mpirun; for `{first['name']}`:", "", "```sh", first["mpirun"], "```", ""]
    lines += [ "Plots (in the output directory):", "", "```sh"] + plot_cmds + ["```", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


# The Markdown's measured columns that --predict's three follow, in order.
PREDICTED_AFTER_MD = ["peak max", "reserved peak", "step ms"]


def with_predicted(head, cells, predicted):
    """A Markdown row (of the table whose header is head, without the
    predicted columns) with the three predicted cells put right after the
    measured ones they predict (PREDICTED_AFTER_MD)."""
    out = list(cells)
    for shift, (after, value) in enumerate(zip(PREDICTED_AFTER_MD, predicted)):
        out.insert(head.index(after) + 1 + shift, value)
    return out


def prediction_markdown(rows, args):
    """--predict's paragraph: what the predicted columns are, the agreement
    figures, and the configurations zt-plan failed on."""
    profiles = sorted({r["predicted_profile"] for r in rows if r.get("predicted_profile")})
    text = ("*predicted* columns are `zt-plan ... --world %d --json`'s for the same flags" % args.np
            + (f" with `--profile {args.predict}`" if args.predict else "")
            + " (rates: " + ("; ".join(profiles) if profiles else "-") + "): *predicted peak* is its `peak_bytes` "
            "(the allocated peak of the rank it plans, beside *peak max*), *predicted reserved* its "
            "`expected_reserved.bytes` (beside *reserved peak*), *predicted step ms* its `time.predicted_step_s` "
            "(beside the measured median *step ms*). Step time, predicted against measured: "
            + stats_text(prediction_stats(rows)) + ".")
    failed = [r for r in rows if "predict_detail" in r]
    if failed:
        text += "\n\nNo prediction:\n\n" + "\n".join(f"- `{r['name']}`: {md_escape(r['predict_detail'])}"
                                                     for r in failed)
    return text


def gp_string(text):
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_memory_plot(out, rows, subtitle, cap):
    dat = os.path.join(out, "ablation_memory.dat")
    with open(dat, "w") as f:
        f.write("# config " + " ".join(CATEGORIES) + " peak_mean_MiB status\n")
        for r in rows:
            if r["status"] == "ok":
                vals = [f"{r[f'peak_{c}_mean_bytes'] / MIB:.6f}" for c in CATEGORIES]
                peak = f"{r['peak_mean_bytes'] / MIB:.6f}"
            else:
                vals, peak = ["0"] * len(CATEGORIES), "?"
            f.write(" ".join([r["name"]] + vals + [peak, r["status"].replace(" ", "_")]) + "\n")
    tops = [sum(r[f"peak_{c}_mean_bytes"] for c in CATEGORIES) / MIB for r in rows if r["status"] == "ok"]
    ymax = max(tops + ([cap / MIB] if cap else [])) * 1.15 if tops or cap else 1.0
    # Names stand upright under their bars, about 26 pixels apart; the bottom
    # margin (in lines of about 16 pixels) holds the longest at about 7.5
    # pixels a character, and the picture grows by as much.
    name_lines = math.ceil(max([len(r["name"]) for r in rows] + [8]) * 7.5 / 16) + 2
    gp = [
        "# Stacked per-category peaks (mean over ranks) per configuration; data: ablation_memory.dat",
        "set terminal pngcairo size %d,%d enhanced font 'Sans,11'"
        % (max(1400, 300 + 26 * len(rows)), 650 + 16 * name_lines),
        "set output 'ablation_memory.png'",
        f"set title {gp_string('Per-rank device memory: bars = each category peak (mean over ranks), stacked; dot = actual peak (mean over ranks)')}"
        f" . \"\\n\" . {gp_string(subtitle)} noenhanced",
        "set datafile missing '?'",
        "set style data histograms",
        "set style histogram rowstacked",
        "set style fill solid 0.9 border rgb '#404040'",
        "set boxwidth 0.75",
        "set ylabel 'MiB'",
        f"set yrange [0:{ymax:.6g}]",
        "set xrange [-0.6:%g]" % (len(rows) - 0.4),
        "set xtics rotate by 90 right noenhanced",
        "set grid ytics",
        "set key outside right top vertical noenhanced",
        f"set bmargin {name_lines}",
    ]
    for i, r in enumerate(rows):
        if r["status"] != "ok":
            gp.append(f"set label {gp_string(r['status'])} at {i},{ymax * 0.02:.6g} rotate by 90 left "
                      "front textcolor rgb '#c00000' noenhanced")
    if cap:
        gp.append(f"set arrow from graph 0, first {cap / MIB:.6g} to graph 1, first {cap / MIB:.6g} "
                  "nohead dashtype 2 linewidth 2 linecolor rgb '#c00000' front")
        gp.append("set style textbox opaque noborder")
        gp.append(f"set label {gp_string('--mem-limit (caps reserved bytes)')} at graph 0.99, first "
                  f"{cap / MIB:.6g} right offset 0,0.8 textcolor rgb '#c00000' front boxed noenhanced")
    colours = " ".join(CATEGORY_COLOURS)
    gp += [
        f"colours = {gp_string(colours)}",
        f"names = {gp_string(' '.join(CATEGORIES))}",
        "plot for [i=2:%d] 'ablation_memory.dat' using i:xtic(1) title word(names, i-1) "
        "linecolor rgb word(colours, i-1), \\" % (len(CATEGORIES) + 1),
        "     'ablation_memory.dat' using 0:%d with points pointtype 7 pointsize 1.3 linecolor rgb 'black' "
        "title 'peak (mean over ranks)'" % (len(CATEGORIES) + 2),
    ]
    with open(os.path.join(out, "ablation_memory.gp"), "w") as f:
        f.write("\n".join(gp) + "\n")
    return "ablation_memory.gp"


# Throughput plot geometry (pixels), used to keep labels apart: the terminal
# size for up to THR_POINTS points (the area grows in proportion beyond), the
# plot area fixed by the margins below, and the label font's (',9')
# character width and line height, with some slack.
THR_SIZE, THR_POINTS = (1300, 900), 32
THR_AREA = (0.08, 0.84, 0.10, 0.88)  # left, right, bottom, top as fractions of the screen
LABEL_CHAR_PX, LABEL_LINE_PX, MARKER_PX = 7.0, 15.0, 8.0


def throughput_size(points):
    scale = max(1.0, (points / THR_POINTS) ** 0.5)
    return round(THR_SIZE[0] * scale), round(THR_SIZE[1] * scale)


def place_labels(points, names, xlim, ylim, size=THR_SIZE):
    """Where to put each point's label so that labels overlap neither each
    other nor other points: beside the point (right, else left), else moved
    up or down by whole lines (then a leader line joins them). Returns per
    point (label x, label y, 'left'|'right' alignment, moved?) in data units."""
    (x0, x1), (y0, y1) = xlim, ylim
    width = (THR_AREA[1] - THR_AREA[0]) * size[0]
    height = (THR_AREA[3] - THR_AREA[2]) * size[1]
    px = [((x - x0) / (x1 - x0) * width, (y - y0) / (y1 - y0) * height) for x, y in points]
    markers = [(a - MARKER_PX, b - MARKER_PX, a + MARKER_PX, b + MARKER_PX) for a, b in px]
    gap = MARKER_PX + 3.0
    placed, result = [], [None] * len(points)

    def overlap(box, own):
        """Area the box covers of other points' markers and placed labels;
        None when it leaves the plot area."""
        xa, ya, xb, yb = box
        if xa < 0 or xb > width or ya < 0 or yb > height:
            return None
        others = [m for k, m in enumerate(markers) if k != own] + placed
        return sum(max(0.0, min(xb, mb) - max(xa, ma)) * max(0.0, min(yb, nb) - max(ya, na))
                   for ma, na, mb, nb in others)

    shifts = [0] + [k * sign for k in range(1, 13) for sign in (1, -1)]
    for i in sorted(range(len(points)), key=lambda k: (points[k][0], points[k][1])):
        a, b = px[i]
        w = len(names[i]) * LABEL_CHAR_PX
        choice, least = None, None  # the first clear place; else the least covered one
        for k in shifts:
            cy = b + k * LABEL_LINE_PX
            for side in ("left", "right"):  # gnuplot's alignment: 'left' = text right of the point
                xa = a + gap if side == "left" else a - gap - w
                box = (xa, cy - LABEL_LINE_PX / 2, xa + w, cy + LABEL_LINE_PX / 2)
                covered = overlap(box, i)
                if covered == 0:
                    choice = (box, side, k)
                    break
                if covered is not None and (least is None or covered < least[0]):
                    least = (covered, (box, side, k))
            if choice:
                break
        if choice is None:
            choice = least[1] if least else \
                ((a + gap, b - LABEL_LINE_PX / 2, a + gap + w, b + LABEL_LINE_PX / 2), "left", 0)
        box, side, k = choice
        placed.append(box)
        ax = box[0] if side == "left" else box[2]
        ay = (box[1] + box[3]) / 2
        result[i] = (x0 + ax / width * (x1 - x0), y0 + ay / height * (y1 - y0), side, k != 0)
    return result


def scatter_head(size, png, title, xlabel, ylabel, grid, unplotted, why):
    """The gnuplot lines both scatter plots open with: terminal, margins,
    title, axes, key, and a red note naming the configurations not shown."""
    gp = ["set terminal pngcairo size %d,%d enhanced font 'Sans,11'" % size, f"set output '{png}'",
          "set lmargin at screen %g\nset rmargin at screen %g\nset bmargin at screen %g\nset tmargin at screen %g"
          % THR_AREA, title, f"set xlabel '{xlabel}'", f"set ylabel '{ylabel}'", grid,
          "set key outside right top noenhanced"]
    if unplotted:
        note = f"not shown ({why}): " + ", ".join(unplotted)
        gp.append(f"set label {gp_string(note)} at screen 0.01, screen 0.02 left textcolor rgb '#c00000' "
                  "noenhanced font ',9'")
    return gp


def write_throughput_plot(out, rows, subtitle):
    ok = [r for r in rows if r["status"] == "ok"]
    failed = [r["name"] for r in rows if r["status"] != "ok"]
    size = throughput_size(len(ok))
    gp = [
        "# tokens/s against the mean per-rank peak, one labelled point per configuration;",
        "# data: ablation_throughput.dat (label_x/label_y/align: where the label goes,",
        "# kept clear of other labels and points; moved = 1: joined to its point by a line)",
    ] + scatter_head(size, "ablation_throughput.png",
                     f"set title {gp_string('Throughput against memory')} . \"\\n\" . {gp_string(subtitle)} noenhanced",
                     "peak device memory per rank, mean over ranks (MiB)", "tokens/s (all ranks)", "set grid",
                     failed, "failed")
    with open(os.path.join(out, "ablation_throughput.dat"), "w") as f:
        f.write("# config peak_mean_MiB tokens_per_s stage label_x label_y align moved\n")
        if ok:
            xs = [r["peak_mean_bytes"] / MIB for r in ok]
            ys = [r["tokens_per_s"] for r in ok]
            xspan = (max(xs) - min(xs)) or max(xs) or 1.0
            yspan = (max(ys) - min(ys)) or max(ys) or 1.0
            xlim = (max(0.0, min(xs) - 0.15 * xspan), max(xs) + 0.3 * xspan)  # room for labels
            ylim = (max(0.0, min(ys) - 0.12 * yspan), max(ys) + 0.12 * yspan)
            labels = place_labels(list(zip(xs, ys)), [r["name"] for r in ok], xlim, ylim, size)
            for r, x, y, (lx, ly, align, moved) in zip(ok, xs, ys, labels):
                f.write(f"{r['name']} {x:.6f} {y:.6g} {r['stage']} {lx:.6g} {ly:.6g} {align} {int(moved)}\n")
    if ok:
        colours = " ".join(STAGE_COLOURS)
        gp += [
            f"set xrange [{xlim[0]:.6g}:{xlim[1]:.6g}]",
            f"set yrange [{ylim[0]:.6g}:{ylim[1]:.6g}]",
            f"colours = {gp_string(colours)}",
            "plot 'ablation_throughput.dat' using 2:($8 != 0 ? $3 : NaN):($5-$2):($6-$3) with vectors nohead "
            "linecolor rgb '#a0a0a0' notitle, \\",
            "     for [s=0:3] 'ablation_throughput.dat' using ($4 == s ? $2 : NaN):3 with points "
            "pointtype 7 pointsize 1.6 linecolor rgb word(colours, s+1) title sprintf('stage %d', s), \\",
            "     'ablation_throughput.dat' using 5:6:(strcol(7) eq 'left' ? strcol(1) : '') with labels left "
            "font ',9' noenhanced notitle, \\",
            "     'ablation_throughput.dat' using 5:6:(strcol(7) eq 'right' ? strcol(1) : '') with labels right "
            "font ',9' noenhanced notitle",
        ]
    else:
        gp += ["set xrange [0:1]", "set yrange [0:1]",
               "set label 'no configuration ran to the end' at 0.5,0.5 center font ',16'",
               "plot NaN notitle"]
    with open(os.path.join(out, "ablation_throughput.gp"), "w") as f:
        f.write("\n".join(gp) + "\n")
    return "ablation_throughput.gp"


def write_predicted_plot(out, rows, subtitle):
    """--predict: zt-plan's predicted step time against the measured one, one
    labelled point per configuration that ran and was predicted, coloured by
    stage, on log-log axes with the same range on both, beside y = x."""
    pairs = predicted_pairs(rows)
    size = throughput_size(len(pairs))
    unplotted = [r["name"] for r in rows if r["status"] != "ok" or r.get("predicted_step_s") is None]
    gp = [
        "# zt-plan's predicted step time against the measured one, one labelled point per configuration;",
        "# data: ablation_predicted.dat (label_x/label_y/align: where the label goes, kept clear of",
        "# other labels and points; moved = 1: joined to its point by a line)",
    ] + scatter_head(size, "ablation_predicted.png",
                     f"set title {gp_string('Predicted against measured step time')} . \"\\n\" . {gp_string(subtitle)} "
                     f". \"\\n\" . {gp_string(stats_text(prediction_stats(rows)))} noenhanced",
                     "measured step time, median over steps (ms)", "predicted step time, zt-plan (ms)",
                     "set logscale xy\nset grid xtics ytics mxtics mytics", unplotted, "failed or not predicted")
    with open(os.path.join(out, "ablation_predicted.dat"), "w") as f:
        f.write("# config measured_ms predicted_ms stage label_x label_y align moved\n")
        if pairs:
            values = [v * 1e3 for _, p, m in pairs for v in (p, m)]
            lo, hi = min(values) / 1.25, max(values) * 1.6  # room for labels on the right
            span = (math.log10(lo), math.log10(hi))
            # Labels are placed on the logarithms, which the axes draw evenly.
            points = [(math.log10(m * 1e3), math.log10(p * 1e3)) for _, p, m in pairs]
            labels = place_labels(points, [r["name"] for r, _, _ in pairs], span, span, size)
            for (r, p, m), (lx, ly, align, moved) in zip(pairs, labels):
                f.write(f"{r['name']} {m * 1e3:.6g} {p * 1e3:.6g} {r['stage']} {10 ** lx:.6g} {10 ** ly:.6g} "
                        f"{align} {int(moved)}\n")
    if pairs:
        colours = " ".join(STAGE_COLOURS)
        gp += [
            f"set xrange [{lo:.6g}:{hi:.6g}]",
            f"set yrange [{lo:.6g}:{hi:.6g}]",
            f"set xtics {log_tics(lo, hi)}",
            f"set ytics {log_tics(lo, hi)}",
            f"colours = {gp_string(colours)}",
            "plot x with lines dashtype 2 linewidth 2 linecolor rgb '#404040' title 'y = x', \\",
            "     'ablation_predicted.dat' using 2:($8 != 0 ? $3 : NaN):($5-$2):($6-$3) with vectors nohead "
            "linecolor rgb '#a0a0a0' notitle, \\",
            "     for [s=0:3] 'ablation_predicted.dat' using ($4 == s ? $2 : NaN):3 with points "
            "pointtype 7 pointsize 1.6 linecolor rgb word(colours, s+1) title sprintf('stage %d', s), \\",
            "     'ablation_predicted.dat' using 5:6:(strcol(7) eq 'left' ? strcol(1) : '') with labels left "
            "font ',9' noenhanced notitle, \\",
            "     'ablation_predicted.dat' using 5:6:(strcol(7) eq 'right' ? strcol(1) : '') with labels right "
            "font ',9' noenhanced notitle",
        ]
    else:
        gp += ["unset logscale", "set xrange [0:1]", "set yrange [0:1]",
               "set label 'no configuration both ran and was predicted' at 0.5,0.5 center font ',16'",
               "plot NaN notitle"]
    with open(os.path.join(out, "ablation_predicted.gp"), "w") as f:
        f.write("\n".join(gp) + "\n")
    return "ablation_predicted.gp"


def paper_formula_text(stage):
    """The ZeRO paper's bytes per parameter for mixed-precision Adam, as written there."""
    return ["16", "4 + 12/N", "2 + 14/N", "16/N"][stage]


def bytes_per_param_series(rows):
    """The measured series of the bytes-per-parameter plot: rows without
    offload (with it, master and optimizer state are on the host), grouped by
    (dtype, optimizer, freeze); per stage the first configuration that ran
    (recompute, the allocator, quantized communication and sequence
    parallelism do not change model state). Returns [(key, {stage: row})]."""
    series = {}
    for r in rows:
        if r["offload"] == "none" and r["status"] == "ok":
            series.setdefault((r["dtype"], r["optimizer"], r["freeze"]), {}).setdefault(r["stage"], r)
    return list(series.items())


def write_bytes_per_param_plot(out, rows, world_size, subtitle):
    """Model state per parameter on each rank against the stage: one point per
    rank, beside the ZeRO paper's formula for mixed-precision Adam and, for
    the other measured (dtype, optimizer) pairs with a known state size, the
    same closed form with their sizes. Data blocks of
    ablation_bytes_per_param.dat: 0, the paper's formula; then one per
    further formula; then one per measured series."""
    series = bytes_per_param_series(rows)
    formulas = [("ZeRO paper, mixed-precision Adam: 16, 4 + 12/N, 2 + 14/N, 16/N", "bf16", "adamw")]
    for (dtype, optimizer, freeze), _ in series:
        f = model_state_formula(0, world_size, dtype, optimizer)
        if f is None or freeze != "none" or any(d == dtype and o == optimizer for _, d, o in formulas):
            continue
        if [model_state_formula(s, world_size, dtype, optimizer) for s in STAGES] == \
                [model_state_formula(s, world_size, "bf16", "adamw") for s in STAGES]:
            continue  # fp16 AdamW: the paper's own line
        formulas.append((f"closed form, {dtype} {optimizer}", dtype, optimizer))
    colours = {key: SERIES_COLOURS[i % len(SERIES_COLOURS)] for i, (key, _) in enumerate(series)}
    blocks, plots = [], []
    for i, (title, dtype, optimizer) in enumerate(formulas):
        lines = [f"# block {len(blocks)}: {title} (N = {world_size}); stage bytes_per_param"]
        lines += [f"{s} {model_state_formula(s, world_size, dtype, optimizer):.6g}" for s in STAGES]
        colour = "black" if i == 0 else colours[(dtype, optimizer, "none")]
        plots.append(f"'ablation_bytes_per_param.dat' index {len(blocks)} using 1:2 with linespoints "
                     f"dashtype {1 if i == 0 else 2} linewidth 2 pointtype 6 pointsize 2.2 "
                     f"linecolor rgb '{colour}' title {gp_string(title)}")
        blocks.append(lines)
    width = min(0.12, 0.45 / max(1, len(series)))
    for i, ((dtype, optimizer, freeze), by_stage) in enumerate(series):
        dx = 0.16 + i * width  # right of the formula markers, which sit on the stage
        title = f"measured, {dtype} {optimizer}" + ("" if freeze == "none" else f", --freeze {freeze}")
        lines = [f"# block {len(blocks)}: {title}, one point per rank; stage rank bytes_per_param x"]
        for stage in sorted(by_stage):
            r = by_stage[stage]
            for rank, b in enumerate(r["model_state_by_rank"]):
                x = stage + dx + (rank - (world_size - 1) / 2) * min(0.025, 0.1 / world_size)
                lines.append(f"{stage} {rank} {b / r['model_params']:.6f} {x:.4f}")
        plots.append(f"'ablation_bytes_per_param.dat' index {len(blocks)} using 4:3 with points pointtype 7 "
                     f"pointsize 1.2 linecolor rgb '{colours[(dtype, optimizer, freeze)]}' "
                     f"title {gp_string(title)}")
        blocks.append(lines)
    with open(os.path.join(out, "ablation_bytes_per_param.dat"), "w") as f:
        f.write("\n\n\n".join("\n".join(b) for b in blocks) + "\n")
    tops = [model_state_formula(0, world_size, d, o) for _, d, o in formulas]
    tops += [b / r["model_params"] for _, by_stage in series for r in by_stage.values()
             for b in r["model_state_by_rank"]]
    ymax = max(tops) * 1.12
    gp = [
        "# Model state per parameter on each rank against the stage; data: ablation_bytes_per_param.dat",
        "set terminal pngcairo size 1100,700 enhanced font 'Sans,11'",
        "set output 'ablation_bytes_per_param.png'",
        f"set title {gp_string('Model state per parameter per rank: (params + grads + master_params + optimizer peaks) / parameters')}"
        f" . \"\\n\" . {gp_string(subtitle)} noenhanced",
        "set xlabel 'ZeRO stage'",
        f"set ylabel {gp_string(f'bytes per parameter on each rank (N = {world_size} ranks)')}",
        "set xrange [-0.5:3.9]",
        f"set yrange [0:{ymax:.6g}]",
        "set xtics ('0' 0, '1' 1, '2' 2, '3' 3)",
        "set grid ytics",
        "set key top right noenhanced",
    ]
    for s in STAGES:
        v = model_state_formula(s, world_size, "bf16", "adamw")
        text = paper_formula_text(s) + ("" if s == 0 else f" = {v:.4g}")
        gp.append(f"set label {gp_string(text)} at {s},{v:.6g} left offset 1,1.3 font ',10' noenhanced")
    if not series:
        gp.append("set label 'no configuration without offload ran to the end' at graph 0.5, graph 0.5 "
                  "center font ',14' textcolor rgb '#c00000'")
    gp.append("plot " + ", \\\n     ".join(plots))
    with open(os.path.join(out, "ablation_bytes_per_param.gp"), "w") as f:
        f.write("\n".join(gp) + "\n")
    return "ablation_bytes_per_param.gp"


def run_gnuplot(gnuplot, out, script):
    try:
        p = subprocess.run([gnuplot, script], cwd=out, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ToolError(f"gnuplot failed on {os.path.join(out, script)}: {e}")
    png = os.path.join(out, script[:-3] + ".png")
    if p.returncode != 0 or not os.path.exists(png) or os.path.getsize(png) == 0:
        raise ToolError(f"gnuplot failed on {os.path.join(out, script)} (exit {p.returncode}):\n{p.stderr}")


def main(argv):
    args = parse_args(argv)
    out = os.path.abspath(args.out)
    invocation = shlex.join([sys.executable, os.path.abspath(__file__)] + argv)
    cap = parse_size(flag_value(args.extra, "--mem-limit") or "") or None
    configs = args.configs
    # On stderr: a dry run's stdout is one `NAME: COMMAND` line per configuration.
    for P, why in args.seq_parallels_left_out:
        print(f"ablate: --seq-parallel {P} {why}: left out of the sweep", file=sys.stderr)
    if args.dry_run:
        for config in configs:
            name, _, cmd = config_command(args, out, config)
            print(f"{name}: {shlex.join(cmd)}")
            if args.predict is not None:
                print(f"{name} (zt-plan): {shlex.join(plan_command(args, out, config))}")
        return 0
    try:
        os.makedirs(os.path.join(out, "runs"), exist_ok=True)
        print(f"ablate: {len(configs)} configurations of {args.model}, np {args.np}, {args.steps} steps, "
              f"zt-train {args.zt_train}"
              + (f", preset {args.preset}" if args.preset else "")
              + (f", extra flags: {shlex.join(args.extra)}" if args.extra else "")
              + (f", predicted by {args.zt_plan}" + (f" --profile {args.predict}" if args.predict else "")
                 if args.predict is not None else ""), flush=True)
        rows = [run_config(args, out, c, i + 1, len(configs)) for i, c in enumerate(configs)]

        subtitle = (f"{args.model}, np {args.np}, {args.steps} steps"
                    + (f", preset {args.preset}" if args.preset else "")
                    + (f", {shlex.join(args.extra)}" if args.extra else f", default {args.model}"))
        scripts = [write_memory_plot(out, rows, subtitle, cap), write_throughput_plot(out, rows, subtitle),
                   write_bytes_per_param_plot(out, rows, args.np, subtitle)]
        if args.predict is not None:
            scripts.append(write_predicted_plot(out, rows, subtitle))
        plot_cmds = [f"cd {shlex.quote(out)}"] + [f"{args.gnuplot} {s}" for s in scripts]
        write_csv(os.path.join(out, "ablation.csv"), rows, args.predict is not None)
        write_markdown(os.path.join(out, "ablation.md"), rows, args, invocation, plot_cmds, cap)
        for s in scripts:
            run_gnuplot(args.gnuplot, out, s)
    except ToolError as e:
        print(f"ablate: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"ablate: error: {e}", file=sys.stderr)
        return 1

    ok = sum(r["status"] == "ok" for r in rows)
    print(f"ablate: {ok} of {len(rows)} configurations ok, {len(rows) - ok} failed")
    if args.predict is not None:
        unpredicted = sum("predict_detail" in r for r in rows)
        print("ablate: step time, predicted against measured: " + stats_text(prediction_stats(rows))
              + (f"; zt-plan failed on {unpredicted} configuration(s)" if unpredicted else ""))
    if ok == 0:
        print("ablate: warning: no configuration ran to the end; see the console.log of each run under "
              + os.path.join(out, "runs"), file=sys.stderr)
    written = [("table (CSV)", "ablation.csv"), ("table (Markdown)", "ablation.md"),
               ("memory plot", "ablation_memory.png"), ("throughput plot", "ablation_throughput.png"),
               ("bytes/param plot", "ablation_bytes_per_param.png")]
    if args.predict is not None:
        written.append(("predicted plot", "ablation_predicted.png"))
    for what, f in written + [("run logs", "runs")]:
        print(f"  {what:<17s} {os.path.join(out, f)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
