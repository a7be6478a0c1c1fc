#!/usr/bin/env python3
"""End-to-end tests of the zt-train command line, run by CTest.

usage: zt_cli_test.py CASE ZT_TRAIN [WORKDIR]

Each case runs the real binary and checks exit codes, messages and the files it
writes. Losses are compared as the exact text/bits JSON carries (17 digits).
"""
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

SMALL = ["--layers", "1", "--d-model", "16", "--heads", "2", "--seq-len", "16",
         "--micro-batch", "2", "--vocab", "16", "--threads", "1", "--quiet"]


def run(zt, args, expect_rc=None, timeout=300):
    p = subprocess.run([zt] + args, capture_output=True, text=True, timeout=timeout)
    if expect_rc is not None and p.returncode != expect_rc:
        sys.exit(f"FAIL: {' '.join(args)}: exit {p.returncode}, expected {expect_rc}\n"
                 f"stdout:\n{p.stdout[-2000:]}\nstderr:\n{p.stderr[-2000:]}")
    return p


def summary(d):
    with open(os.path.join(d, "summary.json")) as f:
        return json.load(f)


def expect_error(zt, args, rc, *needles):
    p = run(zt, args, expect_rc=rc)
    for n in needles:
        if n not in p.stderr:
            sys.exit(f"FAIL: {' '.join(args)}: stderr lacks {n!r}:\n{p.stderr}")
    if "Sanitizer" in p.stderr or "runtime error" in p.stderr:
        sys.exit(f"FAIL: {' '.join(args)}: sanitizer report:\n{p.stderr}")
    print(f"ok: {' '.join(args)} -> exit {rc}")


def case_bad_input(zt, work):
    cfg = lambda name, text: (open(os.path.join(work, name), "w").write(text), os.path.join(work, name))[1]
    expect_error(zt, ["--no-such-flag"], 2, "unknown option", "--no-such-flag")
    expect_error(zt, ["--layers", "two"], 2, "--layers", "not an integer")
    expect_error(zt, ["--layers", "-1"], 2, "--layers", "out of range")
    expect_error(zt, ["--lr", "abc"], 2, "--lr", "not a number")
    expect_error(zt, ["--dtype", "fp8"], 2, "--dtype", "fp32|bf16")
    expect_error(zt, ["--steps"], 2, "--steps", "needs a value")
    expect_error(zt, ["--d-model", "30", "--heads", "4"], 2, "divisible")
    expect_error(zt, ["--mem-limit", "12XB"], 2, "--mem-limit", "unknown unit")
    expect_error(zt, ["--stage", "7"], 2, "--stage", "out of range")
    expect_error(zt, ["--leak-window", "0"], 2, "--leak-window", "out of range")
    expect_error(zt, ["--leak-min-rate", "-1"], 2, "--leak-min-rate", "is not a size")
    expect_error(zt, ["--leak-min-rate", "64QB"], 2, "--leak-min-rate", "unknown unit")
    expect_error(zt, ["--offload", "gpu"], 2, "--offload", "none|cpu|nvme")
    expect_error(zt, ["--recompute", "some"], 2, "--recompute", "none, full, selective or every-K")
    expect_error(zt, ["--recompute", "every-0"], 2, "--recompute", "'every-0' is not none, full, selective or every-K")
    expect_error(zt, ["--bucket-size", "0"], 2, "--bucket-size", "out of range")
    expect_error(zt, ["--config", cfg("ds_bad.json", '{"zero_optimization": {"stage": 3, "offload_param": '
                                      '{"device": "disk"}}}')], 2,
                 '"zero_optimization.offload_param.device"', 'not "cpu", "nvme" or "none"')
    expect_error(zt, ["--config", cfg("ds_nvme.json", '{"zero_optimization": {"stage": 3, "offload_optimizer": '
                                      '{"device": "nvme"}}}')], 2, "--offload nvme needs --nvme-path")
    expect_error(zt, ["--config", cfg("ds_rs.json", '{"zero_optimization": {"reduce_scatter": false}}')], 2,
                 '"zero_optimization.reduce_scatter"', "false is not supported")
    expect_error(zt, ["--config", cfg("ds_bf16.json", '{"bf16": {"enabled": "yes"}}')], 2, '"bf16.enabled"', "boolean")
    expect_error(zt, ["--config", cfg("ds_batch.json", '{"train_batch_size": 32}')], 2, "train_batch_size 32 is not micro-batch 8")
    expect_error(zt, ["--device", "cuda"], 2, "--device cuda")
    expect_error(zt, ["--data", os.path.join(work, "missing.txt")], 1, "cannot open")
    expect_error(zt, ["--config", cfg("syntax.json", '{"layers": 2,,}')], 2, "syntax.json", "line 1")
    expect_error(zt, ["--config", cfg("unknown.json", '{"layerz": 2}')], 2, '"layerz"', "not a known option")
    expect_error(zt, ["--config", cfg("type.json", '{"layers": "2"}')], 2, '"layers"', "must be an integer")
    expect_error(zt, ["--config", cfg("range.json", '{"heads": 0}')], 2, '"heads"', "out of range")
    expect_error(zt, ["--config", cfg("array.json", '[1, 2]')], 2, "top level must be a JSON object")
    expect_error(zt, ["--config", os.path.join(work, "nope.json")], 2, "nope.json")
    # A cap far below the model's state fails in init and says so; under
    # the simple allocator (a block per request) the first blocks fit and
    # the report lists them.
    logdir = os.path.join(work, "oom")
    expect_error(zt, SMALL + ["--allocator", "simple", "--mem-limit", "4KiB", "--log-dir", logdir], 3,
                 "out of device memory in phase 'init'", "requested", "params=", "out-of-memory report")
    if not os.path.exists(os.path.join(logdir, "oom_rank0.txt")):
        sys.exit("FAIL: no oom_rank0.txt written")
    # A cap between the persistent state and the step's needs fails in forward.
    # This model holds 64 KiB of state (init), needs 107 KiB in forward and
    # 135 KiB in backward (see its summary.json): caps in between fail there
    # under simple, whose smallest cap is its allocated peak (caching's
    # first 2 MiB segment would not fit these caps at all).
    simple = SMALL + ["--allocator", "simple"]
    expect_error(zt, simple + ["--mem-limit", "90KiB"], 3, "phase 'forward'", "activations")
    expect_error(zt, simple + ["--mem-limit", "125KiB"], 3, "phase 'backward'", "workspace")
    report = open(os.path.join(logdir, "oom_rank0.txt")).read()
    if "largest live allocations" not in report or "params" not in report:
        sys.exit(f"FAIL: oom report lacks the live allocations:\n{report}")


