"""What the multi-rank test scripts share: launching zt-train under
launch/zt-run, reading a run's summary and per-rank JSONL, and the
CASE ZT_TRAIN ZT_RUN command line with a scratch directory per case."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

# The sanitizer build's tests set ZT_TEST_SANITIZED=1 (tests/mpi/mpi_tests.cmake):
# there a comparison that repeats one check at every stage runs stages 0
# and 3 (no sharding, and everything sharded), the C paths of stages 1 and
# 2 being mpi_stages_np3's, which compares all four; the normal build runs
# every stage.
SANITIZED = os.environ.get("ZT_TEST_SANITIZED") == "1"
STAGES_COMPARED = (0, 3) if SANITIZED else (0, 1, 2, 3)


def launch(ctx, np, args, expect_rc=0, env=None):
    """Runs zt-train on np ranks (env: extra environment variables); exits the
    test with its output unless it ends with expect_rc (None: any)."""
    cmd = [ctx["zt_run"], "-np", str(np), ctx["zt"]] + args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ, **(env or {})))
    if expect_rc is not None and p.returncode != expect_rc:
        sys.exit(f"FAIL: {' '.join(cmd)}: exit {p.returncode}, expected {expect_rc}\n"
                 f"stdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-3000:]}")
    return p


def train(ctx, np, args, name, env=None):
    """A successful run in WORK/name: its summary.json, with every rank's
    per-step JSONL lines under "steps" (steps[r] is rank r's)."""
    d = os.path.join(ctx["work"], name)
    launch(ctx, np, args + ["--log-dir", d], env=env)
    with open(os.path.join(d, "summary.json")) as f:
        s = json.load(f)
    s["steps"] = []
    for r in range(np):
        with open(os.path.join(d, f"rank{r}.jsonl")) as f:
            s["steps"].append([json.loads(line) for line in f])
    return s


def plan(ctx, np, flags):
    """zt-plan --world np --json with zt-train's flags (beside zt-train), parsed."""
    zt_plan = os.path.join(os.path.dirname(ctx["zt"]), "zt-plan")
    p = subprocess.run([zt_plan, "--world", str(np), "--json"] + flags, capture_output=True, text=True)
    if p.returncode not in (0, 1):  # 1: it does not fit --device-mem
        sys.exit(f"FAIL: zt-plan {' '.join(flags)}: exit {p.returncode}\n{p.stderr[-2000:]}")
    return json.loads(p.stdout)


def losses(s):
    """Rank 0's loss at every step (the global mean, the same on every rank)."""
    return [x["loss"] for x in s["steps"][0]]


def main(cases, prefix):
    """usage: SCRIPT CASE ZT_TRAIN ZT_RUN; runs cases[CASE] in a scratch directory removed after."""
    if len(sys.argv) < 4 or sys.argv[1] not in cases:
        sys.exit(f"usage: {sys.argv[0]} {{{'|'.join(cases)}}} ZT_TRAIN ZT_RUN")
    work = tempfile.mkdtemp(prefix=f"zt-{prefix}-{sys.argv[1]}-")
    ctx = {"zt": os.path.abspath(sys.argv[2]), "zt_run": os.path.abspath(sys.argv[3]), "work": work}
    try:
        cases[sys.argv[1]](ctx)
    finally:
        shutil.rmtree(work, ignore_errors=True)
