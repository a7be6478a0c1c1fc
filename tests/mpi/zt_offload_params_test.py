#!/usr/bin/env python3
"""Parameter offload (--offload-params cpu: stage 3's parameter shards in
the host pool, DeepSpeed's offload_param) under real mpirun, run by CTest:
bitwise the run without it, no parameter bytes on the device, the shards'
bytes in the host pool, zt-plan exact on both, the checkpoints the same
format as any other, and the configurations it cannot run refused.

usage: zt_offload_params_test.py CASE ZT_TRAIN ZT_RUN
"""
import json
import os
import subprocess

from zt_harness import launch, losses, main, train

BASE = ["--stage", "3", "--offload", "cpu", "--threads", "1", "--quiet", "--trace", "0"]


def plan(ctx, np_, flags):
    zt_plan = os.path.join(os.path.dirname(ctx["zt"]), "zt-plan")
    p = subprocess.run([zt_plan, "--world", str(np_), "--json"] + flags, capture_output=True, text=True)
    return json.loads(p.stdout)


def case_bitwise(ctx):
    """np 1-3 (3: uneven shards), fp32 and bf16 (and gradient accumulation
    2 at np 2): losses and parameters
    bitwise those of optimizer offload alone; every rank's device params
    peak 0 and its host-pool params equal to the device params of the run
    without it (the shard of every unit); zt-plan's device peak and host
    pool equal the measured ones; and the shards come in over the link at
    every gather (--link pcie4: the planner's bytes per step exactly)."""
    for np_ in (1, 2, 3):
        for dtype in ("fp32", "bf16") if np_ != 2 else ("fp32", "fp32+accum"):
            accum = ["--grad-accum", "2"] if dtype.endswith("+accum") else []
            dtype = dtype.split("+")[0]
            flags = BASE + ["--dtype", dtype, "--link", "pcie4"] + accum
            a = train(ctx, np_, flags + ["--steps", "4"], f"plain-{np_}-{dtype}-{len(accum)}")
            b = train(ctx, np_, flags + ["--steps", "4", "--offload-params", "cpu"], f"params-{np_}-{dtype}-{len(accum)}")
            assert losses(a) == losses(b) and a["params_digest"] == b["params_digest"], (np_, dtype)
            p = plan(ctx, np_, flags + ["--offload-params", "cpu"])
            for ra, rb in zip(a["ranks"], b["ranks"]):
                assert rb["peak_by_category"]["params"] == 0, (np_, dtype, rb)
                assert rb["host_peak_by_category"]["params"] == ra["peak_by_category"]["params"] > 0, (ra, rb)
                assert rb["peak_bytes"] == p["peak_bytes"] and rb["host_peak_bytes"] == p["host_bytes"], (rb, p)
            t = p["transfers_per_step"]
            for steps in b["steps"]:
                for x in steps[1:]:
                    assert x["link"]["h2d_bytes"] == t["h2d_bytes"], (np_, dtype, x["link"], t)
                    assert x["link"]["d2h_bytes"] == t["d2h_bytes"], (np_, dtype, x["link"], t)
    print("ok: --offload-params cpu: bitwise equal to optimizer offload at np 1-3 (fp32, bf16), 0 device param "
          "bytes, the shards in the host pool; zt-plan exact on device, host and link bytes")


def case_resume(ctx):
    """np 3: 8 steps straight equal 4 steps with --offload-params cpu,
    checkpointed, then 4 more resumed without it (the same checkpoint
    format), and the reverse."""
    straight = train(ctx, 3, BASE + ["--steps", "8"], "straight")
    for first, second in ((["--offload-params", "cpu"], []), ([], ["--offload-params", "cpu"])):
        d = os.path.join(ctx["work"], f"ckpt-{len(first)}")
        train(ctx, 3, BASE + first + ["--steps", "4", "--save-every", "4", "--save-dir", d], f"a-{len(first)}")
        r = train(ctx, 3, BASE + second + ["--steps", "8", "--resume", d], f"b-{len(first)}")
        assert r["params_digest"] == straight["params_digest"], (first, second)
        assert losses(r) == losses(straight)[4:], (first, second, losses(r), losses(straight))
    print("ok: a checkpoint of a parameter-offload run resumes without it, and the reverse, bitwise")


def case_refused(ctx):
    """--offload-params cpu needs stage 3 and --offload cpu, without
    --offload-delay: otherwise every rank stops with exit 2 naming it. A
    DeepSpeed config's zero_optimization.offload_param.device "cpu" selects
    it."""
    for bad in (["--stage", "2", "--offload", "cpu"], ["--stage", "3", "--offload", "none"],
                ["--stage", "3", "--offload", "cpu", "--offload-delay", "1"]):
        p = launch(ctx, 2, bad + ["--offload-params", "cpu", "--steps", "1", "--quiet"], expect_rc=2)
        assert "--offload-params cpu needs --stage 3 and --offload cpu" in p.stderr, (bad, p.stderr[-600:])
    cfg = os.path.join(ctx["work"], "ds.json")
    with open(cfg, "w") as f:
        json.dump({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                                         "offload_param": {"device": "cpu", "pin_memory": True}}}, f)
    s = train(ctx, 2, ["--config", cfg, "--steps", "2", "--quiet", "--trace", "0"], "ds")
    assert all(r["peak_by_category"]["params"] == 0 and r["host_peak_by_category"]["params"] > 0 for r in s["ranks"])
    print("ok: --offload-params cpu refused below stage 3, without --offload cpu and with --offload-delay; "
          "DeepSpeed's offload_param selects it")


def case_cuda_emu(ctx):
    """--device cuda on the emulator, np 2 over NCCL with stream jitter: the
    shards in pinned host memory, copied in on the compute stream before
    each all-gather; bitwise optimizer offload alone, 0 device param bytes."""
    env = {"ZT_EMU_DEVICES": "2", "ZT_EMU_JITTER_US": "200", "ZT_EMU_SEED": "9"}
    flags = BASE + ["--device", "cuda", "--steps", "4"]
    a = train(ctx, 2, flags, "cu-plain", env)
    b = train(ctx, 2, flags + ["--offload-params", "cpu"], "cu-params", env)
    assert losses(a) == losses(b) and a["params_digest"] == b["params_digest"]
    assert all(r["peak_by_category"]["params"] == 0 and r["host_peak_by_category"]["params"] > 0 for r in b["ranks"])
    print("ok: cuda emulator: --offload-params cpu bitwise equal to optimizer offload, 0 device param bytes")


CASES = {"bitwise": case_bitwise, "resume": case_resume, "refused": case_refused, "cuda_emu": case_cuda_emu}

if __name__ == "__main__":
    main(CASES, "offload-params")
