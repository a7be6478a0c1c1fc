#!/usr/bin/env python3
"""The delayed parameter update (--offload-delay 1, ZeRO-Offload's DPU)
under real mpirun, run by CTest: it is refused without --offload cpu, the
forward and backward of step t + 1 really use the parameters from before
step t, every stage gives the same result, a resume continues bitwise, the
planner's host bytes match the measured ones, and the default model still
converges.

usage: zt_offload_delay_test.py CASE ZT_TRAIN ZT_RUN
"""
import json
import os
import subprocess

from zt_harness import launch, losses, main, train

MODEL = ["--layers", "2", "--d-model", "32", "--heads", "4", "--seq-len", "32", "--vocab", "48",
         "--micro-batch", "4", "--threads", "1", "--quiet", "--bucket-size", "16KiB"]
DELAY = ["--offload", "cpu", "--offload-delay", "1"]


def case_refused(ctx):
    """Without --offload cpu the flag is refused by name, exit 2, before any step."""
    p = launch(ctx, 2, MODEL + ["--steps", "2", "--offload-delay", "1"], expect_rc=2)
    assert "--offload-delay 1 needs --offload cpu" in p.stderr, p.stderr[-2000:]
    p = launch(ctx, 1, MODEL + ["--steps", "2", "--offload", "cpu", "--offload-delay", "2"], expect_rc=2)
    assert "--offload-delay" in p.stderr, p.stderr[-2000:]
    print("ok: refused without --offload cpu, and out of range")


def case_stale(ctx):
    """Steps 1 and 2 both compute on the initial parameters (so step 2's loss
    and gradient norm are those of a run with lr 0), step 3 on step 1's
    update; without the delay step 2 already sees the update."""
    args = MODEL + ["--steps", "4", "--stage", "2"] + DELAY
    delayed = train(ctx, 3, args, "delayed")
    frozen = train(ctx, 3, args + ["--lr", "0"], "frozen")
    eager = train(ctx, 3, MODEL + ["--steps", "4", "--stage", "2", "--offload", "cpu"], "eager")
    d, f, e = delayed["steps"][0], frozen["steps"][0], eager["steps"][0]
    assert d[0]["loss"] == e[0]["loss"] == f[0]["loss"], (d[0], e[0], f[0])
    assert d[1]["loss"] == f[1]["loss"] and d[1]["grad_norm"] == f[1]["grad_norm"], (d[1], f[1])
    assert d[1]["loss"] != e[1]["loss"], "without the delay step 2 uses step 1's update"
    assert d[2]["loss"] != f[2]["loss"], "step 3 must see step 1's update"
    assert delayed["params_digest"] != eager["params_digest"]
    off = [x["offload"] for x in d]
    assert all(o["delayed_adam_s"] > 0 for o in off[1:]) and off[0]["delayed_adam_s"] == 0, off
    print(f"ok: step 2 loss {d[1]['loss']:.9f} equals lr 0's, eager {e[1]['loss']:.9f}; "
          f"CPU Adam {sum(o['delayed_adam_s'] for o in off) * 1e3:.2f} ms, waited "
          f"{sum(o['delayed_wait_s'] for o in off) * 1e3:.2f} ms")


def case_stages(ctx):
    """np 3 (uneven shards), fp32: losses and the params digest bitwise equal
    at stages 0-3 with the delay, as without it."""
    runs = [train(ctx, 3, MODEL + ["--steps", "5", "--stage", str(s)] + DELAY, f"s{s}") for s in range(4)]
    for s, r in enumerate(runs):
        assert losses(r) == losses(runs[0]), (s, losses(r), losses(runs[0]))
        assert r["params_digest"] == runs[0]["params_digest"], s
    bf = [train(ctx, 2, MODEL + ["--steps", "3", "--stage", str(s), "--dtype", "bf16"] + DELAY, f"bf{s}")
          for s in (1, 3)]
    assert losses(bf[0]) == losses(bf[1]) and bf[0]["params_digest"] == bf[1]["params_digest"]
    print(f"ok: stages 0-3 bitwise equal under the delay (digest {runs[0]['params_digest']}); bf16 1 = 3")


def case_resume(ctx):
    """A checkpoint holds the pending update (master after it, params from
    before it): resuming at step 3 gives the uninterrupted run's losses and
    digest bitwise, at stage 3 and at stage 0 (np 2)."""
    for stage in ("3", "0"):
        save = os.path.join(ctx["work"], f"ckpt{stage}")
        args = MODEL + ["--steps", "6", "--stage", stage] + DELAY
        whole = train(ctx, 2, args + ["--save-every", "3", "--save-dir", save], f"whole{stage}")
        with open(os.path.join(save, "step-000003", "manifest.json")) as f:
            assert json.load(f)["params_behind"] is True
        resumed = train(ctx, 2, args + ["--resume", os.path.join(save, "step-000003")], f"resumed{stage}")
        assert losses(resumed) == losses(whole)[3:], (losses(resumed), losses(whole))
        assert resumed["params_digest"] == whole["params_digest"]
    # Continued without the delay, the pending update is applied at load.
    plain = train(ctx, 2, MODEL + ["--steps", "6", "--stage", "0", "--offload", "cpu", "--resume",
                                   os.path.join(ctx["work"], "ckpt0", "step-000003")], "plain")
    assert losses(plain) != losses(whole)[3:]
    print("ok: resume bitwise at stages 3 and 0; a run without the delay applies the pending update")


def case_planner(ctx):
    """The host pool's peak (master, m, v, the gradients of two steps at
    once, the copies out) equals zt-plan's host_bytes, np 2, stages 0-3, fp32
    and bf16."""
    exe = os.path.join(os.path.dirname(ctx["zt"]), "zt-plan")
    for dtype in ("fp32", "bf16"):
        for stage in range(4):
            args = MODEL + ["--steps", "3", "--stage", str(stage), "--dtype", dtype] + DELAY
            s = train(ctx, 2, args, f"plan-{dtype}-{stage}")
            p = subprocess.run([exe, "--world", "2", "--json"] + args, capture_output=True, text=True, check=True)
            want = json.loads(p.stdout)["host_bytes"]
            got = [r["host_peak_bytes"] for r in s["ranks"]]
            assert all(g == want for g in got), (dtype, stage, got, want)
    print("ok: host bytes exact at stages 0-3 in fp32 and bf16")


def case_convergence(ctx):
    """The default model, 300 steps, np 2: within 0.1 nats of the data's
    entropy rate (0.083 after 200 steps: the stale step slows it)."""
    s = train(ctx, 2, ["--quiet", "--trace", "0", "--steps", "300"] + DELAY, "conv")
    gap = s["final_loss"] - s["data_entropy"]
    assert gap <= 0.1, (s["final_loss"], s["data_entropy"])
    print(f"ok: final loss {s['final_loss']:.5f}, entropy {s['data_entropy']:.5f}, gap {gap:.4f}")


CASES = {"refused": case_refused, "stale": case_stale, "stages": case_stages, "resume": case_resume,
         "planner": case_planner, "convergence": case_convergence}

if __name__ == "__main__":
    main(CASES, "delay")
