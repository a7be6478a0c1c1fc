#!/usr/bin/env python3
"""--auto against an exhaustive ablation at np 2, and the step-time model's
predictions against measured step times (issue 48, docs/auto.md).

1. Calibrate: `launch/zt-run -np 2 zt-plan --calibrate OUT/profile.json`
   (or --profile FILE; --profile builtin: zt-plan's built-in table).
2. For each model (zt-train's default GPT, and a larger one whose step takes
   about 80 ms here), a budget: 75% (--budget-frac) of the planned allocated
   peak of stage 0 without recomputation at the whole per-rank batch in one
   micro-batch, the fastest configuration when memory is free (no
   recomputation, no sharding collectives, the largest GEMMs). --mem-limit
   caps reserved bytes, which are at least the allocated ones, so that
   configuration cannot fit, and neither can those close to it: the budget
   makes the search choose.
3. The grid: stage 0-3 x optimizer offload none, cpu x recompute none,
   selective, full, full with --offload-activations cpu x attention
   materialized, fused (64 combinations; --quick: 4), each at the global
   batch --global-batch (grad-accum fills it) with the largest micro-batch
   (a divisor of the per-rank batch) zt-plan's replay says fits the budget
   (the smallest when none does), plus the ruled-out configuration of step
   2: at most 65 runs per model. The micro-batch is thinned this way because
   at equal other settings it moves the step time by a few percent on this
   machine (larger is faster: fewer, larger GEMM calls) while it decides
   what fits; a combination's best is its largest micro-batch that fits.
   Every run is `zt-train ... --mem-limit BUDGET --steps 8`: exit 3 means
   it does not fit, exit 2 that zt-train refuses the combination. Its step
   time is the median of rank 0's step_time_s (rank0.jsonl) over the steps
   after the first --skip (2); runs go round-robin over the configurations,
   --reps (3) times, and a configuration's time is the median over its
   runs. A configuration that does not fit runs once.
4. `zt-plan --auto --json --mem-limit BUDGET --world 2 --global-batch G
   --profile P`: the choice. `zt-train --auto --mem-limit BUDGET ...` runs
   in every round beside the grid (the same interleaving, the same
   measurement); each run's `auto: chosen:` line must equal zt-plan's
   flags. zt-plan is given the budget as --mem-limit, as zt-train is:
   --device-mem would also take the process's own bytes off it.
5. The figures: (a) auto's measured step over the best measured grid
   configuration that fits (pass: <= 1.10, or the same configuration); (b)
   Spearman's rank correlation (>= 0.9) and the median of |predicted -
   measured| / measured (<= 15%) over the grid configurations that fit,
   predicted = `zt-plan --json` time.predicted_step_s for the run's flags;
   (c) the seed's 100B case, `zt-plan --auto` at 32 ranks on the cuda
   table: its choice, predicted bill and step, the search's wall time
   (pass: < 2 s), beside DeepSpeed's estimate_zero3_model_states_mem_needs
   (deepspeed/runtime/zero/stage3.py) for the same parameters.

Writes the Markdown block for bench/RESULTS.md on stdout (progress goes to
stderr) and every run's logs under --out (default: a temporary folder).
Only the Python standard library is used.

usage: python3 bench/bench_auto.py [--build build] [--out DIR] [--profile FILE|builtin]
                                   [--steps 8] [--skip 2] [--reps 3] [--global-batch 16]
                                   [--budget-frac 0.75] [--models default,large] [--quick]
       python3 bench/bench_auto.py --self-test
"""
import argparse
import datetime
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "launch"))
from ablate import spearman  # noqa: E402  (the sweep's --predict reports the same figure)
NP = 2
MODELS = {
    "default": [],  # zt-train's defaults: 2 layers, d_model 64, 4 heads, seq 64, vocab 64
    "large": ["--layers", "4", "--d-model", "128", "--heads", "4", "--seq-len", "128", "--vocab", "256"],
}
# The grid's axes (step 3 of the docstring); a recompute value is zt-train's
# --recompute and the flags it adds.
STAGES = [0, 1, 2, 3]
OFFLOADS = ["none", "cpu"]
RECOMPUTES = {"none": [], "selective": [], "full": [], "full+acts": ["--offload-activations", "cpu"]}
ATTENTIONS = ["materialized", "fused"]
QUICK_GRID = [(0, "none", "none", "materialized"), (0, "none", "full", "materialized"),
              (3, "none", "none", "materialized"), (3, "cpu", "full", "fused")]
