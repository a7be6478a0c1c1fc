#!/usr/bin/env python3
"""Preemption and storage faults under real mpirun, run by CTest
(docs/failure.md, "Preemption and signals" and "Storage faults"):
--on-signal, --resume auto, --async-save, and saves that fail on the file
system, through runtime/fs.c's hook (ZT_TEST_FS_FAIL) and for real on a
full tmpfs in a private mount namespace.

usage: zt_preempt_test.py CASE ZT_TRAIN ZT_RUN
"""
import glob
import json
import os
import random
import re
import signal
import subprocess
import sys
import time

from zt_harness import launch, main

MODEL = ["--layers", "2", "--d-model", "32", "--heads", "4", "--seq-len", "32", "--vocab", "48",
         "--micro-batch", "4", "--threads", "1", "--bucket-size", "16KiB", "--stage", "3"]
QUIET = MODEL + ["--quiet"]


def fail(msg, p=None):
    if p is not None:
        msg += f"\nexit {p.returncode}\nstdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-3000:]}"
    sys.exit("FAIL: " + msg)


def summary(d):
    with open(os.path.join(d, "summary.json")) as f:
        return json.load(f)


def digest(ctx, log):
    return summary(os.path.join(ctx["work"], log))["params_digest"]


def run(ctx, np, args, log, expect_rc=0, env=None):
    """A run logging to WORK/log; returns the process and its summary (or None)."""
    d = os.path.join(ctx["work"], log)
    p = launch(ctx, np, QUIET + args + ["--log-dir", d], expect_rc=expect_rc, env=env)
    return p, summary(d) if os.path.exists(os.path.join(d, "summary.json")) else None


def latest(save):
    with open(os.path.join(save, "latest")) as f:
        return f.read().strip()


def no_partials(save):
    left = [n for n in os.listdir(save) if n.startswith(".tmp-") or n.endswith(".replaced") or n.endswith(".tmp")]
    for step in glob.glob(os.path.join(save, "step-*")):
        left += [n for n in os.listdir(step) if n.endswith(".tmp")]
    if left:
        fail(f"partial files left in {save}: {left}")


