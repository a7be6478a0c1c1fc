#!/usr/bin/env python3
"""--memory-snapshot DIR under real mpirun, run by CTest: each rank writes
DIR/rank<r>.pickle in the format of torch.cuda.memory._snapshot(), read
here with Python's own pickle (no torch): the segments, blocks and
device_traces keep the fields torch/cuda/_memory_viz.py and the memory_viz
page read; the allocated bytes the trace implies at its peak equal the
rank's peak_bytes in summary.json; --memory-snapshot-entries N keeps the
last N events; an OOM run writes its snapshot with an "oom" event.

usage: zt_memory_snapshot_test.py CASE ZT_TRAIN ZT_RUN
       zt_memory_snapshot_test.py pickle TEST_MEMORY_SNAPSHOT
"""
import os
import pickle
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mpi"))
from zt_harness import launch, main, train  # noqa: E402

MODEL = ["--layers", "2", "--d-model", "32", "--heads", "4", "--seq-len", "32", "--vocab", "48",
         "--micro-batch", "4", "--threads", "1", "--quiet", "--steps", "3"]
CATEGORIES = {"params", "grads", "master_params", "optimizer", "activations", "gathered_params", "comm_buffers",
              "workspace", "checkpoint_staging", "other"}
ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map",
           "segment_unmap", "oom"}


def load(path, kind=dict):
    with open(path, "rb") as f:
        data = f.read()
    snap = pickle.loads(data)
    assert isinstance(snap, kind), path
    return snap


def check_frames(frames, where):
    assert isinstance(frames, list), where
    for fr in frames:
        assert isinstance(fr["filename"], str) and isinstance(fr["line"], int) and isinstance(fr["name"], str), where
    names = {fr["filename"]: fr["name"] for fr in frames}
    assert "zerotrain/category" in names and "zerotrain/phase" in names, (where, frames)


def check_structure(snap, where):
    """The fields _memory_viz.py (segments, segsum, trace) and the page use."""
    traces = snap["device_traces"]
    oom = any(e["action"] == "oom" for e in traces[0])
    # Under a cap below one segment, an OOM run holds none.
    assert isinstance(snap["segments"], list) and (snap["segments"] or oom), where
    for seg in snap["segments"]:
        for k in ("device", "address", "total_size", "allocated_size", "active_size", "stream", "segment_type"):
            assert k in seg, (where, k)
        blocks = seg["blocks"]
        # segsum's invariant: the blocks tile the segment, in address order.
        assert sum(b["size"] for b in blocks) == seg["total_size"], (where, seg["address"])
        at = seg["address"]
        for b in blocks:
            assert b["address"] == at, (where, b["address"], at)
            at += b["size"]
            assert b["state"] in ("active_allocated", "inactive"), (where, b["state"])
            assert 0 <= b["requested_size"] <= b["size"], where
            if b["state"] == "active_allocated":
                assert b["category"] in CATEGORIES and b["requested_size"] > 0, (where, b)
                check_frames(b["frames"], where)
        active = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
        assert seg["allocated_size"] == active, (where, seg["allocated_size"], active)
    traces = snap["device_traces"]
    assert isinstance(traces, list) and len(traces) == 1 and traces[0], where
    for e in traces[0]:
        assert e["action"] in ACTIONS, (where, e["action"])
        assert isinstance(e["addr"], int) and e["size"] > 0 and e["stream"] == 0, (where, e)
        assert e["category"] in CATEGORIES | {"segment"}, (where, e)
        check_frames(e["frames"], where)
        if e["action"] == "oom":
            assert "device_free" in e, where