# The seed's 100B case (c): zt-plan's flags.
BIG_CASE = ["--world", "32", "--device", "cuda", "--device-mem", "80GB", "--layers", "80", "--d-model", "10240",
            "--heads", "80", "--seq-len", "2048", "--micro-batch", "1", "--vocab", "50304", "--dtype", "bf16",
            "--global-batch", "32"]
MIB = 2.0 ** 20


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- statistics

def median_rel_error(predicted, measured):
    return statistics.median(abs(p - m) / m for p, m in zip(predicted, measured)) if measured else None


def self_test():
    """Spearman and the timing extraction on data whose answers are known,
    each with a twin that must come out different."""
    xs = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert spearman(xs, [10.0, 20.0, 30.0, 40.0, 50.0]) == 1.0
    assert spearman(xs, [50.0, 40.0, 30.0, 20.0, 10.0]) == -1.0
    assert abs(spearman(xs, [x ** 3 for x in xs]) - 1.0) < 1e-12  # monotone, not linear: still 1
    # 1 - 6 sum d^2 / (n (n^2 - 1)) without ties: one swap of neighbours gives 1 - 12/120 = 0.9.
    assert abs(spearman(xs, [1.0, 2.0, 3.0, 5.0, 4.0]) - 0.9) < 1e-12
    # Ties: ranks (1.5, 1.5, 3, 4) against (1, 2, 3, 4): 0.9486832980505138 (scipy.stats.spearmanr).
    assert abs(spearman([1.0, 1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0]) - 0.9486832980505138) < 1e-12
    assert spearman([1.0, 1.0], [1.0, 2.0]) is None and spearman([1.0], [1.0]) is None
    assert abs(median_rel_error([1.1, 0.9, 2.0], [1.0, 1.0, 1.0]) - 0.1) < 1e-12
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "rank0.jsonl"), "w") as f:
            for step, t in enumerate([9.0, 5.0, 0.3, 0.1, 0.2, 0.4], 1):
                f.write(json.dumps({"step": step, "step_time_s": t}) + "\n")
        assert step_times(d, skip=2) == [0.3, 0.1, 0.2, 0.4]
        assert statistics.median(step_times(d, skip=2)) == 0.25
        assert statistics.median(step_times(d, skip=0)) != 0.25  # the warm-up steps would count
    print("bench_auto: self-test passed")
    return 0


# ---------------------------------------------------------------- programs

def run(cmd, timeout=900):
    return subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout)


def plan(a, model, flags):
    """zt-plan --json for one configuration under the budget: (plan dict or
    None, stderr)."""
    p = run([a.zt_plan] + model + flags + ["--world", str(NP), "--json"] + a.profile_flags)
    try:
        return (json.loads(p.stdout) if p.returncode in (0, 1) else None), p.stderr
    except ValueError:
        return None, p.stderr


def step_times(run_dir, skip):
    """Rank 0's step_time_s of every step after the first `skip`."""
    with open(os.path.join(run_dir, "rank0.jsonl")) as f:
        steps = [json.loads(line) for line in f if line.strip()]
    return [s["step_time_s"] for s in steps if s["step"] > skip]


def train(a, model, flags, run_dir, steps):
    """One zt-train run at np 2 under the budget: (exit status, console)."""
    cmd = ([os.path.join(ROOT, "launch", "zt-run"), "-np", str(NP), a.zt_train] + model + flags
           + ["--mem-limit", str(a.limit), "--steps", str(steps), "--log-dir", run_dir, "--quiet", "--trace", "0"]
           + a.profile_flags)
    os.makedirs(run_dir, exist_ok=True)
    p = run(cmd)
    with open(os.path.join(run_dir, "console.log"), "w") as f:
        f.write("$ " + shlex.join(cmd) + "\n" + p.stdout + p.stderr)
    return p.returncode, p.stdout + p.stderr


# ---------------------------------------------------------------- configurations

