#!/usr/bin/env python3
"""Sequence parallelism (--seq-parallel P) at np 4 under a fixed --mem-limit:
the longest sequence that trains for P = 1, 2, 4, with and without full
recomputation, and the step-time cost of the all-to-alls.

Longest sequence: zt-plan --max-seq-len gives the longest T whose planned
peak, with the allocator's rounding bound, fits the limit on every rank
(the planner is exact per category, docs/sequence_parallel.md). zt-train
then measures it: from that T rounded down to --granule, --check-steps
steps under --mem-limit at T, T + granule, ... until one runs out of memory
(exit 3). The last that trains is the measured longest.

Step-time cost: at one T that fits every configuration, --steps steps per
configuration, interleaved over --reps rounds (4 ranks share the machine's
cores, and step times drift between runs). At np 4 a step trains 4 / P
sequences (one per data-parallel rank), so throughput is compared in
tokens/s. From every rank's JSONL, over the steps after the first --skip:
the median over steps of the slowest rank's step_time_s; tokens/s = 4 / P
x T over it; the all-to-alls' share, as the mean over ranks of
comm.all_to_all.time_s / step_time_s (their time from start to completion,
waits for slower peers included); their bytes per rank per step.

usage: python3 bench/bench_seq_parallel.py [--build build] [--mem-limit 96MiB] [--granule 64]
                                           [--steps 6] [--skip 2] [--reps 2] [-- zt-train flags]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("--build", default="build")
ap.add_argument("--mem-limit", default="96MiB")
ap.add_argument("--granule", type=int, default=64)
ap.add_argument("--steps", type=int, default=6)
ap.add_argument("--check-steps", type=int, default=2)
ap.add_argument("--skip", type=int, default=2)
ap.add_argument("--reps", type=int, default=2)
ap.add_argument("--timing-seq-len", type=int, default=0, help="T of the step-time runs (0: the longest every one trains)")
ap.add_argument("extra", nargs="*")
args = ap.parse_args()

NP = 4
MODEL = ["--layers", "4", "--d-model", "128", "--heads", "8", "--vocab", "256", "--micro-batch", "1",
         "--stage", "3", "--threads", "1", "--quiet", "--dtype", "bf16"] + args.extra
ZT = os.path.join(args.build, "examples", "zt-train")
PLAN = os.path.join(args.build, "examples", "zt-plan")
RUN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "launch", "zt-run")
CONFIGS = [(P, rc) for rc in ("none", "full") for P in (1, 2, 4)]


def flags(P, rc, T):
    return MODEL + ["--seq-parallel", str(P), "--recompute", rc, "--seq-len", str(T)]


def planned_max(P, rc):
    """zt-plan's longest T for every rank under the limit (it plans the fullest rank)."""
    p = subprocess.run([PLAN, "--world", str(NP), "--json", "--max-seq-len", "--device-mem", args.mem_limit] +
                       flags(P, rc, args.granule), capture_output=True, text=True)
    out = json.loads(p.stdout)
    return out["max_seq_len"]


def trains(P, rc, T, log=None):
    cmd = [RUN, "-np", str(NP), ZT] + flags(P, rc, T) + ["--mem-limit", args.mem_limit,
                                                          "--steps", str(args.check_steps)]
    if log:
        cmd += ["--log-dir", log, "--steps", str(args.steps)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    return p.returncode


def timing(P, rc, T, work, rep):
    d = os.path.join(work, f"t{P}{rc}{rep}")
    rc_ = trains(P, rc, T, d)
    assert rc_ == 0, (P, rc, T, rc_)
    rows = [[json.loads(line) for line in open(os.path.join(d, f"rank{r}.jsonl"))] for r in range(NP)]
    steps = range(args.skip, len(rows[0]))
    slowest = [max(rows[r][k]["step_time_s"] for r in range(NP)) for k in steps]
    share, bytes_ = [], []
    for k in steps:
        a2a = [rows[r][k]["comm"].get("all_to_all", {}) for r in range(NP)]
        share.append(statistics.mean(x.get("time_s", 0.0) / rows[r][k]["step_time_s"] for r, x in enumerate(a2a)))
        bytes_.append(statistics.mean(x.get("bytes", 0.0) for x in a2a))
    return slowest, share, bytes_


def main():
    print(f"np {NP}, --mem-limit {args.mem_limit}, model {' '.join(MODEL)}")
    longest = {}
    print(f"\n{'P':>2} {'recompute':>9} {'planned longest T':>18} {'measured longest T':>19} {'vs P=1':>7}")
    for P, rc in CONFIGS:
        planned = planned_max(P, rc)
        T = planned - planned % args.granule
        rc_ = trains(P, rc, T)
        assert rc_ == 0, (P, rc, T, rc_)  # the plan is an upper bound of the peak
        for _ in range(16):
            rc_ = trains(P, rc, T + args.granule)
            if rc_ != 0:
                break
            T += args.granule
        assert rc_ == 3, (P, rc, T + args.granule, rc_)  # the next one ran out of memory
        longest[(P, rc)] = T
        print(f"{P:>2} {rc:>9} {planned:>18} {T:>19} {T / longest[(1, rc)]:>6.2f}x")
    T = args.timing_seq_len or min(longest.values())
    work = tempfile.mkdtemp(prefix="zt-bench-sp-")
    res = {c: ([], [], []) for c in CONFIGS}
    for rep in range(args.reps):
        for P, rc in CONFIGS:
            for acc, new in zip(res[(P, rc)], timing(P, rc, T, work, rep)):
                acc.extend(new)
    print(f"\nstep time at T = {T} ({args.reps} interleaved rounds, steps after the first {args.skip}):")
    print(f"{'P':>2} {'recompute':>9} {'seqs/step':>9} {'step ms':>8} {'tokens/s':>9} {'vs P=1':>7} "
          f"{'all-to-all share':>17} {'a2a MB/rank/step':>17}")
    for P, rc in CONFIGS:
        ms = statistics.median(res[(P, rc)][0]) * 1e3
        tps = NP // P * T / (ms / 1e3)  # the global batch: one sequence per data-parallel rank
        base = NP * T / (statistics.median(res[(1, rc)][0]))
        print(f"{P:>2} {rc:>9} {NP // P:>9} {ms:>8.1f} {tps:>9.0f} {tps / base:>6.2f}x "
              f"{statistics.median(res[(P, rc)][1]):>17.3f} {statistics.median(res[(P, rc)][2]) / 1e6:>17.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