def rank_pid(rank):
    """The pid of this machine's zt-train process of that world rank."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if cmd and cmd[0].endswith(b"zt-train") and f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
            return int(pid)
    return None


def interrupted(ctx, np, args, save, log, at_step, target):
    """Starts a run, sends a signal once rank 0 printed step at_step
    (target "mpirun": SIGUSR1 to mpirun; an int: SIGTERM to that rank) and
    returns (exit code, seconds from the signal to the exit, summary)."""
    d = os.path.join(ctx["work"], log)
    cmd = [ctx["zt_run"], "-np", str(np), ctx["zt"]] + MODEL + args + [
        "--save-dir", save, "--resume", "auto", "--log-dir", d, "--print-every", "1"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sent = None
    for line in p.stdout:
        m = re.match(r"step\s+(\d+)/", line)
        if m and int(m.group(1)) >= at_step and sent is None:
            if target == "mpirun":
                p.send_signal(signal.SIGUSR1)
            else:
                pid = rank_pid(target)
                if pid is None:
                    p.kill()
                    fail(f"no process of rank {target} found")
                os.kill(pid, signal.SIGTERM)
            sent = time.time()
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        fail(f"{' '.join(cmd)}: still running 60 s after the signal (a hang)")
    err = p.stderr.read()
    if sent is None:
        fail(f"{' '.join(cmd)}: ended (exit {p.returncode}) before step {at_step}\n{err[-2000:]}")
    if p.returncode != 0:
        fail(f"{' '.join(cmd)}: exit {p.returncode} after the signal at step {at_step}\n{err[-3000:]}")
    return time.time() - sent, summary(d)


def case_signals(ctx):
    """SIGTERM to one rank and SIGUSR1 to mpirun, each at 5 seeded moments:
    every rank stops at one step boundary, saves it and exits 0 within a
    few seconds; --resume auto then ends with the uninterrupted digest."""
    steps = ["--steps", "200"]
    _, ref = run(ctx, 2, steps, "ref")
    rng = random.Random(47)
    for trial in range(10):
        target = "mpirun" if trial % 2 else 1
        at = rng.randrange(5, 100)
        save = os.path.join(ctx["work"], f"ck{trial}")
        took, s = interrupted(ctx, 2, steps, save, f"cut{trial}", at, target)
        if s["stop_reason"] != ("SIGUSR1" if target == "mpirun" else "SIGTERM") or not at <= s["stop_step"] < 200:
            fail(f"trial {trial}: stop_reason {s['stop_reason']}, stop_step {s['stop_step']} (signal at step {at})")
        if latest(save) != f"step-{s['stop_step']:06d}":
            fail(f"trial {trial}: latest is {latest(save)}, the stop was at step {s['stop_step']}")
        if took > 20:
            fail(f"trial {trial}: the ranks took {took:.1f} s to stop after the signal")
        _, done = run(ctx, 2, steps + ["--save-dir", save, "--resume", "auto"], f"resumed{trial}")
        if done["start_step"] != s["stop_step"] or done["params_digest"] != ref["params_digest"]:
            fail(f"trial {trial}: resumed at {done['start_step']} to digest {done['params_digest']}, "
                 f"uninterrupted {ref['params_digest']}")
        print(f"trial {trial}: {target} at step {at}: stopped at {s['stop_step']}, {took:.2f} s to exit, resumed "
              "bitwise")
    # --save-every-minutes: rank 0's clock, voted, so every rank saves the same steps
    timed = os.path.join(ctx["work"], "timed")
    _, t = run(ctx, 2, ["--steps", "300", "--save-every-minutes", "0.002", "--keep-checkpoints", "1000",
                        "--save-dir", timed], "timed")
    saved = sorted(n for n in os.listdir(timed) if n.startswith("step-"))
    if len(saved) < 2 or t["params_digest"] == "":
        fail(f"--save-every-minutes 0.002 over 300 steps saved {saved}")
    no_partials(timed)
    print(f"--save-every-minutes 0.002: {len(saved)} timed saves in 300 steps")


def case_quick(ctx):
    """The C paths in few runs: a signal one rank raises stops both at that
    step with a save and --resume auto continues bitwise; an empty
    directory starts fresh; an asynchronous save's files equal a blocking
    save's; a full disk once (the hook) costs one save, not the run."""
    steps = ["--steps", "20"]
    blocking = os.path.join(ctx["work"], "blocking")
    _, ref = run(ctx, 2, steps + ["--save-every", "10", "--save-dir", blocking], "ref")
    save = os.path.join(ctx["work"], "auto")
    p, s = run(ctx, 2, steps + ["--save-dir", save, "--resume", "auto", "--save-every", "5"], "cut",
               env={"ZT_TEST_RAISE": "1:7:USR2"})
    if "starting fresh" not in p.stdout and "starting fresh" not in p.stderr:
        fail("--resume auto on an empty directory did not say it starts fresh", p)
    if (s["stop_reason"], s["stop_step"], latest(save)) != ("SIGUSR2", 7, "step-000007"):
        fail(f"stop {s['stop_reason']} at {s['stop_step']}, latest {latest(save)}", p)
    _, done = run(ctx, 2, steps + ["--save-dir", save, "--resume", "auto", "--save-every", "5"], "resumed")
    if done["start_step"] != 7 or done["params_digest"] != ref["params_digest"]:
        fail(f"resumed from {done['start_step']} to {done['params_digest']}, uninterrupted {ref['params_digest']}")
    asynchronous = os.path.join(ctx["work"], "async")
    _, a = run(ctx, 2, steps + ["--save-every", "10", "--save-dir", asynchronous, "--async-save", "1"], "async")
    for step in ("step-000010", "step-000020"):
        for name in ("rank0.bin", "rank1.bin", "manifest.json"):
            with open(os.path.join(blocking, step, name), "rb") as f, open(os.path.join(asynchronous, step, name),
                                                                           "rb") as g:
                if f.read() != g.read():
                    fail(f"{step}/{name}: the asynchronous save's bytes differ from the blocking save's")
    staged = a["ranks"][0]["host_peak_by_category"]["checkpoint_staging"]
    if staged != os.path.getsize(os.path.join(asynchronous, "step-000010", "rank0.bin")):
        fail(f"checkpoint_staging peak {staged}, the rank file has "
             f"{os.path.getsize(os.path.join(asynchronous, 'step-000010', 'rank0.bin'))} bytes")
    full = os.path.join(ctx["work"], "full")
    # rank 1 writes a header and 4 blocks per unit per save: its 20th write is in the save of step 10
    p, _ = run(ctx, 2, ["--steps", "15", "--save-every", "5", "--save-dir", full], "full",
               env={"ZT_TEST_FS_FAIL": "1:20:ENOSPC"})
    if not re.search(r"checkpoint step 10 was not saved: rank 1: .*rank1\.bin\.tmp: write failed: .*\(ENOSPC",
                     p.stderr):
        fail("the failed save's warning does not name step, rank, path and errno", p)
    if sorted(n for n in os.listdir(full) if n.startswith("step-")) != ["step-000005", "step-000015"]:
        fail(f"after a failed save {full} holds {sorted(os.listdir(full))}")
    no_partials(full)