class Config:
    """One grid point: the axes, its flags, its name."""

    def __init__(self, stage, offload, recompute, attention, mb, per_rank):
        self.stage, self.offload, self.recompute, self.attention = stage, offload, recompute, attention
        self.mb, self.accum = mb, per_rank // mb
        self.plan = None
        self.times, self.status, self.detail, self.summary_predicted = [], None, "", None

    def flags(self):
        return (["--stage", str(self.stage), "--offload", self.offload,
                 "--recompute", self.recompute.split("+")[0], "--attention", self.attention]
                + RECOMPUTES[self.recompute] + ["--micro-batch", str(self.mb), "--grad-accum", str(self.accum)])

    def axes(self):
        """The grid's axes as zt-train flag values, to compare with --auto's choice."""
        return {"stage": str(self.stage), "offload": self.offload, "recompute": self.recompute.split("+")[0],
                "attention": self.attention,
                "offload-activations": "cpu" if self.recompute == "full+acts" else "none",
                "micro-batch": str(self.mb), "offload-params": "none", "seq-parallel": "1"}

    def name(self):
        rc = {"none": "", "selective": "-selective", "full": "-recompute", "full+acts": "-recompute-offload-acts"}
        return (f"s{self.stage}" + ("-offload" if self.offload == "cpu" else "") + rc[self.recompute]
                + ("-fused" if self.attention == "fused" else "") + f"-mb{self.mb}")

    def measured(self):
        return statistics.median(self.times) if self.times else None

    def predicted(self):
        return self.plan["time"]["predicted_step_s"] if self.plan else None


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def choose_micro_batch(a, model, combo, per_rank):
    """The combination at the largest micro-batch zt-plan's replay fits
    under the budget (the smallest when none does), with its plan."""
    for mb in sorted(divisors(per_rank), reverse=True) + [None]:
        c = Config(*combo, mb or 1, per_rank)
        c.plan, err = plan(a, model, c.flags() + ["--mem-limit", str(a.limit)])
        if c.plan is None:
            c.detail = "zt-plan: " + (err.strip().splitlines() or ["failed"])[-1]
            return c
        if mb is None or c.plan.get("fits"):
            return c


def flags_dict(flags):
    return {flags[i][2:]: flags[i + 1] for i in range(0, len(flags) - 1, 2) if flags[i].startswith("--")}


def chosen_line(console):
    for line in console.splitlines():
        if line.startswith("auto: chosen: "):
            return shlex.split(line[len("auto: chosen: "):])
    return None


# ---------------------------------------------------------------- one model

def budget(a, model, per_rank):
    """The budget (step 2): budget-frac of the planned allocated peak of
    stage 0, no recomputation, one micro-batch of the whole per-rank batch,
    rounded down to 64 KiB; that configuration as a Config."""
    anchor = Config(0, "none", "none", "materialized", per_rank, per_rank)
    anchor.plan, err = plan(a, model, anchor.flags())
    if anchor.plan is None:
        raise SystemExit(f"bench_auto: zt-plan failed on {anchor.name()}: {err.strip()}")
    peak = anchor.plan["peak_bytes"]
    return int(peak * a.budget_frac) // 65536 * 65536, anchor


def auto_plan(a, model, limit, top=5):
    cmd = ([a.zt_plan, "--auto", "--json", "--mem-limit", str(limit), "--world", str(NP),
            "--global-batch", str(a.global_batch), "--top", str(top)] + a.profile_flags + model)
    p = run(cmd)
    try:
        out = json.loads(p.stdout)
    except ValueError:
        raise SystemExit(f"bench_auto: {shlex.join(cmd)} gave no JSON (exit {p.returncode}): {p.stderr.strip()}")
    return cmd, out


