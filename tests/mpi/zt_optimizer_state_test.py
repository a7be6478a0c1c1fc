#!/usr/bin/env python3
"""Adafactor and 8-bit Adam under real mpirun, run by CTest: stages 0-3 and
offload bitwise equal in fp32 (and bf16); each rank's optimizer bytes equal
a closed form computed here from the model's shapes, and zt-plan --rank
agrees byte for byte; checkpoints resume bitwise; resharding loads the
saved values, continues alike at every stage of the new world and says
what it changed; the default model converges; bad combinations are
refused by name.

usage: zt_optimizer_state_test.py CASE ZT_TRAIN ZT_RUN
"""
import json
import os
import subprocess

from zt_harness import launch, losses, main, train

MODEL = ["--layers", "2", "--d-model", "32", "--heads", "4", "--seq-len", "32", "--vocab", "48",
         "--micro-batch", "4", "--threads", "1", "--quiet", "--bucket-size", "16KiB"]
OPTIMIZERS = {"adam8bit": ["--optimizer", "adam8bit"],
              "adafactor": ["--optimizer", "adafactor"],
              "adafactor+m": ["--optimizer", "adafactor", "--adafactor-beta1", "0.9"]}
QBLOCK = 2048


def gpt_units(layers=2, C=32, T=32, V=48):
    """Each unit's parameters as (rows, cols) or (n,) in order (examples/gpt/gpt.c)."""
    block = [(C,), (C,), (3 * C, C), (3 * C,), (C, C), (C,), (C,), (C,), (4 * C, C), (4 * C,), (C, 4 * C), (C,)]
    return [[(V, C), (T, C)]] + [block] * layers + [[(C,), (C,), (V, C)]]


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def layout(params, np):
    """[(offset, shape)], padded size and slice size at world size np."""
    out, at = [], 0
    for shape in params:
        out.append((at, shape))
        at += numel(shape)
    q = np * 16 if np > 1 else 1
    padded = (at + q - 1) // q * q
    return out, padded, padded // np


