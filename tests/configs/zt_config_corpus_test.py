#!/usr/bin/env python3
"""The corpus of DeepSpeed-shaped configs in tests/configs/ (written from
DeepSpeed's documentation and tutorials and the Hugging Face integration's
"auto" style), run by CTest: each config in expect.json either runs 3 steps
at np 2, with the resolved options --print-config shows, and that output
read back as a config gives the same run bitwise; or it is refused with
exit 2 and every expected message.

usage: zt_config_corpus_test.py ZT_TRAIN ZT_RUN
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RUN = ["--steps", "3", "--threads", "1", "--quiet", "--trace", "0"]


def launch(zt_run, zt, args, expect_rc):
    cmd = [zt_run, "-np", "2", zt] + args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != expect_rc:
        sys.exit(f"FAIL: {' '.join(cmd)}: exit {p.returncode}, expected {expect_rc}\n"
                 f"stdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-3000:]}")
    return p


def printed_config(zt_run, zt, config):
    """--print-config at np 2 (train_batch_size is checked against the world);
    rank 0 prints, after zt-run's own line."""
    p = launch(zt_run, zt, ["--config", config, "--print-config"], 0)
    return p.stdout[p.stdout.index("{"):]


def train(zt_run, zt, config, d):
    launch(zt_run, zt, ["--config", config, "--log-dir", d] + RUN, 0)
    with open(os.path.join(d, "summary.json")) as f:
        return json.load(f)


def check_runs(zt, zt_run, work, name, want):
    config = os.path.join(HERE, name)
    text = printed_config(zt_run, zt, config)
    resolved = json.loads(text)
    for key, value in want.get("resolved", {}).items():
        assert resolved.get(key) == value, (name, key, resolved.get(key), value)
    again = os.path.join(work, name + ".printed.json")
    with open(again, "w") as f:
        f.write(text)
    assert printed_config(zt_run, zt, again) == text, f"{name}: --print-config of its own output differs"
    first = train(zt_run, zt, config, os.path.join(work, name + ".run"))
    second = train(zt_run, zt, again, os.path.join(work, name + ".again"))
    assert first["losses"] == second["losses"] and first["params_digest"] == second["params_digest"], name
    print(f"ok: {name}: 3 steps at np 2; read back from --print-config, the same run ({first['params_digest']})")


def check_refused(zt, zt_run, name, needles):
    p = launch(zt_run, zt, ["--config", os.path.join(HERE, name)] + RUN, 2)
    for n in needles:
        assert n in p.stderr, (name, n, p.stderr[-3000:])
    print(f"ok: {name}: refused, exit 2, with {len(needles)} expected message(s)")


def main():
    zt, zt_run = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    with open(os.path.join(HERE, "expect.json")) as f:
        expect = json.load(f)
    listed = {k for k in expect if k.endswith(".json")}
    present = {f for f in os.listdir(HERE) if f.endswith(".json") and f != "expect.json"}
    assert listed == present, ("every config needs an expectation", listed ^ present)
    work = tempfile.mkdtemp(prefix="zt-configs-")
    try:
        for name in sorted(listed):
            want = expect[name]
            if want.get("run"):
                check_runs(zt, zt_run, work, name, want)
            else:
                check_refused(zt, zt_run, name, want["refused"])
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