def bench_model(a, key):
    model = MODELS[key]
    per_rank = a.global_batch // NP
    a.limit, anchor = budget(a, model, per_rank)
    log(f"bench_auto: model {key}: budget --mem-limit {a.limit} ({a.limit / MIB:.2f} MiB)")
    _, free = auto_plan(a, model, 1 << 40, top=1)  # the choice when memory is no object
    auto_cmd, auto = auto_plan(a, model, a.limit)
    combos = QUICK_GRID if a.quick else [(s, o, r, at) for s in STAGES for o in OFFLOADS for r in RECOMPUTES
                                         for at in ATTENTIONS]
    grid = [choose_micro_batch(a, model, combo, per_rank) for combo in combos]
    same = [c for c in grid if c.name() == anchor.name()]
    if same:
        anchor = same[0]
    else:
        grid.append(anchor)
    log(f"bench_auto: model {key}: {len(grid)} grid configurations, {a.reps} round(s), {a.steps} steps each")
    chosen = (auto.get("chosen") or {}).get("flags")
    auto_runs = []  # (exit, the chosen flags zt-train printed, step times)
    out = os.path.join(a.out, key)
    for rep in range(a.reps):
        for c in grid + ["auto"]:
            if c == "auto":
                if not chosen:
                    continue
                d = os.path.join(out, "auto", f"rep{rep}")
                rc, console = train(a, model, ["--auto", "--global-batch", str(a.global_batch)], d, a.steps)
                auto_runs.append((rc, chosen_line(console), step_times(d, a.skip) if rc == 0 else []))
                continue
            if c.status not in (None, "fits"):
                continue  # does not fit, or refused: once is enough
            d = os.path.join(out, c.name(), f"rep{rep}")
            rc, console = train(a, model, c.flags(), d, a.steps)
            if rc == 0:
                c.status = "fits"
                c.times.append(statistics.median(step_times(d, a.skip)))
                with open(os.path.join(d, "summary.json")) as f:
                    c.summary_predicted = json.load(f).get("predicted_step_s")
            else:
                c.status = {3: "out of memory", 2: "refused"}.get(rc, f"exit {rc}")
                c.detail = next((l.strip() for l in console.splitlines() if "error" in l), "")
            log(f"  round {rep + 1}: {c.name():<36s} {c.status}"
                + (f" {c.times[-1] * 1e3:8.2f} ms" if rc == 0 else ""))
        log(f"bench_auto: model {key}: round {rep + 1} of {a.reps} done")
    return {"key": key, "model": model, "limit": a.limit, "anchor": anchor, "grid": grid, "free": free,
            "auto": auto, "auto_cmd": auto_cmd, "auto_runs": auto_runs}


# ---------------------------------------------------------------- the 100B case

def largest_unit(a, flags):
    """The largest gathered unit's parameters: zt-plan's JSON when it says,
    else its text line `(N units, largest X)`."""
    p = run([a.zt_plan] + flags)
    m = re.search(r"\((\d+) units, largest ([0-9.e+]+)\)", p.stdout)
    return (float(m.group(2)), int(m.group(1))) if m else (None, None)


def deepspeed_zero3_model_states(total, largest, gpus_per_node, nodes, offload, offload_params,
                                 zero_init=True, buffer_factor=1.5):
    """(per-CPU, per-GPU) bytes by DeepSpeed's estimate_zero3_model_states_mem_needs
    (deepspeed/runtime/zero/stage3.py): a GPU holds 4 bytes of the largest
    layer's parameters, plus 18 bytes per parameter over all GPUs without
    offload (2 with the optimizer offloaded, none with the parameters too)."""
    gpus = gpus_per_node * nodes
    largest_mem = 4 * largest
    if offload and offload_params:
        gpu = largest_mem
        cpu = total * (18 / nodes if zero_init else max(4 * gpus_per_node, 18 / nodes)) * buffer_factor
    elif offload:
        gpu = largest_mem + int(2 * total / gpus)
        cpu = total * (16 / nodes if zero_init else max(4 * gpus_per_node, 16 / nodes)) * buffer_factor
    else:
        gpu = largest_mem + int(18 * total / gpus)
        cpu = (largest if zero_init else total) * 4 * gpus_per_node * buffer_factor
    return int(cpu), int(gpu)


def big_case(a):
    cmd = [a.zt_plan, "--auto", "--json"] + BIG_CASE
    t0 = time.monotonic()
    p = run(cmd)
    wall = time.monotonic() - t0
    try:
        auto = json.loads(p.stdout)
    except ValueError:
        return {"cmd": cmd, "error": f"exit {p.returncode}: {p.stderr.strip()[-300:]}"}
    res = {"cmd": cmd, "auto": auto, "wall": wall}
    chosen = (auto.get("chosen") or {}).get("flags")
    if not chosen:
        return dict(res, error=auto.get("error", "nothing chosen"))
    # The plan of the choice: the bill by category, the parameters.
    cut = BIG_CASE.index("--global-batch")
    plan_flags = BIG_CASE[:cut] + BIG_CASE[cut + 2:]
    p = run([a.zt_plan, "--json"] + plan_flags + chosen)
    res["plan"] = json.loads(p.stdout) if p.returncode in (0, 1) else None
    res["largest"], res["units"] = largest_unit(a, plan_flags + chosen)
    if res["plan"] and res["largest"]:
        c = flags_dict(chosen)
        nodes = res["plan"].get("nodes", 1)
        per_node = res["plan"]["world"] // nodes
        res["ds"] = {(off, prm): deepspeed_zero3_model_states(res["plan"]["params"], res["largest"], per_node, nodes,
                                                              off, prm)
                     for off, prm in ((True, True), (True, False), (False, False))}
        res["ds_match"] = (c.get("offload", "none") != "none", c.get("offload-params", "none") != "none")
    return res