def case_config_precedence(zt, work):
    path = os.path.join(work, "c.json")
    with open(path, "w") as f:
        json.dump({"steps": 3, "layers": 1, "d_model": 16, "heads": 2, "seq_len": 16, "vocab": 16,
                   "micro_batch": 2, "threads": 1, "mem_limit": "1GiB", "dtype": "bf16"}, f)
    d1 = os.path.join(work, "a")
    run(zt, ["--config", path, "--steps", "2", "--log-dir", d1, "--quiet"], expect_rc=0)
    s = summary(d1)
    assert s["steps"] == 2 and len(s["losses"]) == 2, s          # the flag wins
    assert s["dtype"] == "bf16", s                                 # the file applies
    print("ok: flags override --config, config keys apply")


def case_deepspeed_config(zt, work):
    """DeepSpeed keys in DeepSpeed's units: reduce_bucket_size counts elements
    (x 4 bytes of fp32 gradients), numbers in any notation when whole, "auto"
    from the flags and the model, optimizer and offload_optimizer mapped,
    train_batch_size checked, keys without effect named in one warning."""
    path = os.path.join(work, "ds.json")
    with open(path, "w") as f:
        json.dump({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "gradient_clipping": 0.5,
                   "train_batch_size": 4, "steps_per_print": 10, "wall_clock_breakdown": False,
                   "bf16": {"enabled": True},
                   "optimizer": {"type": "AdamW", "params": {"lr": 0.002, "betas": [0.85, 0.97], "eps": "auto",
                                                             "weight_decay": 0.01}},
                   "zero_optimization": {"stage": 3, "reduce_bucket_size": 1e5, "overlap_comm": True,
                                         "stage3_prefetch_bucket_size": 1, "reduce_scatter": True,
                                         "contiguous_gradients": True, "round_robin_gradients": True,
                                         "offload_optimizer": {"device": "cpu", "pin_memory": True}},
                   "layers": 1, "d_model": 16, "heads": 2, "seq_len": 16, "vocab": 16, "threads": 1}, f)
    d = os.path.join(work, "ds")
    p = run(zt, ["--config", path, "--steps", "2", "--log-dir", d], expect_rc=0)
    s = summary(d)
    assert s["stage"] == 3 and s["dtype"] == "bf16" and s["offload"] == "cpu", s
    for needle in ["| micro-batch          | 2 ", "| grad-accum           | 2 ", "| grad-clip            | 0.5 ",
                   "| bucket-size          | 400000 ", "| lr                   | 0.002 ", "| beta1                | 0.85 ",
                   "| beta2                | 0.97 ", "| eps                  | 1e-08 ", "| weight-decay         | 0.01 "]:
        assert needle in p.stdout, (needle, p.stdout)
    assert "accepted without effect in zerotrain: zero_optimization.round_robin_gradients" in p.stderr, p.stderr
    for needle in ["| print-every          | 10 ", "| wall-clock-breakdown | 0 "]:
        assert needle in p.stdout, (needle, p.stdout)
    # "auto" buckets as the Hugging Face integration means them: d_model^2 elements
    auto = os.path.join(work, "auto.json")
    with open(auto, "w") as f:
        json.dump({"zero_optimization": {"stage": 2, "reduce_bucket_size": "auto",
                                         "stage3_prefetch_bucket_size": "auto"},
                   "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
                   "train_batch_size": "auto", "d_model": 16, "heads": 2, "layers": 1, "vocab": 16,
                   "seq_len": 16}, f)
    p = run(zt, ["--config", auto, "--steps", "1", "--micro-batch", "3"], expect_rc=0)
    for needle in ["| bucket-size          | 1024 ", "| prefetch-bucket-size | 230 ", "| micro-batch          | 3 "]:
        assert needle in p.stdout, (needle, p.stdout)
    with open(path, "w") as f:
        json.dump({"train_batch_size": 5, "train_micro_batch_size_per_gpu": 2}, f)
    expect_error(zt, ["--config", path], 2, "train_batch_size 5 is not micro-batch 2 x grad-accum 1 x 1 rank(s) = 2")
    # reduce_bucket_size counts elements: 3e4 of them is --bucket-size 120000 (one bucket for this
    # model's 28032 gradient elements), not 30000 bytes (three buckets)
    calls = []
    with open(path, "w") as f:
        json.dump({"zero_optimization": {"stage": 2, "reduce_bucket_size": 3e4}}, f)
    small = ["--layers", "2", "--d-model", "32", "--heads", "4", "--seq-len", "16", "--vocab", "32", "--micro-batch",
             "2", "--threads", "1", "--quiet", "--steps", "1"]
    for i, extra in enumerate((["--config", path], ["--stage", "2", "--bucket-size", "120000"],
                               ["--stage", "2", "--bucket-size", "30000"])):
        d = os.path.join(work, f"bucket{i}")
        run(zt, small + extra + ["--log-dir", d], expect_rc=0)
        with open(os.path.join(d, "rank0.jsonl")) as f:
            calls.append([json.loads(line)["comm"]["reduce_scatter"]["calls"] for line in f])
    assert calls[0] == calls[1] == [1] and calls[2] == [3], calls
    # DeepSpeed's WarmupLR as DeepSpeed steps it: after each optimizer step, from iteration -1
    with open(path, "w") as f:
        json.dump({"scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 1e-4, "warmup_max_lr": 3e-3,
                                                                "warmup_num_steps": 10}},
                   "optimizer": {"type": "AdamW", "params": {"lr": 5e-4}}}, f)
    d = os.path.join(work, "warmup")
    p = run(zt, small + ["--config", path, "--steps", "4", "--log-dir", d], expect_rc=0)
    with open(os.path.join(d, "rank0.jsonl")) as f:
        lrs = [json.loads(line)["lr"] for line in f]
    want = [1e-4, 1e-4] + [1e-4 + 2.9e-3 * math.log(k + 1) / math.log(10) for k in (1, 2)]
    assert all(abs(a - b) <= 1e-7 * b for a, b in zip(lrs, want)), (lrs, want)
    assert "optimizer.params.lr" in p.stderr, p.stderr  # the scheduler's warmup_max_lr is the peak
    # 5e7 elements, the tutorials' value, is --bucket-size 200000000: the same buckets and bytes
    sent = []
    with open(path, "w") as f:
        json.dump({"zero_optimization": {"stage": 2, "reduce_bucket_size": 5e7}}, f)
    for i, extra in enumerate((["--config", path], ["--stage", "2", "--bucket-size", "200000000"])):
        d = os.path.join(work, f"big{i}")
        p = run(zt, small + extra + ["--log-dir", d, "--quiet", "0"], expect_rc=0)
        assert "| bucket-size          | 200000000 " in p.stdout, p.stdout
        with open(os.path.join(d, "rank0.jsonl")) as f:
            sent.append([{k: v for k, v in json.loads(line)["comm"]["reduce_scatter"].items() if k in ("calls", "bytes")}
                         for line in f])
    assert sent[0] == sent[1], sent
    # fp16 block and communication_data_type: the loss scaler's knobs under DeepSpeed's names
    with open(path, "w") as f:
        json.dump({"fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 8, "loss_scale_window": 3,
                            "hysteresis": 1, "min_loss_scale": 0.5, "consecutive_hysteresis": False},
                   "bf16": {"enabled": False}, "communication_data_type": "bf16"}, f)
    d = os.path.join(work, "fp16")
    p = run(zt, small + ["--config", path, "--steps", "4", "--log-dir", d, "--quiet", "0"], expect_rc=0)
    for needle in ["| dtype                | fp16 ", "| reduce-dtype         | bf16 ", "| initial-scale-power  | 8 ",
                   "| loss-scale-window    | 3 ", "| hysteresis           | 1 ", "| min-loss-scale       | 0.5 "]:
        assert needle in p.stdout, (needle, p.stdout)
    with open(os.path.join(d, "rank0.jsonl")) as f:
        scales = [json.loads(line)["loss_scale"] for line in f]
    assert scales == [256.0, 256.0, 256.0, 512.0], scales  # 2^8, doubled after 3 clean steps
    print("ok: DeepSpeed keys map onto zerotrain options in DeepSpeed's units")


