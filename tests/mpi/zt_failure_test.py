#!/usr/bin/env python3
"""Failure behaviour of zt-train under real mpirun, run by CTest: ranks that
disagree on settings, crashes during a checkpoint save, damaged checkpoints
and a damaged `latest` (docs/failure.md).

usage: zt_failure_test.py CASE ZT_TRAIN ZT_RUN

MPMD launches (`mpirun -np 1 zt ARGS : -np 1 zt OTHER`) give ranks different
flags, as a typo in a hostfile launch or a stale config on one node does.
"""
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

MODEL = ["--layers", "2", "--d-model", "32", "--heads", "4", "--seq-len", "32", "--vocab", "48",
         "--micro-batch", "4", "--threads", "1", "--quiet", "--bucket-size", "16KiB"]
MPIRUN = ["mpirun", "--oversubscribe", "--bind-to", "none", "--mca", "pml", "ob1", "--mca", "btl", "self,vader",
          "--mca", "btl_vader_single_copy_mechanism", "none"]
if os.geteuid() == 0:
    MPIRUN.insert(1, "--allow-run-as-root")


def run(cmd, timeout=120, env=None):
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    return p, time.time() - t0


def mpmd(ctx, per_rank_args, timeout=60):
    """One rank per entry of per_rank_args, each with MODEL + its own args."""
    cmd = list(MPIRUN)
    for i, args in enumerate(per_rank_args):
        cmd += ([":"] if i else []) + ["-np", "1", ctx["zt"]] + MODEL + args
    return run(cmd, timeout=timeout)


def launch(ctx, np, args, expect_rc=0, env=None, timeout=120):
    cmd = [ctx["zt_run"], "-np", str(np), ctx["zt"]] + MODEL + args
    p, dt = run(cmd, timeout=timeout, env=env)
    if expect_rc is not None and p.returncode != expect_rc:
        sys.exit(f"FAIL: {' '.join(cmd)}: exit {p.returncode}, expected {expect_rc}\n"
                 f"stdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-3000:]}")
    return p


def summary(d):
    with open(os.path.join(d, "summary.json")) as f:
        return json.load(f)


def errors(stderr):
    """zerotrain's error lines (not mpirun's notices)."""
    return [line for line in stderr.splitlines() if ": error: " in line]


# One option differs on one rank, with the stage that makes it matter.
DISAGREEMENTS = [
    ("bucket-size", ["--stage", "2"], "4096", "16384"),
    ("prefetch", ["--stage", "3"], "2", "0"),
    ("lr", ["--stage", "1"], "0.01", "0.003"),
    ("grad-accum", ["--stage", "2"], "2", "1"),
    ("offload", ["--stage", "1"], "cpu", "none"),
    ("dtype", ["--stage", "0"], "bf16", "fp32"),
    ("reduce-dtype", ["--stage", "2", "--dtype", "bf16"], "bf16", "fp32"),
    ("steps", ["--stage", "3"], "4", "3"),
]


def case_disagree(ctx):
    """At np 2, one rank's --bucket-size, --prefetch, --lr, --grad-accum,
    --offload, --dtype, --reduce-dtype or --steps differs (at np 3, the
    first three: the agreement's C path is the same for every option):
    every rank exits 2 within 30 s (no hang, no MPI_ERR_TRUNCATE, no
    silently wrong training), and rank 0 alone prints one error naming the
    option and each rank's value, with its source location relative to the
    source tree."""
    for np_ in (2, 3):
        odd = np_ - 1  # the last rank differs: with np 3, ranks 0 and 1 agree
        for opt, base, odd_value, value in DISAGREEMENTS if np_ == 2 else DISAGREEMENTS[:3]:
            ranks = [base + ["--steps", "3", f"--{opt}", value] for _ in range(np_)]
            ranks[odd] = base + ["--steps", "3", f"--{opt}", odd_value]
            p, dt = mpmd(ctx, ranks)
            assert p.returncode == 2, (np_, opt, p.returncode, p.stderr[-2000:])
            assert dt < 30, (np_, opt, dt)
            errs = errors(p.stderr)
            assert len(errs) == 1 and "ranks disagree on settings" in errs[0], (np_, opt, p.stderr[-2000:])
            want = f"--{opt}: rank{'s' if np_ > 2 else ''} 0{', 1' if np_ > 2 else ''} = "
            assert want in p.stderr and f"rank {odd} = " in p.stderr, (np_, opt, p.stderr[-2000:])
            line = next(x for x in p.stderr.splitlines() if x.strip().startswith(f"--{opt}:"))
            shown = line.split("=")[1:]
            assert len(shown) == 2, line
            assert "(invalid at comm/agree.c:" in p.stderr, p.stderr[-1000:]
            assert "MPI_ABORT" not in p.stderr, p.stderr[-2000:]
            print(f"ok: np={np_} --{opt} differs on rank {odd}: exit 2 in {dt:.1f} s: {line.strip()}")