# ---------------------------------------------------------------- the report

def machine():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
        with open("/proc/meminfo") as f:
            mem = int(next(l.split()[1] for l in f if l.startswith("MemTotal"))) / 2 ** 20
    except (OSError, StopIteration, ValueError):
        mem = 0
    os_name = platform.platform()
    try:
        with open("/etc/os-release") as f:
            os_name = next((l.split("=", 1)[1].strip().strip('"') for l in f if l.startswith("PRETTY_NAME")), os_name)
    except OSError:
        pass
    try:
        mpi = run(["mpirun", "--version"], timeout=30).stdout.splitlines()[0].strip()
    except (OSError, IndexError, subprocess.TimeoutExpired):
        mpi = "no mpirun"
    return f"{os.cpu_count()} cores ({cpu or platform.machine()}), {mem:.0f} GiB, {os_name}, {mpi}"


def ms(s):
    return "-" if s is None else f"{s * 1e3:.2f}"


def pct(x):
    return "-" if x is None else f"{x * 100:.1f}%"


def flag_text(flags):
    return "`" + shlex.join(flags) + "`"


def model_figures(r):
    """(a) and (b) of one model."""
    fit = [c for c in r["grid"] if c.status == "fits" and c.times]
    best = min(fit, key=lambda c: c.measured()) if fit else None
    auto_times = [statistics.median(t) for rc, _, t in r["auto_runs"] if rc == 0 and t]
    auto_ms = statistics.median(auto_times) if auto_times else None
    chosen = (r["auto"].get("chosen") or {}).get("flags") or []
    cd = flags_dict(chosen)
    same = best is not None and all(cd.get(k, v) == v for k, v in best.axes().items())
    ratio = auto_ms / best.measured() if auto_ms and best else None
    pred = [c for c in fit if c.predicted() is not None]
    rho = spearman([c.predicted() for c in pred], [c.measured() for c in pred])
    mre = median_rel_error([c.predicted() for c in pred], [c.measured() for c in pred])
    agree = [line == chosen for _, line, _ in r["auto_runs"]]
    return {"best": best, "auto_ms": auto_ms, "auto_times": auto_times, "ratio": ratio, "same": same,
            "a_pass": ratio is not None and (ratio <= 1.10 or same), "rho": rho, "mre": mre, "n": len(pred),
            "b_pass": rho is not None and rho >= 0.9 and mre is not None and mre <= 0.15, "agree": agree}


