#!/usr/bin/env python3
"""Memory per category and CPU step time by dtype (fp32, bf16, fp16) at each
ZeRO stage, on one configuration, and the bf16 kernel-by-kernel cost.

usage: bench/bench_precision.py [--np 2] [--steps 8] [--build build] [-- extra zt-train flags]

Default configuration: issue 24's (4 layers, d_model 256, vocab 512, seq 128,
micro-batch 8). For each dtype x stage it runs zt-train under launch/zt-run
and reads the summary (every rank's per-category peaks, identical across ranks
here) and rank 0's JSONL (step time: median over the steps after the first).
Prints two Markdown tables: MiB per category per rank, and step time with the
ratio to fp32 at the same stage.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

CATS = ["params", "grads", "master_params", "optimizer", "activations", "gathered_params", "comm_buffers",
        "workspace", "other"]
MODEL = ["--layers", "4", "--d-model", "256", "--vocab", "512", "--seq-len", "128", "--micro-batch", "8"]

ap = argparse.ArgumentParser()
ap.add_argument("--np", type=int, default=2)
ap.add_argument("--steps", type=int, default=8)
ap.add_argument("--build", default="build")
ap.add_argument("--reduce-dtype", default="fp32")
ap.add_argument("extra", nargs="*")
a = ap.parse_args()
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
zt = os.path.join(root, a.build, "examples", "zt-train")
zt_run = os.path.join(root, "launch", "zt-run")

rows = []
for dtype in ("fp32", "bf16", "fp16"):
    for stage in range(4):
        with tempfile.TemporaryDirectory() as d:
            cmd = ([zt_run, "-np", str(a.np), zt] + MODEL + ["--stage", str(stage), "--dtype", dtype,
                   "--reduce-dtype", a.reduce_dtype, "--steps", str(a.steps), "--log-dir", d, "--quiet",
                   "--trace", "0"] + a.extra)
            subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            steps = [json.loads(line) for line in open(os.path.join(d, "rank0.jsonl"))][1:]
            s = json.load(open(os.path.join(d, "summary.json")))
        r0 = s["ranks"][0]
        rows.append({"dtype": dtype, "stage": stage, "peak": r0["peak_bytes"], "cats": r0["peak_by_category"],
                     "step": statistics.median(x["step_time_s"] for x in steps), "loss": s["final_loss"]})

MiB = 1048576.0
print("| dtype | stage | " + " | ".join(CATS) + " | peak | peak / fp32 |")
print("|---|---|" + "---:|" * (len(CATS) + 2))
base = {r["stage"]: r for r in rows if r["dtype"] == "fp32"}
for r in rows:
    cells = [f"{r['cats'][c] / MiB:.2f}" for c in CATS]
    print(f"| {r['dtype']} | {r['stage']} | " + " | ".join(cells) +
          f" | {r['peak'] / MiB:.2f} | {r['peak'] / base[r['stage']]['peak']:.3f} |")
print()
print("| dtype | stage | step time (ms, median) | vs fp32 | final loss |")
print("|---|---|---:|---:|---:|")
for r in rows:
    print(f"| {r['dtype']} | {r['stage']} | {r['step'] * 1e3:.1f} | {r['step'] / base[r['stage']]['step']:.2f}x | "
          f"{r['loss']:.5f} |")
