#!/usr/bin/env python3
"""What the optimizer keeps, under real mpirun, run by CTest: SGD with
momentum (--optimizer sgd) beside AdamW. Stages 0-3, offload and the
delayed update give bitwise the same result; each rank's optimizer bytes
are the closed form (4 per owned parameter for SGD, 8 for AdamW) at np 1-4;
the planner agrees byte for byte; a checkpoint resumes bitwise and is
refused by a run of the other optimizer; the default model converges.
Frozen units (--freeze) keep their params only, bitwise unchanged.

usage: zt_optimizer_test.py CASE ZT_TRAIN ZT_RUN
"""
import json
import os
import subprocess

from zt_harness import STAGES_COMPARED, launch, losses, main, train

MODEL = ["--layers", "2", "--d-model", "32", "--heads", "4", "--seq-len", "32", "--vocab", "48",
         "--micro-batch", "4", "--threads", "1", "--quiet", "--bucket-size", "16KiB"]
SGD = ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9", "--weight-decay", "0.01"]


def padded_units(np, layers=2, C=32, T=32, V=48):
    units = [V * C + T * C] + [12 * C * C + 13 * C] * layers + [2 * C + V * C]
    q = np * 16 if np > 1 else 1
    return [(n + q - 1) // q * q for n in units]


def case_stages(ctx):
    """np 3, fp32: SGD's losses and params_digest bitwise equal at stages 0-3,
    with offload and with the delayed update's own (stale) result at every stage."""
    runs = [train(ctx, 3, MODEL + SGD + ["--steps", "4", "--stage", str(s)], f"s{s}") for s in STAGES_COMPARED]
    runs += [train(ctx, 3, MODEL + SGD + ["--steps", "4", "--stage", str(s), "--offload", "cpu"], f"o{s}")
             for s in (0, 3)]
    for r in runs:
        assert losses(r) == losses(runs[0]) and r["params_digest"] == runs[0]["params_digest"]
    delayed = [train(ctx, 3, MODEL + SGD + ["--steps", "4", "--stage", str(s), "--offload", "cpu", "--offload-delay",
                                            "1"], f"d{s}") for s in (1, 3)]
    assert delayed[0]["params_digest"] == delayed[1]["params_digest"] != runs[0]["params_digest"]
    adam = train(ctx, 3, MODEL + ["--steps", "4"], "adam")
    assert adam["params_digest"] != runs[0]["params_digest"]
    print(f"ok: SGD stages 0-3, offload at 0 and 3: bitwise equal ({runs[0]['params_digest']}); delayed 1 = 3")


def case_bytes(ctx):
    """Each rank's optimizer peak (device, or the host pool under offload) is
    4 bytes per owned parameter for SGD and 8 for AdamW, at np 1-4."""
    for np in (1, 2, 3, 4):
        units = padded_units(np)
        for stage in range(4):
            owned = sum(units) if stage == 0 else sum(u // np for u in units)
            for opt, per in (("sgd", 4), ("adamw", 8)):
                extra = SGD if opt == "sgd" else []
                s = train(ctx, np, MODEL + extra + ["--steps", "1", "--stage", str(stage)], f"b{np}{stage}{opt}")
                got = [r["peak_by_category"]["optimizer"] for r in s["ranks"]]
                assert got == [per * owned] * np, (np, stage, opt, got, per * owned)
        s = train(ctx, np, MODEL + SGD + ["--steps", "1", "--stage", "2", "--offload", "cpu"], f"h{np}")
        owned = sum(u // np for u in padded_units(np)) if np > 1 else sum(padded_units(np))
        got = [r["host_peak_by_category"]["optimizer"] for r in s["ranks"]]
        assert got == [4 * owned] * np, (np, got, 4 * owned)
    print("ok: optimizer bytes per rank = 4 (SGD) or 8 (AdamW) x owned parameters, np 1-4, stages 0-3, offload")


def case_planner(ctx):
    """zt-plan's per-category peaks equal the measured ones for SGD, np 2, stages 0-3."""
    exe = os.path.join(os.path.dirname(ctx["zt"]), "zt-plan")
    for stage in range(4):
        args = MODEL + SGD + ["--steps", "2", "--stage", str(stage)]
        s = train(ctx, 2, args, f"p{stage}")
        p = json.loads(subprocess.run([exe, "--world", "2", "--json"] + args, capture_output=True, text=True,
                                      check=True).stdout)
        for r in s["ranks"]:
            assert r["peak_by_category"] == p["peak_by_category"], (stage, r["peak_by_category"], p["peak_by_category"])
    print("ok: zt-plan equals the measured peaks for SGD at stages 0-3")


def case_resume(ctx):
    """SGD resumes bitwise (np 2 stage 3); an AdamW run refuses its checkpoint, naming both optimizers."""
    save = os.path.join(ctx["work"], "ckpt")
    args = MODEL + SGD + ["--steps", "6", "--stage", "3"]
    whole = train(ctx, 2, args + ["--save-every", "3", "--save-dir", save], "whole")
    resumed = train(ctx, 2, args + ["--resume", os.path.join(save, "step-000003")], "resumed")
    assert losses(resumed) == losses(whole)[3:] and resumed["params_digest"] == whole["params_digest"]
    p = launch(ctx, 2, MODEL + ["--steps", "6", "--stage", "3", "--resume", os.path.join(save, "step-000003")],
               expect_rc=2)
    assert "saved with --optimizer sgd; this run uses --optimizer adamw" in p.stderr, p.stderr[-2000:]
    print("ok: SGD resume bitwise; refused by an AdamW run")


def case_convergence(ctx):
    """The default model, 200 steps, np 2, SGD with momentum 0.9 at lr 0.3:
    within 0.15 nats of the data's entropy rate (0.05 here)."""
    d = os.path.join(ctx["work"], "conv")
    launch(ctx, 2, ["--quiet", "--trace", "0", "--steps", "200", "--optimizer", "sgd", "--lr", "0.3", "--log-dir", d])
    with open(os.path.join(d, "summary.json")) as f:
        s = json.load(f)
    gap = s["final_loss"] - s["data_entropy"]
    assert gap <= 0.15, (s["final_loss"], s["data_entropy"])
    print(f"ok: SGD final loss {s['final_loss']:.5f}, entropy {s['data_entropy']:.5f}, gap {gap:.4f}")


def master_blocks(ckpt_dir, units, d=4):
    """np 1 checkpoint: each unit's master block (bytes) from rank0.bin
    (a 32-byte header, then per unit master, m, v (fp32) and params (d bytes each))."""
    with open(os.path.join(ckpt_dir, "rank0.bin"), "rb") as f:
        data = f.read()
    out, off = [], 32
    for n in units:
        out.append(data[off:off + 4 * n])
        off += n * (12 + d)
    return out


def case_freeze(ctx):
    """--freeze embedding,blocks:0: no grads or optimizer state for those
    units on any rank (closed form at np 3, stages 0 and 3), stages 0-3
    bitwise equal, the planner exact; at np 1 the frozen units' values after
    training are bitwise those of a run at lr 0, and the rest changed. Bad
    lists are refused by name."""
    freeze = ["--freeze", "embedding,blocks:0"]
    units = padded_units(3)
    trained = units[2:]  # block 1 and the head
    runs = {}
    for stage in STAGES_COMPARED:
        s = train(ctx, 3, MODEL + freeze + ["--steps", "3", "--stage", str(stage)], f"f{stage}")
        runs[stage] = s
        if stage in (0, 3):
            own = sum(trained) if stage == 0 else sum(u // 3 for u in trained)
            grads = sum(trained) if stage < 2 else sum(u // 3 for u in trained)
            for r in s["ranks"]:
                assert r["peak_by_category"]["optimizer"] == 8 * own, (stage, r["peak_by_category"], own)
                assert r["peak_by_category"]["grads"] == 4 * grads, (stage, r["peak_by_category"], grads)
    assert all(r["params_digest"] == runs[0]["params_digest"] for r in runs.values())
    exe = os.path.join(os.path.dirname(ctx["zt"]), "zt-plan")
    for stage, r in ((0, runs[0]), (3, runs[3])):
        p = json.loads(subprocess.run([exe, "--world", "3", "--json"] + MODEL + freeze + ["--stage", str(stage)],
                                      capture_output=True, text=True, check=True).stdout)
        assert all(x["peak_by_category"] == p["peak_by_category"] for x in r["ranks"]), (stage, p)
    one = padded_units(1)
    blocks = []
    for name, lr in (("trained", "3e-3"), ("still", "0")):
        save = os.path.join(ctx["work"], "ck" + name)
        train(ctx, 1, MODEL + ["--freeze", "embedding,head", "--steps", "3", "--lr", lr, "--save-every", "3",
                               "--save-dir", save], "one" + name)
        blocks.append(master_blocks(os.path.join(save, "step-000003"), one))
    assert blocks[0][0] == blocks[1][0] and blocks[0][3] == blocks[1][3], "frozen units changed"
    assert blocks[0][1] != blocks[1][1], "block 0 should have trained"
    for bad, needle in ((["--freeze", "blocks:5"], "names block 5; the model has blocks 0-1"),
                        (["--freeze", "embedding,blocks,head"], "leaves nothing to train"),
                        (["--freeze", "decoder"], "'decoder' is not embedding, head")):
        p = launch(ctx, 1, MODEL + bad + ["--steps", "1"], expect_rc=2)
        assert needle in p.stderr, (bad, p.stderr[-1500:])
    print("ok: frozen units: no grads or optimizer bytes, stages bitwise, planner exact, values unchanged")


def case_max_batch(ctx):
    """zt-plan --max-micro-batch / --max-seq-len under --mem-limit 24MiB
    (replayed, the default caching allocator): the answer runs under the
    cap and answer + 1 runs out of memory (exit 3), np 2, stages 2 and 3
    (and SGD at stage 3). Every allocator and --max-layers:
    tests/mpi/zt_replay_test.py."""
    exe = os.path.join(os.path.dirname(ctx["zt"]), "zt-plan")
    model = ["--layers", "2", "--d-model", "64", "--threads", "1", "--quiet", "--trace", "0", "--mem-limit", "24MiB"]
    for stage, extra, flag, option in ((2, [], "--max-micro-batch", "--micro-batch"),
                                       (3, [], "--max-micro-batch", "--micro-batch"),
                                       (3, SGD, "--max-micro-batch", "--micro-batch"),
                                       (2, [], "--max-seq-len", "--seq-len")):
        args = model + extra + ["--stage", str(stage)]
        p = subprocess.run([exe, "--world", "2", flag, "--json"] + args, capture_output=True, text=True)
        answer = json.loads(p.stdout)[flag[2:].replace("-", "_")]
        assert answer >= 2, (stage, flag, answer)
        for value, rc in ((answer, 0), (answer + 1, 3)):
            launch(ctx, 2, args + ["--steps", "2", option, str(value)], expect_rc=rc)
        print(f"ok: stage {stage} {' '.join(extra) or 'adamw'}: {flag} {answer} fits in 24 MiB; {answer + 1} does not")


CASES = {"stages": case_stages, "bytes": case_bytes, "planner": case_planner, "resume": case_resume,
         "convergence": case_convergence, "freeze": case_freeze, "max_batch": case_max_batch}

if __name__ == "__main__":
    main(CASES, "optimizer")
