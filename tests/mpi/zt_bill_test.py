#!/usr/bin/env python3
"""The whole bill per rank (docs/memory.md, "The whole bill") under real
mpirun, run by CTest.

usage: zt_bill_test.py CASE ZT_TRAIN ZT_RUN

reconcile  np 2 and 3 on the issue's configuration (stage 3, fp32, 4 layers
           of d_model 256): every rank's ranks[i].process in summary.json
           has every part either measured or listed in not_measured; the
           parts and unexplained_bytes add up to os_bytes exactly;
           |unexplained| <= 2% of os_bytes; os_bytes >= 95% of VmHWM (the
           kept sample is the one with the most); the JSONL's sampled steps
           and the metrics file carry the same parts; the exit table prints
           them.
oom        an out-of-memory stop prints the whole bill beside the
           allocator's report (reserved, not resident, the other parts).
leak       ZT_TEST_LEAK=1:1MiB on the issue's configuration at np 2: rank 1's
           heap is named by the leak watch within 2K steps (K the default
           window of 50), in its log, its JSONL and its metrics; rank 0,
           which leaks nothing, is never named.
plan       zt-plan's process total per rank and its node's Pss (train/
           plan_process.c) against a measured run of the issue's
           configuration at np 2: within the reserved band (-25%..+30%);
           under a memory cgroup of 64 MiB (where this test may make one)
           the node's ranks do not fit and the limit is the cgroup's.
clean      a clean run of 400 steps with the default leak settings names
           nothing on any rank (and its step ends were sampled often enough
           to be judged).
device_emu --device cuda on the CUDA emulator (ZT_CUDA=EMU builds), np 2:
           ranks[i].device_process, the JSONL's and the metrics' GPU bill:
           the allocator's reserved bytes as the allocator counts them, the
           GEMM workspace as cuBLAS's, NCCL's measured; without NVML (as
           here) the total, the context and the other processes are
           not_measured, never 0, and the JSONL says why; the OOM report
           carries the GPU's bill; a CPU run has none.
"""
import glob
import json
import os
import subprocess
import sys
import tempfile

CONFIG = ["--stage", "3", "--layers", "4", "--d-model", "256", "--heads", "4", "--seq-len", "128", "--vocab", "512",
          "--micro-batch", "8", "--threads", "1"]
# The leak cases: steps long enough (tens of ms) for the 1% sampling budget
# to take a step end every few steps, short enough for 400 of them.
LEAK_CONFIG = ["--layers", "2", "--d-model", "128", "--heads", "4", "--seq-len", "128", "--vocab", "256",
               "--micro-batch", "8", "--threads", "1"]
PARTS = ["allocator_allocated", "allocator_cached", "host_pool_allocated", "host_pool_cached", "lib_cuda", "lib_mpi",
         "lib_blas", "lib_other", "mpi_shm", "heap", "thread_stacks", "files"]


def launch(ctx, np_, args, expect_rc=0, env=None):
    cmd = [ctx["zt_run"], "-np", str(np_), ctx["zt"]] + args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ, **(env or {})))
    if expect_rc is not None and p.returncode != expect_rc:
        sys.exit(f"FAIL: {' '.join(cmd)}: exit {p.returncode}, expected {expect_rc}\n"
                 f"stdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-3000:]}")
    return p


def check_bill(b, where):
    """One sample: its parts, not_measured and the exact sum."""
    assert sorted(list(b["parts"]) + b["not_measured"]) == sorted(PARTS), (where, b)
    total = sum(b["parts"].values()) + b["unexplained_bytes"]
    assert total == b["os_bytes"], (where, total, b)
    assert all(v >= 0 for v in b["parts"].values()), (where, b)


def case_reconcile(ctx):
    for np_ in (2, 3):
        d = os.path.join(ctx["work"], f"np{np_}")
        prom = os.path.join(d, "zt.prom")
        p = launch(ctx, np_, CONFIG + ["--steps", "6", "--log-dir", d, "--metrics-file", prom])
        assert "process memory by rank" in p.stdout, p.stdout[-2000:]
        s = json.load(open(os.path.join(d, "summary.json")))
        worst = 0.0
        for r in s["ranks"]:
            b = r["process"]
            check_bill(b, (np_, r["rank"]))
            share = abs(b["unexplained_bytes"]) / b["os_bytes"]
            worst = max(worst, share)
            assert share <= 0.02, (np_, r["rank"], share, b)
            assert b["os_bytes"] >= 0.95 * b["vm_hwm"], (np_, r["rank"], b)
            # A CPU run maps no CUDA library (the CUDA module is opened for a GPU only).
            assert b["parts"].get("lib_cuda", 0) == 0, (np_, r["rank"], b)
            # On the CPU the device is host memory: the allocator's parts are measured.
            assert "allocator_allocated" in b["parts"] and b["parts"]["allocator_allocated"] > 0, b
            sampled = 0
            for line in open(os.path.join(d, f"rank{r['rank']}.jsonl")):
                rec = json.loads(line)
                if "process" in rec:
                    check_bill(rec["process"], (np_, r["rank"], rec["step"]))
                    sampled += 1
            assert sampled >= 1, (np_, r["rank"], "no step carries a sample")
            metrics = open(prom.replace("zt.prom", f"zt.rank{r['rank']}.prom")).read()
            assert 'zt_process_part_bytes{rank="%d",part="heap"}' % r["rank"] in metrics, metrics[-1500:]
            assert "zt_process_unexplained_bytes" in metrics
        print(f"ok: np {np_}: every rank's parts add up to os_bytes exactly; unexplained at most "
              f"{100 * worst:.2f}% of it; os_bytes >= 95% of VmHWM; JSONL and metrics carry the parts")


