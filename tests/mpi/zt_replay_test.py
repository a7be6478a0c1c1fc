"""zt-plan's replay (train/plan_replay.c): the reserved bytes it states are
the allocator's, measured in the run it plans, and its largest micro-batch,
sequence length and layer count are exact at the boundary under a cap.

Cases (tests/mpi/mpi_tests.cmake): grid and boundary compare with real runs
over the representative subset the issue names; quick runs one
configuration per allocator and the refusals, under the sanitizers too."""
import os
import subprocess

from zt_harness import launch, main, plan, train

ALLOCATORS = ("simple", "caching", "expandable")
SMALL = ["--layers", "3", "--d-model", "96", "--heads", "4", "--seq-len", "64", "--vocab", "128",
         "--micro-batch", "4", "--threads", "1"]
RUN = ["--steps", "3", "--quiet", "--trace", "0"]


def measured(s):
    """The run's reserved and allocated peaks: the most over its steps and ranks."""
    reserved = max(x["memory"]["reserved_peak_bytes"] for steps in s["steps"] for x in steps)
    allocated = max(x["memory"]["peak_bytes"] for steps in s["steps"] for x in steps)
    return reserved, allocated


def compare(ctx, np_, flags, name):
    """The replayed figures against a 3-step run's; returns the relative error."""
    er = plan(ctx, np_, flags)["expected_reserved"]
    assert er["how"] == "replay" and er["ranks_replayed"] == np_ and not er["oom"], er
    reserved, allocated = measured(train(ctx, np_, flags + RUN, name))
    assert er["allocated_peak_bytes"] == allocated, (np_, flags, er, allocated)
    err = reserved / er["bytes"] - 1
    assert abs(err) <= 0.01, (np_, flags, er["bytes"], reserved)
    return err


def case_grid(ctx):
    """Stages 0 and 3, offload on and off, recompute on and off, fp32 and
    bf16, np 2 and 3, and the NVMe tier (replayed as the host tier), under
    each allocator: the replayed reserved peak within 1% of the measured one
    (it has been exact), the allocated peak equal."""
    configs = ((2, ["--stage", "0"]), (3, ["--stage", "3"]), (2, ["--stage", "3", "--offload", "cpu"]),
               (3, ["--stage", "0", "--recompute", "full"]), (2, ["--stage", "3", "--dtype", "bf16"]),
               (3, ["--stage", "3", "--dtype", "bf16", "--offload", "cpu", "--recompute", "full"]))
    swap = os.path.join(ctx["work"], "swap")
    os.makedirs(swap)
    configs += ((2, ["--stage", "3", "--offload", "nvme", "--offload-params", "nvme", "--nvme-path", swap,
                     "--nvme-block-size", "64KiB"]),)
    worst = 0.0
    for i, (np_, levers) in enumerate(configs):
        for mode in ALLOCATORS:
            worst = max(worst, abs(compare(ctx, np_, SMALL + levers + ["--allocator", mode], f"grid{i}-{mode}")))
    print(f"ok: {len(configs) * len(ALLOCATORS)} runs, replayed reserved within {worst:.4%} of the measured peak")


def scan_answer(ctx, np_, flags, what):
    """zt-plan's answer to --max-<what> (micro-batch, seq-len, layers)."""
    return plan(ctx, np_, flags + [f"--max-{what}"])["max_" + what.replace("-", "_")]


def case_boundary(ctx):
    """--max-micro-batch, --max-seq-len and --max-layers under --mem-limit
    24MiB, np 2, stage 3, each allocator: the answer trains under the cap,
    answer + 1 fails with the OOM exit code (3)."""
    model = ["--layers", "2", "--d-model", "64", "--threads", "1", "--quiet", "--trace", "0", "--stage", "3"]
    for mode in ALLOCATORS:
        flags = model + ["--allocator", mode, "--mem-limit", "24MiB"]
        for what in ("micro-batch", "seq-len", "layers"):
            answer = scan_answer(ctx, 2, flags, what)
            assert answer >= 2, (mode, what, answer)
            for value, rc in ((answer, 0), (answer + 1, 3)):
                launch(ctx, 2, flags + ["--steps", "2", f"--{what}", str(value)], expect_rc=rc)
            print(f"ok: {mode}: --max-{what} {answer} trains in 24 MiB, {answer + 1} runs out of memory")


def case_quick(ctx):
    """One configuration per allocator at np 3 (uneven shards), a capped
    replay that the cap refuses where the run does, and zt-plan's refusals
    of the new flags."""
    for mode in ALLOCATORS:
        compare(ctx, 3, SMALL + ["--stage", "3", "--offload", "cpu", "--allocator", mode], f"quick-{mode}")
    flags = SMALL + ["--stage", "3", "--allocator", "caching"]
    full = plan(ctx, 2, flags)["expected_reserved"]["bytes"]
    capped = plan(ctx, 2, flags + ["--mem-limit", str(full - (2 << 20))])
    assert not capped["fits"] and capped["expected_reserved"]["oom"], capped["expected_reserved"]
    launch(ctx, 2, flags + ["--mem-limit", str(full - (2 << 20))] + RUN, expect_rc=3)
    launch(ctx, 2, flags + ["--mem-limit", str(full)] + RUN, expect_rc=0)
    exe = os.path.join(os.path.dirname(ctx["zt"]), "zt-plan")
    for bad, needle in ((["--max-layers"], "need --device-mem or --mem-limit"),
                        (["--max-layers", "--mem-limit", "1GiB", "--params", "1e6"], "--max-layers needs a family")):
        p = subprocess.run([exe] + bad, capture_output=True, text=True)
        assert p.returncode == 2 and needle in p.stderr, (bad, p.returncode, p.stderr)
    print("ok: replay exact at np 3 for each allocator; the cap refuses the replay where it refuses the run")


def case_cuda_emu(ctx):
    """--device cuda on the CUDA emulator (ZT_CUDA=EMU builds), np 2 over
    NCCL: the replay shaped like CUDA (its event-ordered paths) gives the
    reserved peak the CUDA backend's run measures, for each allocator."""
    env = {"ZT_EMU_DEVICES": "2"}
    for mode in ALLOCATORS:
        flags = ["--device", "cuda", "--stage", "3", "--allocator", mode]
        er = plan(ctx, 2, flags)["expected_reserved"]
        reserved, allocated = measured(train(ctx, 2, flags + RUN, f"cuda-{mode}", env))
        assert er["how"] == "replay" and er["bytes"] == reserved and er["allocated_peak_bytes"] == allocated, \
            (mode, er, reserved, allocated)
    print("ok: cuda emulator: the replay's reserved and allocated peaks equal the CUDA backend's for each allocator")


CASES = {"grid": case_grid, "boundary": case_boundary, "quick": case_quick, "cuda_emu": case_cuda_emu}

if __name__ == "__main__":
    main(CASES, "replay")