def case_agree_negative(ctx):
    """What may differ per rank does not stop the job: --log-dir and --quiet
    per rank, and the same --lr given by a flag on one rank and by --config on
    the other (the resolved values are compared, not where they came from;
    `--config=FILE` is read like `--config FILE`)."""
    w = ctx["work"]
    cfg = os.path.join(w, "lr.json")
    with open(cfg, "w") as f:
        json.dump({"lr": 0.002}, f)
    a, b = os.path.join(w, "log-a"), os.path.join(w, "log-b")
    p, _ = mpmd(ctx, [["--steps", "3", "--stage", "3", "--lr", "0.002", "--log-dir", a],
                      ["--steps", "3", "--stage", "3", f"--config={cfg}", "--log-dir", b]])
    assert p.returncode == 0, p.stderr[-3000:]
    assert os.path.exists(os.path.join(a, "summary.json")) and os.path.exists(os.path.join(b, "rank1.jsonl"))
    ref = os.path.join(w, "ref")
    launch(ctx, 2, ["--steps", "3", "--stage", "3", "--lr", "0.002", "--log-dir", ref])
    assert summary(a)["params_digest"] == summary(ref)["params_digest"]
    # --quiet on one rank only; MODEL has --quiet, so rank 1 asks for it off
    q = os.path.join(w, "quiet")
    p, _ = mpmd(ctx, [["--steps", "2", "--log-dir", q], ["--steps", "2", "--quiet", "false"]])
    assert p.returncode == 0, p.stderr[-3000:]
    print("ok: per-rank --log-dir and --quiet, and --lr by flag vs by --config, train normally (same digest)")


def digest_of_dir(d):
    h = hashlib.sha256()
    for root, dirs, files in sorted(os.walk(d)):
        dirs.sort()
        for f in sorted(files):
            h.update(os.path.relpath(os.path.join(root, f), d).encode())
            with open(os.path.join(root, f), "rb") as fh:
                h.update(fh.read())
    return h.hexdigest()


def save_points(ctx, np_, args):
    """{rank: [point names]} of the save of step 4 in a run with args."""
    env = dict(os.environ, ZT_TEST_SAVE_POINTS="1")
    p = launch(ctx, np_, args, env=env)
    points = {}
    for line in p.stderr.splitlines():
        if line.startswith("save point: step 4 "):
            words = line.split()
            points.setdefault(int(words[5]), []).append(" ".join(words[7:]))
    return points