def optimizer_bytes(opt, np, stage, rank):
    """Rank `rank`'s optimizer bytes, from the scheme (optim/layout.c's
    comments), not from the engine's code: 8-bit: a byte each for m and v
    per owned element (held in 32-bit words) and two fp32 scales per
    2048-element block, blocks starting at every parameter's part of every
    slice; Adafactor: rows + cols per matrix a rank's slices touch, the
    owned elements of a vector, and 4 per owned element with a first moment."""
    total = 0
    for params in gpt_units():
        placed, padded, S = layout(params, np)
        lo, hi = (0, padded) if stage == 0 else (rank * S, (rank + 1) * S)
        owned = hi - lo
        if opt == "adam8bit":
            blocks = 0
            for r in range(lo // S, hi // S):
                for off, shape in placed:
                    a, b = max(off, r * S), min(off + numel(shape), (r + 1) * S)
                    blocks += -(-(b - a) // QBLOCK) if a < b else 0
            total += 2 * 4 * -(-owned // 4) + 8 * blocks
            continue
        for off, shape in placed:
            a, b = max(off, lo), min(off + numel(shape), hi)
            if a >= b:
                continue
            total += 4 * (shape[0] + shape[1] if len(shape) == 2 else b - a)
        total += 4 * owned if opt == "adafactor+m" else 0
    return total


def stages_equal(ctx, stages, offload, tag):
    """np 3, fp32: for each optimizer, losses and params_digest bitwise equal
    at the given stages and with offload at the given ones; returns each
    optimizer's digest."""
    digests = {}
    for name, flags in OPTIMIZERS.items():
        args = MODEL + flags + ["--steps", "4"]
        runs = [train(ctx, 3, args + ["--stage", str(s)], f"{name}-s{s}") for s in stages]
        runs += [train(ctx, 3, args + ["--stage", str(s), "--offload", "cpu"], f"{name}-o{s}") for s in offload]
        for r in runs:
            assert losses(r) == losses(runs[0]) and r["params_digest"] == runs[0]["params_digest"], name
        if name != "adafactor+m":  # its first moment starts at zero, without bias correction: slow at first
            assert losses(runs[0])[-1] < losses(runs[0])[0], (name, losses(runs[0]))
        digests[name] = runs[0]["params_digest"]
        print(f"ok: {name}: stages {stages}, offload at {offload} bitwise equal ({runs[0]['params_digest']}) [{tag}]")
    assert len(set(digests.values())) == len(OPTIMIZERS), digests
    return digests


def case_stages(ctx):
    """np 3, fp32: for each optimizer, losses and params_digest bitwise equal
    at stages 0 and 3 and with offload at stage 3 (the full state, the
    sharded state, the host pool's shard); stages 1 and 2 and offload at 0
    are case stages_12's."""
    stages_equal(ctx, (0, 3), (3,), "stages")


def case_stages_12(ctx):
    """As case stages, at stages 0, 1 and 2 and with offload at stage 0:
    stages 1 and 2 shard the state as stage 3 does, so under the sanitizers
    case stages alone runs; together the two cover stages 0-3 and offload at
    0 and 3, each against stage 0."""
    stages_equal(ctx, (0, 1, 2), (0,), "stages_12")


def case_stages_more(ctx):
    """bf16 stages 0 and 3 equal at np 2 for each optimizer; 8-bit Adam's
    delayed update equal at stages 1 and 3; adafactor refuses the delayed
    update by name."""
    for name, flags in OPTIMIZERS.items():
        args = MODEL + flags + ["--steps", "4"]
        half = [train(ctx, 2, args + ["--stage", str(s), "--dtype", "bf16"], f"{name}-b{s}") for s in (0, 3)]
        assert half[0]["params_digest"] == half[1]["params_digest"], name
    print("ok: bf16 stages 0 and 3 bitwise equal for every optimizer")
    delayed = [train(ctx, 3, MODEL + OPTIMIZERS["adam8bit"] + ["--steps", "4", "--stage", str(s), "--offload", "cpu",
                                                                "--offload-delay", "1"], f"d{s}") for s in (1, 3)]
    assert delayed[0]["params_digest"] == delayed[1]["params_digest"]
    p = launch(ctx, 2, MODEL + OPTIMIZERS["adafactor"] + ["--steps", "1", "--offload", "cpu", "--offload-delay", "1"],
               expect_rc=2)
    assert "--offload-delay 1 cannot run --optimizer adafactor" in p.stderr, p.stderr[-1500:]
    print("ok: 8-bit Adam's delayed update equal at stages 1 and 3; adafactor refuses the delayed update by name")


def case_bytes(ctx):
    """Each rank's optimizer bytes (device, or the host pool under offload)
    equal the closed form at np 3 and 4 (uneven and even shards), stages
    0-3 (np 2 is tests/test_optim_conformance.c's, per table; at np 1
    every stage holds the whole state, as stage 0 does here); zt-plan --rank r gives
    every rank's measured per-category peaks at np 3 (fp32 stages 0-3, bf16
    stage 1)."""
    exe = os.path.join(os.path.dirname(ctx["zt"]), "zt-plan")
    for name, flags in OPTIMIZERS.items():
        for np in (3, 4):
            for stage in range(4):
                args = MODEL + flags + ["--steps", "2", "--stage", str(stage)]  # 2: the second step prefetches
                s = train(ctx, np, args, f"{name}-{np}-{stage}")
                got = [r["peak_by_category"]["optimizer"] for r in s["ranks"]]
                want = [optimizer_bytes(name, np, stage, r) for r in range(np)]
                assert got == want, (name, np, stage, got, want)
                if np != 3:
                    continue
                for r in range(np):
                    p = json.loads(subprocess.run([exe, "--world", "3", "--rank", str(r), "--json"] + args,
                                                  capture_output=True, text=True, check=True).stdout)
                    assert p["peak_by_category"] == s["ranks"][r]["peak_by_category"], (name, stage, r, p)
        args = MODEL + flags + ["--steps", "2", "--stage", "1", "--dtype", "bf16"]
        s = train(ctx, 3, args, f"{name}-bf16")
        for r in range(3):
            p = json.loads(subprocess.run([exe, "--world", "3", "--rank", str(r), "--json"] + args,
                                          capture_output=True, text=True, check=True).stdout)
            assert p["peak_by_category"] == s["ranks"][r]["peak_by_category"], (name, "bf16", r, p)
        s = train(ctx, 3, MODEL + flags + ["--steps", "1", "--stage", "2", "--offload", "cpu"], f"{name}-host")
        got = [r["host_peak_by_category"]["optimizer"] for r in s["ranks"]]
        assert got == [optimizer_bytes(name, 3, 2, r) for r in range(3)], (name, got)
        print(f"ok: {name}: optimizer bytes per rank = the closed form, np 3 and 4 (np 4 stage 3: {want}); "
              f"zt-plan --rank exact at np 3")


def case_resume(ctx):
    """Each optimizer resumes bitwise: np 2 stage 3, and np 3 stage 1 with
    offload; another optimizer's run refuses the checkpoint."""
    for name, flags in OPTIMIZERS.items():
        for np, extra in ((2, ["--stage", "3"]), (3, ["--stage", "1", "--offload", "cpu"])):
            save = os.path.join(ctx["work"], f"ck-{name}-{np}")
            args = MODEL + flags + extra + ["--steps", "6"]
            whole = train(ctx, np, args + ["--save-every", "3", "--save-dir", save], f"{name}-whole{np}")
            resumed = train(ctx, np, args + ["--resume", os.path.join(save, "step-000003")], f"{name}-res{np}")
            assert losses(resumed) == losses(whole)[3:], (name, np, losses(resumed), losses(whole))
            assert resumed["params_digest"] == whole["params_digest"], (name, np)
    p = launch(ctx, 2, MODEL + ["--steps", "6", "--stage", "3", "--resume",
                                os.path.join(ctx["work"], "ck-adam8bit-2", "step-000003")], expect_rc=2)
    assert "saved with --optimizer adam8bit; this run uses --optimizer adamw" in p.stderr, p.stderr[-1500:]
    print("ok: adam8bit, adafactor and adafactor with m resume bitwise (np 2 stage 3, np 3 stage 1 offload)")


def case_reshard(ctx):
    """Save at np 2 stage 1, load at np 3: the loaded parameters' digest is
    the saved one; continuing at stage 3 and at stage 0 gives bitwise the
    same losses (the state is placed the same way whatever the stage);
    8-bit Adam and Adafactor say what resharding changed (the bound on
    8-bit Adam's re-quantization is tests/test_optim_kernels.c's); SGD's
    state is exact, as AdamW's (zt_mpi_test.py reshard)."""
    cases = dict(OPTIMIZERS)
    cases["sgd"] = ["--optimizer", "sgd", "--lr", "0.05"]
    for name, flags in cases.items():
        save = os.path.join(ctx["work"], f"rs-{name}")
        a = train(ctx, 2, MODEL + flags + ["--steps", "4", "--stage", "1", "--save-every", "4", "--save-dir", save],
                  f"rs-save-{name}")
        loud = [x for x in MODEL if x != "--quiet"]  # the note is a log line
        p = launch(ctx, 3, loud + flags + ["--steps", "4", "--stage", "1", "--resume", save,
                                            "--log-dir", os.path.join(ctx["work"], f"rs-load-{name}")])
        with open(os.path.join(ctx["work"], f"rs-load-{name}", "summary.json")) as f:
            assert json.load(f)["params_digest"] == a["params_digest"], name
        said = p.stdout + p.stderr
        if name == "adam8bit":
            assert "8-bit Adam's m and v were dequantized and quantized again" in said, said[-1500:]
        if name.startswith("adafactor"):
            assert "Adafactor's statistics carry over exactly" in said, said[-1500:]
        cont = [train(ctx, 3, MODEL + flags + ["--steps", "8", "--stage", str(s), "--resume", save], f"rs-{name}-{s}")
                for s in (3, 0)]
        assert losses(cont[0]) == losses(cont[1]) and cont[0]["params_digest"] == cont[1]["params_digest"], name
        assert len(losses(cont[0])) == 4 and losses(cont[0])[-1] < losses(cont[0])[0], (name, losses(cont[0]))
        print(f"ok: {name}: np 2 -> 3 loads the saved digest; stages 3 and 0 continue bitwise alike")


def case_convergence(ctx):
    """The default model, 200 steps, np 2, at the default lr (3e-3) for
    8-bit Adam and Adafactor: within 0.15 nats of the data's entropy rate."""
    for name in ("adam8bit", "adafactor"):
        d = os.path.join(ctx["work"], "conv-" + name)
        launch(ctx, 2, ["--quiet", "--trace", "0", "--steps", "200", "--log-dir", d] + OPTIMIZERS[name])
        with open(os.path.join(d, "summary.json")) as f:
            s = json.load(f)
        gap = s["final_loss"] - s["data_entropy"]
        assert gap <= 0.15, (name, s["final_loss"], s["data_entropy"])
        print(f"ok: {name} final loss {s['final_loss']:.5f}, entropy {s['data_entropy']:.5f}, gap {gap:.4f}")


def case_cuda_emu(ctx):
    """--device cuda on the CUDA emulator (ZT_CUDA=EMU builds), np 2 over
    NCCL with stream jitter: 8-bit Adam and Adafactor with a first moment
    bitwise equal at stages 0 and 3 and with offload at stage 3, each rank's
    optimizer bytes the closed form, losses within 1e-4 (relative) of the
    CPU backend's (the model's GPU kernels sum in other orders)."""
    env = dict(os.environ, ZT_EMU_DEVICES="2", ZT_EMU_JITTER_US="200", ZT_EMU_SEED="15")
    for name in ("adam8bit", "adafactor+m"):
        args = MODEL + OPTIMIZERS[name] + ["--steps", "4"]
        cpu = train(ctx, 2, args, f"cpu-{name}")
        runs = []
        for extra in (["--stage", "0"], ["--stage", "3"], ["--stage", "3", "--offload", "cpu"]):
            d = os.path.join(ctx["work"], f"cu-{name}-{len(runs)}")
            cmd = [ctx["zt_run"], "-np", "2", ctx["zt"]] + args + ["--device", "cuda", "--log-dir", d] + extra
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
            assert p.returncode == 0, (cmd, p.stdout[-2000:], p.stderr[-2000:])
            with open(os.path.join(d, "summary.json")) as f:
                runs.append(json.load(f))
        for r in runs:
            assert r["device"] == "cuda" and r["losses"] == runs[0]["losses"], (name, r["losses"], runs[0]["losses"])
            assert r["params_digest"] == runs[0]["params_digest"], name
        for stage, r in ((0, runs[0]), (3, runs[1])):
            got = [x["peak_by_category"]["optimizer"] for x in r["ranks"]]
            assert got == [optimizer_bytes(name, 2, stage, k) for k in range(2)], (name, stage, got)
        for a, b in zip(runs[0]["losses"], losses(cpu)):
            assert abs(a - b) <= 1e-4 * abs(b), (name, a, b)
        print(f"ok: {name} on the CUDA emulator: stages 0 and 3 and offload bitwise; bytes the closed form; "
              f"within 1e-4 of the CPU")


CASES = {"stages": case_stages, "stages_12": case_stages_12, "stages_more": case_stages_more, "bytes": case_bytes, "resume": case_resume, "reshard": case_reshard,
         "convergence": case_convergence, "cuda_emu": case_cuda_emu}

if __name__ == "__main__":
    main(CASES, "optstate")
