#!/usr/bin/env python3
"""--trace-per-rank: each rank's DIR/rank_traces/trace_rank<r>.json has what
Holistic Trace Analysis reads (docs/interop_traces.md), and the merged
DIR/trace.json keeps its shape. Plain json only: HTA itself runs in
bench/bench_hta.py.

usage: zt_trace_hta_test.py CASE ZT_TRAIN ZT_RUN   (CASE: np2, np3)"""
import json
import os
import re
import subprocess
import sys
import tempfile

MODEL = ["--layers", "2", "--d-model", "32", "--heads", "4", "--seq-len", "32", "--vocab", "48",
         "--micro-batch", "4", "--threads", "1", "--quiet", "--bucket-size", "16KiB"]
STEPS = 4
KERNEL_CATS = ("kernel", "gpu_memcpy")
# Rounding of the %.3f timestamps: a kernel may start this much before the
# previous one on its stream ends (microseconds).
EPS_US = 0.002


def launch(zt_run, zt, np_, args):
    cmd = [zt_run, "-np", str(np_), zt] + args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)}: exit {p.returncode}\nstdout:\n{p.stdout[-3000:]}\n"
                 f"stderr:\n{p.stderr[-3000:]}")


def hta_rank_of(path):
    """The rank as HTA's trace_file.py finds it: the first line matching
    "rank":<whitespace><digits>."""
    pattern = re.compile(r'"rank":\s+(\d+)')
    with open(path) as f:
        for line in f:
            m = pattern.search(line)
            if m:
                return int(m.group(1))
    return None


def inside(e, span):
    return span["ts"] - EPS_US <= e["ts"] and e["ts"] + e["dur"] <= span["ts"] + span["dur"] + EPS_US


def check_chrome_format(t):
    """What Perfetto's and chrome://tracing's JSON importers need: a
    traceEvents array of events with a phase, integer pid and tid, and for
    complete events a name and numeric ts and dur >= 0."""
    assert isinstance(t["traceEvents"], list)
    for e in t["traceEvents"]:
        assert e["ph"] in ("M", "X", "C", "i"), e
        assert isinstance(e["pid"], int) and isinstance(e.get("tid", 0), int), e
        if e["ph"] == "X":
            assert isinstance(e["name"], str) and isinstance(e["ts"], (int, float)), e
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e


def check_rank_trace(t, rank, world, steps):
    """Raises AssertionError at the first field HTA needs that is missing
    or wrong; returns a line of counts."""
    info = t["distributedInfo"]
    assert (info["rank"], info["world_size"]) == (rank, world), info
    assert info["backend"] in ("mpi", "nccl", "gloo"), info
    events = t["traceEvents"]
    assert all(e["ph"] in ("M", "X") for e in events), "only metadata and complete events"
    step_spans = [e for e in events if e["name"].startswith("ProfilerStep#")]
    assert sorted(e["name"] for e in step_spans) == sorted(f"ProfilerStep#{s}" for s in range(1, steps + 1)), \
        [e["name"] for e in step_spans]
    assert all(e["cat"] == "user_annotation" and "stream" not in e.get("args", {}) for e in step_spans)
    kernels = [e for e in events if e.get("cat") in KERNEL_CATS]
    launches = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}
    assert kernels, "no kernel events"
    for k in kernels:
        a = k.get("args", {})
        for field in ("device", "stream", "correlation"):
            assert isinstance(a.get(field), int), (field, k)
        assert a["stream"] > 0, k  # HTA: stream > 0 is the GPU's, -1 the host's
        assert (k["pid"], k["tid"]) == (a["device"], a["stream"]), k
        launch_ev = launches.get(a["correlation"])
        assert launch_ev is not None, ("kernel without its launch", k)
        assert launch_ev["ts"] <= k["ts"] + EPS_US, (launch_ev, k)
        assert any(inside(launch_ev, s) for s in step_spans), ("launch outside every step", launch_ev)
    assert len(launches) == len(kernels), "one launch per kernel"
    # Every step holds its compute kernels whole.
    for s in step_spans:
        names = {k["name"] for k in kernels if inside(k, s)}
        assert {"zt::forward", "zt::backward", "zt::optimizer"} <= names, (s["name"], names)
    # Collectives: NCCL's names, which HTA counts as communication.
    comm = [k for k in kernels if k["args"]["stream"] == 20]
    assert comm and all(k["name"].startswith("ncclDevKernel_") for k in comm), comm[:3]
    colls = {k["args"]["Collective name"] for k in comm}
    assert {"all_gather", "reduce_scatter"} <= colls, colls
    # One kernel at a time per stream, in file order.
    last_end = {}
    for k in kernels:
        key = (k["pid"], k["tid"])
        assert k["ts"] + EPS_US >= last_end.get(key, float("-inf")), ("overlap on a stream", k)
        last_end[key] = k["ts"] + k["dur"]
    copies = [k for k in kernels if k["cat"] == "gpu_memcpy"]
    assert all(re.match(r"^Memcpy (HtoD|DtoH) ", k["name"]) for k in copies), copies[:3]
    return f"{len(kernels)} kernels ({len(comm)} collectives, {len(copies)} copies), {len(step_spans)} steps"