def model_section(a, r, f):
    key, grid, auto = r["key"], r["grid"], r["auto"]
    anchor, free = r["anchor"], r["free"]
    L = [f"### Model `{key}`: " + (flag_text(r["model"]) if r["model"] else "zt-train's defaults")
         + f", global batch {a.global_batch} sequences", ""]
    L.append(f"Budget: `--mem-limit {r['limit']}` ({r['limit'] / MIB:.2f} MiB) = {a.budget_frac:.0%} of the planned "
             f"allocated peak of `{anchor.name()}` (stage 0, no recomputation, the per-rank batch in one "
             f"micro-batch: the fastest configuration with memory free), {anchor.plan['peak_bytes'] / MIB:.2f} MiB, "
             "rounded down to 64 KiB. `--mem-limit` caps reserved bytes, at least the allocated ones, so it "
             f"cannot fit: measured, {anchor.status or 'not run'}.")
    fc = free.get("chosen")
    if fc:
        fits_too = fc["predicted_peak_bytes"] <= r["limit"]
        L.append(f"With memory free (`--mem-limit 1TiB`) `--auto` chooses {flag_text(fc['flags'])}, "
                 f"{ms(fc['predicted_step_s'])} ms predicted, {fc['predicted_peak_bytes'] / MIB:.2f} MiB reserved: "
                 + ("it fits the budget too (the budget does not bind)." if fits_too else "above the budget."))
    L.append("")
    ch = auto.get("chosen")
    if ch:
        L.append(f"`zt-plan --auto` under the budget ({auto.get('evaluated', '?')} configurations, "
                 f"{auto.get('fitting', '?')} fit by the closed form, {auto.get('replays', '?')} replayed, {auto.get('search_s', 0):.3f} s): {flag_text(ch['flags'])}, "
                 f"{ms(ch['predicted_step_s'])} ms predicted, {ch['predicted_peak_bytes'] / MIB:.2f} MiB reserved. "
                 f"`zt-train --auto` chose the same in {sum(f['agree'])} of {len(f['agree'])} runs.")
        for reason in auto.get("reasons", []):
            L.append(f"- {reason}")
    else:
        L.append(f"`zt-plan --auto` chose nothing: {auto.get('error', '?')}")
    L.append("")
    counts = {}
    for c in grid:
        counts[c.status or "not run"] = counts.get(c.status or "not run", 0) + 1
    L.append(f"Grid: {len(grid) - (anchor in grid)} combinations of stage x offload x recompute x attention, each at "
             "the largest micro-batch zt-plan's replay fits under the budget, and the ruled-out configuration; "
             + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) + ". Sorted by measured step time:")
    L.append("")
    L.append(f"| configuration | micro-batch x accum | planned reserved MiB | measured ms (median of runs) | runs | "
             "predicted ms | predicted / measured | status |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---|")
    rows = sorted(grid, key=lambda c: (c.measured() is None, c.measured() or 0, c.name()))
    for c in rows:
        er = c.plan.get("expected_reserved", {}).get("bytes") if c.plan else None
        ratio = c.predicted() / c.measured() if c.measured() and c.predicted() else None
        mark = " **best**" if c is f["best"] else ""
        L.append(f"| {c.name()}{mark} | {c.mb} x {c.accum} | {'-' if er is None else f'{er / MIB:.2f}'} | "
                 f"{ms(c.measured())} | {len(c.times)} | {ms(c.predicted())} | "
                 f"{'-' if ratio is None else f'{ratio:.2f}'} | {c.status or c.detail or 'not run'} |")
    if ch:
        ratio = ch["predicted_step_s"] / f["auto_ms"] if f["auto_ms"] else None
        L.append(f"| **auto** | {flags_dict(ch['flags']).get('micro-batch', '?')} x "
                 f"{flags_dict(ch['flags']).get('grad-accum', '?')} | {ch['predicted_peak_bytes'] / MIB:.2f} | "
                 f"{ms(f['auto_ms'])} | {len(f['auto_times'])} | {ms(ch['predicted_step_s'])} | "
                 f"{'-' if ratio is None else f'{ratio:.2f}'} | zt-train --auto |")
    checked = [c for c in grid if c.summary_predicted is not None and c.predicted()]
    if checked:
        worst = max(abs(c.summary_predicted - c.predicted()) / c.predicted() for c in checked)
        L += ["", f"summary.json's `predicted_step_s` against zt-plan's for the same flags: largest relative "
                  f"difference {worst:.2e} over {len(checked)} configurations."]
    L.append("")
    return L


