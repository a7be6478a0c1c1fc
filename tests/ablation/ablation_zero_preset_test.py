#!/usr/bin/env python3
"""The ablation's `--preset zero` against the ZeRO paper, run by CTest.

usage: ablation_zero_preset_test.py ZT_TRAIN ZT_RUN ABLATE_PY

1. The preset's commands (--dry-run, nothing runs): bf16 at np 4, stages
   0-3 x offload none,cpu x recompute none,full x optimizer adamw,sgd with
   its model flags; flags on the command line override each of them, the
   freeze axis is a repeatable flag whose values keep their commas, and an
   axis flag after `--` is refused.
2. The preset at np 4 for 2 steps, without offload and recompute (8 runs):
   on every rank, model state (the params + grads + master_params +
   optimizer peaks of summary.json) per model parameter is the paper's
   16, 4 + 12/N, 2 + 14/N, 16/N bytes for AdamW (and 12, 4 + 8/N, 2 + 10/N,
   12/N for SGD's 4-byte momentum) within the padding: each unit is padded to
   a multiple of N x 16 elements, so a rank holds at most
   (formula bytes per parameter) x units x (16N - 1) bytes more than the
   formula on the unpadded count, and never less. The check also fails each
   measurement against the other stages' and the other optimizer's formulas
   (the padding's slack cannot hide a wrong stage). At stage 0 model state is
   at least half of every rank's peak, so the stages visibly cut memory.
   The CSV's per-rank column, the Markdown table's optimizer column and the
   bytes-per-parameter plot (a PNG and 16 points, 4 ranks x 4 stages, per
   optimizer) are checked too.
"""
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
from fractions import Fraction

