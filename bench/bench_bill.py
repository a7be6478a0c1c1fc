#!/usr/bin/env python3
"""The whole bill per rank (docs/memory.md, "The whole bill"): the issue-42
configuration at np 2 with each allocator, every rank's parts in MiB,
VmHWM and the sampling's share of the run; then the non-allocator parts of
a CPU rank (Rss and Pss) at np 1, 2 and 4, the constants zt-plan adds to
its predicted process totals (train/plan_process.c).

usage: bench/bench_bill.py [BUILD_DIR]   (default: build)
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
ZT = os.path.join(BUILD, "examples", "zt-train")
RUN = os.path.join(ROOT, "launch", "zt-run")
CONFIG = ["--stage", "3", "--layers", "4", "--d-model", "256", "--heads", "4", "--seq-len", "128", "--vocab", "512",
          "--micro-batch", "8"]
ALLOCATOR_PARTS = {"allocator_allocated", "allocator_cached", "host_pool_allocated", "host_pool_cached"}
MIB = 1048576.0


def train(np_, args, work):
    d = os.path.join(work, f"run{len(os.listdir(work))}")
    subprocess.run([RUN, "-np", str(np_), ZT] + args + ["--quiet", "--log-dir", d], check=True,
                   capture_output=True, text=True)
    return json.load(open(os.path.join(d, "summary.json")))


def bill_table(s, title):
    print(f"\n{title}")
    parts = list(s["ranks"][0]["process"]["parts"])
    print("| rank | os | " + " | ".join(parts) + " | unexplained | VmHWM |")
    print("|---" * (len(parts) + 4) + "|")
    for r in s["ranks"]:
        b = r["process"]
        cells = [f"{b['parts'][p] / MIB:.2f}" for p in parts]
        print(f"| {r['rank']} | {b['os_bytes'] / MIB:.2f} | " + " | ".join(cells) +
              f" | {b['unexplained_bytes'] / MIB:.2f} | {b['vm_hwm'] / MIB:.2f} |")
    print(f"sampling overhead (rank 0): {100 * s['process_sampling_overhead']:.2f}% of the run")


def main():
    with tempfile.TemporaryDirectory(prefix="zt-bill-bench-") as work:
        for alloc in ("simple", "caching", "expandable"):
            s = train(2, CONFIG + ["--steps", "40", "--allocator", alloc], work)
            bill_table(s, f"np 2, --allocator {alloc}, 40 steps (MiB):")
        print("\nnon-allocator parts of a CPU rank (default model, 10 steps), MiB: rank 0's Rss and Pss")
        print("| np | Rss | Pss | heap | lib_mpi | lib_blas | lib_other | mpi_shm | thread_stacks |")
        print("|---|---|---|---|---|---|---|---|---|")
        rss, pss = {}, {}
        for np_ in (1, 2, 4):
            s = train(np_, ["--steps", "10"], work)
            b = s["ranks"][0]["process"]
            alloc = sum(v for k, v in b["parts"].items() if k in ALLOCATOR_PARTS)
            # Pss of the non-allocator part: the allocators' pages are private (Pss = Rss).
            rss[np_], pss[np_] = b["os_bytes"] - alloc, b["pss_bytes"] - alloc
            print(f"| {np_} | {rss[np_] / MIB:.2f} | {pss[np_] / MIB:.2f} | "
                  + " | ".join(f"{b['parts'][k] / MIB:.2f}"
                               for k in ("heap", "lib_mpi", "lib_blas", "lib_other", "mpi_shm", "thread_stacks"))
                  + " |")
        # Pss(n) = a + b / n through np 1 and 4; Rss: the most seen (MPI's shared memory grows with n).
        b_shared = (pss[1] - pss[4]) / (1 - 1 / 4)
        a_fixed = pss[1] - b_shared
        print(f"\nconstants for train/plan_process.c (MiB): rss {max(rss.values()) / MIB:.2f}, "
              f"pss a {a_fixed / MIB:.2f}, b {b_shared / MIB:.2f} "
              f"(predicts np 2: {(a_fixed + b_shared / 2) / MIB:.2f}, measured {pss[2] / MIB:.2f})")


if __name__ == "__main__":
    main()
