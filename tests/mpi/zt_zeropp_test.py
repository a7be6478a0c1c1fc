#!/usr/bin/env python3
"""ZeRO++'s quantized communication under real mpirun, run by CTest:
--quantize-weights int8 (qwZ: stage 3's all-gathers as block-wise int8
codes) and --quantize-grads int8|int4 (qgZ: the reduce-scatter's chunks as
codes, decoded inside the sum in rank order), with error feedback. Bytes on
the wire from the comm stats against the bf16 baseline; stages bitwise
equal for qgZ; runs repeat bitwise; zt-plan --rank exact; bad combinations
refused; the default job converges within 0.05 nats of the unquantized
run; the CUDA emulator's NCCL path.

usage: zt_zeropp_test.py CASE ZT_TRAIN ZT_RUN
"""
import json
import os
import subprocess

from zt_harness import SANITIZED, STAGES_COMPARED, launch, losses, main, train

MODEL = ["--layers", "2", "--d-model", "32", "--heads", "4", "--seq-len", "32", "--vocab", "48",
         "--micro-batch", "4", "--threads", "1", "--quiet", "--bucket-size", "16KiB", "--dtype", "bf16",
         "--reduce-dtype", "bf16"]
QW = ["--quantize-weights", "int8"]
QG4 = ["--quantize-grads", "int4"]
QG8 = ["--quantize-grads", "int8"]


def step_bytes(s, kind, key="bytes"):
    """Rank 0's bytes of collective `kind` in the world communicator at the last step."""
    return s["steps"][0][-1]["comm"][kind][key]


def case_wire(ctx):
    """np 2 and 4, stage 3: per step, qwZ's all-gathers move at most 0.55x
    and int4 qgZ's reduce-scatters at most 0.3x (int8: 0.55x) the bytes of
    the bf16 baseline, scales included; their uncompressed_bytes are the
    baseline's bytes."""
    for np in (2, 4):
        args = MODEL + ["--steps", "2", "--stage", "3"]
        base = train(ctx, np, args, f"base{np}")
        qw = train(ctx, np, args + QW, f"qw{np}")
        q4 = train(ctx, np, args + QG4, f"q4{np}")
        q8 = train(ctx, np, args + QG8, f"q8{np}")
        # the layouts differ (slices padded to whole blocks): compare with what each would have sent
        ag = step_bytes(qw, "all_gather") / step_bytes(qw, "all_gather", "uncompressed_bytes")
        rs4 = step_bytes(q4, "reduce_scatter") / step_bytes(q4, "reduce_scatter", "uncompressed_bytes")
        rs8 = step_bytes(q8, "reduce_scatter") / step_bytes(q8, "reduce_scatter", "uncompressed_bytes")
        assert ag <= 0.55 and rs4 <= 0.3 and rs8 <= 0.55, (np, ag, rs4, rs8)
        assert step_bytes(base, "all_gather") == step_bytes(base, "all_gather", "uncompressed_bytes")
        # against the baseline run itself: its layout pads less, so at most the padding more
        assert step_bytes(qw, "all_gather") <= 0.55 * step_bytes(base, "all_gather") * 1.1, np
        assert step_bytes(q4, "reduce_scatter") <= 0.3 * step_bytes(base, "reduce_scatter") * 1.1, np
        print(f"ok: np {np}: all-gather {ag:.3f}x with qwZ, reduce-scatter {rs4:.3f}x int4, {rs8:.3f}x int8")


def case_stages(ctx):
    """np 3 (uneven ranks): qgZ int4 with feedback, bitwise over the stages
    compared; qwZ + qgZ at stage 3 repeats bitwise; each changes the run."""
    args = MODEL + QG4 + ["--quantize-grads-feedback", "1", "--steps", "4"]
    runs = [train(ctx, 3, args + ["--stage", str(s)], f"g{s}") for s in STAGES_COMPARED]
    for r in runs:
        assert losses(r) == losses(runs[0]) and r["params_digest"] == runs[0]["params_digest"], r["params_digest"]
    both = MODEL + QW + QG4 + ["--steps", "4", "--stage", "3", "--recompute", "full"]
    a, b = train(ctx, 3, both, "a"), train(ctx, 3, both, "b")
    assert losses(a) == losses(b) and a["params_digest"] == b["params_digest"]
    plain = train(ctx, 3, MODEL + ["--steps", "4", "--stage", "3"], "plain")
    assert len({plain["params_digest"], a["params_digest"], runs[0]["params_digest"]}) == 3
    print(f"ok: int4 qgZ with feedback: stages {STAGES_COMPARED} bitwise; qwZ + qgZ repeats bitwise")


