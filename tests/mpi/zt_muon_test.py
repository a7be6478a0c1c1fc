#!/usr/bin/env python3
"""Muon (--optimizer muon) under real mpirun, run by CTest: each hidden
matrix orthogonalized whole by its owner rank, AdamW on the rest. Stages
0-3 and offload bitwise equal at np 2, 3 and 4; the owners balanced (work
per rank <= total / N + the largest matrix's); each rank's optimizer bytes
and every category's peak (device, and the host pool under offload) equal
zt-plan --rank's; resume bitwise and a reshard that loads; bad settings
refused before step 1; the default job converges with and without offload
on 0.56x AdamW's optimizer state.

usage: zt_muon_test.py CASE ZT_TRAIN ZT_RUN
"""
import json
import os
import subprocess

from zt_harness import STAGES_COMPARED, launch, losses, main, train

MODEL = ["--layers", "2", "--d-model", "32", "--heads", "4", "--seq-len", "32", "--vocab", "48",
         "--micro-batch", "4", "--threads", "1", "--quiet", "--bucket-size", "16KiB"]
MUON = ["--optimizer", "muon", "--lr", "0.01", "--weight-decay", "0.01"]


def zt_plan(ctx, np, rank, args):
    exe = os.path.join(os.path.dirname(ctx["zt"]), "zt-plan")
    out = subprocess.run([exe, "--world", str(np), "--rank", str(rank), "--json"] + args, capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out)


def check_owners(s, np):
    """Every hidden matrix of the 2 blocks (q, k, v, proj, fc, fcproj) owned once; balance bound."""
    owners = s["muon_owners"]
    assert len(owners) == 12, owners
    work = [0.0] * np
    costs = []
    for m in owners:
        r, c = min(m["rows"], m["cols"]), max(m["rows"], m["cols"])
        cost = 4 * r * r * c + 2 * r ** 3
        costs.append(cost)
        work[m["owner"]] += cost
    assert max(work) <= sum(costs) / np + max(costs), (work, costs)
    assert {m["param"] for m in owners} == {"qkv_w", "attproj_w", "fc_w", "fcproj_w"}, owners


def stages_at(ctx, np, stages):
    runs = [train(ctx, np, MODEL + MUON + ["--steps", "4", "--stage", str(s)], f"n{np}s{s}") for s in stages]
    runs += [train(ctx, np, MODEL + MUON + ["--steps", "4", "--stage", str(s), "--offload", "cpu"], f"n{np}o{s}")
             for s in (0, 3)]
    for r in runs:
        assert losses(r) == losses(runs[0]) and r["params_digest"] == runs[0]["params_digest"], np
    check_owners(runs[-1], np)
    return runs[0]


def case_stages(ctx):
    """np 3: Muon's losses and params_digest bitwise equal at stages 0-3 and
    under offload at stages 0 and 3; AdamW's differ; owners balanced."""
    muon = stages_at(ctx, 3, STAGES_COMPARED)
    adam = train(ctx, 3, MODEL + ["--steps", "4"], "adam")
    assert adam["params_digest"] != muon["params_digest"]
    print(f"ok: Muon np 3 stages {STAGES_COMPARED} and offload 0, 3: bitwise equal ({muon['params_digest']})")


def case_stages_np24(ctx):
    """np 2 and 4: stages 0-3 and offload bitwise equal."""
    for np in (2, 4):
        s = stages_at(ctx, np, STAGES_COMPARED)
        print(f"ok: Muon np {np}: stages and offload bitwise equal ({s['params_digest']})")


def case_planner(ctx):
    """zt-plan --rank r equals rank r's measured per-category peaks (the
    owner's gathered matrix in comm_buffers, Newton-Schulz scratch in
    workspace) at np 2 and 3, stages 0-3, fp32 and bf16; under offload its
    host_bytes equal each rank's host peak."""
    for np in (2, 3):
        for extra in ([], ["--dtype", "bf16"], ["--offload", "cpu"]):
            for stage in range(4):
                args = MODEL + MUON + extra + ["--steps", "2", "--stage", str(stage)]
                s = train(ctx, np, args, f"p{np}{stage}{len(extra)}")
                for r in s["ranks"]:
                    p = zt_plan(ctx, np, r["rank"], args)
                    assert p["peak_by_category"] == r["peak_by_category"], (np, extra, stage, r["rank"], p)
                    if extra == ["--offload", "cpu"]:
                        assert p["host_bytes"] == r["host_peak_bytes"], (np, stage, r["rank"], p["host_bytes"])
    print("ok: zt-plan --rank exact for Muon at np 2 and 3, stages 0-3, fp32, bf16 and offload's host pool")


def case_resume(ctx):
    """np 2 stage 3: resumed at step 3 of 6, bitwise the whole run; the
    checkpoint also loads at np 3 (resharded) and trains on."""
    save = os.path.join(ctx["work"], "ckpt")
    args = MODEL + MUON + ["--steps", "6", "--stage", "3"]
    whole = train(ctx, 2, args + ["--save-every", "3", "--save-dir", save], "whole")
    at = os.path.join(save, "step-000003")
    resumed = train(ctx, 2, args + ["--resume", at], "resumed")
    assert losses(resumed) == losses(whole)[3:] and resumed["params_digest"] == whole["params_digest"]
    offload = train(ctx, 2, args + ["--offload", "cpu", "--resume", at], "resumed_offload")
    assert offload["params_digest"] == whole["params_digest"]
    three = train(ctx, 3, args + ["--resume", at], "reshard")
    # np 3 draws other batches: its first loss is near, not equal to, the np 2 run's
    assert abs(losses(three)[0] - losses(whole)[3]) < 0.05, (losses(three), losses(whole))
    print("ok: Muon resumes bitwise (also under offload); a np 2 checkpoint loads at np 3")


