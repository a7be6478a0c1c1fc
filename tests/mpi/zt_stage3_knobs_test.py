#!/usr/bin/env python3
"""DeepSpeed's ZeRO-3 knobs under real mpirun, run by CTest: persistent
units (--persist-threshold), the cap on live gathered parameters
(--max-live-params), keeping a unit gathered for a reuse that comes soon
(--max-reuse-distance) and the optimizer's 16-bit chunk (--sub-group-size).
Each only moves memory and communication: losses and the params digest
stay bitwise those of the run without it, and zt-plan predicts every
category's peak to the byte.

usage: zt_stage3_knobs_test.py CASE ZT_TRAIN ZT_RUN
"""
import json
import os
import subprocess

from zt_harness import losses, main, train

LAYERS, C, T, V = 2, 32, 32, 48
MODEL = ["--layers", str(LAYERS), "--d-model", str(C), "--heads", "4", "--seq-len", str(T), "--vocab", str(V),
         "--micro-batch", "4", "--threads", "1", "--quiet", "--bucket-size", "16KiB"]
CATS = ["params", "grads", "master_params", "optimizer"]
ALL_CATS = CATS + ["activations", "gathered_params", "comm_buffers", "workspace", "checkpoint_staging", "other"]


def same_result(a, b, what):
    assert losses(a) == losses(b), (what, losses(a), losses(b))
    assert a["params_digest"] == b["params_digest"], (what, a["params_digest"], b["params_digest"])


def gathers(s):
    """All-gathers per step on rank 0 (every rank runs the same ones)."""
    return [x["comm"]["all_gather"]["calls"] for x in s["steps"][0]]


def unit_numels(tied):
    """Embedding, blocks, final norm + head (its lm_head only when untied), as examples/gpt/gpt.c declares them."""
    return [V * C + T * C] + [12 * C * C + 13 * C] * LAYERS + [2 * C + (0 if tied else V * C)]