def report(a, results, big, profile_source, started):
    L = ["## Automatic configuration: `--auto` against an exhaustive ablation, and the step-time model "
         "(issue 48), np 2", ""]
    L.append(f"Command: `{shlex.join(['python3', 'bench/bench_auto.py'] + a.argv)}`. "
             f"Date: {datetime.date.today().isoformat()}. Machine: {machine()}. "
             f"Took {(time.monotonic() - started) / 60:.1f} min.")
    L.append("")
    L.append(f"Profile: {profile_source}. Every run: `launch/zt-run -np 2 zt-train MODEL FLAGS --mem-limit BUDGET "
             f"--steps {a.steps}`; its step time is the median of rank 0's `step_time_s` after the first {a.skip} "
             f"steps; {a.reps} round(s), round-robin over the configurations and `zt-train --auto`; the table gives "
             "the median over rounds. Predicted: `zt-plan --json` for the same flags and profile.")
    L.append("")
    figs = {r["key"]: model_figures(r) for r in results}
    L.append("| figure | " + " | ".join(f"`{k}`" for k in figs) + " | pass when |")
    L.append("|---|" + "---|" * len(figs) + "---|")

    def row(name, cell, when):
        L.append(f"| {name} | " + " | ".join(cell(f) for f in figs.values()) + f" | {when} |")

    row("(a) auto's measured step / the grid's best that fits",
        lambda f: ("-" if f["ratio"] is None else f"{f['ratio']:.3f}") + (" (same configuration)" if f["same"] else "")
        + (" PASS" if f["a_pass"] else " FAIL"), "<= 1.10, or the same configuration")
    row("(b) Spearman rank correlation, predicted vs measured",
        lambda f: ("-" if f["rho"] is None else f"{f['rho']:.3f}") + f" (n = {f['n']})", ">= 0.9")
    row("(b) median absolute relative error", lambda f: pct(f["mre"]), "<= 15%")
    row("(b) both", lambda f: "PASS" if f["b_pass"] else "FAIL", "")
    row("zt-train --auto chose zt-plan's configuration",
        lambda f: f"{sum(f['agree'])} of {len(f['agree'])} runs", "every run")
    L.append("")
    for r in results:
        L += model_section(a, r, figs[r["key"]])
    L += big_section(big)
    return "\n".join(L)


def big_section(big):
    L = ["### (c) The seed's 100B case: " + flag_text(["zt-plan"] + big["cmd"][1:]), ""]
    if "error" in big:
        return L + [f"Failed: {big['error']}", ""]
    auto, ch = big["auto"], big["auto"]["chosen"]
    ok = big["wall"] < 2.0
    L.append(f"Search: {auto.get('evaluated', '?')} configurations, {auto.get('fitting', '?')} fit by the closed form, "
             f"{auto.get('replays', '?')} replays; {big['wall']:.3f} s wall for the whole zt-plan run "
             f"({auto.get('search_s', 0):.3f} s in the search): " + ("PASS (< 2 s)." if ok else "FAIL (>= 2 s)."))
    L.append(f"Chosen: {flag_text(ch['flags'])}; predicted step {ch['predicted_step_s']:.3f} s, "
             f"{ch['tokens_per_s']:.0f} tokens/s ({ch.get('time', {}).get('profile', auto.get('profile', ''))}).")
    p = big.get("plan")
    if p:
        GB = 1e9
        cats = ", ".join(f"{k} {v / GB:.2f}" for k, v in p["peak_by_category"].items() if v)
        L.append(f"Per-rank bill (GB = 1e9 bytes): reserved {ch['predicted_peak_bytes'] / GB:.2f} (replayed) of the "
                 f"80 GB device; allocated peak {p['peak_bytes'] / GB:.2f} at {p.get('peak_moment', '?')}: {cats}; "
                 f"model state {p['model_state_bytes_per_rank'] / GB:.2f} per rank for {p['params']:.4g} "
                 "parameters.")
    if big.get("ds"):
        largest = big["largest"]
        L.append("")
        L.append(f"DeepSpeed's `estimate_zero3_model_states_mem_needs` (deepspeed/runtime/zero/stage3.py; "
                 f"zero_init=1, additional_buffer_factor 1.5) for total_params {p['params']} and "
                 f"largest_layer_params {largest:.4g} (zt-plan's largest of {big['units']} gathered units, a "
                 "block; DeepSpeed counts one module's own parameters, which for this model is smaller), "
                 f"{p['world'] // p.get('nodes', 1)} GPUs per node x {p.get('nodes', 1)} node(s):")
        L.append("")
        L.append("| offload_optimizer | offload_param | per GPU (GB, 1e9 bytes) | per CPU (GB) | matches the choice |")
        L.append("|---|---|---:|---:|---|")
        for (off, prm), (cpu, gpu) in big["ds"].items():
            L.append(f"| {'cpu' if off else 'none'} | {'cpu' if prm else 'none'} | {gpu / 1e9:.2f} | {cpu / 1e9:.2f} | "
                     + ("yes" if (off, prm) == big["ds_match"] else "") + " |")
        cpu, gpu = big["ds"][big["ds_match"]]
        L.append("")
        L.append(f"For the chosen offload setting DeepSpeed's model states are {gpu / 1e9:.2f} GB per GPU against "
                 f"zt-plan's {p['model_state_bytes_per_rank'] / 1e9:.2f} GB of model state (16 bytes a parameter "
                 f"over {p['world']} ranks) and {ch['predicted_peak_bytes'] / 1e9:.2f} GB reserved in all "
                 "(activations, gathered units, buffers and the allocator's rounding, which DeepSpeed's estimate "
                 "leaves out).")
    L.append("")
    return L