def case_bad(ctx):
    """Refused with exit 2 before step 1, naming the problem."""
    for bad, needle in ((["--muon-ns-coefficients", "3.4,-4.7"], "is not three finite numbers"),
                        (["--offload", "cpu", "--offload-delay", "1"], "sums over the ranks"),
                        (["--offload", "nvme", "--nvme-path", ctx["work"]], "--offload nvme runs"),
                        (["--mem-limit", "3MiB", "--d-model", "256"], "more than --mem-limit's")):
        p = launch(ctx, 2, MODEL + MUON + ["--steps", "1"] + bad, expect_rc=2)
        assert needle in p.stderr, (bad, p.stderr[-1500:])
        assert "step     1" not in p.stdout
    print("ok: bad Muon settings refused before step 1")


def case_convergence(ctx):
    """The default job at np 2, stage 3 (default --lr): within 0.1 nats of the
    entropy floor with and without offload, its optimizer state at most 0.58x
    AdamW's (0.563: the embedding, head, norms and biases keep two states)."""
    runs = {}
    for name, extra in (("muon", ["--optimizer", "muon"]), ("offload", ["--optimizer", "muon", "--offload", "cpu"]),
                        ("adamw", [])):
        d = os.path.join(ctx["work"], "conv_" + name)
        launch(ctx, 2, ["--quiet", "--trace", "0", "--stage", "3", "--log-dir", d] + extra)
        with open(os.path.join(d, "summary.json")) as f:
            runs[name] = json.load(f)
    for name in ("muon", "offload"):
        gap = runs[name]["final_loss"] - runs[name]["data_entropy"]
        assert gap <= 0.1, (name, gap)
    ratio = (runs["muon"]["ranks"][0]["peak_by_category"]["optimizer"] /
             runs["adamw"]["ranks"][0]["peak_by_category"]["optimizer"])
    assert ratio <= 0.58, ratio
    print(f"ok: Muon gap {runs['muon']['final_loss'] - runs['muon']['data_entropy']:.4f} "
          f"(offload {runs['offload']['final_loss'] - runs['offload']['data_entropy']:.4f}), "
          f"AdamW {runs['adamw']['final_loss'] - runs['adamw']['data_entropy']:.4f}; optimizer state {ratio:.3f}x AdamW's")


def case_cuda_emu(ctx):
    """--device cuda on the CUDA emulator (ZT_CUDA=EMU builds), np 2 over
    NCCL with stream jitter. --muon-ns-device device: the state on the
    device, Newton-Schulz in the device's fp32 GEMMs, the slices staged
    through the host pool; stages 0 and 3 bitwise equal, losses within 1e-4
    (relative) of the CPU backend's, zt-plan --device cuda --rank exact on
    the device and in the host pool (the staging). --muon-ns-device host
    with --offload cpu: stages 0 and 3 bitwise. host without offload and
    device with offload refused with exit 2 before step 1."""
    env = dict(os.environ, ZT_EMU_DEVICES="2", ZT_EMU_JITTER_US="200", ZT_EMU_SEED="15")
    base = MODEL + MUON + ["--steps", "4"]
    cpu = train(ctx, 2, base + ["--stage", "3"], "cpu")
    for name, extra in (("device", []), ("host", ["--offload", "cpu", "--muon-ns-device", "host"])):
        runs = []
        for stage in (0, 3):
            d = os.path.join(ctx["work"], f"cu-{name}{stage}")
            args = base + extra + ["--stage", str(stage), "--device", "cuda"]
            p = subprocess.run([ctx["zt_run"], "-np", "2", ctx["zt"]] + args + ["--log-dir", d], capture_output=True,
                               text=True, timeout=600, env=env)
            assert p.returncode == 0, (name, p.stdout[-2000:], p.stderr[-2000:])
            with open(os.path.join(d, "summary.json")) as f:
                runs.append(json.load(f))
            if name == "device" and stage == 3:
                for r in runs[-1]["ranks"]:
                    plan = zt_plan(ctx, 2, r["rank"], args)
                    assert plan["peak_by_category"] == r["peak_by_category"], (r["rank"], plan)
                    assert plan["host_bytes"] == r["host_peak_bytes"], (r["rank"], plan["host_bytes"])
        assert runs[0]["device"] == "cuda" and runs[0]["params_digest"] == runs[1]["params_digest"], name
        for a, b in zip(runs[0]["losses"], losses(cpu)):
            assert abs(a - b) <= 1e-4 * abs(b), (name, a, b)
    for bad, needle in ((["--muon-ns-device", "host"], "needs --offload cpu"),
                        (["--offload", "cpu"], "give --muon-ns-device host")):
        cmd = [ctx["zt_run"], "-np", "2", ctx["zt"]] + MODEL + MUON + ["--steps", "1", "--device", "cuda"] + bad
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
        assert p.returncode == 2 and needle in p.stderr, (bad, p.stderr[-1500:])
    print("ok: Muon on the CUDA emulator, Newton-Schulz on the device and on the host (offload): stages 0 and 3 "
          "bitwise, within 1e-4 of the CPU, zt-plan exact; the mismatched pairs refused")


CASES = {"stages": case_stages, "stages_np24": case_stages_np24, "planner": case_planner, "resume": case_resume,
         "bad": case_bad, "convergence": case_convergence, "cuda_emu": case_cuda_emu}

if __name__ == "__main__":
    main(CASES, "muon")