def case_planner(ctx):
    """zt-plan --rank equals rank r's measured per-category peaks: qgZ at
    stages 0, 2, 3 with feedback (bf16 feedback too), qwZ and both at
    stage 3 at np 2 and 3, and with hpZ (--reshard-after-forward 2) at np 4."""
    cases = [(np, st, q) for np in (2, 3) for st in (0, 2, 3)
             for q in (QG4 + ["--quantize-grads-feedback", "1"],
                       QG8 + ["--quantize-grads-feedback", "1", "--quantize-grads-feedback-dtype", "bf16"])]
    cases += [(np, 3, q) for np in (2, 3) for q in (QW, QW + QG4)]
    cases += [(4, 3, QW + QG4 + ["--reshard-after-forward", "2"])]
    exe = os.path.join(os.path.dirname(ctx["zt"]), "zt-plan")
    for np, stage, q in cases:
        args = MODEL + q + ["--steps", "2", "--stage", str(stage)]
        s = train(ctx, np, args, f"p{np}{stage}{len(q)}")
        for r in s["ranks"]:
            p = json.loads(subprocess.run([exe, "--world", str(np), "--rank", str(r["rank"]), "--json"] + args,
                                          capture_output=True, text=True, check=True).stdout)
            assert p["peak_by_category"] == r["peak_by_category"], (np, stage, q, r["rank"], p["peak_by_category"],
                                                                    r["peak_by_category"])
    print(f"ok: zt-plan --rank exact with quantized communication ({len(cases)} configurations)")


def case_resume(ctx):
    """np 2 stage 3, qwZ + qgZ int4 with error feedback (and without):
    resumed at step 3 of 6, bitwise the whole run (each rank's feedback is
    in the checkpoint); at np 3 the feedback is dropped with a warning and
    the run trains on; the checkpoint loads unquantized too."""
    for fb in ("1", "0"):
        save = os.path.join(ctx["work"], "ckpt" + fb)
        args = MODEL + QW + QG4 + ["--quantize-grads-feedback", fb, "--steps", "6", "--stage", "3"]
        whole = train(ctx, 2, args + ["--save-every", "3", "--save-dir", save], "whole" + fb)
        at = os.path.join(save, "step-000003")
        assert os.path.exists(os.path.join(at, "feedback_rank1.bin")) == (fb == "1")
        resumed = train(ctx, 2, args + ["--resume", at], "resumed" + fb)
        assert losses(resumed) == losses(whole)[3:] and resumed["params_digest"] == whole["params_digest"], fb
    p = launch(ctx, 3, args[:-4] + ["--quantize-grads-feedback", "1", "--steps", "4", "--stage", "3", "--resume",
                                    os.path.join(ctx["work"], "ckpt1", "step-000003")])
    assert "error feedback dropped, starting from zero: it was saved at 2 ranks, this run has 3" in p.stderr, \
        p.stderr[-1500:]
    three = train(ctx, 3, MODEL + ["--steps", "6", "--stage", "3", "--resume", at], "reshard")
    assert abs(losses(three)[0] - losses(whole)[3]) < 0.05, (losses(three), losses(whole))
    print("ok: quantized runs resume bitwise with and without feedback; a reshard drops it, said; loads unquantized")


def case_hosts(ctx):
    """2 simulated hosts x 2 ranks, stage 3, bf16: int4 qgZ reduces in two
    hops (two reduce-scatters per bucket, counted as the world's); per step each rank receives over the
    inter-host link at most 0.3x the reduce-scatter bytes and, with qwZ, at
    most 0.55x the all-gather bytes of the bf16 baseline; with feedback it
    repeats bitwise; zt-plan --nodes 2 --rank r equals every rank's
    measured peaks; the losses stay within 0.01 of the baseline's."""
    from zt_hosts_test import hosts_down, hosts_up
    hostfile = hosts_up(ctx, 2)
    runs = {}
    args = MODEL + ["--steps", "3", "--stage", "3"]
    try:
        for name, q in (("base", []), ("coded", QW + QG4), ("fb", QG4 + ["--quantize-grads-feedback", "1"]),
                        ("fb2", QG4 + ["--quantize-grads-feedback", "1"])):
            d = os.path.join(ctx["work"], name)
            cmd = [ctx["zt_run"], "-np", "4", "--hostfile", hostfile, ctx["zt"]] + args + q + ["--log-dir", d]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            assert p.returncode == 0, p.stderr[-2000:]
            with open(os.path.join(d, "summary.json")) as f:
                s = json.load(f)
            s["steps"] = []
            for r in range(4):
                with open(os.path.join(d, f"rank{r}.jsonl")) as f:
                    s["steps"].append([json.loads(line) for line in f])
            runs[name] = (s, args + q)
    finally:
        hosts_down(ctx)
    base, coded = runs["base"][0], runs["coded"][0]
    for r in range(4):
        b, c = base["steps"][r][-1]["comm"], coded["steps"][r][-1]["comm"]
        assert c["reduce_scatter"]["calls"] == 2 * b["reduce_scatter"]["calls"], (b, c)  # two hops per bucket
        rs = c["reduce_scatter"]["inter_node_bytes"] / b["reduce_scatter"]["inter_node_bytes"]
        ag = c["all_gather"]["inter_node_bytes"] / b["all_gather"]["inter_node_bytes"]
        assert rs <= 0.3 and ag <= 0.55 * 1.1, (r, rs, ag)  # 1.1: the codes' layout pads slices to whole blocks
        # both hops' bytes, the intra-node one included: 2 x 0.26 x (L + K) / N of a flat bf16 reduce-scatter
        both = c["reduce_scatter"]["bytes"] / b["reduce_scatter"]["bytes"]
        assert both <= 0.4 * 1.1, (r, both)
    assert runs["fb"][0]["params_digest"] == runs["fb2"][0]["params_digest"]
    for a, b in zip(losses(coded), losses(base)):
        assert abs(a - b) <= 0.01, (losses(coded), losses(base))
    exe = os.path.join(os.path.dirname(ctx["zt"]), "zt-plan")
    for name in ("coded", "fb"):
        s, flags = runs[name]
        for r in s["ranks"]:
            p = json.loads(subprocess.run([exe, "--world", "4", "--nodes", "2", "--rank", str(r["rank"]), "--json"] +
                                          flags, capture_output=True, text=True, check=True).stdout)
            assert p["peak_by_category"] == r["peak_by_category"], (name, r["rank"], p["peak_by_category"],
                                                                    r["peak_by_category"])
    print(f"ok: 2 hosts: int4 qgZ in two hops, inter-node reduce-scatter {rs:.3f}x (both hops' bytes {both:.3f}x), "
          f"all-gather {ag:.3f}x of bf16's; "
          "feedback repeats bitwise; zt-plan --nodes 2 exact")