def padded(np, tied):
    q = np * 16 if np > 1 else 1
    return [(n + q - 1) // q * q for n in unit_numels(tied)]


def plan(ctx, np, args):
    exe = os.path.join(os.path.dirname(ctx["zt"]), "zt-plan")
    p = subprocess.run([exe, "--world", str(np), "--json"] + args, capture_output=True, text=True, check=True)
    return json.loads(p.stdout)


def check_plan(ctx, np, args, s, what):
    """zt-plan's peak and per-category peaks equal every rank's measured ones to the byte."""
    predicted = plan(ctx, np, args)
    for rank in s["ranks"]:
        got, want = rank["peak_by_category"], predicted["peak_by_category"]
        diff = {c: (want[c], got[c]) for c in ALL_CATS if want[c] != got[c]}
        assert not diff, (what, rank["rank"], "category: (predicted, measured)", diff)
        assert rank["peak_bytes"] == predicted["peak_bytes"], (what, rank["rank"], predicted["peak_bytes"],
                                                               rank["peak_bytes"])
    return predicted


def case_persist(ctx):
    """np 3, tied: the final norm + head (2C = 64 parameters, the smallest
    unit) persists under --persist-threshold 65. It is gathered twice a step
    without the knob (its forward and its backward) and never with it,
    while its updated slice is all-gathered once after each optimizer step
    (as at stages 1-2): one all-gather fewer per step, and its padded size
    fewer bytes. Its params are full on every rank, the others' a third
    (the closed form); a threshold of 64 (not below 64) changes nothing."""
    np, tied = 3, 1
    sizes, P = unit_numels(tied), padded(np, tied)
    head = sizes.index(min(sizes))
    args = MODEL + ["--stage", "3", "--tied", str(tied), "--steps", "3"]
    base = train(ctx, np, args, "base")
    knob = args + ["--persist-threshold", str(sizes[head] + 1)]
    per = train(ctx, np, knob, "persist")
    same_result(per, base, "persist")
    for b, p in zip(base["steps"][0], per["steps"][0]):
        ab, ap = b["comm"]["all_gather"], p["comm"]["all_gather"]
        assert ap["calls"] == ab["calls"] - 2 + 1, (ab["calls"], ap["calls"])
        assert ap["bytes"] == ab["bytes"] - 2 * P[head] * 4 + P[head] * 4, (ab["bytes"], ap["bytes"])
    want = sum(p if u == head else p // np for u, p in enumerate(P)) * 4
    for rank in per["ranks"]:
        assert rank["peak_by_category"]["params"] == want, (rank["rank"], rank["peak_by_category"]["params"], want)
    check_plan(ctx, np, knob, per, "persist")
    at = train(ctx, np, args + ["--persist-threshold", str(sizes[head])], "at")
    assert gathers(at) == gathers(base), (gathers(at), gathers(base))
    assert at["ranks"][0]["peak_by_category"]["params"] == sum(p // np for p in P) * 4
    print(f"ok: persistent head: {gathers(base)} -> {gathers(per)} all-gathers per step, params {want} B per rank "
          f"(the closed form), bitwise equal, zt-plan exact")


def case_max_live(ctx):
    """np 3, --prefetch 2, --max-live-params 1.5 blocks: from step 2 the
    gathered parameters at once (gathered_inflight_peak_bytes, every step
    and rank) stay within the cap, below the uncapped run's (a block in use
    with the next block prefetched), bitwise equal, zt-plan exact."""
    np = 3
    P = padded(np, 0)
    cap = P[1] * 3 // 2
    args = MODEL + ["--stage", "3", "--prefetch", "2", "--steps", "3"]
    free = train(ctx, np, args, "uncapped")
    knob = args + ["--max-live-params", str(cap)]
    capped = train(ctx, np, knob, "capped")
    same_result(capped, free, "max_live")
    peak = lambda s: max(x["gathered_inflight_peak_bytes"] for r in s["steps"] for x in r)
    for r, steps in enumerate(capped["steps"]):
        inflight = [x["gathered_inflight_peak_bytes"] for x in steps]
        assert all(b <= cap * 4 for b in inflight), (r, inflight, cap * 4)
    assert peak(capped) < peak(free), (peak(capped), peak(free))
    assert gathers(capped) == gathers(free)  # the same gathers, later
    check_plan(ctx, np, knob, capped, "max_live")
    check_plan(ctx, np, args, free, "uncapped")
    print(f"ok: gathered at once {peak(free)} -> {peak(capped)} B under a cap of {cap * 4} B; bitwise equal; "
          "zt-plan exact")


def case_reuse(ctx):
    """np 3, tied. Forward uses embedding, block 0, block 1, head, embedding;
    backward head, embedding, block 1, block 0 (9 all-gathers a step). The
    first step has no recorded order to look ahead in. From step 2:
    - a large --max-reuse-distance keeps every unit from its forward use to
      its next (the tied embedding is not gathered twice in forward, and
      backward gathers nothing): each unit once a step, 4;
    - the head's padded size keeps the head (used first in backward, nothing
      in between) and the tied embedding (only the head in between): the
      start of backward gathers nothing, 7;
    - one parameter less keeps the head alone, 8.
    Bitwise equal throughout, zt-plan exact."""
    np, tied = 3, 1
    P = padded(np, tied)
    args = MODEL + ["--stage", "3", "--tied", str(tied), "--steps", "3"]
    base = train(ctx, np, args, "base")
    assert gathers(base) == [9, 9, 9], gathers(base)
    for dist, want in ((10 ** 9, 4), (P[-1], 7), (P[-1] - 1, 8)):
        knob = args + ["--max-reuse-distance", str(dist)]
        s = train(ctx, np, knob, f"reuse{dist}")
        same_result(s, base, ("reuse", dist))
        assert gathers(s) == [9, want, want], (dist, gathers(s), want)
        check_plan(ctx, np, knob, s, ("reuse", dist))
        print(f"ok: --max-reuse-distance {dist}: {gathers(s)} all-gathers per step (9 without); bitwise equal; "
              "zt-plan exact")


def optimizer_workspace(s):
    """Per step and rank: the optimizer phase's peak less the persistent
    state (on the CPU the optimizer allocates only its widening chunk)."""
    out = []
    for r, steps in enumerate(s["steps"]):
        state = sum(s["ranks"][r]["peak_by_category"][c] for c in CATS)
        out += [x["memory"]["peak_by_phase"]["optimizer"] - state for x in steps]
    return out


def case_sub_group(ctx):
    """bf16, np 3, --sub-group-size 1000: the optimizer widens 1000 elements
    at a time, so its workspace is 4000 bytes at every stage (without the
    knob the largest owned range, 4 x 4240 at stage 3), and stages 0-3 are
    bitwise equal with each other. With activations small enough that the
    optimizer's chunk is the workspace peak, zt-plan and the run agree it
    is 4000 bytes."""
    np = 3
    args = MODEL + ["--dtype", "bf16", "--steps", "3"]
    runs = [train(ctx, np, args + ["--stage", str(st), "--sub-group-size", "1000"], f"s{st}") for st in range(4)]
    for st, s in enumerate(runs):
        same_result(s, runs[0], ("sub_group stage", st))
        ws = optimizer_workspace(s)
        assert ws == [4000] * len(ws), (st, ws)
        check_plan(ctx, np, args + ["--stage", str(st), "--sub-group-size", "1000"], s, ("sub_group", st))
    default = train(ctx, np, args + ["--stage", "3"], "default")
    assert set(optimizer_workspace(default)) == {4 * padded(np, 0)[1] // np}, optimizer_workspace(default)
    small = MODEL + ["--dtype", "bf16", "--steps", "2", "--stage", "3", "--micro-batch", "1", "--seq-len", "4",
                     "--sub-group-size", "1000"]
    s = train(ctx, np, small, "small")
    predicted = check_plan(ctx, np, small, s, "sub_group, small activations")
    assert predicted["peak_by_category"]["workspace"] == 4000, predicted["peak_by_category"]
    print(f"ok: optimizer workspace 4000 B at stages 0-3 (default {optimizer_workspace(default)[0]} B), stages "
          "bitwise equal; zt-plan and the run agree on a 4000 B workspace peak")


CASES = {"persist": case_persist, "max_live": case_max_live, "reuse": case_reuse, "sub_group": case_sub_group}

if __name__ == "__main__":
    main(CASES, "knobs")
