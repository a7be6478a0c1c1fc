#!/usr/bin/env python3
"""End-to-end test of the ablation sweep (launch/ablate.py), run by CTest.

usage: ablation_test.py ZT_TRAIN ZT_RUN [ABLATE_PY]

Runs the 16-configuration sweep at np 2 on a small model twice:
1. without a cap: every configuration runs; the CSV has all 16 rows and its
   columns, the numbers are sane, the Markdown table and the three PNG plots exist;
2. with a --mem-limit chosen from run 1's measurements between stage 0's peak
   (no offload) and stage 3 with offload's reserved bytes: the configurations
   that cannot fit are rows marked `failed: oom`, the ones that fit are `ok`,
   and the sweep still exits 0 and writes every file.
3. with --dtype bf16: the same 16 configurations named `...-bf16`, each
   with exactly half of run 1's params peak (2 bytes per parameter);
4. with --recompute selective: 8 configurations named `...-selective`,
   each ending at exactly run 1's loss for the same stage and offload
   (recomputation does not change the arithmetic; the memory ordering of the
   policies is tested on a 4-layer model in mpi_recompute_cuts_activations).
5. with --allocator simple,caching (offload and recompute none, 2 steps): the
   dry run passes --allocator to zt-train; the 8 runs are named `...-caching`
   for the caching allocator, each rank's JSONL names the allocator it ran
   with, the CSV and Markdown carry the allocator, the reserved peak and the
   fragmentation at peak, and the two allocators agree on the allocated peak
   and the loss.
6. with --model llama --dry-run: every configuration's zt-train command
   line carries `--model llama` (and `--model gpt` without the flag, which
   run 1 records in the CSV's model column and the Markdown); `--model`
   after `--` is refused.
7. with --quantize none,w8,g4,w8g4 (offload and recompute none, 2 steps):
   the dry run names the configurations `...-w8`, `...-g4`, `...-w8g4`,
   passes --quantize-weights / --quantize-grads for them and none without,
   and leaves out w8 below stage 3 (10 configurations); the 10 runs are ok
   with the setting in the CSV's and the Markdown's quantize column, and
   each quantized one moves fewer collective bytes than its stage unquantized;
   --quantize-grads after `--` is refused.
8. with --seq-parallel 1,2,4 (offload and recompute none, 2 steps): the dry
   run names the configurations `...-sp2`, passes --seq-parallel 2 for them
   and no flag at P 1, and leaves out P 4 (it divides neither np 2 nor the
   model's 2 heads) with a note on stderr; a P that does not divide --heads
   (or Llama's --kv-heads) is left out too, a sweep with no P left is
   refused, and so is --seq-parallel after `--`. The 8 runs are ok with P in
   the CSV's and the Markdown's seq-parallel column; at P 2 each rank holds
   at most 0.55x the activation bytes of P 1, moves all-to-all bytes (and
   P 1 none), keeps the same model state (sharded over both ranks at any
   P), and a step counts half the tokens of P 1 (np 2 at P 2 is one
   data-parallel replica).
Also checks that a missing zt-train is a tooling error (exit 2).
"""
import csv
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

# Small: each run takes a fraction of a second, the whole test a few seconds
# (a few times more under the sanitizers).
MODEL = ["--layers", "1", "--d-model", "32", "--heads", "2", "--seq-len", "16", "--vocab", "16",
         "--micro-batch", "2", "--threads", "1"]
STEPS = 3
CATEGORIES = ["params", "grads", "master_params", "optimizer", "activations",
              "gathered_params", "comm_buffers", "workspace", "checkpoint_staging", "other"]
EXPECTED_COLUMNS = (["name", "model", "stage", "offload", "recompute", "status", "peak_mean_bytes", "peak_max_bytes",
                     "imbalance_max_over_mean"]
                    + [f"peak_{c}_mean_bytes" for c in CATEGORIES]
                    + ["host_peak_mean_bytes", "reserved_peak_max_bytes", "step_time_median_s", "tokens_per_s",
                       "final_loss", "comm_bytes_per_step"])
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CONFIGS = {(s, o, r) for s in ("0", "1", "2", "3") for o in ("none", "cpu") for r in ("none", "full")}