def case_deepspeed_problems(zt, work):
    """Five problems in one config: one message naming all five, exit 2."""
    path = os.path.join(work, "five.json")
    with open(path, "w") as f:
        json.dump({"no_such_key": 1, "optimizer": {"type": "Lamb"},
                   "zero_optimization": {"stage": 7, "reduce_bucket_size": 1.5, "offload_param": {"swap_folder": 4}}}, f)
    p = run(zt, ["--config", path], expect_rc=2)
    for needle in ["5 problems", '"no_such_key" is not a known option', '"optimizer.type" is not Adam, AdamW, SGD, Adafactor or Adam8bit',
                   '"zero_optimization.stage": 7 is out of range', '"zero_optimization.reduce_bucket_size" is not a whole',
                   '"zero_optimization.offload_param.swap_folder" is not supported']:
        assert needle in p.stderr, (needle, p.stderr)
    assert p.stderr.count("error:") == 1, p.stderr
    with open(path, "w") as f:
        json.dump({"bf16": {"enabled": True}, "fp16": {"enabled": True, "consecutive_hysteresis": True,
                                                         "auto_cast": True}, "amp": {"enabled": True}}, f)
    p = run(zt, ["--config", path], expect_rc=2)
    for needle in ["4 problems", '"fp16.enabled" sets --dtype, which another key of this file sets too',
                   '"fp16.consecutive_hysteresis" is true, which zerotrain does not support', '"fp16.auto_cast" is not supported',
                   '"amp" is not supported by zerotrain (use bf16 or fp16)']:
        assert needle in p.stderr, (needle, p.stderr)
    print("ok: five problems reported in one message; bf16 and fp16 together, and fp16 keys zerotrain lacks, refused")