def negative_twins(t, rank, world, steps):
    """The check rejects traces that lack what HTA needs."""
    def mutated(fn):
        u = json.loads(json.dumps(t))
        fn(u)
        return u

    def first_kernel(u):
        return next(e for e in u["traceEvents"] if e.get("cat") == "kernel")

    cases = {
        "wrong rank": lambda u: u["distributedInfo"].update(rank=rank + 1),
        "kernel without stream": lambda u: first_kernel(u)["args"].pop("stream"),
        "kernel without launch": lambda u: first_kernel(u)["args"].update(correlation=10 ** 9),
        "a step missing": lambda u: u["traceEvents"].remove(
            next(e for e in u["traceEvents"] if e["name"].startswith("ProfilerStep#"))),
        "collective not nccl": lambda u: next(e for e in u["traceEvents"] if e["name"].startswith(
            "ncclDevKernel_")).update(name="all_gather"),
    }
    for name, fn in cases.items():
        try:
            check_rank_trace(mutated(fn), rank, world, steps)
        except (AssertionError, KeyError, StopIteration):
            continue
        sys.exit(f"FAIL: the check accepts a trace with {name}")


def check_merged(d, world):
    t = json.load(open(os.path.join(d, "trace.json")))
    check_chrome_format(t)
    assert set(t) == {"displayTimeUnit", "traceEvents"}, set(t)
    events = t["traceEvents"]
    assert {e["pid"] for e in events} == set(range(world))
    names = {e["name"] for e in events}
    assert {"forward", "backward", "optimizer", "all_gather", "reduce_scatter"} <= names
    assert not [n for n in names if n.startswith("ProfilerStep#") or n.startswith("ncclDevKernel")]
    assert not [f for f in os.listdir(d) if f.endswith(".part")]


def run_case(zt, zt_run, world, extra, work):
    d = os.path.join(work, f"np{world}")
    launch(zt_run, zt, world, MODEL + extra + ["--steps", str(STEPS), "--log-dir", d, "--trace-per-rank", "1"])
    folder = os.path.join(d, "rank_traces")
    assert sorted(os.listdir(folder)) == sorted(f"trace_rank{r}.json" for r in range(world)), os.listdir(folder)
    for r in range(world):
        path = os.path.join(folder, f"trace_rank{r}.json")
        assert hta_rank_of(path) == r, (path, hta_rank_of(path))
        t = json.load(open(path))
        check_chrome_format(t)
        line = check_rank_trace(t, r, world, STEPS)
        if r == 0:
            negative_twins(t, r, world, STEPS)
        print(f"ok: rank {r}/{world}: {line}")
    check_merged(d, world)
    # Off by default: the merged trace alone.
    d0 = os.path.join(work, f"np{world}_off")
    launch(zt_run, zt, world, MODEL + extra + ["--steps", "2", "--log-dir", d0])
    assert not os.path.exists(os.path.join(d0, "rank_traces"))
    check_merged(d0, world)
    print(f"ok: np {world}: merged trace.json keeps its shape; no rank_traces/ without --trace-per-rank")


CASES = {
    "np2": (2, ["--stage", "3"]),
    # Uneven shards, and offload copies on the h2d/d2h streams.
    "np3": (3, ["--stage", "3", "--offload", "cpu"]),
}


def main():
    case, zt, zt_run = sys.argv[1], sys.argv[2], sys.argv[3]
    world, extra = CASES[case]
    with tempfile.TemporaryDirectory(prefix="zt_trace_hta_") as work:
        run_case(zt, zt_run, world, extra, work)


if __name__ == "__main__":
    main()
