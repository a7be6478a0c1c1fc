#!/usr/bin/env python3
"""Activation offload (--offload-activations cpu: under --recompute full
each block's kept input lives in the host pool between its forward and its
backward, DeepSpeed's cpu_checkpointing) under real mpirun, run by CTest:
bitwise the run without it, a lower device activations peak, the inputs'
bytes in the host pool and on the link, zt-plan exact on all of them, and
the configurations it cannot run refused.

usage: zt_offload_activations_test.py CASE ZT_TRAIN ZT_RUN
"""
import json
import os
import subprocess

from zt_harness import launch, losses, main, train

# A 4-layer model small enough for a few dozen runs on 2 cores.
L, B, T, C = 4, 4, 32, 64
MODEL = ["--layers", str(L), "--d-model", str(C), "--heads", "4", "--seq-len", str(T), "--micro-batch", str(B),
         "--vocab", "64", "--threads", "1", "--quiet", "--trace", "0"]
FULL = MODEL + ["--recompute", "full"]
OFF = ["--offload-activations", "cpu"]


def kept_input_bytes(dtype):
    """One block's kept input [B,T,C] in the compute dtype."""
    return B * T * C * (2 if dtype == "bf16" else 4)


def plan(ctx, np_, flags):
    zt_plan = os.path.join(os.path.dirname(ctx["zt"]), "zt-plan")
    p = subprocess.run([zt_plan, "--world", str(np_), "--json"] + flags, capture_output=True, text=True)
    assert p.returncode in (0, 1), (flags, p.stderr)
    return json.loads(p.stdout)


def same_training(a, b):
    return losses(a) == losses(b) and a["params_digest"] == b["params_digest"]


def bitwise_at(ctx, nps):
    """At each np of nps, fp32 and bf16, stage 3 and stage 1 (stage 0 at np
    1): losses and parameters bitwise those of --recompute full alone."""
    for np_ in nps:
        for dtype in ("fp32", "bf16"):
            for stage in ("3", "1" if np_ > 1 else "0"):
                flags = FULL + ["--stage", stage, "--dtype", dtype, "--steps", "3"]
                a = train(ctx, np_, flags, f"full-{np_}-{dtype}-{stage}")
                b = train(ctx, np_, flags + OFF, f"off-{np_}-{dtype}-{stage}")
                assert same_training(a, b), (np_, dtype, stage, losses(a), losses(b))


def case_bitwise(ctx):
    """np 2 (bitwise_at; np 1 and 3 are case bitwise_np13's); and under
    ZT_CPU_DEFER_COPIES=1 (copy-stream copies happen only when waited for,
    so a missing wait reads stale or freed data) still bitwise. Negative
    twin: a run with another seed is told apart."""
    bitwise_at(ctx, (2,))
    flags = FULL + ["--stage", "3", "--steps", "3", "--grad-accum", "2"]
    a = train(ctx, 2, flags, "full-accum")
    b = train(ctx, 2, flags + OFF, "defer", env={"ZT_CPU_DEFER_COPIES": "1"})
    assert same_training(a, b), (losses(a), losses(b))
    c = train(ctx, 2, flags + OFF + ["--seed", "99"], "other-seed")
    assert not same_training(a, c), "the comparison cannot tell two trainings apart"
    print("ok: --offload-activations cpu bitwise equal to --recompute full at np 2 (fp32, bf16, stages 1 and 3), "
          "also with deferred copies and two micro-batches; another seed is told apart")


def case_bitwise_np13(ctx):
    """bitwise_at np 1 and 3: one rank (stage 0) and uneven shards."""
    bitwise_at(ctx, (1, 3))
    print("ok: --offload-activations cpu bitwise equal to --recompute full at np 1 and 3 (fp32, bf16, stages 0/1 "
          "and 3)")


def act_peaks(s):
    return [r["peak_by_category"]["activations"] for r in s["ranks"]]


def lowered_enough(full, off, dtype):
    """Every rank's device activations peak is lower by at least the L - 2
    kept inputs not in flight."""
    need = (L - 2) * kept_input_bytes(dtype)
    return all(f - o >= need for f, o in zip(act_peaks(full), act_peaks(off)))


def case_memory(ctx):
    """np 2, fp32 and bf16: the device activations peak falls by at least
    (L - 2) x B T C d (by L - 1 of them: only the input in use and the one
    coming back stay), the host pool holds the L kept inputs (its
    activations peak L x B T C d exactly, nothing without offload), and the
    JSONL's offload transfers count them once each way per micro-batch.
    Negative twins: recompute alone against itself is not lowered enough,
    and L - 1 inputs are not the host's bytes."""
    for dtype in ("fp32", "bf16"):
        flags = FULL + ["--stage", "3", "--dtype", dtype, "--steps", "2", "--grad-accum", "2"]
        full = train(ctx, 2, flags, f"mem-full-{dtype}")
        off = train(ctx, 2, flags + OFF, f"mem-off-{dtype}")
        k = kept_input_bytes(dtype)
        assert lowered_enough(full, off, dtype), (dtype, act_peaks(full), act_peaks(off), k)
        assert not lowered_enough(full, full, dtype), "the peak check cannot fail"
        for r, rf in zip(off["ranks"], full["ranks"]):
            assert rf["peak_by_category"]["activations"] - r["peak_by_category"]["activations"] == (L - 1) * k, (r, rf)
            assert r["host_peak_by_category"]["activations"] == L * k, (dtype, r["host_peak_by_category"], k)
            assert r["host_peak_by_category"]["activations"] != (L - 1) * k
            assert rf["host_peak_bytes"] == 0, rf
        for steps in off["steps"]:
            for x in steps:
                assert x["offload"]["activations_d2h_bytes"] == x["offload"]["activations_h2d_bytes"] == 2 * L * k, x
    print(f"ok: device activations peak lower by (L-1) x {kept_input_bytes('fp32')} bytes (fp32; half in bf16), "
          f"host pool {L} kept inputs, {L} copies each way per micro-batch")


