#!/usr/bin/env python3
"""PyTorch's memory_viz on zerotrain's per-rank snapshots (--memory-snapshot).

Runs zt-train under mpirun (launch/zt-run) with --memory-snapshot under
each --allocator, then runs PyTorch's own torch.cuda._memory_viz command
line on every rank's pickle: `stats` (its segment summary, which asserts
that the blocks tile each segment), `trace` (the event list as text),
`trace_plot` and `segment_plot` (the HTML pages of memory_viz). A command
that fails fails the bench. docs/interop_memory_viz.md says what the
frames and categories are.

Needs a venv with torch (no GPU: the commands read the pickle only).

usage: bench_memory_viz.py [--np 2] [--steps 5] [--stage 3] [--build build]
                           [--python /work/venv-torch/bin/python]
                           [--dir /var/tmp/zt-bench-memory-viz] [extra zt-train flags...]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALLOCATORS = ("simple", "caching", "expandable")


def train(a, allocator, extra):
    d = os.path.join(a.dir, allocator)
    zt = os.path.join(ROOT, a.build, "examples", "zt-train")
    cmd = [os.path.join(ROOT, "launch", "zt-run"), "-np", str(a.np), zt, "--stage", str(a.stage), "--steps",
           str(a.steps), "--allocator", allocator, "--memory-snapshot", d, "--quiet"] + extra
    print("command:", " ".join(cmd[1:]))
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return d


def viz(a, args):
    cmd = [a.python, "-m", "torch.cuda._memory_viz"] + args
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)}: exit {p.returncode}\n{p.stderr[-3000:]}")
    return p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--stage", type=int, default=3)
    ap.add_argument("--build", default="build")
    ap.add_argument("--python", default="/work/venv-torch/bin/python")
    ap.add_argument("--dir", default="/var/tmp/zt-bench-memory-viz")
    a, extra = ap.parse_known_args()
    shutil.rmtree(a.dir, ignore_errors=True)
    print(subprocess.run([a.python, "-c", "import torch; print('torch', torch.__version__)"], check=True,
                         capture_output=True, text=True).stdout.strip())
    print("| allocator | rank | events | segments | total_reserved | total_allocated | trace_plot | segment_plot |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for allocator in ALLOCATORS:
        d = train(a, allocator, extra)
        for r in range(a.np):
            pickle_path = os.path.join(d, f"rank{r}.pickle")
            stats = viz(a, ["stats", pickle_path])
            events = re.search(r"^(\d+) entries", viz(a, ["trace", pickle_path]), re.M)
            sizes = []
            for cmd in ("trace_plot", "segment_plot"):
                out = os.path.join(d, f"rank{r}_{cmd}.html")
                viz(a, [cmd, pickle_path, "-o", out])
                sizes.append(f"{os.path.getsize(out) / 1024:.0f} KiB")
            field = {k: re.search(rf"^{k}: (.*)$", stats, re.M).group(1)
                     for k in ("segments", "total_reserved", "total_allocated")}
            print(f"| {allocator} | {r} | {events.group(1) if events else '?'} | {field['segments']} | "
                  f"{field['total_reserved']} | {field['total_allocated']} | {sizes[0]} | {sizes[1]} |")


if __name__ == "__main__":
    main()
