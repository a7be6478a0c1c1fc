#!/usr/bin/env python3
"""Automatic configuration (zt-plan --auto, zt-train --auto; docs/auto.md)
under real mpirun, run by CTest: the search's choice is the brute-force
optimum of the same grid (every configuration planned on its own by
zt-plan with a made-up profile); a budget nothing fits names the smallest
configuration and what it needs; bad profiles, budgets and axes are
refused; zt-train --auto trains under --mem-limit at np 2 and 3 and its
printed flags reproduce the run bitwise; zt-plan --calibrate writes a
profile that --profile reads.

usage: zt_auto_test.py CASE ZT_TRAIN ZT_RUN
"""
import json
import os
import subprocess
import sys

from zt_harness import launch, main, train

SMALL = ["--threads", "1", "--quiet"]
# A made-up machine: slow small GEMMs and fast attention, so micro-batch and
# recomputation trade against each other.
PROFILE = {
    "zt_time_profile": 1, "device": "cpu", "source": "made up for zt_auto_test", "measured": False,
    "ranks_per_node": 2, "threads": 1,
    "gemm_flops": {d: {"small": 2e9, "medium": 9e9, "large": 2e10} for d in ("fp32", "bf16", "fp16")},
    "attention_flops": {"materialized": {"forward": 3e10, "backward": 2e10},
                        "fused": {"forward": 1e10, "backward": 8e9}},
    "collectives": {"intra_node": {"gbs": 2.0, "latency_s": 2e-5}, "inter_node": {"gbs": 0.5, "latency_s": 1e-4}},
    "pointwise_gbs": 5.0, "kernel_overhead_s": 3e-5, "adam_device_eps": 2e8, "adam_host_eps": 1e8,
    "nvme_read_gbs": 1.0, "nvme_write_gbs": 0.5, "copy_gbs": 4.0, "overlap": 0.3, "efficiency": 1.0,
    "step_overhead_s": 2e-3, "unit_overhead_s": 5e-5,
}
GRID_AXES = "stage,recompute,micro-batch"
BUDGET = "12MiB"


def zt_plan(ctx):
    return os.path.join(os.path.dirname(ctx["zt"]), "zt-plan")


def run_plan(ctx, args, expect=(0, 1)):
    p = subprocess.run([zt_plan(ctx)] + args, capture_output=True, text=True, timeout=300)
    if p.returncode not in expect:
        sys.exit(f"FAIL: zt-plan {' '.join(args)}: exit {p.returncode}, expected {expect}\n{p.stdout[-2000:]}\n"
                 f"{p.stderr[-2000:]}")
    return p


def write_profile(ctx, profile, name="profile.json"):
    path = os.path.join(ctx["work"], name)
    with open(path, "w") as f:
        json.dump(profile, f)
    return path


