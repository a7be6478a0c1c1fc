#!/usr/bin/env python3
"""zt-plan's replayed reserved bytes against measured runs over the whole
grid: stage 0-3 x offload none/cpu x recompute none/full x fp32/bf16 x
np 1-4 x each allocator. Every configuration trains 3 steps uncapped under
launch/zt-run; its largest reserved peak over ranks and steps is compared
with zt-plan's replayed figure and with the closed-form estimate
(--no-replay) beside it. Prints one row per configuration, then per
allocator the error range of both and the replay's time.

usage: bench_replay.py [--build DIR] [--np 1,2,3,4] [--stages 0,1,2,3]
"""
import argparse
import itertools
import json
import os
import subprocess
import tempfile

MODEL = ["--layers", "3", "--d-model", "96", "--heads", "4", "--seq-len", "64", "--vocab", "128",
         "--micro-batch", "4", "--threads", "1"]
MODES = ("simple", "caching", "expandable")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def measured(build, np_, args, work):
    subprocess.run([os.path.join(ROOT, "launch", "zt-run"), "-np", str(np_), os.path.join(build, "examples", "zt-train")]
                   + args + ["--steps", "3", "--quiet", "--trace", "0", "--log-dir", work], check=True,
                   capture_output=True)
    top = 0
    for r in range(np_):
        with open(os.path.join(work, f"rank{r}.jsonl")) as f:
            top = max([top] + [json.loads(line)["memory"]["reserved_peak_bytes"] for line in f])
    return top


def planned(build, np_, args, replay):
    out = subprocess.run([os.path.join(build, "examples", "zt-plan"), "--world", str(np_), "--json"]
                         + ([] if replay else ["--no-replay"]) + args, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["expected_reserved"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--np", default="1,2,3,4")
    ap.add_argument("--stages", default="0,1,2,3")
    a = ap.parse_args()
    err = {m: [] for m in MODES}
    est = {m: [] for m in MODES}
    seconds = {m: [] for m in MODES}
    grid = itertools.product(map(int, a.np.split(",")), map(int, a.stages.split(",")), ("none", "cpu"),
                             ("none", "full"), ("fp32", "bf16"), MODES)
    print("np stage offload recompute dtype allocator  measured  replayed  error  estimate  error")
    with tempfile.TemporaryDirectory(prefix="zt-replay-") as tmp:
        for i, (np_, stage, off, rc, dt, mode) in enumerate(grid):
            args = MODEL + ["--stage", str(stage), "--offload", off, "--recompute", rc, "--dtype", dt,
                            "--allocator", mode]
            got = measured(a.build, np_, args, os.path.join(tmp, str(i)))
            rep, old = planned(a.build, np_, args, True), planned(a.build, np_, args, False)
            e, o = got / rep["bytes"] - 1, got / old["bytes"] - 1
            err[mode].append(e)
            est[mode].append(o)
            seconds[mode].append(rep["seconds"])
            print(f"{np_:2d} {stage:5d} {off:7s} {rc:9s} {dt:5s} {mode:10s} {got:9d} {rep['bytes']:9d} {e:+.2%} "
                  f"{old['bytes']:9d} {o:+.1%}", flush=True)
    print("\nallocator   runs  replay error        estimate error      replay time (all ranks)")
    for m in MODES:
        print(f"{m:10s} {len(err[m]):5d}  {min(err[m]):+.3%} .. {max(err[m]):+.3%}   "
              f"{min(est[m]):+.1%} .. {max(est[m]):+.1%}   {min(seconds[m]) * 1e3:.0f}-{max(seconds[m]) * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