def fail(msg):
    sys.exit("FAIL: " + msg)


def sweep(ctx, out, extra, own=(), steps=STEPS):
    cmd = ([sys.executable, ctx["ablate"], "--np", "2", "--steps", str(steps), "--out", out,
            "--zt-train", ctx["zt"], "--zt-run", ctx["zt_run"]] + list(own) + ["--"] + MODEL + extra)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        fail(f"{' '.join(cmd)}: exit {p.returncode}\nstdout:\n{p.stdout[-4000:]}\nstderr:\n{p.stderr[-4000:]}")
    for f in ("ablation.csv", "ablation.md", "ablation_memory.png", "ablation_throughput.png"):
        if os.path.join(out, f) not in p.stdout:
            fail(f"ablate.py did not print where {f} is:\n{p.stdout}")
    return p


def read_rows(out, suffix=""):
    with open(os.path.join(out, "ablation.csv"), newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in EXPECTED_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            fail(f"ablation.csv lacks columns {missing} (has {reader.fieldnames})")
        rows = list(reader)
    if len(rows) != 16:
        fail(f"ablation.csv has {len(rows)} rows, expected 16")
    got = {(r["stage"], r["offload"], r["recompute"]) for r in rows}
    if got != CONFIGS:
        fail(f"ablation.csv configurations {sorted(got)} != stage x offload x recompute")
    if len({r["name"] for r in rows}) != 16:
        fail("configuration names are not unique")
    if not all(r["name"].endswith(suffix) for r in rows):
        fail(f"configuration names lack {suffix!r}: {[r['name'] for r in rows]}")
    return {r["name"]: r for r in rows}


def check_files(out, rows):
    for png in ("ablation_memory.png", "ablation_throughput.png", "ablation_bytes_per_param.png"):
        path = os.path.join(out, png)
        if not os.path.isfile(path):
            fail(f"{path} missing")
        with open(path, "rb") as f:
            if f.read(8) != PNG_SIGNATURE:
                fail(f"{path} is not a PNG")
        if os.path.getsize(path) < 1000:
            fail(f"{path} is suspiciously small ({os.path.getsize(path)} bytes)")
    md_path = os.path.join(out, "ablation.md")
    if not os.path.isfile(md_path):
        fail(f"{md_path} missing")
    md = open(md_path).read()
    for name, r in rows.items():
        line = next((l for l in md.splitlines() if l.startswith(f"| {name} |")), None)
        if line is None:
            fail(f"ablation.md has no table row for {name}")
        if r["status"] not in line:
            fail(f"ablation.md row of {name} does not say {r['status']!r}: {line}")
        if f"--log-dir {os.path.join(out, 'runs', name)} --quiet" not in md:
            fail(f"ablation.md does not show the command of {name}")
    for name in ("ablation_memory.gp", "ablation_throughput.gp", "ablation_bytes_per_param.gp",
                 "ablation_memory.dat", "ablation_throughput.dat", "ablation_bytes_per_param.dat"):
        if not os.path.isfile(os.path.join(out, name)):
            fail(f"{name} missing (the plots' data and scripts are kept beside them)")
    return md


def num(r, col):
    v = r[col]
    if v == "":
        fail(f"{r['name']}: {col} is empty in an ok row")
    x = float(v)
    if not math.isfinite(x):
        fail(f"{r['name']}: {col} = {v}")
    return x


def check_ok_row(r):
    for col in ("peak_mean_bytes", "peak_max_bytes", "tokens_per_s", "step_time_median_s", "comm_bytes_per_step",
                "reserved_peak_max_bytes", "peak_params_mean_bytes", "peak_activations_mean_bytes"):
        if num(r, col) <= 0:
            fail(f"{r['name']}: {col} = {r[col]}, expected > 0")
    if not num(r, "peak_mean_bytes") <= num(r, "peak_max_bytes") <= num(r, "reserved_peak_max_bytes"):
        fail(f"{r['name']}: expected mean peak <= max peak <= reserved: {r}")
    if num(r, "imbalance_max_over_mean") < 1.0:
        fail(f"{r['name']}: imbalance {r['imbalance_max_over_mean']} < 1")
    num(r, "final_loss")
    host = num(r, "host_peak_mean_bytes")
    if (r["offload"] == "cpu") != (host > 0):
        fail(f"{r['name']}: offload {r['offload']} with host peak {host}")
    if r["offload"] == "cpu" and (num(r, "peak_optimizer_mean_bytes") != 0 or num(r, "peak_master_params_mean_bytes") != 0):
        fail(f"{r['name']}: offloaded run with optimizer state on the device")


def case_uncapped(ctx):
    out = os.path.join(ctx["work"], "uncapped")
    sweep(ctx, out, [])
    rows = read_rows(out)
    for r in rows.values():
        if r["status"] != "ok":
            fail(f"{r['name']} failed without a cap: {r['status']} {r.get('detail', '')}")
        check_ok_row(r)
        if not os.path.isfile(os.path.join(out, "runs", r["name"], "summary.json")):
            fail(f"{r['name']}: no summary.json in its run directory")
    if num(rows["s3"], "peak_params_mean_bytes") >= num(rows["s0"], "peak_params_mean_bytes"):
        fail("stage 3 does not hold fewer parameter bytes per rank than stage 0")
    if {r["model"] for r in rows.values()} != {"gpt"}:
        fail(f"the CSV's model column is not gpt (the default) in every row: {[r['model'] for r in rows.values()]}")
    md = check_files(out, rows)
    if "Model family `gpt`" not in md:
        fail("ablation.md does not record the model family")
    print(f"ok: uncapped sweep: 16 configurations ok, CSV/Markdown/PNGs written ({out})")
    return rows


def case_capped(ctx, base):
    # A cap between what stage 0 without offload needs (its peak: allocated
    # bytes alone exceed the cap, so it must fail) and what stage 3 with
    # offload reserves (its reserved bytes never reach the cap, so it must
    # run exactly as without one).
    need_s0 = int(num(base["s0"], "peak_max_bytes"))
    need_s3 = int(num(base["s3-offload"], "reserved_peak_max_bytes"))
    if need_s0 <= need_s3 + 4096:
        fail(f"no room for a cap: stage 0 peak {need_s0} B, stage 3 + offload reserved {need_s3} B")
    cap_kib = (need_s0 + need_s3) // 2 // 1024
    cap = cap_kib * 1024
    assert need_s3 < cap < need_s0
    out = os.path.join(ctx["work"], "capped")
    sweep(ctx, out, ["--mem-limit", f"{cap_kib}KiB"])
    rows = read_rows(out)
    for name, r in rows.items():
        if r["status"] not in ("ok", "failed: oom"):
            fail(f"{name}: status {r['status']!r} under the cap ({r.get('detail', '')})")
        uncapped_peak = num(base[name], "peak_max_bytes")
        if uncapped_peak > cap and r["status"] != "failed: oom":
            fail(f"{name}: needs {uncapped_peak:.0f} B > cap {cap} B, yet {r['status']}")
        if r["status"] == "ok":
            check_ok_row(r)
            if num(r, "reserved_peak_max_bytes") > cap:
                fail(f"{name}: reserved {r['reserved_peak_max_bytes']} B above the cap {cap} B")
        else:
            if r["exit_code"] != "3":
                fail(f"{name}: failed: oom with exit code {r['exit_code']!r}, expected 3")
            if r["peak_mean_bytes"] != "" or r["tokens_per_s"] != "":
                fail(f"{name}: a failed row carries measurements: {r}")
            if "out of device memory" not in r["detail"]:
                fail(f"{name}: the detail does not quote the OOM report: {r['detail']!r}")
    for name in ("s0", "s0-recompute"):
        if rows[name]["status"] != "failed: oom":
            fail(f"{name} should not fit in {cap} B: {rows[name]['status']}")
    if rows["s3-offload"]["status"] != "ok":
        fail(f"s3-offload should fit in {cap} B: {rows['s3-offload']['status']} {rows['s3-offload']['detail']}")
    md = check_files(out, rows)
    if "failed: oom" not in md or "Failed configurations" not in md:
        fail("ablation.md does not list the failed configurations")
    failed = sorted(n for n, r in rows.items() if r["status"] != "ok")
    print(f"ok: capped sweep (--mem-limit {cap_kib}KiB between {need_s3} and {need_s0} B): "
          f"{16 - len(failed)} ok, {len(failed)} failed: oom ({', '.join(failed)}); every file written")


def case_dtype_axis(ctx, base):
    out = os.path.join(ctx["work"], "bf16")
    sweep(ctx, out, [], own=["--dtype", "bf16"])
    rows = read_rows(out, "-bf16")
    for name, r in rows.items():
        if r["status"] != "ok" or r["dtype"] != "bf16":
            fail(f"{name}: {r['status']}, dtype {r['dtype']}")
        want = num(base[name[:-len("-bf16")]], "peak_params_mean_bytes") / 2
        if num(r, "peak_params_mean_bytes") != want:
            fail(f"{name}: params peak {r['peak_params_mean_bytes']}, want half of fp32's ({want})")
    print(f"ok: --dtype bf16 sweep: 16 configurations ok, params peak half of fp32's ({out})")


def case_recompute_axis(ctx, base):
    out = os.path.join(ctx["work"], "selective")
    sweep(ctx, out, [], own=["--recompute", "selective"])
    with open(os.path.join(out, "ablation.csv"), newline="") as f:
        rows = {r["name"]: r for r in csv.DictReader(f)}
    if len(rows) != 8 or not all(n.endswith("-selective") and r["recompute"] == "selective" for n, r in rows.items()):
        fail(f"selective sweep rows: {sorted(rows)}")
    for name, r in rows.items():
        stem = name[:-len("-selective")]
        if r["status"] != "ok" or r["final_loss"] != base[stem]["final_loss"]:
            fail(f"{name}: {r['status']}, final loss {r['final_loss']} vs {base[stem]['final_loss']} without recompute")
    print(f"ok: --recompute selective sweep: 8 configurations, each at the loss of no recompute ({out})")


def case_allocator_axis(ctx):
    own = ["--allocator", "simple,caching", "--offload", "none", "--recompute", "none"]
    out = os.path.join(ctx["work"], "allocator")
    p = subprocess.run([sys.executable, ctx["ablate"], "--np", "2", "--steps", "2", "--out", out, "--zt-train",
                        ctx["zt"], "--zt-run", ctx["zt_run"], "--dry-run"] + own + ["--"] + MODEL,
                       capture_output=True, text=True, timeout=60)
    cmds = dict(line.split(": ", 1) for line in p.stdout.splitlines() if ": " in line)
    want = {f"s{s}{a}" for s in range(4) for a in ("", "-caching")}
    if p.returncode != 0 or set(cmds) != want:
        fail(f"--allocator simple,caching --dry-run: exit {p.returncode}, configurations {sorted(cmds)}\n{p.stderr}")
    for name, cmd in cmds.items():
        if f"--allocator {'caching' if name.endswith('-caching') else 'simple'} " not in cmd:
            fail(f"{name}: the dry run's command does not pass its allocator: {cmd}")
    sweep(ctx, out, [], own=own, steps=2)
    with open(os.path.join(out, "ablation.csv"), newline="") as f:
        rows = {r["name"]: r for r in csv.DictReader(f)}
    if set(rows) != want:
        fail(f"allocator sweep rows: {sorted(rows)}")
    md = check_files(out, rows)
    if "| allocator |" not in md or "| reserved peak | frag at peak |" not in md:
        fail("ablation.md's table has no allocator, reserved peak and fragmentation at peak columns")
    for name, r in rows.items():
        allocator = "caching" if name.endswith("-caching") else "simple"
        if r["status"] != "ok" or r["allocator"] != allocator:
            fail(f"{name}: {r['status']}, allocator {r['allocator']!r}, expected ok with {allocator}")
        check_ok_row(r)
        frag = num(r, "fragmentation_at_peak_last_step_max")
        if not 0 <= frag < 1 or num(r, "largest_free_block_last_step_min_bytes") < 0:
            fail(f"{name}: fragmentation at peak {frag}, largest free block "
                 f"{r['largest_free_block_last_step_min_bytes']}")
        if f"| {name} | ok | adamw | none | {allocator} |" not in md:
            fail(f"ablation.md has no row for {name} with its allocator")
        for rank in range(2):
            with open(os.path.join(out, "runs", name, f"rank{rank}.jsonl")) as f:
                used = {json.loads(line)["memory"]["allocator"] for line in f if line.strip()}
            if used != {allocator}:
                fail(f"{name}: rank {rank}'s steps ran with the allocator(s) {used}, expected {allocator}")
        if allocator == "caching":
            simple = rows[name[:-len("-caching")]]
            for col in ("peak_max_bytes", "final_loss"):
                if r[col] != simple[col]:
                    fail(f"{name}: {col} {r[col]} differs from the simple allocator's {simple[col]}")
    print(f"ok: --allocator simple,caching sweep: 8 configurations ok, allocator, reserved peak and "
          f"fragmentation at peak in the CSV and Markdown ({out})")


def case_quantize_axis(ctx):
    own = ["--quantize", "none,w8,g4,w8g4", "--offload", "none", "--recompute", "none"]
    cmds = dry_run_commands(ctx, own)
    # w8 (the int8 all-gather of weights) exists at stage 3 only.
    want = {f"s{s}": [] for s in range(4)}
    want.update({f"s{s}-g4": ["--quantize-grads", "int4"] for s in range(4)})
    want.update({"s3-w8": ["--quantize-weights", "int8"],
                 "s3-w8g4": ["--quantize-weights", "int8", "--quantize-grads", "int4"]})
    if set(cmds) != set(want):
        fail(f"--quantize none,w8,g4,w8g4 --dry-run: configurations {sorted(cmds)}, expected {sorted(want)}")
    for name, c in cmds.items():
        got = [a for i, a in enumerate(c) if a.startswith("--quantize") or c[i - 1].startswith("--quantize")]
        if got != want[name]:
            fail(f"{name}: the dry run passes {got}, expected {want[name]}: {' '.join(c)}")
    out = os.path.join(ctx["work"], "quantize")
    sweep(ctx, out, [], own=own, steps=2)
    with open(os.path.join(out, "ablation.csv"), newline="") as f:
        rows = {r["name"]: r for r in csv.DictReader(f)}
    if set(rows) != set(want):
        fail(f"quantize sweep rows: {sorted(rows)}")
    md = check_files(out, rows)
    if "| allocator | quantize |" not in md:
        fail("ablation.md's table has no quantize column")
    for name, r in rows.items():
        quantize = name.partition("-")[2] or "none"
        if r["status"] != "ok" or r["quantize"] != quantize:
            fail(f"{name}: {r['status']}, quantize {r['quantize']!r}, expected ok with {quantize}")
        check_ok_row(r)
        if f"| {name} | ok | adamw | none | simple | {quantize} |" not in md:
            fail(f"ablation.md has no row for {name} with its quantize setting")
        # comm bytes are as they travelled, so codes must move fewer than fp32.
        plain = rows[f"s{r['stage']}"]
        if quantize != "none" and num(r, "comm_bytes_per_step") >= num(plain, "comm_bytes_per_step"):
            fail(f"{name}: {r['comm_bytes_per_step']} collective bytes per step, not fewer than "
                 f"{plain['name']}'s {plain['comm_bytes_per_step']}")
    p = subprocess.run([sys.executable, ctx["ablate"], "--zt-train", ctx["zt"], "--zt-run", ctx["zt_run"],
                        "--dry-run", "--", "--quantize-grads", "int4"], capture_output=True, text=True, timeout=60)
    if p.returncode != 2 or "use ablate.py --quantize)" not in p.stderr:
        fail(f"--quantize-grads after `--`: exit {p.returncode}, expected 2 with a hint\n{p.stderr}")
    print(f"ok: --quantize none,w8,g4,w8g4 sweep: 10 configurations (w8 at stage 3 only) ok, quantize in the "
          f"CSV and Markdown, fewer collective bytes when quantized ({out})")


def case_seq_parallel_axis(ctx):
    def dry(own, extra=()):
        cmd = ([sys.executable, ctx["ablate"], "--np", "2", "--steps", "2", "--out", os.path.join(ctx["work"], "dry"),
                "--zt-train", ctx["zt"], "--zt-run", ctx["zt_run"], "--dry-run", "--offload", "none",
                "--recompute", "none"] + list(own) + ["--"] + MODEL + list(extra))
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        return p, {name: line.split() for name, _, line in (l.partition(": ") for l in p.stdout.splitlines())}

    p, cmds = dry(["--seq-parallel", "1,2,4"])
    want = {f"s{s}{sp}" for s in range(4) for sp in ("", "-sp2")}
    if p.returncode != 0 or set(cmds) != want:
        fail(f"--seq-parallel 1,2,4 --dry-run: exit {p.returncode}, configurations {sorted(cmds)}, expected "
             f"{sorted(want)}\n{p.stderr}")
    for name, c in cmds.items():
        got = [a for i, a in enumerate(c) if a == "--seq-parallel" or c[i - 1] == "--seq-parallel"]
        if got != (["--seq-parallel", "2"] if name.endswith("-sp2") else []):
            fail(f"{name}: the dry run passes {got}: {' '.join(c)}")
    if "--seq-parallel 4 does not divide --np 2: left out" not in p.stderr:
        fail(f"--seq-parallel 4 at np 2: no note that it is left out\n{p.stderr}")
    # The heads rule, with np allowing P 2: only P 1 is left.
    for own, extra, why in (([], ["--heads", "1"], "--heads 1"),
                            (["--model", "llama"], ["--kv-heads", "1"], "--kv-heads 1")):
        p, cmds = dry(["--seq-parallel", "1,2"] + own, extra)
        if p.returncode != 0 or set(cmds) != {f"s{s}" for s in range(4)} \
                or f"--seq-parallel 2 does not divide {why}: left out" not in p.stderr:
            fail(f"--seq-parallel 1,2 with {' '.join(own + extra)}: exit {p.returncode}, configurations "
                 f"{sorted(cmds)}\n{p.stderr}")
    p, _ = dry(["--seq-parallel", "4"])
    if p.returncode != 2 or "no group size is left to sweep" not in p.stderr:
        fail(f"--seq-parallel 4 alone at np 2: exit {p.returncode}, expected 2 with a message\n{p.stderr}")
    p = subprocess.run([sys.executable, ctx["ablate"], "--zt-train", ctx["zt"], "--zt-run", ctx["zt_run"],
                        "--dry-run", "--", "--seq-parallel", "2"], capture_output=True, text=True, timeout=60)
    if p.returncode != 2 or "use ablate.py --seq-parallel)" not in p.stderr:
        fail(f"--seq-parallel after `--`: exit {p.returncode}, expected 2 with a hint\n{p.stderr}")

    out = os.path.join(ctx["work"], "seq_parallel")
    # stages 0 and 3 (no sharding, all of it) of the dry run's configurations
    sweep(ctx, out, [], own=["--seq-parallel", "1,2,4", "--offload", "none", "--recompute", "none", "--stages", "0,3"],
          steps=2)
    with open(os.path.join(out, "ablation.csv"), newline="") as f:
        rows = {r["name"]: r for r in csv.DictReader(f)}
    if set(rows) != {n for n in want if n.startswith(("s0", "s3"))}:
        fail(f"seq-parallel sweep rows: {sorted(rows)}")
    md = check_files(out, rows)
    if "| quantize | seq-parallel |" not in md or "Left out: `--seq-parallel 4` does not divide --np 2." not in md:
        fail("ablation.md has no seq-parallel column or does not say that P 4 was left out")
    B, T = int(MODEL[MODEL.index("--micro-batch") + 1]), int(MODEL[MODEL.index("--seq-len") + 1])
    for name, r in rows.items():
        P = 2 if name.endswith("-sp2") else 1
        if r["status"] != "ok" or r["seq_parallel"] != str(P):
            fail(f"{name}: {r['status']} {r.get('detail', '')}, seq_parallel {r['seq_parallel']!r}, expected ok at {P}")
        check_ok_row(r)
        if f"| {name} | ok | adamw | none | simple | none | {P} |" not in md:
            fail(f"ablation.md has no row for {name} with its seq-parallel setting")
        with open(os.path.join(out, "runs", name, "rank0.jsonl")) as f:
            steps = [json.loads(line) for line in f if line.strip()]
        a2a = num(r, "all_to_all_bytes_per_step")
        if (a2a > 0) != (P > 1) or a2a > num(r, "comm_bytes_per_step"):
            kinds = sorted({k for st in steps for k in st.get("comm", {})})
            fail(f"{name}: {a2a} all-to-all bytes per step of {r['comm_bytes_per_step']} at P {P} (the kinds of "
                 f"rank 0's step comm: {', '.join(kinds)})")
        # Tokens per step, as tokens/s counts them: np 2 / P replicas of B x T.
        want_tokens = B * T * 2 // P
        for st in steps:
            tokens = st["tokens_per_s"] * st["step_time_s"]
            if abs(tokens - want_tokens) > 1e-6 * want_tokens:
                fail(f"{name}: step {st['step']} counts {tokens:.3f} tokens, expected {want_tokens} (B x T x np / P)")
        if P == 2:
            plain = rows[name[:-len("-sp2")]]
            # Every kept tensor of a block is per position or per head, so P 2
            # halves them (docs/sequence_parallel.md, Memory); 0.55 leaves room
            # for a per-rank constant.
            if num(r, "peak_activations_mean_bytes") > 0.55 * num(plain, "peak_activations_mean_bytes"):
                fail(f"{name}: activations {r['peak_activations_mean_bytes']} B per rank, more than 0.55x "
                     f"{plain['name']}'s {plain['peak_activations_mean_bytes']} B")
            for col in ("model_state_by_rank_bytes", "formula_bytes_per_param"):
                if r[col] != plain[col]:
                    fail(f"{name}: {col} {r[col]} differs from {plain['name']}'s {plain[col]}")
    print(f"ok: --seq-parallel 1,2,4 sweep at np 2: P 4 left out, 8 configurations ok, P in the CSV and Markdown, "
          f"at P 2 at most 0.55x the activation bytes, all-to-all bytes, the same model state and half the tokens "
          f"per step ({out})")


def dry_run_commands(ctx, own, extra=()):
    """{config name: its zt-train command as a list} from --dry-run."""
    cmd = ([sys.executable, ctx["ablate"], "--np", "2", "--steps", "2", "--out", os.path.join(ctx["work"], "dry"),
            "--zt-train", ctx["zt"], "--zt-run", ctx["zt_run"], "--dry-run"] + list(own) + ["--"] + MODEL
           + list(extra))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        fail(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stderr}")
    return {name: line.split() for name, _, line in (l.partition(": ") for l in p.stdout.splitlines())}


def case_model_flag(ctx):
    """--model reaches every zt-train command line, right after zt-train, and
    once: zt-train keeps a flag's last value, so a second one would win."""
    for own, family in (([], "gpt"), (["--model", "llama"], "llama")):
        cmds = dry_run_commands(ctx, own + ["--recompute", "none,full,selective"])
        if len(cmds) != 24:
            fail(f"--dry-run {' '.join(own)}: {len(cmds)} configurations, expected 24: {sorted(cmds)}")
        for name, c in cmds.items():
            at = c.index(ctx["zt"]) if ctx["zt"] in c else -1
            if c[at + 1:at + 3] != ["--model", family] or c.count("--model") != 1:
                fail(f"{name}: the command does not pass --model {family} once, after zt-train: {' '.join(c)}")
    p = subprocess.run([sys.executable, ctx["ablate"], "--zt-train", ctx["zt"], "--zt-run", ctx["zt_run"],
                        "--dry-run", "--", "--model", "llama"], capture_output=True, text=True, timeout=60)
    if p.returncode != 2 or "use ablate.py --model" not in p.stderr:
        fail(f"--model after `--`: exit {p.returncode}, expected 2 with a hint\n{p.stderr}")
    print("ok: --model llama (and the default gpt) reaches every zt-train command line of the dry run; "
          "--model after `--` is refused")


def case_predict(ctx):
    """--predict: zt-plan's predicted step and peaks beside the measured ones
    for every configuration, the agreement figures in the Markdown, the
    plot; each predicted step is summary.json's predicted_step_s."""
    out = os.path.join(ctx["work"], "predict")
    cmd = ([sys.executable, ctx["ablate"], "--np", "2", "--steps", str(STEPS), "--out", out, "--zt-train", ctx["zt"],
            "--zt-run", ctx["zt_run"], "--stages", "0,3", "--offload", "none", "--recompute", "none,full",
            "--predict", "--"] + MODEL)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        fail(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    with open(os.path.join(out, "ablation.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    if len(rows) != 4:
        fail(f"--predict sweep: {len(rows)} rows, expected 4")
    for r in rows:
        for c in ("predicted_step_s", "predicted_peak_bytes", "predicted_reserved_bytes"):
            if not r.get(c) or float(r[c]) <= 0:
                fail(f"{r['name']}: no {c} ({r})")
        with open(os.path.join(r["run_dir"], "summary.json")) as f:
            s = json.load(f)
        if abs(s["predicted_step_s"] - float(r["predicted_step_s"])) > 1e-9 * s["predicted_step_s"]:
            fail(f"{r['name']}: zt-plan predicts {r['predicted_step_s']} s, the run's summary {s['predicted_step_s']}")
    with open(os.path.join(out, "ablation.md")) as f:
        md = f.read()
    if "Spearman" not in md or not open(os.path.join(out, "ablation_predicted.png"), "rb").read(8) == PNG_SIGNATURE:
        fail("--predict: no Spearman figure in ablation.md or no ablation_predicted.png")
    print("ok: --predict: predicted step, peak and reserved beside the measured ones in 4 configurations")


def case_tool_error(ctx):
    cmd = [sys.executable, ctx["ablate"], "--out", os.path.join(ctx["work"], "none"),
           "--zt-train", os.path.join(ctx["work"], "no-such-zt-train"), "--zt-run", ctx["zt_run"]]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if p.returncode != 2 or "zt-train not found" not in p.stderr:
        fail(f"a missing zt-train: exit {p.returncode}, expected 2 with a message\n{p.stderr}")
    p = subprocess.run(cmd[:4] + ["--zt-train", ctx["zt"], "--zt-run", ctx["zt_run"], "--", "--stage", "1"],
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 2 or "--stage is set by the sweep" not in p.stderr:
        fail(f"--stage after `--`: exit {p.returncode}, expected 2 with a message\n{p.stderr}")
    p = subprocess.run(cmd[:4] + ["--zt-train", ctx["zt"], "--zt-run", ctx["zt_run"], "--", "--dtype", "bf16"],
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 2 or "use ablate.py --dtype" not in p.stderr:
        fail(f"--dtype after `--`: exit {p.returncode}, expected 2 with a message\n{p.stderr}")
    p = subprocess.run(cmd[:4] + ["--zt-train", ctx["zt"], "--zt-run", ctx["zt_run"], "--", "--allocator", "caching"],
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 2 or "use ablate.py --allocator" not in p.stderr:
        fail(f"--allocator after `--`: exit {p.returncode}, expected 2 with a message\n{p.stderr}")
    print("ok: a missing zt-train and a flag the sweep owns are refused with exit 2")


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(f"usage: {sys.argv[0]} ZT_TRAIN ZT_RUN [ABLATE_PY]")
    here = os.path.dirname(os.path.abspath(__file__))
    ablate = sys.argv[3] if len(sys.argv) == 4 else os.path.join(here, "..", "..", "launch", "ablate.py")
    work = tempfile.mkdtemp(prefix="zt-ablation-")
    ctx = {"zt": os.path.abspath(sys.argv[1]), "zt_run": os.path.abspath(sys.argv[2]),
           "ablate": os.path.abspath(ablate), "work": work}
    ok = False
    try:
        case_tool_error(ctx)
        case_model_flag(ctx)
        base = case_uncapped(ctx)
        case_capped(ctx, base)
        case_dtype_axis(ctx, base)
        case_recompute_axis(ctx, base)
        case_allocator_axis(ctx)
        case_quantize_axis(ctx)
        case_seq_parallel_axis(ctx)
        case_predict(ctx)
        ok = True
    finally:
        if ok:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"(outputs kept in {work})", file=sys.stderr)