def implied_peak(snap):
    """The allocated bytes at their highest, replayed backwards from the
    blocks held at the end (as the page does), so a trace cut by the ring
    still gives the bytes held before it."""
    cur = sum(b["requested_size"] for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated")
    peak = cur
    for e in reversed(snap["device_traces"][0]):
        if e["action"] == "alloc":
            cur -= e["requested_size"]
        elif e["action"] == "free_completed":
            cur += e["requested_size"]
        assert cur >= 0, e
        peak = max(peak, cur)
    return peak


def run_and_check(ctx, np, allocator, extra=()):
    d = os.path.join(ctx["work"], f"snap-{allocator}-np{np}")
    s = train(ctx, np, MODEL + list(extra) + ["--allocator", allocator, "--memory-snapshot", d], f"log-{allocator}-np{np}")
    for r in range(np):
        snap = load(os.path.join(d, f"rank{r}.pickle"))
        where = f"np {np} {allocator} rank {r}"
        check_structure(snap, where)
        assert not os.path.exists(os.path.join(d, f"rank{r}.pickle.tmp")), where
        peak = implied_peak(snap)
        assert peak == s["ranks"][r]["peak_bytes"], (where, peak, s["ranks"][r]["peak_bytes"])
        segs = snap["segments"]
        if allocator == "simple":  # each system block is a segment of its own
            assert all(len(seg["blocks"]) == 1 for seg in segs), where
        elif allocator == "caching":  # whole segments from the system
            assert all(seg["total_size"] % (2 << 20) == 0 and not seg["is_expandable"] for seg in segs), where
        else:  # a pool's addresses, tiled as far as they have grown
            assert all(seg["is_expandable"] for seg in segs), where
            assert any(e["action"] == "segment_map" for e in snap["device_traces"][0]), where
        # The negative twin: one free fewer in the trace moves its peak.
        cut = dict(snap, device_traces=[[e for i, e in enumerate(snap["device_traces"][0]) if i != last_free(snap)]])
        assert implied_peak_safe(cut) != peak, where
    return d


def last_free(snap):
    return max(i for i, e in enumerate(snap["device_traces"][0]) if e["action"] == "free_completed")


def implied_peak_safe(snap):
    try:
        return implied_peak(snap)
    except AssertionError:
        return None


def case_np2(ctx):
    """np 2, stage 3: --allocator simple and caching."""
    for a in ("simple", "caching"):
        run_and_check(ctx, 2, a, ["--stage", "3"])
    print("ok: np 2 simple and caching: snapshots load, keep memory_viz's fields, and the trace's peak equals "
          "peak_bytes")


def case_np3(ctx):
    """np 3, stage 3 and stage 0, caching and expandable."""
    run_and_check(ctx, 3, "caching", ["--stage", "3"])
    run_and_check(ctx, 3, "expandable", ["--stage", "0"])
    print("ok: np 3 caching and expandable: snapshots as at np 2")


def case_entries(ctx):
    """--memory-snapshot-entries 25 keeps the last 25 events of the full trace
    (same actions, sizes and labels: the runs are deterministic), and the
    peak, replayed from the blocks held, still holds where the peak is in
    the window."""
    full = run_and_check(ctx, 1, "caching")
    d = os.path.join(ctx["work"], "snap-short")
    launch(ctx, 1, MODEL + ["--allocator", "caching", "--memory-snapshot", d, "--memory-snapshot-entries", "25"])
    short = load(os.path.join(d, "rank0.pickle"))
    check_structure(short, "entries 25")
    key = [(e["action"], e["size"], e["requested_size"], e["label"]) for e in short["device_traces"][0]]
    whole = [(e["action"], e["size"], e["requested_size"], e["label"])
             for e in load(os.path.join(full, "rank0.pickle"))["device_traces"][0]]
    assert len(whole) > 25 and len(key) == 25, (len(whole), len(key))
    assert key == whole[-25:], "not the last 25 events"
    assert short["allocator_settings"]["trace_max_entries"] == 25
    print(f"ok: --memory-snapshot-entries 25 keeps the last 25 of {len(whole)} events")


def case_oom(ctx):
    """np 2 under a 1 MiB cap: the run stops out of memory (exit 3) and each
    rank that ran out writes its snapshot, the last event an "oom" with the
    request's size; a DIR that cannot be made fails the run at its start."""
    d = os.path.join(ctx["work"], "snap-oom")
    log = os.path.join(ctx["work"], "log-oom")
    for a in ("simple", "caching"):
        launch(ctx, 2, MODEL + ["--allocator", a, "--mem-limit", "1MiB", "--memory-snapshot", d, "--log-dir", log],
               expect_rc=3)
        oom_ranks = [r for r in range(2) if os.path.exists(os.path.join(log, f"oom_rank{r}.txt"))]
        assert oom_ranks, "no rank reported an OOM"
        for r in oom_ranks:
            snap = load(os.path.join(d, f"rank{r}.pickle"))
            check_structure(snap, f"oom {a} rank {r}")
            last = snap["device_traces"][0][-1]
            assert last["action"] == "oom" and last["requested_size"] > 0, (a, r, last)
            assert snap["allocator_settings"]["limit_bytes"] == 1 << 20
            os.remove(os.path.join(d, f"rank{r}.pickle"))
            os.remove(os.path.join(log, f"oom_rank{r}.txt"))
    blocker = os.path.join(ctx["work"], "a-file")
    open(blocker, "w").close()
    p = launch(ctx, 1, MODEL + ["--memory-snapshot", os.path.join(blocker, "sub")], expect_rc=None)
    assert p.returncode != 0 and "a-file" in p.stderr + p.stdout, (p.returncode, p.stderr[-2000:])
    print("ok: an OOM run writes each failing rank's snapshot ending in an 'oom' event (simple and caching); "
          "a bad DIR fails the run at its start")


def case_pickle(exe):
    """The pickle writer's edge values and a CPU zt_mem's snapshot through a
    ring of 4 (tests/interop/test_memory_snapshot.c writes both)."""
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory(prefix="zt-snapshot-pickle-") as d:
        p = subprocess.run([exe, d], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        values = load(os.path.join(d, "values.pickle"), list)
        want = [0, 1, -1, 255, 256, 65535, 65536, 2**31 - 1, -2**31, 2**31, -2**31 - 1, 2**63 - 1, -2**63,
                2**64 - 1, 2**63, 0x00007f0012345678, 0.5, -1e300, True, False, None, {}, [], "",
                "block3 acts \u00e9", {"a": 1, "b": ["x"]}]
        assert values == want and [type(v) for v in values] == [type(v) for v in want], values
        ring = load(os.path.join(d, "ring.pickle"))
        check_structure(ring, "ring")
        events = ring["device_traces"][0]
        got = [(e["action"], e["label"], e["phase"]) for e in events]
        assert got == [("free_requested", "block3 acts", "forward"), ("free_completed", "block3 acts", "forward"),
                       ("segment_alloc", "", "forward"), ("alloc", "block1 gathered", "forward")], got
        live = {b["label"]: b for s in ring["segments"] for b in s["blocks"] if b["state"] == "active_allocated"}
        assert sorted(live) == ["block0 params", "block1 gathered"], live
        assert live["block1 gathered"]["category"] == "gathered_params" and live["block0 params"]["frames"][-1] == {
            "filename": "zerotrain/phase", "line": 0, "name": "init"}, live
        assert implied_peak(ring) == 6000 == ring["allocator_settings"]["allocated_bytes"]
        assert ring["allocator_settings"]["allocated_peak_bytes"] == 6000
    print("ok: the pickle writer's edge values load as written; a ring of 4 keeps the last 4 events")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "pickle":
        case_pickle(sys.argv[2])
        sys.exit(0)
    main({"np2": case_np2, "np3": case_np3, "entries": case_entries, "oom": case_oom}, "snapshot")