def case_oom(ctx):
    p = launch(ctx, 2, ["--layers", "2", "--d-model", "64", "--heads", "4", "--seq-len", "64", "--vocab", "128",
                        "--micro-batch", "4", "--steps", "2", "--threads", "1", "--mem-limit", "3MiB",
                        "--allocator", "simple"], expect_rc=3)
    assert "process (the OS's view, Rss over /proc/self/smaps)" in p.stderr, p.stderr[-3000:]
    for name in ("allocator_allocated", "lib_mpi", "heap", "unexplained", "reserved by the allocators but not resident"):
        assert name in p.stderr, (name, p.stderr[-3000:])
    print("ok: the out-of-memory report carries the whole bill")


def leaks_in(d, rank):
    """The JSONL's leak warnings of a rank: [(step, part, bytes_per_step)]; and the steps it judged."""
    named, judged = [], 0
    for line in open(os.path.join(d, f"rank{rank}.jsonl")):
        rec = json.loads(line)
        judged += rec.get("leak_judged", False)
        for w in rec.get("leaks", []):
            named.append((rec["step"], w["part"], w["bytes_per_step"]))
    return named, judged


def case_leak(ctx):
    d = os.path.join(ctx["work"], "leak")
    prom = os.path.join(d, "zt.prom")
    window = 50
    p = launch(ctx, 2, LEAK_CONFIG + ["--steps", str(2 * window), "--log-dir", d, "--metrics-file", prom],
               env={"ZT_TEST_LEAK": "1:1048576"})
    named, judged = leaks_in(d, 1)
    assert named, f"rank 1 leaked 1 MiB per step for {2 * window} steps and was not named ({judged} steps judged)"
    step, part, rate = named[0]
    assert part == "heap" and 0.8 * 1048576 < rate < 1.25 * 1048576, named
    assert step <= 2 * window, named
    log = p.stdout + p.stderr
    assert "leak watch: heap grew" in log, log[-3000:]
    metrics = open(prom.replace("zt.prom", "zt.rank1.prom")).read()
    assert 'zt_leak_bytes_per_step{rank="1",part="heap"}' in metrics, metrics[-1500:]
    assert 'zt_leak_warnings_total{rank="1"} 1' in metrics, metrics[-1500:]
    clean, _ = leaks_in(d, 0)
    assert not clean, ("rank 0 leaks nothing", clean)
    print(f"ok: a 1 MiB/step heap leak on rank 1 named at step {step} ({rate / 1024:.0f} KiB/step) in the log, "
          f"JSONL and metrics; rank 0 never named")


def case_clean(ctx):
    d = os.path.join(ctx["work"], "clean")
    p = launch(ctx, 2, LEAK_CONFIG + ["--steps", "400", "--log-dir", d])
    for rank in (0, 1):
        named, judged = leaks_in(d, rank)
        assert not named, (rank, named)
        assert judged >= 20, (rank, "the watch judged only", judged, "step ends of 400 steps")
    assert "leak watch" not in p.stdout + p.stderr, (p.stdout + p.stderr)[-3000:]
    print("ok: 400 clean steps at np 2, judged at 20 step ends or more, no part named on any rank")


def plan_process(ctx, args, world, prefix=()):
    plan = os.path.join(os.path.dirname(ctx["zt"]), "zt-plan")
    out = subprocess.run(list(prefix) + [plan, "--world", str(world), "--json"] + args, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)["process"]


def memory_cgroup():
    """A fresh child of this process's memory cgroup (v1 or v2), or None where none can be made."""
    for line in open("/proc/self/cgroup"):
        _, ctrl, path = line.rstrip("\n").split(":", 2)
        base = ("/sys/fs/cgroup/memory" if ctrl == "memory" else "/sys/fs/cgroup" if ctrl == "" else None)
        if base is None or not os.path.isdir(base + path):
            continue
        limit = "memory.limit_in_bytes" if ctrl == "memory" else "memory.max"
        d = os.path.join(base + path, f"zt_bill_test_{os.getpid()}")
        try:
            os.mkdir(d)
            open(os.path.join(d, limit), "w").write(str(64 << 20))
            return d
        except OSError:
            if os.path.isdir(d):
                os.rmdir(d)
    return None


