#!/usr/bin/env python3
"""Low-memory state under real mpirun, run by CTest: --dtype bf16 with
--master-dtype none (no fp32 master: the bf16 params stepped with
stochastic rounding) and --optim-state-dtype bf16 (the optimizer's slots in
bf16), for AdamW, SGD and Muon. Stages bitwise equal; each rank's bytes
the closed form and zt-plan --rank's every category; resume bitwise and a
reshard that loads; bad combinations refused before step 1; the default
job converges on half of bf16 AdamW's model state.

usage: zt_low_memory_test.py CASE ZT_TRAIN ZT_RUN
"""
import json
import os
import subprocess

from zt_harness import SANITIZED, STAGES_COMPARED, launch, losses, main, train

MODEL = ["--layers", "2", "--d-model", "32", "--heads", "4", "--seq-len", "32", "--vocab", "48",
         "--micro-batch", "4", "--threads", "1", "--quiet", "--bucket-size", "16KiB", "--dtype", "bf16"]
LOW = ["--master-dtype", "none", "--optim-state-dtype", "bf16"]
OPTIMIZERS = {"adamw": [], "sgd": ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9"],
              "muon": ["--optimizer", "muon", "--lr", "0.01"]}


def model_state(rank):
    c = rank["peak_by_category"]
    return c["params"] + c["grads"] + c["master_params"] + c["optimizer"]


def case_stages(ctx):
    """np 3: each optimizer with both options bitwise equal over the stages
    compared; AdamW with each option alone too; the result differs from
    the fp32-master run (the options did something). Under the sanitizers
    Muon alone, which runs every C path of the others (the per-element
    slot, the packed one, the master-less params)."""
    for name, opt in OPTIMIZERS.items():
        if SANITIZED and name != "muon":
            continue
        runs = [train(ctx, 3, MODEL + opt + LOW + ["--steps", "4", "--stage", str(s)], f"{name}{s}")
                for s in STAGES_COMPARED]
        for r in runs:
            assert losses(r) == losses(runs[0]) and r["params_digest"] == runs[0]["params_digest"], name
            assert all(x["peak_by_category"]["master_params"] == 0 for x in r["ranks"]), name
        if not SANITIZED:
            full = train(ctx, 3, MODEL + opt + ["--steps", "4", "--stage", "3"], f"{name}full")
            assert full["params_digest"] != runs[0]["params_digest"], name
        print(f"ok: {name} with no master and bf16 state: stages {STAGES_COMPARED} bitwise ({runs[0]['params_digest']})")
    for one in () if SANITIZED else (LOW[:2], LOW[2:]):
        runs = [train(ctx, 3, MODEL + one + ["--steps", "4", "--stage", str(s)], f"one{len(one)}{s}")
                for s in (0, 3)]
        assert runs[0]["params_digest"] == runs[1]["params_digest"], one
    print("ok: each option alone: stages 0 and 3 bitwise")


def case_planner(ctx):
    """zt-plan --rank r equals rank r's measured per-category peaks (the
    step's fp32 copies in workspace) at np 2 and 3, stages 0-3, for each
    optimizer with both options, and AdamW with each alone; optimizer bytes
    are 2 per state value."""
    for np in (2, 3):
        for name, opt in OPTIMIZERS.items():
            for extra in ([LOW] if name != "adamw" else [LOW, LOW[:2], LOW[2:]]):
                for stage in range(4):
                    args = MODEL + opt + extra + ["--steps", "2", "--stage", str(stage)]
                    s = train(ctx, np, args, f"p{np}{name}{stage}{len(extra)}")
                    for r in s["ranks"]:
                        exe = os.path.join(os.path.dirname(ctx["zt"]), "zt-plan")
                        p = json.loads(subprocess.run([exe, "--world", str(np), "--rank", str(r["rank"]), "--json"] +
                                                      args, capture_output=True, text=True, check=True).stdout)
                        assert p["peak_by_category"] == r["peak_by_category"], (np, name, extra, stage, r["rank"], p)
    print("ok: zt-plan --rank exact with low-memory state at np 2 and 3, stages 0-3")


def case_resume(ctx):
    """np 2 stage 3, Muon and AdamW with both options: resumed at step 3 of
    6, bitwise the whole run (the stochastic rounding's bits are keyed by the
    update count, so the resumed steps draw the same); the checkpoint loads
    at np 3 and trains on."""
    for name in ("adamw", "muon"):
        save = os.path.join(ctx["work"], "ckpt" + name)
        args = MODEL + OPTIMIZERS[name] + LOW + ["--steps", "6", "--stage", "3"]
        whole = train(ctx, 2, args + ["--save-every", "3", "--save-dir", save], "whole" + name)
        at = os.path.join(save, "step-000003")
        resumed = train(ctx, 2, args + ["--resume", at], "resumed" + name)
        assert losses(resumed) == losses(whole)[3:] and resumed["params_digest"] == whole["params_digest"], name
        three = train(ctx, 3, args + ["--resume", at], "reshard" + name)
        assert abs(losses(three)[0] - losses(whole)[3]) < 0.05, (losses(three), losses(whole))
    print("ok: low-memory state resumes bitwise (AdamW, Muon); loads at np 3")