def case_kill_during_save(ctx):
    """kill -9 of one rank at a seeded point of a save (before, between and
    after each file's write, fsync and rename, each directory rename and
    removal), 8 trials, half of them re-saving a step that exists: the job
    ends, and resuming from the directory continues bitwise to the digest of
    an uninterrupted run."""
    w, np_ = ctx["work"], 2
    ref = os.path.join(w, "straight")
    launch(ctx, np_, ["--steps", "6", "--log-dir", ref])
    want = summary(ref)["params_digest"]
    base = os.path.join(w, "base")
    launch(ctx, np_, ["--steps", "4", "--save-every", "2", "--save-dir", base])
    fresh_args = lambda d: ["--steps", "6", "--save-every", "2", "--save-dir", d]
    resave_args = lambda d: fresh_args(d) + ["--resume", os.path.join(d, "step-000002")]
    probe = os.path.join(w, "probe")
    shutil.copytree(base, probe)
    kinds = {"fresh": save_points(ctx, np_, fresh_args(os.path.join(w, "probe-fresh"))),
             "resave": save_points(ctx, np_, resave_args(probe))}
    assert any("set aside" in p for p in kinds["resave"][0]), kinds["resave"][0]
    rng = random.Random(25)
    seen = set()
    for trial in range(8):
        kind = "fresh" if trial % 2 == 0 else "resave"
        rank = rng.randrange(np_)
        k = rng.randrange(len(kinds[kind][rank]))
        d = os.path.join(w, f"trial{trial}")
        if kind == "resave":
            shutil.copytree(base, d)
        env = dict(os.environ, ZT_TEST_KILL_SAVE=f"4:{rank}:{k}")
        args = fresh_args(d) if kind == "fresh" else resave_args(d)
        p = launch(ctx, np_, args, expect_rc=None, env=env, timeout=60)
        assert p.returncode != 0 and "killed at save point" in p.stderr, (trial, p.returncode, p.stderr[-1500:])
        out = os.path.join(w, f"resumed{trial}")
        p = launch(ctx, np_, ["--steps", "6", "--resume", d, "--log-dir", out])
        got = summary(out)
        assert got["params_digest"] == want, (trial, kind, rank, kinds[kind][rank][k])
        seen.add(kinds[kind][rank][k])
        print(f"ok: trial {trial}: {kind}, rank {rank} killed at '{kinds[kind][rank][k]}'; resumed from step "
              f"{got['start_step']}, digest equal")
    print(f"ok: 8 kills at {len(seen)} distinct save points: every checkpoint directory resumed bitwise")


def case_latest(ctx):
    """`latest` truncated, removed or naming a missing step: resume falls
    back to the newest complete checkpoint with a warning naming `latest`;
    with no complete checkpoint left, it refuses naming `latest` and what it
    found."""
    w = ctx["work"]
    base = os.path.join(w, "base")
    launch(ctx, 2, ["--steps", "4", "--save-every", "2", "--save-dir", base])
    ref = os.path.join(w, "ref")
    launch(ctx, 2, ["--steps", "6", "--log-dir", ref])
    damages = {
        "truncated": lambda p: open(p, "w").write("step-00"),
        "removed": os.remove,
        "missing step": lambda p: open(p, "w").write("step-000009\n"),
    }
    for what, damage in damages.items():
        d = os.path.join(w, what.replace(" ", "-"))
        shutil.copytree(base, d)
        damage(os.path.join(d, "latest"))
        out = os.path.join(w, f"out-{what.replace(' ', '-')}")
        p = launch(ctx, 2, ["--steps", "6", "--resume", d, "--log-dir", out])
        assert "warning: --resume:" in p.stderr and f"{d}/latest" in p.stderr, (what, p.stderr[-1500:])
        assert f"{d}/step-000004" in p.stderr, (what, p.stderr[-1500:])
        s = summary(out)
        assert s["start_step"] == 4 and s["params_digest"] == summary(ref)["params_digest"], (what, s["start_step"])
        print(f"ok: latest {what}: fell back to step-000004 with a warning, resumed bitwise")
    empty = os.path.join(w, "none")
    os.makedirs(empty)
    open(os.path.join(empty, "latest"), "w").write("garbage")
    os.makedirs(os.path.join(empty, "step-000003"))
    p = launch(ctx, 2, ["--steps", "6", "--resume", empty], expect_rc=2)
    errs = errors(p.stderr)
    assert len(errs) == 1 and "no complete checkpoint" in errs[0] and f"{empty}/latest" in errs[0], p.stderr[-1500:]
    assert "step-000003" in errs[0], errs
    print(f"ok: no complete checkpoint: refused naming latest ({errs[0][:160]}...)")


def flip(path, at):
    data = bytearray(open(path, "rb").read())
    data[at % len(data)] ^= 0x10
    open(path, "wb").write(bytes(data))


