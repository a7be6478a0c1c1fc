#!/usr/bin/env python3
"""The NVMe tier (--offload nvme, --offload-params nvme: the fp32 master,
the optimizer state and stage 3's parameter shards in a swap file per rank,
streamed through a bounded set of host buffers; DeepSpeed's
offload_optimizer / offload_param device nvme) under real mpirun, run by
CTest: bitwise host offload, host memory only the buffers (the accounting
and zt-plan exact, VmHWM lower by the state it no longer holds), an I/O
error that stops every rank naming the file, the fallback path said in the
log, checkpoints in the usual format, and what it cannot run refused.

usage: zt_offload_nvme_test.py CASE ZT_TRAIN ZT_RUN
"""
import json
import os
import re
import subprocess
import time

from zt_harness import launch, losses, main, plan, train

BASE = ["--threads", "1", "--quiet", "--trace", "0", "--layers", "2", "--d-model", "64", "--heads", "4",
        "--seq-len", "32", "--vocab", "64", "--micro-batch", "2"]


def nvme(ctx, *extra):
    return ["--offload", "nvme", "--nvme-path", os.path.join(ctx["work"], "swap")] + list(extra)


def case_bitwise(ctx):
    """np 1-3 (3: uneven shards), fp32 and bf16, stages 3 and 1, SGD once,
    buffers of 1, 2 and 4 and blocks small enough that every unit streams in
    several chunks: losses and parameters bitwise those of host offload;
    no master or optimizer bytes in the host pool; every rank's host pool
    and device peaks, the swap file's size and the I/O per step equal
    zt-plan's."""
    runs = [(1, "fp32", "3", [], 2), (2, "bf16", "3", ["--offload-params", "nvme"], 1),
            (3, "fp32", "3", ["--offload-params", "nvme"], 4), (3, "bf16", "1", [], 2),
            (2, "fp32", "2", ["--optimizer", "sgd"], 3)]
    for np_, dtype, stage, more, k in runs:
        flags = BASE + ["--dtype", dtype, "--stage", stage, "--steps", "3"] + more
        host_params = ["--offload-params", "cpu"] if "nvme" in more else []
        plain = [x for x in flags if x != "nvme" and x != "--offload-params"] + host_params
        a = train(ctx, np_, plain + ["--offload", "cpu"], f"host-{np_}-{dtype}-{stage}-{k}")
        tier = nvme(ctx, "--nvme-buffers", str(k), "--nvme-block-size", "8KiB")
        b = train(ctx, np_, flags + tier, f"nvme-{np_}-{dtype}-{stage}-{k}")
        what = (np_, dtype, stage, more, k)
        assert losses(a) == losses(b) and a["params_digest"] == b["params_digest"], what
        p = plan(ctx, np_, flags + tier)
        for r, (ra, rb) in enumerate(zip(a["ranks"], b["ranks"])):
            hb = rb["host_peak_by_category"]
            assert ra["host_peak_by_category"]["master_params"] > 0 and hb["master_params"] == hb["optimizer"] == 0, (what, hb)
            if "nvme" in more:
                assert hb["params"] == 0 and rb["peak_by_category"]["params"] == 0, (what, rb)
            assert rb["peak_bytes"] == p["peak_bytes"] and rb["host_peak_bytes"] == p["host_bytes"], (what, rb, p)
            for x in b["steps"][r]:
                io = x["nvme"]
                assert io["file_bytes"] == p["nvme"]["file_bytes"], (what, io, p["nvme"])
                assert io["read_bytes"] == p["nvme"]["read_bytes_per_step"], (what, io, p["nvme"])
                assert io["write_bytes"] == p["nvme"]["write_bytes_per_step"], (what, io, p["nvme"])
    print("ok: --offload nvme (and --offload-params nvme): bitwise host offload at np 1-3, fp32 and bf16, stages 1-3, "
          "AdamW and SGD, 1-4 buffers; host pool, device peaks, swap file and I/O per step equal zt-plan's")


