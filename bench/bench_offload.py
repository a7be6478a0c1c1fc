#!/usr/bin/env python3
"""Offload transfer bandwidth: device->host gradient copies and host->device
parameter copies per step, as zt-train logs them (JSONL "offload").

usage: bench/bench_offload.py [--np 2] [--steps 20] [--build build] [-- zt-train flags]

On the CPU backend both sides are host memory, so these are memcpy rates
into and out of the page-locked pool; on a GPU they are PCIe/NVLink copies.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("--np", type=int, default=2)
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--build", default="build")
ap.add_argument("extra", nargs="*")
a = ap.parse_args()
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
zt = os.path.join(root, a.build, "examples", "zt-train")
print("| stage | dtype | D2H bytes/step | D2H GB/s | H2D bytes/step | H2D GB/s | step time (ms) |")
print("|---|---|---|---|---|---|---|")
for stage in (0, 2, 3):
    for dtype in ("fp32", "bf16"):
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([os.path.join(root, "launch", "zt-run"), "-np", str(a.np), zt, "--stage", str(stage),
                            "--dtype", dtype, "--offload", "cpu", "--steps", str(a.steps), "--log-dir", d, "--quiet",
                            "--trace", "0"] + a.extra, check=True, stderr=subprocess.DEVNULL)
            steps = [json.loads(l) for l in open(os.path.join(d, "rank0.jsonl"))][1:]
        o = [s["offload"] for s in steps]
        med = lambda k: statistics.median(x[k] for x in o)
        st = statistics.median(s["step_time_s"] for s in steps)
        print(f"| {stage} | {dtype} | {med('d2h_bytes'):.0f} | {med('d2h_gbs'):.2f} | {med('h2d_bytes'):.0f} | "
              f"{med('h2d_gbs'):.2f} | {st*1e3:.1f} |")