def case_determinism(zt, work):
    runs = []
    for i in range(2):
        d = os.path.join(work, f"r{i}")
        run(zt, SMALL + ["--steps", "12", "--log-dir", d], expect_rc=0)
        runs.append(summary(d))
    a, b = runs
    assert a["losses"] == b["losses"], (a["losses"], b["losses"])
    assert a["params_digest"] == b["params_digest"]
    d = os.path.join(work, "other-seed")
    run(zt, SMALL + ["--steps", "12", "--seed", "99", "--log-dir", d], expect_rc=0)
    assert summary(d)["params_digest"] != a["params_digest"], "seed has no effect"
    for line in open(os.path.join(work, "r0", "rank0.jsonl")):
        json.loads(line)
    print("ok: same seed, same flags -> identical losses and digest; another seed differs")


def case_convergence(zt, work):
    """The default model on the default Markov source gets within 0.05 nats of
    the best achievable loss. The last 20 steps are averaged because one
    step's loss over 512 tokens has a spread of a few hundredths."""
    d = os.path.join(work, "conv")
    run(zt, ["--steps", "400", "--log-dir", d, "--quiet"], expect_rc=0, timeout=600)
    s = summary(d)
    tail = s["losses"][-20:]
    gap = sum(tail) / len(tail) - s["data_entropy"]
    print(f"mean of last 20 losses {sum(tail)/len(tail):.4f}, floor {s['data_entropy']:.4f}, gap {gap:.4f}")
    assert gap <= 0.05, gap
    assert s["final_loss"] - s["data_entropy"] <= 0.1
    print("ok: converged")