N = 4
STEPS = 2
PAD_ALIGN = 16  # shard/zt_units.h: units padded to a multiple of world_size x 16 elements
MODEL_STATE = ["params", "grads", "master_params", "optimizer"]
# Bytes per parameter on each rank, written out as the ZeRO paper does for
# mixed-precision Adam (2 + 2 + K with K = 12), and with K = 8 for SGD
# (fp32 master 4 + momentum 4).
FORMULA = {
    "adamw": {0: Fraction(16), 1: 4 + Fraction(12, N), 2: 2 + Fraction(14, N), 3: Fraction(16, N)},
    "sgd": {0: Fraction(12), 1: 4 + Fraction(8, N), 2: 2 + Fraction(10, N), 3: Fraction(12, N)},
}
PRESET_MODEL = ["--layers", "2", "--d-model", "256", "--heads", "4", "--vocab", "256", "--seq-len", "32",
                "--micro-batch", "2", "--bucket-size", "1MiB"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def fail(msg):
    sys.exit("FAIL: " + msg)


def ablate(ctx, own, extra=(), expect_rc=0):
    cmd = ([sys.executable, ctx["ablate"], "--zt-train", ctx["zt"], "--zt-run", ctx["zt_run"]] + list(own)
           + (["--"] + list(extra) if extra else []))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != expect_rc:
        fail(f"{' '.join(cmd)}: exit {p.returncode}, expected {expect_rc}\nstdout:\n{p.stdout[-4000:]}\n"
             f"stderr:\n{p.stderr[-4000:]}")
    return p


def dry_run(ctx, own, extra=()):
    """{config name: its zt-train command as a list} from --dry-run."""
    p = ablate(ctx, ["--preset", "zero", "--dry-run", "--out", os.path.join(ctx["work"], "dry")] + own, extra)
    commands = {}
    for line in p.stdout.splitlines():
        name, _, cmd = line.partition(": ")
        commands[name] = cmd.split()
    if os.path.exists(os.path.join(ctx["work"], "dry")):
        fail("--dry-run created the output directory")
    return commands


def flag(cmd, name):
    """Every value given to NAME in cmd, in order."""
    return [cmd[i + 1] for i, a in enumerate(cmd[:-1]) if a == name]


def case_preset_commands(ctx):
    cmds = dry_run(ctx, [])
    if len(cmds) != 32:
        fail(f"--preset zero runs {len(cmds)} configurations, expected 32: {sorted(cmds)}")
    got = {(flag(c, "--stage")[0], flag(c, "--offload")[0], flag(c, "--recompute")[0], flag(c, "--optimizer")[0])
           for c in cmds.values()}
    want = {(s, o, r, opt) for s in "0123" for o in ("none", "cpu") for r in ("none", "full")
            for opt in ("adamw", "sgd")}
    if got != want:
        fail(f"--preset zero's axes: {sorted(got)}")
    for name, c in cmds.items():
        if flag(c, "-np") != ["4"] or flag(c, "--dtype") != ["bf16"] or flag(c, "--steps") != ["20"]:
            fail(f"{name}: not bf16 at np 4 for 20 steps: {' '.join(c)}")
        if " ".join(PRESET_MODEL) not in " ".join(c):
            fail(f"{name}: the preset's model flags are missing: {' '.join(c)}")
        if flag(c, "--freeze") != ["none"]:
            fail(f"{name}: --freeze {flag(c, '--freeze')}, expected none")
    cmds = dry_run(ctx, ["--np", "2", "--steps", "3", "--optimizer", "sgd", "--offload", "none",
                         "--recompute", "none", "--dtype", "fp32", "--freeze", "none",
                         "--freeze", "embedding,blocks:0"], ["--layers", "3"])
    want = {f"s{s}-sgd{f}" for s in range(4) for f in ("", "-frz-embedding_blocks_0")}
    if set(cmds) != want:
        fail(f"overridden preset's configurations {sorted(cmds)} != {sorted(want)}")
    for name, c in cmds.items():
        if (flag(c, "-np") != ["2"] or flag(c, "--steps") != ["3"] or flag(c, "--dtype") != ["fp32"]
                or flag(c, "--optimizer") != ["sgd"]):
            fail(f"{name}: the command line did not override the preset: {' '.join(c)}")
        if flag(c, "--layers") != ["2", "3"]:
            fail(f"{name}: extra flags should follow the preset's model (zt-train keeps the last): {' '.join(c)}")
        if flag(c, "--freeze") != (["embedding,blocks:0"] if "frz" in name else ["none"]):
            fail(f"{name}: --freeze {flag(c, '--freeze')}")
    p = ablate(ctx, ["--preset", "zero", "--dry-run"], ["--optimizer", "sgd"], expect_rc=2)
    if "use ablate.py --optimizer" not in p.stderr:
        fail(f"--optimizer after `--` was not refused with a hint:\n{p.stderr}")
    p = ablate(ctx, ["--preset", "zero", "--dry-run", "--freeze", "none", "--freeze", "none"], expect_rc=2)
    print("ok: --preset zero: 32 bf16 configurations at np 4 with its model; flags override it; "
          "--freeze is repeatable; an axis flag after `--` is refused")


def within_padding(measured, params, per_param, units):
    """Whether measured bytes on a rank are the formula's bytes on the
    unpadded parameter count, plus at most the formula's bytes on the most
    padding the units can have."""
    ideal = per_param * params
    slack = per_param * units * (N * PAD_ALIGN - 1)
    return ideal <= measured <= ideal + slack


def case_preset_run(ctx):
    out = os.path.join(ctx["work"], "zero")
    ablate(ctx, ["--preset", "zero", "--steps", str(STEPS), "--offload", "none", "--recompute", "none",
                 "--out", out])
    with open(os.path.join(out, "ablation.csv"), newline="") as f:
        rows = {r["name"]: r for r in csv.DictReader(f)}
    want = {f"s{s}{'' if o == 'adamw' else '-sgd'}-bf16" for s in range(4) for o in FORMULA}
    if set(rows) != want:
        fail(f"configurations {sorted(rows)} != {sorted(want)}")
    checked = 0
    for name, r in sorted(rows.items()):
        if r["status"] != "ok":
            fail(f"{name}: {r['status']} {r['detail']}")
        stage, optimizer = int(r["stage"]), r["optimizer"]
        run_dir = os.path.join(out, "runs", name)
        with open(os.path.join(run_dir, "summary.json")) as f:
            summary = json.load(f)
        with open(os.path.join(run_dir, "labels_rank0.json")) as f:
            units = sum(1 for e in json.load(f)["device"] if e["category"] == "params")
        if summary["world_size"] != N or summary["dtype"] != "bf16" or units < 3:
            fail(f"{name}: world size {summary['world_size']}, dtype {summary['dtype']}, {units} units")
        params = summary["params"]
        ranks = sorted(summary["ranks"], key=lambda x: x["rank"])
        state = [sum(rk["peak_by_category"][c] for c in MODEL_STATE) for rk in ranks]
        if r["model_state_by_rank_bytes"].split() != [str(b) for b in state] or int(r["model_params"]) != params:
            fail(f"{name}: CSV model state {r['model_state_by_rank_bytes']!r} / {r['model_params']} params, "
                 f"summary.json {state} / {params}")
        if Fraction(r["formula_bytes_per_param"]) != FORMULA[optimizer][stage]:
            fail(f"{name}: CSV formula {r['formula_bytes_per_param']}, paper {FORMULA[optimizer][stage]}")
        for rank, b in enumerate(state):
            if not within_padding(b, params, FORMULA[optimizer][stage], units):
                fail(f"{name}: rank {rank} holds {b} B of model state = {b / params:.4f} B/param; "
                     f"formula {float(FORMULA[optimizer][stage]):.4f} B/param within the padding of {units} units")
            # The negative twin: every other stage's and optimizer's formula rejects it.
            for o, by_stage in FORMULA.items():
                for s, per_param in by_stage.items():
                    if (o, s) != (optimizer, stage) and per_param != FORMULA[optimizer][stage] \
                            and within_padding(b, params, per_param, units):
                        fail(f"{name}: rank {rank}'s {b} B also passes {o} stage {s}'s formula: "
                             "the padding's slack is too loose to tell stages apart")
            checked += 1
        if name == "s0-bf16":
            for rank, (b, rk) in enumerate(zip(state, ranks)):
                if 2 * b < rk["peak_bytes"]:
                    fail(f"s0-bf16 rank {rank}: model state {b} B is less than half of its peak {rk['peak_bytes']} B")
            share = min(b / rk["peak_bytes"] for b, rk in zip(state, ranks))
    check_outputs(out, rows)
    print(f"ok: --preset zero at np {N}: model state per parameter on each of {checked} rank-runs matches "
          f"16, 4+12/N, 2+14/N, 16/N (AdamW) and 12, 4+8/N, 2+10/N, 12/N (SGD) within the padding, and no "
          f"other formula; stage-0 model state is {share:.2f} of the peak")


def check_outputs(out, rows):
    png = os.path.join(out, "ablation_bytes_per_param.png")
    with open(png, "rb") as f:
        if f.read(8) != PNG_SIGNATURE or os.path.getsize(png) < 1000:
            fail(f"{png} is not a plot")
    with open(os.path.join(out, "ablation_bytes_per_param.dat")) as f:
        blocks = [b for b in f.read().split("\n\n\n") if "measured" in b]
    for optimizer in FORMULA:
        block = next((b for b in blocks if f"measured, bf16 {optimizer}," in b), None)
        points = [] if block is None else [l for l in block.splitlines() if l and not l.startswith("#")]
        if len(points) != 4 * N:
            fail(f"the bytes-per-parameter plot has {len(points)} points for {optimizer}, expected {4 * N}")
    with open(os.path.join(out, "ablation.md")) as f:
        md = f.read()
    if "| optimizer | freeze |" not in md:
        fail("ablation.md's table has no optimizer and freeze columns")
    for name, r in rows.items():
        if f"| {name} | ok | {r['optimizer']} | none |" not in md:
            fail(f"ablation.md has no row for {name} with its optimizer")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(f"usage: {sys.argv[0]} ZT_TRAIN ZT_RUN ABLATE_PY")
    work = tempfile.mkdtemp(prefix="zt-ablation-zero-")
    ctx = {"zt": os.path.abspath(sys.argv[1]), "zt_run": os.path.abspath(sys.argv[2]),
           "ablate": os.path.abspath(sys.argv[3]), "work": work}
    ok = False
    try:
        case_preset_commands(ctx)
        case_preset_run(ctx)
        ok = True
    finally:
        if ok:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"(outputs kept in {work})", file=sys.stderr)