def case_plan(ctx):
    q = plan_process(ctx, CONFIG, 2)
    assert q["measured"] and q["local_ranks"] == 2 and q["node_fits"], q
    d = os.path.join(ctx["work"], "plan")
    launch(ctx, 2, CONFIG + ["--steps", "6", "--log-dir", d, "--quiet"])
    s = json.load(open(os.path.join(d, "summary.json")))
    for r in s["ranks"]:
        ratio = q["rank_bytes"] / r["process"]["vm_hwm"] - 1
        assert -0.25 <= ratio <= 0.30, (r["rank"], q["rank_bytes"], r["process"]["vm_hwm"], ratio)
    pss = sum(r["process"]["pss_bytes"] for r in s["ranks"])
    node_ratio = q["node_bytes"] / pss - 1
    assert -0.25 <= node_ratio <= 0.30, (q["node_bytes"], pss, node_ratio)
    print(f"ok: zt-plan's process total {q['rank_bytes'] / 2**20:.1f} MiB per rank, {100 * ratio:+.1f}% of the "
          f"measured VmHWM; the node's Pss {q['node_bytes'] / 2**20:.1f} MiB, {100 * node_ratio:+.1f}% of measured")
    cg = memory_cgroup()
    if cg is None:
        print("skipped: no memory cgroup can be made here (the cgroup half)")
        return
    try:
        enter = ["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$@"', "sh"]
        q = plan_process(ctx, CONFIG, 8, prefix=enter)
    finally:
        os.rmdir(cg)
    assert q["node_limit_bytes"] == 64 << 20 and "cgroup" in q["node_limit_source"] and not q["node_fits"], q
    print("ok: under a 64 MiB memory cgroup the node's 8 ranks do not fit, and the limit named is the cgroup's")


DEVICE_PARTS = ["allocator_reserved", "cuda_context", "cublas", "backend_buffers", "nccl"]


def case_device_emu(ctx):
    env = {"ZT_EMU_DEVICES": "2"}
    d = os.path.join(ctx["work"], "device")
    launch(ctx, 2, ["--device", "cuda", "--stage", "3", "--steps", "3", "--quiet", "--trace", "0", "--log-dir", d,
                    "--metrics-file", os.path.join(d, "zt.prom")], env=env)
    s = json.load(open(os.path.join(d, "summary.json")))
    for r in s["ranks"]:
        b = r["device_process"]
        assert sorted(list(b["parts"]) + [p for p in b["not_measured"] if p in DEVICE_PARTS]) == sorted(DEVICE_PARTS), b
        assert set(b["not_measured"]) == {"os_bytes", "cuda_context", "other_processes"}, b  # no NVML here
        assert "os_bytes" not in b and "unexplained_bytes" not in b, b
        assert b["parts"]["cublas"] == 32 << 20, b  # the GEMM workspace (the emulator's handles hold nothing)
        assert 0 < b["parts"]["backend_buffers"] < 1 << 20 and b["parts"]["nccl"] == 0, b
        lines = [json.loads(x) for x in open(os.path.join(d, f"rank{r['rank']}.jsonl"))]
        for x in lines:
            assert x["device_process"]["parts"]["allocator_reserved"] == x["memory"]["reserved_bytes"], x
            assert "NVML" in x["device_process"]["why_not_measured"], x["device_process"]
        metrics = open(os.path.join(d, f"zt.rank{r['rank']}.prom")).read()
        assert 'zt_device_part_bytes{rank="%d",part="cublas"} %d' % (r["rank"], 32 << 20) in metrics, metrics[-1500:]
    p = launch(ctx, 2, ["--device", "cuda", "--stage", "3", "--steps", "2", "--mem-limit", "3MiB", "--allocator",
                        "simple", "--threads", "1"], expect_rc=3, env=env)
    for needle in ("device process: total not measured", "cublas", "other processes on this GPU: not measured"):
        assert needle in p.stderr, (needle, p.stderr[-3000:])
    c = os.path.join(ctx["work"], "cpu")
    launch(ctx, 1, ["--steps", "1", "--quiet", "--trace", "0", "--log-dir", c])
    assert "device_process" not in json.load(open(os.path.join(c, "summary.json")))["ranks"][0]
    print("ok: the GPU's bill on the emulator: measured parts named, the rest not_measured with NVML's absence said; "
          "in the JSONL, the summary, the metrics and the OOM report; none on the CPU")


CASES = {"reconcile": case_reconcile, "plan": case_plan, "oom": case_oom, "leak": case_leak, "clean": case_clean,
         "device_emu": case_device_emu}

if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in CASES:
        sys.exit(f"usage: {sys.argv[0]} {{{'|'.join(CASES)}}} ZT_TRAIN ZT_RUN")
    with tempfile.TemporaryDirectory(prefix="zt-bill-") as work:
        CASES[sys.argv[1]]({"zt": sys.argv[2], "zt_run": sys.argv[3], "work": work})
