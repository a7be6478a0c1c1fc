#!/usr/bin/env python3
"""Ablation sweep of the toy GPT: ZeRO stage x optimizer offload x recompute
(x dtype).

    python3 launch/ablate.py [--np 2] [--steps 30] [--out out/ablation]
                             [--dtype fp32[,bf16,fp16]] [--recompute none,full[,selective,every-K]]
                             [--build build | --zt-train PATH] [--zt-run PATH]
                             [-- EXTRA ZT-TRAIN FLAGS ...]

Runs the configurations stage {0,1,2,3} x --offload {none,cpu} x each
policy of --recompute (default none,full: 16 configurations) for each dtype
of --dtype (default fp32 alone), each as

    launch/zt-run -np NP zt-train --stage S --offload O --recompute R --dtype D
                  --steps K --log-dir OUT/runs/NAME --quiet EXTRA...

and reads OUT/runs/NAME/summary.json and rank0.jsonl. A configuration that
fails (out of memory: exit 3 or an oom_rank<r>.txt report; any other exit
status) is recorded as a failed row and the sweep goes on. Writes

    OUT/ablation.csv             one row per configuration, bytes and seconds
    OUT/ablation.md              the same in MiB as a Markdown table, and the commands run
    OUT/ablation_memory.png      stacked per-category peaks (mean over ranks) per configuration
    OUT/ablation_throughput.png  tokens/s against mean per-rank peak memory

(with the gnuplot data files and scripts beside them, so the plots can be
redrawn with `cd OUT && gnuplot ablation_memory.gp`). Every run's console
output is kept in OUT/runs/NAME/console.log.

Flags after `--` go to every run (model size, --mem-limit, --threads, ...);
the flags the sweep sets itself are refused there. The exit status is 0
when the sweep ran, whatever the configurations did; 2 for bad arguments or
a missing program; 1 when writing the results or plotting fails.

Only the Python standard library and gnuplot (pngcairo terminal) are used.
"""
import argparse
import csv
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time

CATEGORIES = ["params", "grads", "master_params", "optimizer", "activations",
              "gathered_params", "comm_buffers", "workspace", "other"]
STAGES = [0, 1, 2, 3]
OFFLOADS = ["none", "cpu"]
RECOMPUTES = ["none", "full"]  # the default --recompute
# Flags whose value the sweep decides; passing them after `--` would silently
# turn the ablation into 16 runs of one configuration (or mix their logs).
OWNED_FLAGS = ["--stage", "--offload", "--recompute", "--dtype", "--steps", "--log-dir"]
DTYPES = ["fp32", "bf16", "fp16"]
MIB = 1024.0 * 1024.0

COLUMNS = (["name", "stage", "offload", "recompute", "dtype", "status",
            "peak_mean_bytes", "peak_max_bytes", "imbalance_max_over_mean"]
           + [f"peak_{c}_mean_bytes" for c in CATEGORIES]
           + ["host_peak_mean_bytes", "host_peak_max_bytes", "reserved_peak_max_bytes", "os_peak_max_bytes",
              "step_time_median_s", "tokens_per_s", "final_loss", "comm_bytes_per_step",
              "wall_s", "exit_code", "run_dir", "detail"])

# Colours of the categories in the memory plot (same order as CATEGORIES).
CATEGORY_COLOURS = ["#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c",
                    "#98df8a", "#d62728", "#9467bd", "#8c564b"]
STAGE_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"]


class ToolError(Exception):
    """A failure of the sweep itself (not of a configuration)."""


def config_name(stage, offload, recompute, dtype="fp32"):
    name = f"s{stage}"
    if offload != "none":
        name += "-offload"
    if recompute == "full":
        name += "-recompute"
    elif recompute != "none":
        name += "-" + recompute.replace("-", "")  # -selective, -every2
    if dtype != "fp32":
        name += f"-{dtype}"
    return name


