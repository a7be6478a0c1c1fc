#!/usr/bin/env python3
"""The delayed parameter update (--offload-delay 1) against offload without
it, side by side in one run: the loss curve on the default model, and on a
larger model how much of the CPU Adam the next step's forward and backward
hid (JSONL offload.delayed_adam_s against offload.delayed_wait_s) and the
median step time.

usage: bench/bench_offload_delay.py [--np 2] [--build build] [--steps 400]
                                    [--big-steps 30]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("--np", type=int, default=2)
ap.add_argument("--build", default="build")
ap.add_argument("--steps", type=int, default=400)
ap.add_argument("--big-steps", type=int, default=30)
a = ap.parse_args()
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
zt = os.path.join(root, a.build, "examples", "zt-train")
BIG = ["--layers", "4", "--d-model", "256", "--vocab", "512", "--seq-len", "128", "--micro-batch", "4"]


def run(args):
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([os.path.join(root, "launch", "zt-run"), "-np", str(a.np), zt, "--offload", "cpu",
                        "--log-dir", d, "--quiet", "--trace", "0"] + args, check=True, stderr=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL)
        steps = [json.loads(line) for line in open(os.path.join(d, "rank0.jsonl"))]
        summary = json.load(open(os.path.join(d, "summary.json")))
    return steps, summary


curves = {delay: run(["--steps", str(a.steps), "--offload-delay", str(delay)]) for delay in (0, 1)}
entropy = curves[0][1]["data_entropy"]
print(f"default model, {a.steps} steps, np {a.np}; data entropy rate {entropy:.5f} nats")
print("| step | loss, no delay | loss, --offload-delay 1 | difference |")
print("|---|---|---|---|")
for k in (1, 2, 3, 10, 25, 50, 100, 200, a.steps):
    if k > a.steps:
        continue
    x, y = curves[0][0][k - 1]["loss"], curves[1][0][k - 1]["loss"]
    print(f"| {k} | {x:.5f} | {y:.5f} | {y - x:+.5f} |")
for delay in (0, 1):
    s = curves[delay][1]
    last = statistics.mean(x["loss"] for x in curves[delay][0][-50:])
    print(f"delay {delay}: final loss {s['final_loss']:.5f} (gap to entropy {s['final_loss'] - entropy:.4f}), "
          f"mean of the last 50 steps {last:.5f}")

print(f"\nlarger model ({' '.join(BIG)}), {a.big_steps} steps, np {a.np}, stage 2:")
print("| --offload-delay | median step (ms) | CPU Adam per step (ms) | waited for it per step (ms) | hidden |")
print("|---|---|---|---|---|")
for delay in (0, 1):
    steps, _ = run(BIG + ["--stage", "2", "--steps", str(a.big_steps), "--offload-delay", str(delay)])
    tail = steps[2:]
    step_ms = statistics.median(x["step_time_s"] for x in tail) * 1e3
    if delay:
        adam = statistics.median(x["offload"]["delayed_adam_s"] for x in tail) * 1e3
        wait = statistics.median(x["offload"]["delayed_wait_s"] for x in tail) * 1e3
        print(f"| 1 | {step_ms:.1f} | {adam:.2f} | {wait:.2f} | {1 - wait / adam:.0%} |")
    else:
        print(f"| 0 | {step_ms:.1f} | (in the step) | - | - |")
