#!/usr/bin/env python3
"""Holistic Trace Analysis on zerotrain's per-rank traces (--trace-per-rank).

Runs zt-train under mpirun (launch/zt-run) with --trace-per-rank 1, loads
DIR/rank_traces with HTA's TraceAnalysis, and prints its temporal breakdown
and communication/computation overlap per rank beside zerotrain's own
account of the same steps from DIR/rank<r>.jsonl: the share of step time
the rank spent blocked in collective waits. HTA drops the last
ProfilerStep (an incomplete iteration in a PyTorch trace), so both sides
cover steps 1 .. steps-1. docs/interop_traces.md says what the kernels are.

Needs a venv with HTA (pip install HolisticTraceAnalysis "pandas<3": HTA
0.5.0's correlation join fails on pandas 3, see docs/interop_traces.md).

usage: bench_hta.py [--np 2] [--steps 20] [--stage 3] [--build build]
                    [--dir /var/tmp/zt-bench-hta] [extra zt-train flags...]
"""
import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(a, extra):
    shutil.rmtree(a.dir, ignore_errors=True)
    zt = os.path.join(ROOT, a.build, "examples", "zt-train")
    cmd = [os.path.join(ROOT, "launch", "zt-run"), "-np", str(a.np), zt, "--stage", str(a.stage),
           "--steps", str(a.steps), "--log-dir", a.dir, "--trace-per-rank", "1", "--quiet"] + extra
    print("command:", " ".join(cmd[1:]))
    subprocess.run(cmd, check=True, capture_output=True, text=True)


def zerotrain_view(a, rank):
    """Blocked-in-wait share of the step time over steps 1 .. steps-1."""
    with open(os.path.join(a.dir, f"rank{rank}.jsonl")) as f:
        steps = [json.loads(line) for line in f][: a.steps - 1]
    step_s = sum(s["step_time_s"] for s in steps)
    wait_s = sum(c["wait_s"] for s in steps for c in s.get("comm", {}).values())
    comm_s = sum(c["time_s"] for s in steps for c in s.get("comm", {}).values())
    return step_s, wait_s, comm_s


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--stage", type=int, default=3)
    p.add_argument("--build", default="build")
    p.add_argument("--dir", default="/var/tmp/zt-bench-hta")
    a, extra = p.parse_known_args()
    run(a, extra)
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    from hta.trace_analysis import TraceAnalysis  # the venv's, not a Debian package

    ta = TraceAnalysis(trace_dir=os.path.join(a.dir, "rank_traces"))
    print(f"HTA loaded ranks {sorted(ta.t.traces)}, profiler steps {list(map(int, ta.get_profiler_steps()))}")
    tb = ta.get_temporal_breakdown(visualize=False)
    ov = ta.get_comm_comp_overlap(visualize=False)
    print("\nget_temporal_breakdown():")
    print(tb.to_string(index=False))
    print("\nget_comm_comp_overlap():")
    print(ov.to_string(index=False))
    print("\nside by side (steps 1..%d):" % (a.steps - 1))
    print("| rank | HTA kernel time (ms) | zt step time (ms) | HTA compute % | HTA non-compute % | "
          "zt blocked in wait % | HTA comm/comp overlap % |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for _, row in tb.iterrows():
        r = int(row["rank"])
        step_s, wait_s, _ = zerotrain_view(a, r)
        o = float(ov.loc[ov["rank"] == r, "comp_comm_overlap_pctg"].iloc[0])
        print(f"| {r} | {row['kernel_time(us)'] / 1e3:.1f} | {step_s * 1e3:.1f} | {row['compute_time_pctg']:.1f} | "
              f"{row['non_compute_time_pctg']:.1f} | {100 * wait_s / step_s:.1f} | {o:.1f} |")


if __name__ == "__main__":
    sys.exit(main())