def parse_size(text):
    """zt-train's size syntax (runtime/size.c): a number with an optional unit
    among B, K/KiB, KB, M/MiB, MB, G/GiB, GB, T/TiB, TB (case-insensitive).
    Returns bytes, or None when the text is not a size."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    if not m:
        return None
    units = {"": 1, "b": 1, "k": 1024, "kib": 1024, "kb": 1e3, "m": 1024 ** 2, "mib": 1024 ** 2,
             "mb": 1e6, "g": 1024 ** 3, "gib": 1024 ** 3, "gb": 1e9, "t": 1024 ** 4, "tib": 1024 ** 4,
             "tb": 1e12}
    mult = units.get(m.group(2).lower())
    return None if mult is None else round(float(m.group(1)) * mult)


def flag_value(extra, flag):
    """The last value given to FLAG in the extra arguments (`--f v` or `--f=v`)."""
    value = None
    for i, a in enumerate(extra):
        if a == flag and i + 1 < len(extra):
            value = extra[i + 1]
        elif a.startswith(flag + "="):
            value = a[len(flag) + 1:]
    return value


def parse_args(argv):
    if "--" in argv:
        cut = argv.index("--")
        own, extra = argv[:cut], argv[cut + 1:]
    else:
        own, extra = argv, []
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(
        prog="ablate.py",
        description="Sweep ZeRO stage {0,1,2,3} x offload {none,cpu} x recompute policies (x dtypes) "
                    "on the toy GPT and tabulate and plot memory and throughput.",
        epilog="Flags after `--` are passed to every zt-train run, e.g. "
               "`-- --layers 4 --d-model 128 --mem-limit 8MiB`.")
    p.add_argument("--np", type=int, default=2, help="ranks per run [default: 2]")
    p.add_argument("--steps", type=int, default=30, help="optimizer steps per run [default: 30]")
    p.add_argument("--out", default=os.path.join("out", "ablation"),
                   help="output directory [default: out/ablation]")
    p.add_argument("--build", default="build",
                   help="build directory holding examples/zt-train [default: build]")
    p.add_argument("--zt-train", default=None, help="path of zt-train (overrides --build)")
    p.add_argument("--zt-run", default=os.path.join(here, "zt-run"),
                   help="path of the mpirun wrapper [default: zt-run beside this script]")
    p.add_argument("--recompute", default=",".join(RECOMPUTES),
                   help="comma-separated recompute policies to sweep (none, full, selective, every-K) "
                        "[default: none,full]")
    p.add_argument("--dtype", default="fp32",
                   help="comma-separated dtypes to sweep (fp32, bf16, fp16) [default: fp32]")
    p.add_argument("--gnuplot", default="gnuplot", help="gnuplot program [default: gnuplot]")
    p.add_argument("--timeout", type=float, default=1800.0,
                   help="seconds one configuration may run before it is stopped and marked failed "
                        "[default: 1800]")
    args = p.parse_args(own)
    if args.np < 1:
        p.error("--np must be at least 1")
    if args.steps < 1:
        p.error("--steps must be at least 1")
    if args.timeout <= 0:
        p.error("--timeout must be positive")
    args.recomputes = [r.strip() for r in args.recompute.split(",") if r.strip()]
    bad = [r for r in args.recomputes if r not in ("none", "full", "selective") and not re.fullmatch(r"every-[1-9][0-9]*", r)]
    if not args.recomputes or bad or len(set(args.recomputes)) != len(args.recomputes):
        p.error(f"--recompute {args.recompute!r}: give distinct policies among none, full, selective, every-K")
    args.dtypes = [d.strip() for d in args.dtype.split(",") if d.strip()]
    bad = [d for d in args.dtypes if d not in DTYPES]
    if not args.dtypes or bad or len(set(args.dtypes)) != len(args.dtypes):
        p.error(f"--dtype {args.dtype!r}: give distinct dtypes among {', '.join(DTYPES)}")
    for a in extra:
        for f in OWNED_FLAGS:
            if a == f or a.startswith(f + "="):
                p.error(f"{f} is set by the sweep; it cannot be passed after `--`"
                        + (f" (use ablate.py {f})" if f in ("--steps", "--dtype", "--recompute") else ""))
    args.extra = extra
    args.zt_train = os.path.abspath(args.zt_train or os.path.join(args.build, "examples", "zt-train"))
    args.zt_run = os.path.abspath(args.zt_run)
    for what, path in (("zt-train", args.zt_train), ("zt-run", args.zt_run)):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            p.error(f"{what} not found or not executable: {path}")
    return args


def read_jsonl(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return rows


def oom_detail(run_dir, output):
    """What ran out of memory: the first line of the lowest rank's non-empty
    OOM report (a rank can be ended by another rank's MPI_Abort while it
    writes its own, leaving it empty), else the console's report line.
    None when there is no sign of an OOM."""
    reports = []
    if os.path.isdir(run_dir):
        reports = sorted((int(m.group(1)), f) for f in os.listdir(run_dir)
                         if (m := re.fullmatch(r"oom_rank(\d+)\.txt", f)))
    for rank, f in reports:
        try:
            with open(os.path.join(run_dir, f)) as fh:
                first = fh.readline().strip()
        except OSError:
            continue
        if first:
            return f"rank {rank}: {first}"
    for line in output.splitlines():
        if "out of device memory" in line:
            return line.strip()
    return "(empty OOM report)" if reports else None


def last_error_line(text):
    lines = [l.strip() for l in text.splitlines() if "error" in l.lower()]
    return lines[-1] if lines else ""


def metrics(run_dir):
    """Everything the table needs from a successful run's logs."""
    with open(os.path.join(run_dir, "summary.json")) as f:
        s = json.load(f)
    ranks = s["ranks"]
    peaks = [r["peak_bytes"] for r in ranks]
    hosts = [r.get("host_peak_bytes", 0) for r in ranks]
    row = {
        "peak_mean_bytes": statistics.fmean(peaks),
        "peak_max_bytes": max(peaks),
        "imbalance_max_over_mean": s["imbalance"]["peak_max_over_mean"],
        "host_peak_mean_bytes": statistics.fmean(hosts),
        "host_peak_max_bytes": max(hosts),
        "os_peak_max_bytes": max(r.get("os_peak_bytes", 0) for r in ranks),
        "step_time_median_s": s["step_time_s"],
        "tokens_per_s": s["tokens_per_s"],
        "final_loss": s["final_loss"],
    }
    for c in CATEGORIES:
        row[f"peak_{c}_mean_bytes"] = statistics.fmean(r["peak_by_category"].get(c, 0) for r in ranks)
    steps = read_jsonl(os.path.join(run_dir, "rank0.jsonl"))
    if steps:
        row["comm_bytes_per_step"] = statistics.fmean(
            sum(k.get("bytes", 0) for k in st.get("comm", {}).values()) for st in steps)
    # Reserved bytes (what --mem-limit caps), highest over ranks and steps.
    reserved = []
    for r in range(s["world_size"]):
        path = os.path.join(run_dir, f"rank{r}.jsonl")
        if os.path.exists(path):
            reserved += [st["memory"].get("reserved_peak_bytes", 0) for st in read_jsonl(path)]
    if reserved:
        row["reserved_peak_max_bytes"] = max(reserved)
    return row


