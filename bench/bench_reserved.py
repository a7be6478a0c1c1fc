#!/usr/bin/env python3
"""The planner's closed-form reserved estimate (shard/plan_reserved.c, zt-plan --no-replay) against
measured runs, for each allocator mode: every configuration trains 3 steps
uncapped under launch/zt-run, and its largest reserved peak over ranks and
steps is compared with zt-plan's figure. Prints one row per configuration
and, per mode, the band measured / expected - 1 fell in: the band zt-plan
states (zt_plan_reserved_band) must contain it.

usage: bench_reserved.py [--build DIR] [--models default,d128,...] [--np 1,3]
"""
import argparse
import json
import os
import subprocess
import tempfile

MODELS = {
    "default": [],
    "d128": ["--layers", "4", "--d-model", "128", "--heads", "4", "--seq-len", "256", "--vocab", "256",
             "--micro-batch", "4"],
    "d256": ["--layers", "2", "--d-model", "256", "--heads", "8", "--seq-len", "128", "--vocab", "512",
             "--micro-batch", "4"],
    "bf16": ["--dtype", "bf16", "--micro-batch", "16"],
    "d96": ["--layers", "3", "--d-model", "96", "--heads", "4", "--seq-len", "192", "--vocab", "128",
            "--micro-batch", "2"],
}
MODES = ("simple", "caching", "expandable")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def measured_reserved(build, np_, args, work):
    subprocess.run([os.path.join(ROOT, "launch", "zt-run"), "-np", str(np_), os.path.join(build, "examples", "zt-train")]
                   + args + ["--steps", "3", "--quiet", "--trace", "0", "--threads", "1", "--log-dir", work],
                   check=True, capture_output=True)
    top = 0
    for r in range(np_):
        with open(os.path.join(work, f"rank{r}.jsonl")) as f:
            top = max([top] + [json.loads(line)["memory"]["reserved_peak_bytes"] for line in f])
    return top


def planned(build, np_, args):
    out = subprocess.run([os.path.join(build, "examples", "zt-plan"), "--world", str(np_), "--json", "--no-replay"] + args,
                         capture_output=True, text=True)
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--np", default="1,3")
    a = ap.parse_args()
    errors = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory(prefix="zt-reserved-") as tmp:
        for name in a.models.split(","):
            for np_ in map(int, a.np.split(",")):
                for stage in range(4):
                    for rc in ("none", "full"):
                        args = MODELS[name] + ["--stage", str(stage), "--recompute", rc]
                        row = [f"{name:8} np {np_} stage {stage} recompute {rc:4}"]
                        for mode in MODES:
                            p = planned(build=a.build, np_=np_, args=args + ["--allocator", mode])
                            want = p["expected_reserved"]["bytes"]
                            got = measured_reserved(a.build, np_, args + ["--allocator", mode],
                                                    os.path.join(tmp, f"{name}-{np_}-{stage}-{rc}-{mode}"))
                            errors[mode].append(got / want - 1)
                            row.append(f"{mode} {got / 2**20:6.1f} MiB ({got / want - 1:+.0%})")
                        print(f"{row[0]}  allocated {p['peak_bytes'] / 2**20:6.1f} MiB  " + "  ".join(row[1:]),
                              flush=True)
    for mode in MODES:
        e = errors[mode]
        print(f"{mode:10}: measured / expected - 1 in [{min(e):+.1%}, {max(e):+.1%}] over {len(e)} configurations")


if __name__ == "__main__":
    main()