def check_plan(off, p, case):
    """zt-plan against a measured run: every rank's device peak and each
    category's, the host pool and its activations, the link bytes of every
    step after the first."""
    for r in off["ranks"]:
        assert r["peak_bytes"] == p["peak_bytes"], (case, r["peak_bytes"], p["peak_bytes"])
        for cat, v in r["peak_by_category"].items():
            assert v == p["peak_by_category"][cat], (case, cat, v, p["peak_by_category"][cat])
        assert r["host_peak_bytes"] == p["host_bytes"], (case, r["host_peak_bytes"], p["host_bytes"])
        assert r["host_peak_by_category"]["activations"] == p["host_activations_bytes"], (case, r, p)
    t = p["transfers_per_step"]
    for steps in off["steps"]:
        for x in steps[1:]:
            assert x["link"]["h2d_bytes"] == t["h2d_bytes"], (case, x["link"], t)
            assert x["link"]["d2h_bytes"] == t["d2h_bytes"], (case, x["link"], t)


def case_planner(ctx):
    """zt-plan --offload-activations cpu equals measured runs byte for byte
    (np 1-3, stages 0/1 and 3, fp32 and bf16, with optimizer offload and
    two micro-batches): device peak and per-category peaks, host pool and
    its kept inputs, link bytes per step each way (--link pcie4), with the
    time the link left exposed. Negative twin: the plan without it does not
    match the offload run."""
    configs = [(1, ["--stage", "0", "--dtype", "fp32"]),
               (2, ["--stage", "3", "--dtype", "bf16"]),
               (2, ["--stage", "1", "--dtype", "fp32", "--offload", "cpu", "--grad-accum", "2"]),
               (3, ["--stage", "3", "--dtype", "fp32", "--offload", "cpu"]),
               (3, ["--stage", "2", "--dtype", "bf16", "--seq-len", "48", "--layers", "5"])]
    for np_, extra in configs:
        flags = FULL + extra + ["--link", "pcie4"] + OFF
        off = train(ctx, np_, flags + ["--steps", "3"], f"plan-{np_}-{'-'.join(extra)}")
        check_plan(off, plan(ctx, np_, flags), (np_, extra))
    np_, extra = configs[1]
    flags = FULL + extra + ["--link", "pcie4"]
    off = train(ctx, np_, flags + OFF + ["--steps", "3"], "plan-twin")
    try:
        check_plan(off, plan(ctx, np_, flags), "twin")
    except AssertionError:
        pass
    else:
        raise AssertionError("the plan without --offload-activations matched the offload run")
    print("ok: zt-plan --offload-activations cpu equals the measured device peaks per category, host pool and link "
          "bytes at np 1-3; without the flag it does not")


def case_refused(ctx):
    """--offload-activations cpu needs --recompute full: with none,
    selective or every-K every rank stops with exit 2 naming both flags.
    DeepSpeed's activation_checkpointing.cpu_checkpointing true selects it
    (with --recompute full), false leaves it off."""
    for bad in ("none", "selective", "every-2"):
        p = launch(ctx, 2, MODEL + ["--recompute", bad] + OFF + ["--steps", "1"], expect_rc=2)
        assert "--offload-activations cpu needs --recompute full" in p.stderr, (bad, p.stderr[-600:])
    for on in (True, False):
        cfg = os.path.join(ctx["work"], f"ds-{on}.json")
        with open(cfg, "w") as f:
            json.dump({"zero_optimization": {"stage": 3},
                       "activation_checkpointing": {"partition_activations": False, "cpu_checkpointing": on}}, f)
        s = train(ctx, 2, FULL + ["--config", cfg, "--steps", "1"], f"ds-{on}")
        assert s["offload_activations"] == ("cpu" if on else "none"), s["offload_activations"]
        assert all((r["host_peak_by_category"]["activations"] > 0) == on for r in s["ranks"]), s["ranks"]
    p = launch(ctx, 1, MODEL + ["--config", cfg, "--steps", "1", "--offload-activations", "cpu"], expect_rc=2)
    assert "--offload-activations cpu needs --recompute full" in p.stderr, p.stderr[-600:]
    print("ok: --offload-activations cpu refused without --recompute full (exit 2); DeepSpeed's cpu_checkpointing "
          "selects it")


def case_cuda_emu(ctx):
    """--device cuda on the emulator, np 2 with stream jitter: the kept
    inputs in pinned host memory, out on the d2h stream and back on the h2d
    stream behind events; bitwise --recompute full alone."""
    env = {"ZT_EMU_DEVICES": "2", "ZT_EMU_JITTER_US": "200", "ZT_EMU_SEED": "9"}
    flags = FULL + ["--stage", "3", "--device", "cuda", "--steps", "3"]
    a = train(ctx, 2, flags, "cu-full", env)
    b = train(ctx, 2, flags + OFF, "cu-off", env)
    assert same_training(a, b), (losses(a), losses(b))
    assert all(r["host_peak_by_category"]["activations"] == L * kept_input_bytes("fp32") for r in b["ranks"])
    print("ok: cuda emulator: --offload-activations cpu bitwise equal to --recompute full")


CASES = {"bitwise": case_bitwise, "bitwise_np13": case_bitwise_np13, "memory": case_memory, "planner": case_planner, "refused": case_refused,
         "cuda_emu": case_cuda_emu}

if __name__ == "__main__":
    main(CASES, "offload-activations")
