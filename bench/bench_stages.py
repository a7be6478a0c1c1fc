#!/usr/bin/env python3
"""Step time per ZeRO stage and the share of communication hidden behind compute.

usage: bench/bench_stages.py [--np 2] [--steps 100] [--build build] [-- extra zt-train flags]

For each stage it runs zt-train under launch/zt-run and reads rank 0's JSONL:
- step time: median over steps after the first;
- communication time: per step, the sum over collectives of start-to-completion
  time (time_s), and of the time the rank was blocked waiting (wait_s);
- hidden share: 1 - wait_s / time_s, the fraction of collective time that
  overlapped with compute instead of stalling it.
Prints a Markdown table (paste it into bench/RESULTS.md with the command).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("--np", type=int, default=2)
ap.add_argument("--steps", type=int, default=100)
ap.add_argument("--build", default="build")
ap.add_argument("extra", nargs="*")
a = ap.parse_args()
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
zt = os.path.join(root, a.build, "examples", "zt-train")
zt_run = os.path.join(root, "launch", "zt-run")

print(f"| stage | step time (ms, median) | tokens/s | comm bytes/step | comm time/step (ms) | blocked in wait (ms) | hidden | model state / rank (bytes) | peak / rank (bytes) |")
print("|---|---|---|---|---|---|---|---|---|")
for stage in range(4):
    with tempfile.TemporaryDirectory() as d:
        cmd = [zt_run, "-np", str(a.np), zt, "--stage", str(stage), "--steps", str(a.steps), "--log-dir", d,
               "--quiet"] + a.extra
        subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
        steps = [json.loads(l) for l in open(os.path.join(d, "rank0.jsonl"))][1:]
        s = json.load(open(os.path.join(d, "summary.json")))
    st = statistics.median(x["step_time_s"] for x in steps)
    per = lambda key: statistics.mean(sum(k[key] for k in x["comm"].values()) for x in steps)
    t, w, b = per("time_s"), per("wait_s"), per("bytes")
    hidden = 1 - w / t if t > 0 else 0.0
    r0 = s["ranks"][0]["peak_by_category"]
    state = sum(r0[c] for c in ["params", "grads", "master_params", "optimizer"])
    print(f"| {stage} | {st*1e3:.2f} | {s['tokens_per_s']:.0f} | {b:.0f} | {t*1e3:.2f} | {w*1e3:.2f} | {hidden:.0%} | {state} | {s['ranks'][0]['peak_bytes']} |")
