#!/usr/bin/env python3
"""Training stall per checkpoint: blocking save vs --async-save 1.

Runs zt-train twice on the same model under mpirun (launch/zt-run), saving
every K steps, and reads each save's `checkpoint_stall_s` from rank 0's
JSONL: the time that step boundary spent on saves (blocking: the whole
write and fsync; asynchronous: staging the rank file into host memory plus
the commit of the previous save once its writer ended). The last save of
an asynchronous run is committed at exit and is left out (its stall is the
writer's remaining time). Also the median step time, with and without a
writer thread running beside the training.

usage: bench_async_save.py [--np 2] [--layers 12] [--d-model 768] [--steps 9]
                           [--save-every 3] [--dir /var/tmp/zt-bench-save]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(a, mode):
    d = os.path.join(a.dir, mode)
    shutil.rmtree(d, ignore_errors=True)
    zt = os.path.join(ROOT, "build", "examples", "zt-train")
    cmd = [os.path.join(ROOT, "launch", "zt-run"), "-np", str(a.np), zt, "--layers", str(a.layers), "--d-model",
           str(a.d_model), "--heads", "12", "--seq-len", "64", "--vocab", "256", "--micro-batch", "1", "--stage", "3",
           "--steps", str(a.steps), "--save-every", str(a.save_every), "--save-dir", os.path.join(d, "ck"),
           "--log-dir", os.path.join(d, "log"), "--quiet", "--async-save", "1" if mode == "async" else "0"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    with open(os.path.join(d, "log", "rank0.jsonl")) as f:
        steps = [json.loads(line) for line in f]
    size = sum(os.path.getsize(os.path.join(d, "ck", "step-%06d" % a.steps, n))
               for n in os.listdir(os.path.join(d, "ck", "step-%06d" % a.steps)))
    stalls = [s.get("checkpoint_stall_s", 0.0) for s in steps if s["step"] % a.save_every == 0]
    if mode == "async":
        stalls = stalls[:-1]  # the last one is committed at exit
    times = [s["step_time_s"] for s in steps if s["step"] % a.save_every != 0]
    shutil.rmtree(d, ignore_errors=True)
    return stalls, statistics.median(times), size


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--steps", type=int, default=9)
    p.add_argument("--save-every", type=int, default=3)
    p.add_argument("--dir", default="/var/tmp/zt-bench-save")
    a = p.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    blocking, t_block, size = run(a, "blocking")
    asynchronous, t_async, _ = run(a, "async")
    mb, ma = statistics.median(blocking), statistics.median(asynchronous)
    print(f"checkpoint: {size / 1e6:.0f} MB over {a.np} rank files")
    print(f"| save | stall per save (s, median) | each save's stall (s) | step time without a save (s, median) |")
    print(f"|---|---|---|---|")
    print(f"| blocking | {mb:.3f} | {', '.join('%.3f' % x for x in blocking)} | {t_block:.3f} |")
    print(f"| --async-save 1 | {ma:.3f} | {', '.join('%.3f' % x for x in asynchronous)} | {t_async:.3f} |")
    print(f"stall ratio async / blocking: {ma / mb:.3f}")


if __name__ == "__main__":
    sys.exit(main())