def case_second_signal(ctx):
    """A second signal during the signal's save exits at once with 128 +
    its number, and the previous checkpoint still loads."""
    save = os.path.join(ctx["work"], "ck")
    # the signal at step 6 makes the ranks save step 6; rank 0 gets SIGTERM at that save's 2nd point
    p, _ = run(ctx, 2, ["--steps", "20", "--save-every", "4", "--save-dir", save], "cut", expect_rc=None,
               env={"ZT_TEST_RAISE": "1:6:USR1", "ZT_TEST_KILL_SAVE": "6:0:2:TERM"})
    if p.returncode != 128 + signal.SIGTERM or "a second signal (SIGTERM)" not in p.stderr:
        fail(f"a second signal during the save: exit {p.returncode}, expected {128 + signal.SIGTERM}", p)
    if latest(save) != "step-000004":
        fail(f"latest is {latest(save)} after the abandoned save, not step-000004")
    _, s = run(ctx, 2, ["--steps", "8", "--save-dir", save, "--resume", "auto"], "resumed")
    if s["start_step"] != 4:
        fail(f"resumed at step {s['start_step']}, not 4")


def case_storage(ctx):
    """Saves failing through the fs.c hook with ENOSPC, EIO and EROFS:
    training goes on, the first checkpoint loads bitwise, nothing partial
    stays; --save-failures failures in a row stop the run with exit 1."""
    steps = ["--steps", "20", "--save-every", "5"]
    _, ref = run(ctx, 2, steps[:2], "ref")
    for errno_name, rank in (("ENOSPC", 0), ("EIO", 1), ("EROFS", -1)):
        save = os.path.join(ctx["work"], errno_name)
        # every write from the 20th on (within the save of step 10 on either rank) fails; --save-failures 9 forgives them
        p, s = run(ctx, 2, steps + ["--save-dir", save, "--save-failures", "9"], errno_name + "-log",
                   env={"ZT_TEST_FS_FAIL": f"{rank}:20+:{errno_name}"})
        if s["params_digest"] != ref["params_digest"] or p.stderr.count("was not saved") != 3:
            fail(f"{errno_name}: training did not go on past 3 failed saves", p)
        if f"({errno_name}" not in p.stderr:
            fail(f"{errno_name}: the warning does not name the errno", p)
        if sorted(os.listdir(save)) != ["latest", "step-000005"] or latest(save) != "step-000005":
            fail(f"{errno_name}: {save} holds {sorted(os.listdir(save))}")
        no_partials(save)
    _, first = run(ctx, 2, ["--steps", "5", "--save-every", "5", "--save-dir", os.path.join(ctx["work"], "first")],
                   "first")
    _, back = run(ctx, 2, ["--steps", "5", "--resume", os.path.join(ctx["work"], "EIO")], "back")
    if back["params_digest"] != first["params_digest"] or back["start_step"] != 5:
        fail("the checkpoint kept through the failures does not load bitwise")
    save = os.path.join(ctx["work"], "three")
    p, _ = run(ctx, 2, steps + ["--save-dir", save], "three", expect_rc=1, env={"ZT_TEST_FS_FAIL": "-1:20+:EIO"})
    if "3 checkpoint saves in a row failed (--save-failures 3)" not in p.stderr:
        fail("three failed saves in a row did not stop the run with the message", p)
    no_partials(save)


