#!/usr/bin/env python3
"""The optimizers of issue 44 side by side: the default job (GPT) and the
Llama job, np 2, with AdamW (fp32), Muon (fp32), and AdamW and Muon in bf16
with no fp32 master and bf16 state (--master-dtype none --optim-state-dtype
bf16) beside bf16 AdamW; per run the first step whose loss is within 0.1
nats of the data's entropy floor, the final gap, and rank 0's model state
and device peak. Then the seed's 100B case through zt-plan with each
(bytes of model state per parameter, per-rank model state and peak at 32
ranks).

usage: bench/bench_optimizers.py [--build build] [--stage 3] [--out /tmp/bench_optimizers]
"""
import argparse
import json
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = [
    ("adamw fp32", []),
    ("muon fp32", ["--optimizer", "muon"]),
    ("adamw bf16", ["--dtype", "bf16"]),
    ("adamw bf16, no master, bf16 state", ["--dtype", "bf16", "--master-dtype", "none", "--optim-state-dtype", "bf16"]),
    ("muon bf16, no master, bf16 state", ["--optimizer", "muon", "--dtype", "bf16", "--master-dtype", "none",
                                          "--optim-state-dtype", "bf16"]),
]
PLAN_CONFIGS = [
    ("adamw, fp32 master", []),
    ("muon, fp32 master", ["--optimizer", "muon"]),
    ("adamw, no master, bf16 state", ["--master-dtype", "none", "--optim-state-dtype", "bf16"]),
    ("muon, no master, bf16 state", ["--optimizer", "muon", "--master-dtype", "none", "--optim-state-dtype", "bf16"]),
]
SEED_100B = ["--params", "100e9", "--layers", "80", "--d-model", "10240", "--heads", "80", "--seq-len", "2048",
             "--micro-batch", "1", "--vocab", "50304", "--world", "32", "--device-mem", "80GB", "--stage", "3",
             "--recompute", "full"]
MIB = 1024.0 * 1024.0


def run(build, out, model, name, flags, stage):
    d = os.path.join(out, model + "-" + name.replace(" ", "").replace(",", "-"))
    cmd = [os.path.join(ROOT, "launch", "zt-run"), "-np", "2", os.path.join(build, "examples", "zt-train"),
           "--model", model, "--stage", str(stage), "--quiet", "--trace", "0", "--log-dir", d] + flags
    subprocess.run(cmd, check=True, capture_output=True)
    with open(os.path.join(d, "summary.json")) as f:
        s = json.load(f)
    floor = s["data_entropy"]
    within = next((i + 1 for i, loss in enumerate(s["losses"]) if loss - floor <= 0.1), None)
    c = s["ranks"][0]["peak_by_category"]
    state = c["params"] + c["grads"] + c["master_params"] + c["optimizer"]
    return within, s["final_loss"] - floor, state, s["ranks"][0]["peak_bytes"], len(s["losses"])


def plan(build, flags):
    out = subprocess.run([os.path.join(build, "examples", "zt-plan"), "--json"] + SEED_100B + flags,
                         check=True, capture_output=True, text=True).stdout
    p = json.loads(out)
    return p["model_state_bytes_per_rank"], p["peak_bytes"], p["params"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--stage", type=int, default=3)
    ap.add_argument("--out", default="/tmp/bench_optimizers")
    a = ap.parse_args()
    print(f"np 2, stage {a.stage}, each family's default job (zt-train's defaults)\n")
    print("| model | optimizer | steps to floor + 0.1 | final gap | model state, rank 0 (MiB) | device peak, rank 0 (MiB) |")
    print("|---|---|---:|---:|---:|---:|")
    for model in ("gpt", "llama"):
        for name, flags in CONFIGS:
            within, gap, state, peak, steps = run(a.build, a.out, model, name, flags, a.stage)
            print(f"| {model} | {name} | {within if within else f'> {steps}'} | {gap:.4f} | {state / MIB:.3f} | "
                  f"{peak / MIB:.3f} |")
    print("\nThe seed's 100B case: zt-plan " + " ".join(SEED_100B) + " --dtype bf16 OPTIONS\n")
    print("| optimizer (bf16 params) | model state bytes / parameter | model state per rank (GB) | peak per rank (GB) |")
    print("|---|---:|---:|---:|")
    for name, flags in PLAN_CONFIGS:
        state, peak, params = plan(a.build, flags + ["--dtype", "bf16"])
        print(f"| {name} | {state * 32 / params:.3f} | {state / 1e9:.3f} | {peak / 1e9:.3f} |")

if __name__ == "__main__":
    main()