def case_memory(ctx):
    """np 2, 3.3M parameters at stage 3: with the state in the swap file,
    each rank's VmHWM is lower than under host offload by at least half of
    the state it no longer holds (12 bytes per owned parameter), its host
    pool holds the buffers and no state, and the swap file is what the
    closed form gives. The negative twin: host offload's own host pool holds
    that state."""
    flags = ["--threads", "1", "--quiet", "--trace", "0", "--layers", "4", "--d-model", "256", "--heads", "4",
             "--seq-len", "32", "--vocab", "256", "--micro-batch", "2", "--steps", "2", "--stage", "3"]
    a = train(ctx, 2, flags + ["--offload", "cpu"], "host")
    tier = nvme(ctx, "--nvme-block-size", "64KiB", "--nvme-buffers", "4")
    b = train(ctx, 2, flags + tier, "nvme")
    p = plan(ctx, 2, flags + tier)
    for ra, rb in zip(a["ranks"], b["ranks"]):
        state = ra["host_peak_by_category"]["master_params"] + ra["host_peak_by_category"]["optimizer"]
        assert state > 10 * 2**20, ra
        saved = ra["os_peak_bytes"] - rb["os_peak_bytes"]
        assert saved >= state / 2, (saved, state, ra["os_peak_bytes"], rb["os_peak_bytes"])
        assert rb["host_peak_bytes"] == p["host_bytes"] < ra["host_peak_bytes"] - state / 2, (rb, p)
        assert p["nvme"]["file_bytes"] >= state, (p["nvme"], state)
        print(f"  rank {ra['rank']}: VmHWM {ra['os_peak_bytes']/2**20:.1f} MiB (host) vs {rb['os_peak_bytes']/2**20:.1f} "
              f"MiB (nvme), state {state/2**20:.1f} MiB, nvme host pool {rb['host_peak_bytes']/2**20:.2f} MiB")
    print("ok: VmHWM lower by at least half the state moved to the swap file; the host pool holds the buffers only")


def case_io_error(ctx):
    """The test hook fails rank 1's 3rd write (while the initial values
    are written), every rank's 12th read and rank 1's 14th write (in the
    first step's stream): every rank stops with exit 1 within seconds, the
    message names the swap file and the operation, and no process is left."""
    for spec, rank in (("write:3:1", 1), ("read:12", 0), ("write:14:1", 1)):
        t0 = time.time()
        p = launch(ctx, 2, BASE + ["--stage", "3", "--steps", "3"] + nvme(ctx, "--nvme-block-size", "8KiB"),
                   expect_rc=1, env={"ZT_TEST_NVME_FAIL": spec})
        took = time.time() - t0
        assert took < 60, took
        name = f"zt-swap-rank{rank}.bin"
        assert name in p.stderr and ("write" if spec.startswith("write") else "read") in p.stderr, p.stderr[-1500:]
        assert "Input/output error" in p.stderr, p.stderr[-1500:]
        assert "failed alone" not in p.stderr, p.stderr[-1500:]
        print(f"  ZT_TEST_NVME_FAIL={spec}: exit 1 after {took:.1f} s")
    left = subprocess.run(["pgrep", "-f", ctx["work"]], capture_output=True, text=True).stdout.split()
    assert not left, left
    print("ok: a failed write or read of the swap file stops every rank with exit 1, naming the file")


def case_io_paths(ctx):
    """The log says which I/O path runs: --nvme-io pread runs pread/pwrite and
    says it was asked for; auto says io_uring, or the fallback and why; the
    file is opened with O_DIRECT or the log says why not. Both bitwise."""
    runs = {}
    for io in ("auto", "pread"):
        d = os.path.join(ctx["work"], f"io-{io}")
        flags = [x for x in BASE if x != "--quiet"] + ["--stage", "3", "--steps", "2", "--log-dir", d]
        p = launch(ctx, 2, flags + nvme(ctx, "--nvme-io", io, "--nvme-block-size", "8KiB"))
        line = next((l for l in p.stdout.splitlines() if "nvme:" in l), "")
        assert line, p.stdout[-1500:]
        if io == "pread":
            assert "pread/pwrite (asked for)" in line, line
        else:
            assert re.search(r"io_uring \(queue depth \d+\)|pread/pwrite fallback \(", line), line
        assert "O_DIRECT" in line or "buffered (" in line, line
        with open(os.path.join(d, "summary.json")) as f:
            runs[io] = json.load(f)["params_digest"]
        print(f"  --nvme-io {io}: {line.strip()}")
    assert runs["auto"] == runs["pread"], runs
    print("ok: the log names the I/O path (io_uring or the pread/pwrite fallback, O_DIRECT or buffered)")