def case_enospc(ctx):
    """A real full disk: the save directory on a small tmpfs in a private
    mount namespace (root and unshare needed; skipped with a message
    elsewhere). The first save fits, the later ones do not."""
    if os.geteuid() != 0 or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        print("SKIP: needs root and unshare -m for a private tmpfs")
        return
    _, first = run(ctx, 2, ["--steps", "5"], "first")
    mnt = os.path.join(ctx["work"], "mnt")
    os.makedirs(mnt)
    d = os.path.join(ctx["work"], "full")
    args = QUIET + ["--steps", "20", "--save-every", "5", "--save-dir", os.path.join(mnt, "ck"),
                    "--keep-checkpoints", "5", "--save-failures", "9", "--log-dir", d]
    cmd = (f"mount -t tmpfs -o size=720k tmpfs {mnt} && {ctx['zt_run']} -np 2 {ctx['zt']} {' '.join(args)}; rc=$?; "
           f"ls -a {mnt}/ck; cat {mnt}/ck/latest; {ctx['zt_run']} -np 2 {ctx['zt']} {' '.join(QUIET)} --steps 5 "
           f"--resume {mnt}/ck/step-000005 --log-dir {d}-back > /dev/null; exit $rc")
    p = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", cmd], capture_output=True, text=True,
                       timeout=300)
    if p.returncode != 0 or "No space left on device (ENOSPC)" not in p.stderr:
        fail("a full tmpfs: training did not go on with ENOSPC named", p)
    if "step-000005" not in p.stdout.split() or ".tmp-step" in p.stdout or "step-000010" in p.stdout.split():
        fail("a full tmpfs: the directory does not hold exactly the first checkpoint", p)
    if summary(d + "-back")["params_digest"] != first["params_digest"]:
        fail("a full tmpfs: the first checkpoint does not load bitwise")
    print(f"real ENOSPC: {p.stderr.count('was not saved')} saves refused, step-000005 kept and loaded bitwise")


def case_async_kill(ctx):
    """A rank killed while its writer writes leaves the previous
    checkpoint as `latest`; --resume auto with a damaged newest checkpoint
    takes the previous complete one and says so."""
    save = os.path.join(ctx["work"], "ck")
    # save point 1 of step 10 is rank 1's "after write", on its writer thread
    run(ctx, 2, ["--steps", "20", "--save-every", "5", "--async-save", "1", "--save-dir", save], "killed",
        expect_rc=None, env={"ZT_TEST_KILL_SAVE": "10:1:1"})
    if latest(save) != "step-000005" or os.path.exists(os.path.join(save, "step-000010")):
        fail(f"after a kill during the write of step 10: latest {latest(save)}, {sorted(os.listdir(save))}")
    _, s = run(ctx, 2, ["--steps", "10", "--save-every", "5", "--save-dir", save, "--resume", "auto"], "resumed")
    _, ref = run(ctx, 2, ["--steps", "10"], "ref")
    if s["start_step"] != 5 or s["params_digest"] != ref["params_digest"]:
        fail("the run after the kill did not resume bitwise from step 5")
    with open(os.path.join(save, "step-000010", "rank1.bin"), "r+b") as f:
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 0xFF]))
    p, s = run(ctx, 2, ["--steps", "10", "--save-dir", save, "--resume", "auto"], "fallback")
    if "does not load" not in p.stderr or "taking the previous complete checkpoint" not in p.stderr:
        fail("--resume auto did not say it fell back from the damaged checkpoint", p)
    if s["start_step"] != 5 or s["params_digest"] != ref["params_digest"]:
        fail(f"--resume auto fell back to step {s['start_step']}, digest {s['params_digest']}")


if __name__ == "__main__":
    main({"signals": case_signals, "quick": case_quick, "second_signal": case_second_signal,
          "storage": case_storage, "enospc": case_enospc, "async_kill": case_async_kill}, "preempt")
