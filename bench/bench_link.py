#!/usr/bin/env python3
"""What offload costs on a modelled link (--link, --link-gbs; the CPU
backend, runtime/cpu/link.c): for no offload, optimizer offload and (stage
3) parameter offload on top of it, at
memory speed and on the given link, per rank the device and host peaks,
the median step time, and per step the transfer time and its exposed part
as the JSONL "link" object reports them.

usage: bench/bench_link.py [--np 2] [--steps 10] [--build build] [--link pcie4] [-- zt-train flags]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("--np", type=int, default=2)
ap.add_argument("--steps", type=int, default=10)
ap.add_argument("--build", default="build")
ap.add_argument("--link", default="pcie4", help="a --link preset, or H2D,D2H in GB/s for --link-gbs")
ap.add_argument("extra", nargs="*")
a = ap.parse_args()
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
zt = os.path.join(root, a.build, "examples", "zt-train")
link_flags = ["--link", a.link] if a.link in ("pcie4", "pcie5") else ["--link-gbs", a.link]
print("| stage | offload | link | device peak MiB | host peak MiB | step ms (median) | transfer ms/step | exposed ms/step |")
print("|---|---|---|---|---|---|---|---|")
for stage in (2, 3):
    for offload in ("none", "cpu", "params") if stage == 3 else ("none", "cpu"):
        tier = ["--offload", "cpu", "--offload-params", "cpu"] if offload == "params" else ["--offload", offload]
        for link in ([], link_flags):
            with tempfile.TemporaryDirectory() as d:
                subprocess.run([os.path.join(root, "launch", "zt-run"), "-np", str(a.np), zt, "--stage", str(stage)]
                               + tier + ["--steps", str(a.steps), "--quiet", "--trace", "0", "--threads", "1",
                                         "--log-dir", d] + link + a.extra, check=True, capture_output=True)
                s = json.load(open(os.path.join(d, "summary.json")))
                steps = [json.loads(x) for x in open(os.path.join(d, "rank0.jsonl"))][1:]
                times = statistics.median(x["step_time_s"] for x in steps) * 1e3
                if link:
                    tr = statistics.mean(x["link"]["h2d_transfer_s"] + x["link"]["d2h_transfer_s"] for x in steps)
                    ex = statistics.mean(x["link"]["h2d_exposed_s"] + x["link"]["d2h_exposed_s"] for x in steps)
                    tr_s, ex_s = f"{tr * 1e3:.3f}", f"{ex * 1e3:.3f}"
                else:
                    tr_s = ex_s = "-"
                r = s["ranks"][0]
                print(f"| {stage} | {offload} | {a.link if link else 'memory speed'} | {r['peak_bytes'] / 2**20:.1f} | "
                      f"{r['host_peak_bytes'] / 2**20:.1f} | {times:.1f} | {tr_s} | {ex_s} |", flush=True)