def run_config(args, out, stage, offload, recompute, dtype, index, total):
    name = config_name(stage, offload, recompute, dtype)
    run_dir = os.path.join(out, "runs", name)
    if os.path.exists(run_dir):
        shutil.rmtree(run_dir)  # a stale summary.json must not pass for this run's
    cmd = ([args.zt_run, "-np", str(args.np), args.zt_train,
            "--stage", str(stage), "--offload", offload, "--recompute", recompute, "--dtype", dtype,
            "--steps", str(args.steps)] + args.extra + ["--log-dir", run_dir, "--quiet"])
    row = {"name": name, "stage": stage, "offload": offload, "recompute": recompute, "dtype": dtype,
           "run_dir": run_dir,
           "command": shlex.join(cmd), "mpirun": ""}
    print(f"[{index:2d}/{total}] {name:<22s} ", end="", flush=True)
    t0 = time.monotonic()
    try:
        # A session of its own, so that a run past --timeout is ended with
        # every process it started (mpirun and its ranks), not mpirun alone.
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", start_new_session=True)
    except OSError as e:
        raise ToolError(f"cannot run {cmd[0]}: {e}")
    try:
        output, _ = proc.communicate(timeout=args.timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        # SIGTERM first: mpirun then ends its ranks (which sit in process
        # groups of their own); SIGKILL whatever is left after 10 s.
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, None)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                output, _ = proc.communicate(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        rc = None
    row["wall_s"] = time.monotonic() - t0
    row["exit_code"] = "" if rc is None else rc
    for line in output.splitlines():
        if line.startswith("zt-run: mpirun"):
            row["mpirun"] = line[len("zt-run: "):]
            break
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "console.log"), "w") as f:
        f.write("$ " + row["command"] + "\n" + output)

    oom = oom_detail(run_dir, output)
    if rc is None:
        row["status"] = "failed: timeout"
        row["detail"] = f"stopped after {args.timeout:g} s"
    elif rc == 3 or (rc != 0 and oom):
        row["status"] = "failed: oom"
        row["detail"] = oom or last_error_line(output)
    elif rc != 0:
        row["status"] = f"failed: exit {rc}"
        row["detail"] = last_error_line(output)
    elif not os.path.exists(os.path.join(run_dir, "summary.json")):
        row["status"] = "failed: no summary"
        row["detail"] = "exit 0 but no summary.json"
    else:
        try:
            row.update(metrics(run_dir))
            row["status"] = "ok"
            row["detail"] = ""
        except (OSError, ValueError, KeyError, TypeError, statistics.StatisticsError) as e:
            row["status"] = "failed: bad logs"
            row["detail"] = f"{type(e).__name__}: {e}"
    if row["status"] == "ok":
        print(f"ok      peak {row['peak_mean_bytes'] / MIB:9.3f} MiB  {row['tokens_per_s']:12.0f} tok/s  "
              f"({row['wall_s']:.1f} s)")
    else:
        print(f"{row['status']}  ({row['wall_s']:.1f} s)  {row['detail'][:120]}")
    return row