def case_bad(ctx):
    """Refused with exit 2 before step 1, naming the problem."""
    fp32 = [a for a in MODEL if a not in ("--dtype", "bf16")]
    for args, needle in ((fp32 + ["--master-dtype", "none"], "--master-dtype none needs --dtype bf16"),
                         (MODEL + ["--optimizer", "adafactor", "--optim-state-dtype", "bf16"],
                          "runs --optimizer adamw, sgd or muon"),
                         (MODEL + ["--optimizer", "adam8bit", "--master-dtype", "none"],
                          "runs --optimizer adamw, sgd or muon"),
                         (MODEL + LOW + ["--offload", "cpu"], "runs without --offload"),
                         (MODEL + ["--optim-state-dtype", "fp8"], "optim-state-dtype")):
        p = launch(ctx, 2, args + ["--steps", "1"], expect_rc=2)
        assert needle in p.stderr, (args, p.stderr[-1500:])
    print("ok: bad low-memory combinations refused before step 1")


def case_convergence(ctx):
    """The default job at np 2 in bf16: with no master and bf16 AdamW state
    within 0.1 nats of the entropy floor on at most 0.55x bf16 AdamW's model
    state per rank (0.5: 8 bytes per parameter instead of 16); Muon with
    both options converges too."""
    runs = {}
    for name, extra in (("low", LOW), ("bf16", []), ("muon", ["--optimizer", "muon"] + LOW)):
        d = os.path.join(ctx["work"], "conv_" + name)
        launch(ctx, 2, ["--quiet", "--trace", "0", "--dtype", "bf16", "--log-dir", d] + extra)
        with open(os.path.join(d, "summary.json")) as f:
            runs[name] = json.load(f)
    gaps = {k: v["final_loss"] - v["data_entropy"] for k, v in runs.items()}
    assert gaps["low"] <= 0.1 and gaps["muon"] <= 0.1, gaps
    ratio = model_state(runs["low"]["ranks"][0]) / model_state(runs["bf16"]["ranks"][0])
    assert ratio <= 0.55, ratio
    print(f"ok: gaps {', '.join(f'{k} {v:.4f}' for k, v in gaps.items())}; model state {ratio:.3f}x bf16 AdamW's")


def case_cuda_emu(ctx):
    """--device cuda on the CUDA emulator (ZT_CUDA=EMU builds), np 2 over
    NCCL with stream jitter, AdamW with both options: the widening, the
    optimizer and the stochastic rounding's kernel on the device; stages 0
    and 3 bitwise equal, no master bytes, losses within 1e-3 (relative) of
    the CPU backend's (the model's GPU kernels sum in other orders, and the
    rounding then draws on other values)."""
    env = dict(os.environ, ZT_EMU_DEVICES="2", ZT_EMU_JITTER_US="200", ZT_EMU_SEED="15")
    args = MODEL + LOW + ["--steps", "4"]
    cpu = train(ctx, 2, args + ["--stage", "3"], "cpu")
    runs = []
    for stage in (0, 3):
        d = os.path.join(ctx["work"], f"cu{stage}")
        cmd = [ctx["zt_run"], "-np", "2", ctx["zt"]] + args + ["--stage", str(stage), "--device", "cuda", "--log-dir", d]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
        assert p.returncode == 0, (cmd, p.stdout[-2000:], p.stderr[-2000:])
        with open(os.path.join(d, "summary.json")) as f:
            runs.append(json.load(f))
    assert runs[0]["device"] == "cuda" and runs[0]["params_digest"] == runs[1]["params_digest"]
    assert all(r["peak_by_category"]["master_params"] == 0 for r in runs[1]["ranks"])
    for a, b in zip(runs[0]["losses"], losses(cpu)):
        assert abs(a - b) <= 1e-3 * abs(b), (a, b)
    print("ok: low-memory AdamW on the CUDA emulator: stages 0 and 3 bitwise, within 1e-3 of the CPU")


CASES = {"stages": case_stages, "planner": case_planner, "resume": case_resume, "bad": case_bad,
         "convergence": case_convergence, "cuda_emu": case_cuda_emu}

if __name__ == "__main__":
    main(CASES, "low_memory")