def case_resume(ctx):
    """np 3: 6 steps straight under host offload equal 3 steps under
    --offload nvme, checkpointed, then 3 more resumed under host offload
    (the same checkpoint format), and the reverse; and a DeepSpeed config's
    offload_optimizer device nvme selects the tier."""
    flags = BASE + ["--stage", "3"]
    straight = train(ctx, 3, flags + ["--offload", "cpu", "--steps", "6"], "straight")
    tier = nvme(ctx, "--nvme-block-size", "8KiB")
    for first, second in ((tier, ["--offload", "cpu"]), (["--offload", "cpu"], tier)):
        d = os.path.join(ctx["work"], f"ckpt-{first[1]}")
        train(ctx, 3, flags + first + ["--steps", "3", "--save-every", "3", "--save-dir", d], f"a-{first[1]}")
        r = train(ctx, 3, flags + second + ["--steps", "6", "--resume", d], f"b-{first[1]}")
        assert r["params_digest"] == straight["params_digest"], (first, second)
        assert losses(r) == losses(straight)[3:], (first, second)
    cfg = os.path.join(ctx["work"], "ds.json")
    swap = os.path.join(ctx["work"], "ds-swap")
    with open(cfg, "w") as f:
        json.dump({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": swap},
                                         "offload_param": {"device": "nvme", "nvme_path": swap}},
                   "aio": {"block_size": 8192, "queue_depth": 8}}, f)
    s = train(ctx, 2, BASE + ["--config", cfg, "--steps", "2"], "ds")
    assert all(r["host_peak_by_category"]["master_params"] == 0 and r["peak_by_category"]["params"] == 0
               for r in s["ranks"]), s["ranks"]
    assert not os.listdir(swap), os.listdir(swap)  # the swap files go with the run
    print("ok: checkpoints of an NVMe run resume under host offload and the reverse, bitwise; DeepSpeed's nvme "
          "device selects the tier; the swap files are removed at the end")


def case_refused(ctx):
    """What the tier cannot run stops every rank with exit 2 naming it: no
    --nvme-path, Adafactor and 8-bit Adam (their state does not stream in
    chunks), the delayed update, --offload-params nvme without --offload
    nvme, a block size that is not a multiple of 8 KiB."""
    bad = [(["--offload", "nvme"], "--offload nvme needs --nvme-path"),
           (nvme(ctx, "--optimizer", "adafactor"), "--offload nvme runs --optimizer adamw or sgd, not adafactor"),
           (nvme(ctx, "--optimizer", "adam8bit"), "--offload nvme runs --optimizer adamw or sgd, not adam8bit"),
           (nvme(ctx, "--offload-delay", "1"), "--offload-delay 1 needs --offload cpu (got --offload nvme)"),
           (["--offload", "cpu", "--offload-params", "nvme"], "--offload-params nvme needs --offload nvme"),
           (nvme(ctx, "--nvme-block-size", "12KiB"), "is not a multiple of 8KiB")]
    for flags, needle in bad:
        p = launch(ctx, 2, BASE + ["--stage", "3", "--steps", "1"] + flags, expect_rc=2)
        assert needle in p.stderr, (flags, p.stderr[-800:])
    print("ok: the NVMe tier's impossible configurations are refused by name")


def case_cuda_emu(ctx):
    """--device cuda on the emulator, np 2 over NCCL with stream jitter: the
    state and the shards in the swap file, the new parameters to the device
    on the h2d stream, the shards staged in pinned buffers before each
    all-gather; bitwise host offload."""
    env = {"ZT_EMU_DEVICES": "2", "ZT_EMU_JITTER_US": "200", "ZT_EMU_SEED": "5"}
    flags = BASE + ["--device", "cuda", "--steps", "3", "--stage", "3", "--dtype", "bf16"]
    for params in ([], ["--offload-params", "nvme"]):
        host = ["--offload-params", "cpu"] if params else []
        a = train(ctx, 2, flags + ["--offload", "cpu"] + host, f"cu-host-{len(params)}", env)
        b = train(ctx, 2, flags + params + nvme(ctx, "--nvme-block-size", "8KiB", "--nvme-buffers", "2"),
                  f"cu-nvme-{len(params)}", env)
        assert losses(a) == losses(b) and a["params_digest"] == b["params_digest"], params
        assert all(r["host_peak_by_category"]["master_params"] == 0 for r in b["ranks"]), b["ranks"]
    print("ok: cuda emulator: --offload nvme (and --offload-params nvme) bitwise host offload")


CASES = {"bitwise": case_bitwise, "memory": case_memory, "io_error": case_io_error, "io_paths": case_io_paths,
         "resume": case_resume, "refused": case_refused, "cuda_emu": case_cuda_emu}

if __name__ == "__main__":
    main(CASES, "offload-nvme")