def case_summary_schema(zt, work):
    """summary.json and rank0.jsonl carry the documented keys, and the
    summary names the device that ran, as --device chose it: cpu by default;
    with auto, what the start-up line says auto picked, which is cuda exactly
    when this process can run on a GPU (--device cuda starts: a CUDA build
    that sees one, real or emulated) and cpu otherwise."""
    d = os.path.join(work, "schema")
    p = run(zt, SMALL[:-1] + ["--steps", "3", "--device", "auto", "--log-dir", d], expect_rc=0)  # not --quiet
    s = summary(d)
    for k in ["world_size", "stage", "offload", "recompute", "dtype", "device", "params", "steps", "losses",
              "final_loss", "data_entropy", "tokens_per_s", "step_time_s", "params_digest", "ranks", "imbalance"]:
        assert k in s, k
    picked = re.search(r"^device auto: (\w+) \((\d+) CUDA device\(s\) visible\)$", p.stdout, re.M)
    assert picked, p.stdout[-2000:]
    gpus = int(picked[2])
    cuda_runs = run(zt, SMALL + ["--steps", "1", "--device", "cuda"]).returncode == 0
    assert s["device"] == picked[1] == ("cuda" if gpus > 0 else "cpu"), (s["device"], picked[0])
    assert (s["device"] == "cuda") == cuda_runs, (s["device"], "--device cuda runs" if cuda_runs else "cannot")
    d0 = os.path.join(work, "schema-default")
    run(zt, SMALL + ["--steps", "1", "--log-dir", d0], expect_rc=0)
    assert summary(d0)["device"] == "cpu", summary(d0)["device"]
    print(f"ok: --device auto ran on {s['device']} ({gpus} CUDA device(s) visible); the default ran on cpu")
    r = s["ranks"][0]
    for k in ["rank", "peak_bytes", "peak_by_category", "host_peak_bytes", "os_peak_bytes"]:
        assert k in r, k
    assert set(r["peak_by_category"]) == {"params", "grads", "master_params", "optimizer", "activations",
                                          "gathered_params", "comm_buffers", "workspace", "checkpoint_staging", "other"}
    for k in ["peak_max_over_mean", "peak_max_minus_min_bytes", "max_rank", "top_category"]:
        assert k in s["imbalance"], k
    lines = open(os.path.join(d, "rank0.jsonl")).read().splitlines()
    assert len(lines) == 3
    step = json.loads(lines[0])
    for k in ["step", "loss", "tokens_per_s", "step_time_s"]:
        assert k in step, k
    mem = step["memory"]
    for k in ["peak_bytes", "peak_by_phase", "current_by_category", "peak_by_category", "allocated_bytes",
              "reserved_bytes", "fragmentation", "os"]:
        assert k in mem, k
    assert mem["os"]["vm_rss"] > 0
    print("ok: summary.json and rank0.jsonl carry the documented keys")


def case_file_data(zt, work):
    path = os.path.join(work, "text.txt")
    with open(path, "w") as f:
        f.write("the quick brown fox jumps over the lazy dog. " * 50)
    d = os.path.join(work, "file")
    run(zt, SMALL[:8] + ["--micro-batch", "2", "--threads", "1", "--quiet", "--data", path, "--steps", "5",
                         "--log-dir", d], expect_rc=0)
    s = summary(d)
    assert s["data_entropy"] is None and len(s["losses"]) == 5
    expect_error(zt, SMALL[:8] + ["--data", path, "--vocab", "300"], 2, "--vocab must be 256")
    print("ok: byte-level file data")


CASES = {n[5:]: f for n, f in globals().items() if n.startswith("case_")}

if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in CASES:
        sys.exit(f"usage: {sys.argv[0]} {{{'|'.join(CASES)}}} ZT_TRAIN")
    work = tempfile.mkdtemp(prefix=f"zt-{sys.argv[1]}-")
    try:
        CASES[sys.argv[1]](os.path.abspath(sys.argv[2]), work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