def case_damage(ctx):
    """A flipped byte or a truncation in any file of a checkpoint (each rank
    file at its header or a seeded block, truncated, and rank 2's last
    byte; the manifest anywhere):
    refused on every rank with one message naming that file and the newest
    older checkpoint that verifies, exit 2, nothing in the directory changed.
    At np 3 stage 1, and loaded at np 2 (resharding reads other files)."""
    w = ctx["work"]
    base = os.path.join(w, "base")
    launch(ctx, 3, ["--steps", "4", "--stage", "1", "--save-every", "2", "--save-dir", base])
    step = os.path.join(base, "step-000004")
    rng = random.Random(7)
    victims = []
    for r in range(3):
        size = os.path.getsize(os.path.join(step, f"rank{r}.bin"))
        victims += [(f"rank{r}.bin", "flip", 9 if r == 0 else rng.randrange(32, size)),
                    (f"rank{r}.bin", "truncate", size - 8)]
    victims += [("rank2.bin", "flip", os.path.getsize(os.path.join(step, "rank2.bin")) - 1)]
    msize = os.path.getsize(os.path.join(step, "manifest.json"))
    victims += [("manifest.json", "flip", rng.randrange(msize)) for _ in range(2)] + [("manifest.json", "truncate", msize // 2)]
    for i, (name, how, at) in enumerate(victims):
        d = os.path.join(w, f"d{i}")
        shutil.copytree(base, d)
        path = os.path.join(d, "step-000004", name)
        if how == "flip":
            flip(path, at)
        else:
            os.truncate(path, at)
        before = digest_of_dir(d)
        np_ = 3 if i % 2 == 0 else 2
        p = launch(ctx, np_, ["--steps", "6", "--stage", "1", "--resume", d, "--save-every", "2", "--save-dir", d],
                   expect_rc=2)
        errs = errors(p.stderr)
        assert len(errs) == 1, (name, how, at, p.stderr[-2000:])
        assert f"step-000004/{name}" in errs[0], (name, how, at, errs[0])
        assert f"{d}/step-000002 (--resume {d}/step-000002 takes it)" in errs[0], (name, how, errs[0])
        assert digest_of_dir(d) == before, f"{name} {how}: the checkpoint directory changed"
        print(f"ok: np={np_}: {name} {how} at {at}: {errs[0][len('zt-train: error: '):][:140]}")


def case_keep(ctx):
    """--keep-checkpoints K keeps the K newest complete checkpoints (the one
    just saved among them) and removes the rest only after a newer one is
    complete; a re-save of an existing step replaces it."""
    w = ctx["work"]
    d = os.path.join(w, "keep")
    launch(ctx, 2, ["--steps", "5", "--save-every", "1", "--save-dir", d, "--keep-checkpoints", "2"])
    assert sorted(os.listdir(d)) == ["latest", "step-000004", "step-000005"], os.listdir(d)
    launch(ctx, 2, ["--steps", "6", "--save-every", "1", "--save-dir", d, "--keep-checkpoints", "3",
                    "--resume", os.path.join(d, "step-000004")])
    assert sorted(os.listdir(d)) == ["latest", "step-000004", "step-000005", "step-000006"], os.listdir(d)
    assert open(os.path.join(d, "latest")).read() == "step-000006\n"
    p = launch(ctx, 2, ["--steps", "6", "--keep-checkpoints", "0"], expect_rc=2)
    assert "--keep-checkpoints" in p.stderr, p.stderr[-800:]
    print("ok: --keep-checkpoints 2 and 3 leave the newest 2 and 3; a re-save replaces step 5; 0 is refused")


CASES = {n[5:]: f for n, f in globals().items() if n.startswith("case_")}

if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[1] not in CASES:
        sys.exit(f"usage: {sys.argv[0]} {{{'|'.join(CASES)}}} ZT_TRAIN ZT_RUN")
    work = tempfile.mkdtemp(prefix=f"zt-fail-{sys.argv[1]}-")
    ctx = {"zt": os.path.abspath(sys.argv[2]), "zt_run": os.path.abspath(sys.argv[3]), "work": work}
    try:
        CASES[sys.argv[1]](ctx)
    finally:
        shutil.rmtree(work, ignore_errors=True)