# ---------------------------------------------------------------- main

def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--out", default=None, help="folder for the profile and every run's logs (default: a temporary one)")
    ap.add_argument("--profile", default=None,
                    help="a profile to use instead of calibrating; builtin: zt-plan's built-in table")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--skip", type=int, default=2, help="leading steps left out of each run's median")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--global-batch", type=int, default=16)
    ap.add_argument("--budget-frac", type=float, default=0.75)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--quick", action="store_true", help="a smoke test: 4 combinations, 1 round, 4 steps")
    ap.add_argument("--self-test", action="store_true", help="check Spearman and the step-time extraction, run nothing")
    a = ap.parse_args(argv)
    a.argv = argv
    if a.quick:
        a.reps, a.steps = 1, 4
    if a.skip >= a.steps:
        ap.error("--skip must leave steps to time")
    if a.global_batch % NP:
        ap.error(f"--global-batch must be a multiple of {NP}")
    a.models = [m for m in a.models.split(",") if m]
    if not a.models or any(m not in MODELS for m in a.models):
        ap.error(f"--models: among {', '.join(MODELS)}")
    a.zt_train = os.path.join(ROOT, a.build, "examples", "zt-train")
    a.zt_plan = os.path.join(ROOT, a.build, "examples", "zt-plan")
    return a


def calibrate(a):
    """The profile flags and a sentence saying where the rates come from."""
    if a.profile == "builtin":
        return [], "zt-plan's built-in table for the CPU (no --profile)"
    if a.profile:
        return ["--profile", os.path.abspath(a.profile)], f"`{a.profile}` (given)"
    path = os.path.join(a.out, "profile.json")
    cmd = [os.path.join(ROOT, "launch", "zt-run"), "-np", str(NP), a.zt_plan, "--calibrate", path]
    log("bench_auto: " + shlex.join(cmd))
    t0 = time.monotonic()
    p = run(cmd)
    if p.returncode != 0 or not os.path.isfile(path):
        raise SystemExit(f"bench_auto: calibration wrote no profile (exit {p.returncode}): "
                         f"{(p.stderr or p.stdout).strip()[-400:]}\n(--profile FILE or --profile builtin skip it)")
    with open(path) as f:
        source = json.load(f).get("source", "")
    return ["--profile", path], (f"measured by `launch/zt-run -np 2 zt-plan --calibrate` in "
                                 f"{time.monotonic() - t0:.0f} s" + (f" ({source})" if source else ""))


def main(argv):
    a = parse_args(argv)
    if a.self_test:
        return self_test()
    started = time.monotonic()
    a.out = os.path.abspath(a.out or tempfile.mkdtemp(prefix="zt-bench-auto-"))
    os.makedirs(a.out, exist_ok=True)
    log(f"bench_auto: logs under {a.out}")
    a.profile_flags, source = calibrate(a)
    results = [bench_model(a, key) for key in a.models]
    big = big_case(a)
    print(report(a, results, big, source, started))
    save_results(a, results)
    return 0


def save_results(a, results):
    """Every configuration's runs, plan and prediction, as OUT/results.json."""
    data = {r["key"]: {"model": r["model"], "mem_limit": r["limit"], "auto": r["auto"],
                       "auto_runs": [{"exit": rc, "chosen": line, "step_times_s": t} for rc, line, t in r["auto_runs"]],
                       "grid": [{"name": c.name(), "flags": c.flags(), "status": c.status, "detail": c.detail,
                                 "step_time_medians_s": c.times, "predicted_step_s": c.predicted(),
                                 "planned_reserved_bytes": (c.plan or {}).get("expected_reserved", {}).get("bytes")}
                                for c in r["grid"]]}
            for r in results}
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(data, f, indent=1)
    log(f"bench_auto: results in {os.path.join(a.out, 'results.json')}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
