#!/usr/bin/env python3
"""The model interface on its own (train/zt_train_model.h), run by CTest: a
two-unit MLP family defined in tests/model_iface/mlp_model.c, built into
zt-train-mlp and zt-plan-mlp, under real mpirun through launch/zt-run.

  stages    at np 2, stages 0-3 end with the same losses and parameter digest
            to the bit, and the loss falls; the negative twin: another seed
            gives another digest (so the digest does see the parameters)
  refusals  zt-train-mlp refuses --model gpt with exit 2, naming the family
            it has (mlp); zt-plan-mlp refuses mlp (no planner walk) with exit
            2; --freeze with a unit the MLP lacks exits 2 naming its units

usage: zt_model_iface_test.py CASE ZT_TRAIN_MLP ZT_RUN
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mpi"))
from zt_harness import launch, losses, main, train  # noqa: E402  (the path above first)

# A fraction of a millisecond a step: each run's time is mpirun's start.
# --lr 0.03 brings the loss most of the way to the data's floor in 30 steps.
MLP = ["--model", "mlp", "--d-model", "32", "--vocab", "48", "--seq-len", "16", "--micro-batch", "4",
       "--threads", "1", "--quiet", "--steps", "30", "--warmup", "2", "--lr", "0.03"]


def case_stages(ctx):
    runs = [train(ctx, 2, MLP + ["--stage", str(s)], f"s{s}") for s in range(4)]
    for s, r in enumerate(runs):
        assert r["world_size"] == 2 and r["stage"] == s, (s, r["world_size"], r["stage"])
        assert r["losses"] == runs[0]["losses"], (s, r["losses"][:3], runs[0]["losses"][:3])
        assert r["final_loss"] == runs[0]["final_loss"], (s, r["final_loss"], runs[0]["final_loss"])
        assert r["params_digest"] == runs[0]["params_digest"], (s, r["params_digest"], runs[0]["params_digest"])
    curve = losses(runs[0])
    first, last = curve[0], curve[-1]
    # Markov data of branch 4 over 48 symbols: from about ln 48 = 3.9 toward
    # ln 4 = 1.4 (it reaches about 1.6 here).
    assert last < 0.6 * first, f"the loss does not fall: {first:.4f} -> {last:.4f}"
    other = train(ctx, 2, MLP + ["--stage", "3", "--seed", "7"], "s3-seed7")
    assert other["params_digest"] != runs[3]["params_digest"], "another seed gives the same digest"
    assert other["losses"] != runs[3]["losses"], "another seed gives the same losses"
    print(f"ok: mlp at np 2: stages 0-3 bitwise-identical over 30 steps (digest {runs[0]['params_digest']}), "
          f"loss {first:.4f} -> {last:.4f}; seed 7 gives digest {other['params_digest']}")


def case_refusals(ctx):
    p = launch(ctx, 2, ["--model", "gpt", "--steps", "1", "--quiet"], expect_rc=2)
    out = p.stdout + p.stderr
    assert "--model gpt" in out and "(it has mlp)" in out, out[-2000:]
    zt_plan = os.path.join(os.path.dirname(ctx["zt"]), "zt-plan-mlp")
    p = subprocess.run([zt_plan, "--model", "mlp"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--model mlp" in p.stderr and "no planner walk" in p.stderr, \
        (p.returncode, p.stderr)
    p = launch(ctx, 2, MLP + ["--freeze", "embedding"], expect_rc=2)
    out = p.stdout + p.stderr
    assert "'embedding' is not a unit (in, out)" in out, out[-2000:]
    print("ok: zt-train-mlp refuses --model gpt (it has mlp), zt-plan-mlp refuses mlp (no planner walk), "
          "--freeze embedding is refused naming in, out; each with exit 2")


if __name__ == "__main__":
    main({"stages": case_stages, "refusals": case_refusals}, "model-iface")
