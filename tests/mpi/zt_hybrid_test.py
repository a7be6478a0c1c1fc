#!/usr/bin/env python3
"""Hybrid sharding (--shard-group G: the state sharded over groups of G
ranks and replicated across them; FSDP2's HSDP, DeepSpeed's MiCS) under real
mpirun on one host, run by CTest: stages 0-3 bitwise identical at a given
world and group size, per-rank model state by the closed form for G ranks,
zt-plan equal to it, a hybrid checkpoint resuming without groups (and the
reverse) bitwise, DeepSpeed's mics_shard_size, and bad group sizes refused.

usage: zt_hybrid_test.py CASE ZT_TRAIN ZT_RUN
"""
import json
import os

from zt_harness import STAGES_COMPARED, launch, losses, main, plan, train

C, T, V, L = 64, 32, 64, 2
MODEL = ["--threads", "1", "--quiet", "--trace", "0", "--layers", str(L), "--d-model", str(C), "--heads", "4",
         "--seq-len", str(T), "--vocab", str(V), "--micro-batch", "2"]
STATE = ["params", "grads", "master_params", "optimizer"]


def padded_units(G):
    """The toy GPT's units padded for a group of G ranks, derived here:
    numel rounded up to a multiple of G x 16 (G > 1)."""
    units = [V * C + T * C] + [12 * C * C + 13 * C] * L + [2 * C + V * C]
    q = G * 16 if G > 1 else 1
    return [(n + q - 1) // q * q for n in units]


def closed_form(G, stage, dtype):
    """Bytes per rank per persistent category when the state is a G-rank group's."""
    padded = padded_units(G)
    d = 2 if dtype == "bf16" else 4
    full, shard = sum(padded), sum(p // G for p in padded)
    return {"params": (full if stage < 3 else shard) * d, "grads": (full if stage < 2 else shard) * d,
            "master_params": 0 if dtype == "fp32" else (full if stage < 1 else shard) * 4,
            "optimizer": (full if stage < 1 else shard) * 8}


def case_stages(ctx):
    """np 4, --shard-group 2, fp32 and bf16: stages 0-3 give bitwise the
    same losses and parameters; every rank's params, grads, master and
    optimizer bytes are the closed form for 2 ranks (at stage 3, 16 x P / 2
    plus padding in fp32), which zt-plan gives too; the replicas' sums ran
    over the replica groups. The negative twin: the world-sharded run's
    state is half that."""
    for dtype in ("fp32", "bf16"):
        runs = []
        for stage in STAGES_COMPARED:
            flags = MODEL + ["--stage", str(stage), "--dtype", dtype, "--steps", "3", "--shard-group", "2"]
            s = train(ctx, 4, flags, f"g2-{dtype}-s{stage}")
            runs.append(s)
            want = closed_form(2, stage, dtype)
            p = plan(ctx, 4, flags)
            for r in s["ranks"]:
                got = {k: r["peak_by_category"][k] for k in STATE}
                assert got == want, (dtype, stage, r["rank"], got, want)
                assert r["peak_bytes"] == p["peak_bytes"], (dtype, stage, r["peak_bytes"], p["peak_bytes"])
            rep = s["steps"][0][-1]["comm_replicas"]
            assert rep["all_gather"]["calls"] > 0, rep
        for s in runs[1:]:
            assert losses(s) == losses(runs[0]) and s["params_digest"] == runs[0]["params_digest"], dtype
        world = train(ctx, 4, MODEL + ["--stage", "3", "--dtype", dtype, "--steps", "1"], f"world-{dtype}")
        g2 = runs[-1]["ranks"][0]["peak_by_category"]["optimizer"]  # stage 3
        assert world["ranks"][0]["peak_by_category"]["optimizer"] * 2 == g2 != 0, (world["ranks"][0], g2)
    fp32 = closed_form(2, 3, "fp32")
    print(f"ok: --shard-group 2 at np 4: stages 0-3 bitwise (fp32, bf16); stage-3 state {sum(fp32.values())} bytes "
          f"per rank = 16 x {sum(padded_units(2)) // 2} (P/2 + padding); zt-plan equal")


def case_resume(ctx):
    """A checkpoint of --shard-group 2 at np 4 (the group's layout, written
    by the first group) resumes at np 3 without groups bitwise in the
    parameters; np 4 grouped, 3 steps + 3 resumed equal 6 straight."""
    flags = MODEL + ["--stage", "3"]
    d = os.path.join(ctx["work"], "ckpt")
    a = train(ctx, 4, flags + ["--shard-group", "2", "--steps", "3", "--save-every", "3", "--save-dir", d], "a")
    b = train(ctx, 3, flags + ["--steps", "3", "--resume", d], "b")
    assert b["params_digest"] == a["params_digest"], (a["params_digest"], b["params_digest"])
    straight = train(ctx, 4, flags + ["--shard-group", "2", "--steps", "6"], "straight")
    c = train(ctx, 4, flags + ["--shard-group", "2", "--steps", "6", "--resume", d], "c")
    assert c["params_digest"] == straight["params_digest"] and losses(c) == losses(straight)[3:]
    print("ok: a hybrid checkpoint loads at np 3 without groups, bitwise in parameters, and resumes bitwise")


def case_refused(ctx):
    """Group sizes that do not divide the world, or that cannot carry a
    16-bit reduce's replica sum, and bad values: exit 2 naming them.
    DeepSpeed's zero_optimization.mics_shard_size selects the group size."""
    for flags, needle in ((["--shard-group", "3"], "--shard-group 3 does not divide the 4 rank(s)"),
                          (["--shard-group", "two"], "--shard-group 'two' is not world, node or a positive number"),
                          (["--shard-group", "1", "--reduce-dtype", "bf16", "--dtype", "bf16"],
                           "hybrid sharding needs groups of at least 2 rank(s) for a bf16 reduce dtype")):
        p = launch(ctx, 4, MODEL + ["--steps", "1"] + flags, expect_rc=2)
        assert needle in p.stderr, (flags, p.stderr[-800:])
    cfg = os.path.join(ctx["work"], "ds.json")
    with open(cfg, "w") as f:
        json.dump({"zero_optimization": {"stage": 3, "mics_shard_size": 2}}, f)
    s = train(ctx, 4, MODEL + ["--config", cfg, "--steps", "1"], "ds")
    assert s["ranks"][0]["peak_by_category"]["optimizer"] == closed_form(2, 3, "fp32")["optimizer"]
    print("ok: bad group sizes refused by name; DeepSpeed's mics_shard_size selects hybrid sharding")


def case_reshard(ctx):
    """np 4, stage 3, --reshard-after-forward 2 (hpZ in groups of 2 ranks):
    bitwise the run without it (fp32 and bf16, and with full recompute);
    the secondary parts raise the gathered_params peak by at most half the
    padded model per rank (each rank keeps 1/2 of every unit its backward
    gathers, from its forward to its backward), as zt-plan predicts byte for
    byte; refused below stage 3 and with --shard-group."""
    for extra in (["--dtype", "fp32"], ["--dtype", "bf16"], ["--recompute", "full"]):
        flags = MODEL + ["--stage", "3", "--steps", "3"] + extra
        a = train(ctx, 4, flags, f"plain-{'-'.join(extra)}")
        b = train(ctx, 4, flags + ["--reshard-after-forward", "2"], f"hpz-{'-'.join(extra)}")
        assert losses(a) == losses(b) and a["params_digest"] == b["params_digest"], extra
        d = 2 if "bf16" in extra else 4
        more = b["ranks"][0]["peak_by_category"]["gathered_params"] - a["ranks"][0]["peak_by_category"]["gathered_params"]
        assert 0 < more <= sum(padded_units(4)) // 2 * d, (extra, more)
        assert b["steps"][0][-1]["comm_secondary"]["all_gather"]["calls"] > 0
        p = plan(ctx, 4, flags + ["--reshard-after-forward", "2"])
        assert all(r["peak_bytes"] == p["peak_bytes"] for r in b["ranks"]), (extra, p["peak_bytes"], b["ranks"][0])
        assert b["ranks"][0]["peak_by_category"]["gathered_params"] == p["peak_by_category"]["gathered_params"]
    for bad, needle in ((["--stage", "2"], "--reshard-after-forward 2 needs --stage 3 with world sharding"),
                        (["--stage", "3", "--shard-group", "2"], "needs --stage 3 with world sharding"),
                        (["--stage", "3", "--reshard-after-forward", "3"], "does not divide the 4 rank(s)")):
        flags = MODEL + ["--steps", "1", "--reshard-after-forward", "2"] + bad
        p = launch(ctx, 4, flags, expect_rc=2)
        assert needle in p.stderr, (bad, p.stderr[-600:])
    print("ok: --reshard-after-forward 2: bitwise (fp32, bf16, full recompute), the secondary parts in "
          "gathered_params, refused where it does not apply")


def case_cuda_emu(ctx):
    """--device cuda on the emulator, np 4 over NCCL with stream jitter:
    --shard-group 2 (NCCL groups from ncclCommInitRank over split host
    communicators, the replicas' sums all-gathered on device) gives stages
    0 and 3 bitwise alike with half the world-sharded state; and
    --reshard-after-forward 2 (hpZ over an NCCL group) is bitwise the run
    without it."""
    env = {"ZT_EMU_DEVICES": "4", "ZT_EMU_JITTER_US": "200", "ZT_EMU_SEED": "3"}
    flags = MODEL + ["--device", "cuda", "--steps", "3"]
    s0 = train(ctx, 4, flags + ["--stage", "0", "--shard-group", "2"], "cu-g2-s0", env)
    s3 = train(ctx, 4, flags + ["--stage", "3", "--shard-group", "2"], "cu-g2-s3", env)
    assert losses(s0) == losses(s3) and s0["params_digest"] == s3["params_digest"]
    assert s3["ranks"][0]["peak_by_category"]["optimizer"] == closed_form(2, 3, "fp32")["optimizer"]
    a = train(ctx, 4, flags + ["--stage", "3"], "cu-plain", env)
    b = train(ctx, 4, flags + ["--stage", "3", "--reshard-after-forward", "2"], "cu-hpz", env)
    assert losses(a) == losses(b) and a["params_digest"] == b["params_digest"]
    print("ok: cuda emulator: --shard-group 2 stages 0 and 3 bitwise over NCCL groups; hpZ bitwise")


CASES = {"stages": case_stages, "resume": case_resume, "refused": case_refused, "reshard": case_reshard,
         "cuda_emu": case_cuda_emu}

if __name__ == "__main__":
    main(CASES, "hybrid")