def case_search(ctx):
    """The choice over stage x recompute x micro-batch (16 sequences a step at
    np 2) equals the fastest of the grid's configurations that fit, each
    planned alone: its replay under the cap and its predicted step."""
    prof = write_profile(ctx, PROFILE)
    common = ["--world", "2", "--mem-limit", BUDGET, "--profile", prof, "--global-batch", "16"]
    auto = json.loads(run_plan(ctx, ["--auto", "--auto-axes", GRID_AXES, "--json", "--top", "3"] + common).stdout)
    best, fits, misses = None, 0, 0
    for stage in range(4):
        for rc in ("none", "selective", "full"):
            for mb in (1, 2, 4, 8):
                flags = ["--stage", str(stage), "--recompute", rc, "--micro-batch", str(mb), "--grad-accum",
                         str(8 // mb), "--world", "2", "--mem-limit", BUDGET, "--profile", prof, "--json"]
                o = json.loads(run_plan(ctx, flags).stdout)
                t = o["time"]["predicted_step_s"]
                if not o["fits"]:
                    misses += 1
                    continue
                fits += 1
                if best is None or t < best[0]:
                    best = (t, stage, rc, mb)
    assert fits and misses, ("the grid must hold configurations on both sides of the budget", fits, misses)
    chosen = auto["chosen"]
    f = chosen["flags"]
    got = (int(f[f.index("--stage") + 1]), f[f.index("--recompute") + 1], int(f[f.index("--micro-batch") + 1]))
    assert abs(chosen["predicted_step_s"] - best[0]) <= 1e-12 * best[0], (chosen, best)
    assert got == best[1:] or chosen["predicted_step_s"] == best[0], (got, best)
    assert auto["reasons"] and all(isinstance(r, str) for r in auto["reasons"]), auto["reasons"]
    assert len(auto["candidates"]) == 3 and auto["candidates"][0] == chosen
    steps = [c["predicted_step_s"] for c in auto["candidates"]]
    assert steps == sorted(steps), steps
    print(f"ok: --auto chose stage {got[0]}, recompute {got[1]}, micro-batch {got[2]} at "
          f"{1e3 * best[0]:.3f} ms predicted: the brute-force optimum of {fits} fitting of {fits + misses} "
          f"({auto['evaluated']} planned by the search in {auto['search_s']:.3f} s)")


def case_none_fits(ctx):
    """A budget nothing fits: zt-plan exits 1 and zt-train 3, each naming the
    smallest configuration and what it needs."""
    p = run_plan(ctx, ["--auto", "--world", "2", "--mem-limit", "1MiB"], expect=(1,))
    assert "nothing fits: the smallest configuration (--stage" in p.stderr and "above the 1.0 MiB budget" in p.stderr, p.stderr
    j = json.loads(run_plan(ctx, ["--auto", "--world", "2", "--mem-limit", "1MiB", "--json"], expect=(1,)).stdout)
    assert j["chosen"] is None and "needs" in j["error"], j
    r = launch(ctx, 2, ["--auto", "--mem-limit", "1MiB", "--steps", "2"] + SMALL, expect_rc=3)
    assert "--auto: nothing fits: the smallest configuration" in r.stderr, r.stderr[-2000:]
    print("ok: nothing fits 1 MiB: zt-plan exit 1, zt-train exit 3, both naming the smallest configuration")


def case_bad(ctx):
    """Bad profiles, budgets and axes: exit 2 with the problem named."""
    cases = [("not json {", "not a JSON file"),
             (json.dumps({**PROFILE, "zt_time_profile": 2}), "not a time profile of version 1"),
             (json.dumps({k: v for k, v in PROFILE.items() if k != "pointwise_gbs"}), "pointwise_gbs must be positive"),
             (json.dumps({**PROFILE, "adam_host_eps": -1}), "adam_host_eps must be positive"),
             (json.dumps({**PROFILE, "overlap": 2}), "overlap must be in [0, 1]"),
             (json.dumps({**PROFILE, "device": "tpu"}), "device must be cpu or cuda"),
             (json.dumps({**PROFILE, "gemm_flops": {"fp32": {"small": 1}}}), "gemm_flops.fp32.medium")]
    for i, (text, why) in enumerate(cases):
        path = os.path.join(ctx["work"], f"bad{i}.json")
        with open(path, "w") as f:
            f.write(text)
        p = run_plan(ctx, ["--world", "2", "--profile", path], expect=(2,))
        assert why in p.stderr and path in p.stderr, (why, p.stderr)
        if i in (0, 2):  # zt-train reads the file with the same code: two of the cases there
            r = launch(ctx, 2, ["--profile", path, "--steps", "1"] + SMALL, expect_rc=2)
            assert why in r.stderr, (why, r.stderr[-1500:])
    missing = os.path.join(ctx["work"], "none.json")
    assert "not a JSON file" in run_plan(ctx, ["--profile", missing], expect=(2,)).stderr
    assert "--auto needs a device budget" in run_plan(ctx, ["--auto", "--world", "2"], expect=(2,)).stderr
    r = launch(ctx, 2, ["--auto", "--steps", "1"] + SMALL, expect_rc=2)
    assert "--auto needs --mem-limit" in r.stderr, r.stderr[-1500:]
    p = run_plan(ctx, ["--auto", "--world", "2", "--mem-limit", "20MiB", "--auto-axes", "stage,nope"], expect=(2,))
    assert "--auto-axes: 'nope' is not an axis" in p.stderr, p.stderr
    assert "--top needs a count" in run_plan(ctx, ["--auto", "--top", "0"], expect=(2,)).stderr
    assert "--calibrate needs the profile file" in run_plan(ctx, ["--calibrate"], expect=(2,)).stderr
    print(f"ok: {len(cases)} bad profiles refused by zt-plan (2 by zt-train), a missing one, no budget, a bad axis, "
          "--top 0, --calibrate without a file")


def reproduce(ctx, np, budget):
    """zt-train --auto under the budget, then its printed flags without --auto: bitwise the same run."""
    args = ["--steps", "6", "--global-batch", str(4 * np)] + SMALL
    d = os.path.join(ctx["work"], f"auto{np}")
    p = launch(ctx, np, ["--auto", "--mem-limit", budget, "--log-dir", d] + args)
    line = [x for x in p.stdout.splitlines() if x.startswith("auto: chosen: ")]
    assert len(line) == 1, p.stdout[-2000:]
    flags = line[0][len("auto: chosen: "):].split()
    with open(os.path.join(d, "summary.json")) as f:
        auto = json.load(f)
    again = train(ctx, np, flags + ["--mem-limit", budget] + args, f"again{np}")
    assert auto["params_digest"] == again["params_digest"] and auto["losses"] == again["losses"], (flags,)
    assert auto["predicted_step_s"] > 0 and auto["step_time_s"] > 0, auto
    cfg = launch(ctx, np, ["--auto", "--mem-limit", budget, "--print-config"] + args)
    printed = json.loads(cfg.stdout)
    assert printed.get("auto") in (None, False, 0) and str(printed["stage"]) == flags[flags.index("--stage") + 1], printed
    return flags, auto


def case_train(ctx):
    """zt-train --auto at np 2 and 3 (uneven shards) trains without running
    out of memory under --mem-limit; its flags reproduce it bitwise."""
    for np, budget in ((2, "10MiB"), (3, "10MiB")):
        flags, s = reproduce(ctx, np, budget)
        print(f"ok: np {np} --auto under {budget}: {' '.join(flags)}; bitwise again without --auto; step "
              f"{1e3 * s['step_time_s']:.2f} ms measured, {1e3 * s['predicted_step_s']:.2f} ms predicted")


def case_calibrate(ctx):
    """zt-plan --calibrate at np 1 and np 2 writes a profile --profile reads."""
    for np in (1, 2):
        path = os.path.join(ctx["work"], f"cal{np}.json")
        cmd = [ctx["zt_run"], "-np", str(np), zt_plan(ctx), "--calibrate", path, "--threads", "1"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, (cmd, p.stdout[-2000:], p.stderr[-2000:])
        with open(path) as f:
            prof = json.load(f)
        assert prof["measured"] and prof["ranks_per_node"] == np, prof
        assert all(v > 0 for row in prof["gemm_flops"].values() for v in row.values()), prof
        o = json.loads(run_plan(ctx, ["--world", "2", "--profile", path, "--json"]).stdout)
        assert o["time"]["predicted_step_s"] > 0 and path in o["time"]["profile"], o["time"]
    print(f"ok: --calibrate at np 1 and 2: {prof['source']}")


if __name__ == "__main__":
    main({"search": case_search, "none_fits": case_none_fits, "bad": case_bad, "train": case_train,
          "calibrate": case_calibrate}, "auto")