# ---------------------------------------------------------------- output files

def csv_value(v):
    if v is None or v == "":
        return ""
    if isinstance(v, float):
        if v.is_integer() and abs(v) < 1e18:
            return str(int(v))
        return repr(v)
    return str(v)


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for r in rows:
            w.writerow([csv_value(r.get(c)) for c in COLUMNS])


def mib(v, digits=3):
    return "" if v is None or v == "" else f"{v / MIB:.{digits}f}"


def md_escape(text):
    return str(text).replace("|", "\\|")


def write_markdown(path, rows, args, invocation, plot_cmds, cap):
    ok = [r for r in rows if r["status"] == "ok"]
    lines = ["# Ablation: ZeRO stage x optimizer offload x activation recompute", ""]
    lines.append(f"{args.np} rank(s), {args.steps} steps per configuration, extra zt-train flags: "
                 + (f"`{shlex.join(args.extra)}`" if args.extra else "none (the default toy GPT)")
                 + f"; {len(ok)} of {len(rows)} configurations ran to the end.")
    lines.append("")
    lines.append("Memory is the tracked device memory of each rank (MiB = 2^20 bytes): *peak* is the "
                 "mean (and max) over ranks of each rank's peak; per category, the mean over ranks of "
                 "each category's own peak (these peaks need not coincide, so they can add up to more "
                 "than the peak). *host* is the offload pool's peak (mean over ranks). Step time is "
                 "the median over steps; comm is the bytes of all collectives per step on rank 0 "
                 "(mean over steps).")
    if cap is not None:
        lines.append("")
        lines.append(f"`--mem-limit` = {cap} bytes ({cap / MIB:.3f} MiB); the cap applies to *reserved* "
                     "bytes (live + cached), so a run can fail with a peak below it.")
    lines.append("")
    lines.append("Config `sS[-offload][-recompute|-selective|-everyK][-DTYPE]`: ZeRO stage S, `--offload cpu`, "
                 "`--recompute full|selective|every-K`, "
                 "`--dtype DTYPE` (fp32 when absent).")
    lines.append("")
    head = (["config", "status", "peak mean", "peak max", "max/mean"]
            + CATEGORIES + ["host peak", "step ms", "tokens/s", "final loss", "comm MiB/step"])
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join(["---"] * 2 + ["---:"] * (len(head) - 2)) + "|")
    for r in rows:
        good = r["status"] == "ok"
        cells = [r["name"], r["status"]]
        if good:
            cells += [mib(r["peak_mean_bytes"]), mib(r["peak_max_bytes"]),
                      f"{r['imbalance_max_over_mean']:.4f}"]
            cells += [mib(r[f"peak_{c}_mean_bytes"]) for c in CATEGORIES]
            cells += [mib(r["host_peak_mean_bytes"]), f"{r['step_time_median_s'] * 1e3:.2f}",
                      f"{r['tokens_per_s']:.0f}", f"{r['final_loss']:.4f}",
                      mib(r.get("comm_bytes_per_step"))]
        else:
            cells += ["-"] * (len(head) - 2)
        lines.append("| " + " | ".join(md_escape(c) for c in cells) + " |")
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        lines += ["", "Failed configurations:", ""]
        for r in failed:
            detail = r["detail"].split("; by category:")[0]  # the breakdown is in the run's oom_rank<r>.txt
            lines.append(f"- `{r['name']}`: {r['status']}" + (f" — {md_escape(detail)}" if detail else "")
                         + f" (console output: `{os.path.join(r['run_dir'], 'console.log')}`)")
    lines += ["", "Plots: `ablation_memory.png` (stacked per-category peaks per configuration, dot = "
              "mean per-rank peak) and `ablation_throughput.png` (tokens/s against mean peak).", ""]
    lines += ["## Commands", "", "The sweep:", "", "```sh", invocation, "```", "",
              "Each configuration:", "", "```sh"]
    lines += [r["command"] for r in rows]
    lines += ["```", ""]
    first = next((r for r in rows if r["mpirun"]), None)
    if first:
        lines += [f"zt-run ran each under mpirun; for `{first['name']}`:", "", "```sh", first["mpirun"], "```", ""]
    lines += [ "Plots (in the output directory):", "", "```sh"] + plot_cmds + ["```", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def gp_string(text):
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_memory_plot(out, rows, subtitle, cap):
    dat = os.path.join(out, "ablation_memory.dat")
    with open(dat, "w") as f:
        f.write("# config " + " ".join(CATEGORIES) + " peak_mean_MiB status\n")
        for r in rows:
            if r["status"] == "ok":
                vals = [f"{r[f'peak_{c}_mean_bytes'] / MIB:.6f}" for c in CATEGORIES]
                peak = f"{r['peak_mean_bytes'] / MIB:.6f}"
            else:
                vals, peak = ["0"] * len(CATEGORIES), "?"
            f.write(" ".join([r["name"]] + vals + [peak, r["status"].replace(" ", "_")]) + "\n")
    tops = [sum(r[f"peak_{c}_mean_bytes"] for c in CATEGORIES) / MIB for r in rows if r["status"] == "ok"]
    ymax = max(tops + ([cap / MIB] if cap else [])) * 1.15 if tops or cap else 1.0
    gp = [
        "# Stacked per-category peaks (mean over ranks) per configuration; data: ablation_memory.dat",
        "set terminal pngcairo size 1400,800 enhanced font 'Sans,11'",
        "set output 'ablation_memory.png'",
        f"set title {gp_string('Per-rank device memory: bars = each category peak (mean over ranks), stacked; dot = actual peak (mean over ranks)')}"
        f" . \"\\n\" . {gp_string(subtitle)} noenhanced",
        "set datafile missing '?'",
        "set style data histograms",
        "set style histogram rowstacked",
        "set style fill solid 0.9 border rgb '#404040'",
        "set boxwidth 0.75",
        "set ylabel 'MiB'",
        f"set yrange [0:{ymax:.6g}]",
        "set xrange [-0.6:%g]" % (len(rows) - 0.4),
        "set xtics rotate by -40 left noenhanced",
        "set grid ytics",
        "set key outside right top vertical noenhanced",
        "set bmargin 9",
    ]
    for i, r in enumerate(rows):
        if r["status"] != "ok":
            gp.append(f"set label {gp_string(r['status'])} at {i},{ymax * 0.02:.6g} rotate by 90 left "
                      "front textcolor rgb '#c00000' noenhanced")
    if cap:
        gp.append(f"set arrow from graph 0, first {cap / MIB:.6g} to graph 1, first {cap / MIB:.6g} "
                  "nohead dashtype 2 linewidth 2 linecolor rgb '#c00000' front")
        gp.append("set style textbox opaque noborder")
        gp.append(f"set label {gp_string('--mem-limit (caps reserved bytes)')} at graph 0.99, first "
                  f"{cap / MIB:.6g} right offset 0,0.8 textcolor rgb '#c00000' front boxed noenhanced")
    colours = " ".join(CATEGORY_COLOURS)
    gp += [
        f"colours = {gp_string(colours)}",
        f"names = {gp_string(' '.join(CATEGORIES))}",
        "plot for [i=2:%d] 'ablation_memory.dat' using i:xtic(1) title word(names, i-1) "
        "linecolor rgb word(colours, i-1), \\" % (len(CATEGORIES) + 1),
        "     'ablation_memory.dat' using 0:%d with points pointtype 7 pointsize 1.3 linecolor rgb 'black' "
        "title 'peak (mean over ranks)'" % (len(CATEGORIES) + 2),
    ]
    with open(os.path.join(out, "ablation_memory.gp"), "w") as f:
        f.write("\n".join(gp) + "\n")
    return "ablation_memory.gp"


# Throughput plot geometry (pixels), used to keep labels apart: the terminal
# size, the plot area fixed by the margins below, and the label font's
# (',9') character width and line height, with some slack.
THR_SIZE = (1200, 800)
THR_AREA = (0.08, 0.84, 0.10, 0.88)  # left, right, bottom, top as fractions of the screen
LABEL_CHAR_PX, LABEL_LINE_PX, MARKER_PX = 7.0, 15.0, 8.0


def place_labels(points, names, xlim, ylim):
    """Where to put each point's label so that labels overlap neither each
    other nor other points: beside the point (right, else left), else moved
    up or down by whole lines (then a leader line joins them). Returns per
    point (label x, label y, 'left'|'right' alignment, moved?) in data units."""
    (x0, x1), (y0, y1) = xlim, ylim
    width = (THR_AREA[1] - THR_AREA[0]) * THR_SIZE[0]
    height = (THR_AREA[3] - THR_AREA[2]) * THR_SIZE[1]
    px = [((x - x0) / (x1 - x0) * width, (y - y0) / (y1 - y0) * height) for x, y in points]
    markers = [(a - MARKER_PX, b - MARKER_PX, a + MARKER_PX, b + MARKER_PX) for a, b in px]
    gap = MARKER_PX + 3.0
    placed, result = [], [None] * len(points)

    def clear(box, own):
        xa, ya, xb, yb = box
        if xa < 0 or xb > width or ya < 0 or yb > height:
            return False
        others = [m for k, m in enumerate(markers) if k != own] + placed
        return all(xb <= ma or xa >= mb or yb <= na or ya >= nb for ma, na, mb, nb in others)

    shifts = [0] + [k * sign for k in range(1, 8) for sign in (1, -1)]
    for i in sorted(range(len(points)), key=lambda k: (points[k][0], points[k][1])):
        a, b = px[i]
        w = len(names[i]) * LABEL_CHAR_PX
        choice = None
        for k in shifts:
            cy = b + k * LABEL_LINE_PX
            for side in ("left", "right"):  # gnuplot's alignment: 'left' = text right of the point
                xa = a + gap if side == "left" else a - gap - w
                box = (xa, cy - LABEL_LINE_PX / 2, xa + w, cy + LABEL_LINE_PX / 2)
                if clear(box, i):
                    choice = (box, side, k)
                    break
            if choice:
                break
        if choice is None:  # nowhere clear: beside the point, to the right
            choice = ((a + gap, b - LABEL_LINE_PX / 2, a + gap + w, b + LABEL_LINE_PX / 2), "left", 0)
        box, side, k = choice
        placed.append(box)
        ax = box[0] if side == "left" else box[2]
        ay = (box[1] + box[3]) / 2
        result[i] = (x0 + ax / width * (x1 - x0), y0 + ay / height * (y1 - y0), side, k != 0)
    return result


def write_throughput_plot(out, rows, subtitle):
    ok = [r for r in rows if r["status"] == "ok"]
    failed = [r["name"] for r in rows if r["status"] != "ok"]
    gp = [
        "# tokens/s against the mean per-rank peak, one labelled point per configuration;",
        "# data: ablation_throughput.dat (label_x/label_y/align: where the label goes,",
        "# kept clear of other labels and points; moved = 1: joined to its point by a line)",
        "set terminal pngcairo size %d,%d enhanced font 'Sans,11'" % THR_SIZE,
        "set output 'ablation_throughput.png'",
        "set lmargin at screen %g\nset rmargin at screen %g\nset bmargin at screen %g\nset tmargin at screen %g"
        % THR_AREA,
        f"set title {gp_string('Throughput against memory')} . \"\\n\" . {gp_string(subtitle)} noenhanced",
        "set xlabel 'peak device memory per rank, mean over ranks (MiB)'",
        "set ylabel 'tokens/s (all ranks)'",
        "set grid",
        "set key outside right top noenhanced",
    ]
    if failed:
        note = "not shown (failed): " + ", ".join(failed)
        gp.append(f"set label {gp_string(note)} at screen 0.01, screen 0.02 left textcolor rgb '#c00000' "
                  "noenhanced font ',9'")
    with open(os.path.join(out, "ablation_throughput.dat"), "w") as f:
        f.write("# config peak_mean_MiB tokens_per_s stage label_x label_y align moved\n")
        if ok:
            xs = [r["peak_mean_bytes"] / MIB for r in ok]
            ys = [r["tokens_per_s"] for r in ok]
            xspan = (max(xs) - min(xs)) or max(xs) or 1.0
            yspan = (max(ys) - min(ys)) or max(ys) or 1.0
            xlim = (max(0.0, min(xs) - 0.15 * xspan), max(xs) + 0.3 * xspan)  # room for labels
            ylim = (max(0.0, min(ys) - 0.12 * yspan), max(ys) + 0.12 * yspan)
            labels = place_labels(list(zip(xs, ys)), [r["name"] for r in ok], xlim, ylim)
            for r, x, y, (lx, ly, align, moved) in zip(ok, xs, ys, labels):
                f.write(f"{r['name']} {x:.6f} {y:.6g} {r['stage']} {lx:.6g} {ly:.6g} {align} {int(moved)}\n")
    if ok:
        colours = " ".join(STAGE_COLOURS)
        gp += [
            f"set xrange [{xlim[0]:.6g}:{xlim[1]:.6g}]",
            f"set yrange [{ylim[0]:.6g}:{ylim[1]:.6g}]",
            f"colours = {gp_string(colours)}",
            "plot 'ablation_throughput.dat' using 2:($8 != 0 ? $3 : NaN):($5-$2):($6-$3) with vectors nohead "
            "linecolor rgb '#a0a0a0' notitle, \\",
            "     for [s=0:3] 'ablation_throughput.dat' using ($4 == s ? $2 : NaN):3 with points "
            "pointtype 7 pointsize 1.6 linecolor rgb word(colours, s+1) title sprintf('stage %d', s), \\",
            "     'ablation_throughput.dat' using 5:6:(strcol(7) eq 'left' ? strcol(1) : '') with labels left "
            "font ',9' noenhanced notitle, \\",
            "     'ablation_throughput.dat' using 5:6:(strcol(7) eq 'right' ? strcol(1) : '') with labels right "
            "font ',9' noenhanced notitle",
        ]
    else:
        gp += ["set xrange [0:1]", "set yrange [0:1]",
               "set label 'no configuration ran to the end' at 0.5,0.5 center font ',16'",
               "plot NaN notitle"]
    with open(os.path.join(out, "ablation_throughput.gp"), "w") as f:
        f.write("\n".join(gp) + "\n")
    return "ablation_throughput.gp"


def run_gnuplot(gnuplot, out, script):
    try:
        p = subprocess.run([gnuplot, script], cwd=out, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ToolError(f"gnuplot failed on {os.path.join(out, script)}: {e}")
    png = os.path.join(out, script[:-3] + ".png")
    if p.returncode != 0 or not os.path.exists(png) or os.path.getsize(png) == 0:
        raise ToolError(f"gnuplot failed on {os.path.join(out, script)} (exit {p.returncode}):\n{p.stderr}")


def main(argv):
    args = parse_args(argv)
    out = os.path.abspath(args.out)
    invocation = shlex.join([sys.executable, os.path.abspath(__file__)] + argv)
    cap = parse_size(flag_value(args.extra, "--mem-limit") or "") or None
    configs = [(s, o, r, d) for d in args.dtypes for s in STAGES for o in OFFLOADS for r in args.recomputes]
    try:
        os.makedirs(os.path.join(out, "runs"), exist_ok=True)
        print(f"ablate: {len(configs)} configurations, np {args.np}, {args.steps} steps, zt-train {args.zt_train}"
              + (f", extra flags: {shlex.join(args.extra)}" if args.extra else ""), flush=True)
        rows = [run_config(args, out, s, o, r, d, i + 1, len(configs)) for i, (s, o, r, d) in enumerate(configs)]

        subtitle = (f"np {args.np}, {args.steps} steps"
                    + (f", {shlex.join(args.extra)}" if args.extra else ", default toy GPT"))
        scripts = [write_memory_plot(out, rows, subtitle, cap), write_throughput_plot(out, rows, subtitle)]
        plot_cmds = [f"cd {shlex.quote(out)}"] + [f"{args.gnuplot} {s}" for s in scripts]
        write_csv(os.path.join(out, "ablation.csv"), rows)
        write_markdown(os.path.join(out, "ablation.md"), rows, args, invocation, plot_cmds, cap)
        for s in scripts:
            run_gnuplot(args.gnuplot, out, s)
    except ToolError as e:
        print(f"ablate: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"ablate: error: {e}", file=sys.stderr)
        return 1

    ok = sum(r["status"] == "ok" for r in rows)
    print(f"ablate: {ok} of {len(rows)} configurations ok, {len(rows) - ok} failed")
    if ok == 0:
        print("ablate: warning: no configuration ran to the end; see the console.log of each run under "
              + os.path.join(out, "runs"), file=sys.stderr)
    for what, f in (("table (CSV)", "ablation.csv"), ("table (Markdown)", "ablation.md"),
                    ("memory plot", "ablation_memory.png"), ("throughput plot", "ablation_throughput.png"),
                    ("run logs", "runs")):
        print(f"  {what:<17s} {os.path.join(out, f)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