def case_bad(ctx):
    """Refused with exit 2 before step 1, naming the problem."""
    for args, needle in ((MODEL + QW + ["--stage", "2"], "--quantize-weights int8 needs --stage 3"),
                         (MODEL + QG4 + ["--quant-block", "24"], "--quant-block 24 is not a multiple of 16"),
                         (MODEL + ["--quantize-grads-feedback", "1"], "needs --quantize-grads int8|int4"),
                         (MODEL + QG4 + ["--stage", "2", "--shard-group", "1"], "runs with world sharding"),
                         (MODEL + ["--quantize-grads", "int2"], "quantize-grads")):
        p = launch(ctx, 2, args + ["--steps", "1"], expect_rc=2)
        assert needle in p.stderr, (args, p.stderr[-1500:])
    print("ok: bad quantization flags refused before step 1")


def case_convergence(ctx):
    """The default job at np 2, stage 3, bf16: with qwZ, int8 qgZ, int4
    qgZ (the default feedback setting: off) and qwZ with int4 qgZ the final
    loss is within 0.05 nats of the unquantized run's."""
    runs = {}
    for name, extra in (("plain", []), ("qw", QW), ("g8", QG8), ("g4", QG4), ("qw_g4", QW + QG4)):
        d = os.path.join(ctx["work"], "conv_" + name)
        launch(ctx, 2, ["--quiet", "--trace", "0", "--dtype", "bf16", "--stage", "3", "--log-dir", d] + extra)
        with open(os.path.join(d, "summary.json")) as f:
            runs[name] = json.load(f)["final_loss"]
    gaps = {k: v - runs["plain"] for k, v in runs.items() if k != "plain"}
    assert all(abs(g) <= 0.05 for g in gaps.values()), (runs, gaps)
    print(f"ok: final loss {runs['plain']:.4f}; quantized within {', '.join(f'{k} {v:+.4f}' for k, v in gaps.items())}")


def case_cuda_emu(ctx):
    """--device cuda on the CUDA emulator, np 2 over NCCL with stream
    jitter, stage 3 with qwZ and int4 qgZ with feedback: the codes' kernels
    and the coded ordered sum on the device; losses within 1e-3 (relative)
    of the CPU backend's, the same wire bytes."""
    env = dict(os.environ, ZT_EMU_DEVICES="2", ZT_EMU_JITTER_US="200", ZT_EMU_SEED="15")
    args = MODEL + QW + QG4 + ["--quantize-grads-feedback", "1", "--steps", "3", "--stage", "3"]
    cpu = train(ctx, 2, args, "cpu")
    d = os.path.join(ctx["work"], "cu")
    cmd = [ctx["zt_run"], "-np", "2", ctx["zt"]] + args + ["--device", "cuda", "--log-dir", d]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, (cmd, p.stdout[-2000:], p.stderr[-2000:])
    with open(os.path.join(d, "summary.json")) as f:
        cu = json.load(f)
    with open(os.path.join(d, "rank0.jsonl")) as f:
        last = [json.loads(line) for line in f][-1]
    assert cu["device"] == "cuda"
    for a, b in zip(cu["losses"], losses(cpu)):
        assert abs(a - b) <= 1e-3 * abs(b), (a, b)
    for kind in ("all_gather", "reduce_scatter"):
        assert last["comm"][kind]["bytes"] == step_bytes(cpu, kind), kind
    print("ok: qwZ + int4 qgZ on the CUDA emulator over NCCL: within 1e-3 of the CPU, the same wire bytes")


CASES = {"wire": case_wire, "stages": case_stages, "hosts": case_hosts, "planner": case_planner, "resume": case_resume, "bad": case_bad,
         "convergence": case_convergence, "cuda_emu": case_cuda_emu}

if __name__ == "__main__":
    main(CASES, "zeropp")
