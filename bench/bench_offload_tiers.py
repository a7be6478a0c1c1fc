#!/usr/bin/env python3
"""The offload tiers side by side on one model at np 2 (ZeRO-Infinity's
question: what each tier frees on the device and what it costs), every run
on a modelled PCIe 4.0 link (--link pcie4; the CPU backend):

  none          stage 3, nothing offloaded
  optimizer     + --offload cpu (master and Adam state in the host pool)
  + params      + --offload-params cpu (the parameter shards too)
  + recompute   + --recompute full (what the next tier needs, on its own)
  + activations + --recompute full --offload-activations cpu (the kept block inputs too)
  nvme          --offload nvme --offload-params nvme (state and shards in a swap file),
                with the kept inputs offloaded as above

per rank: the device and host-pool peaks, the swap file, the median step
time, the host<->device transfer per step and its exposed part, and the
NVMe bytes per step. Then, for each tier, the largest model (in layers of
the given width) that zt-plan --max-layers says fits --mem-limit
--device-mem (replayed; the NVMe tier by the closed form), confirmed by
training it for 2 steps under --mem-limit and the next size refused.

usage: bench/bench_offload_tiers.py [--build build] [--np 2] [--steps 6] [--device-mem 48MiB]
       [--nvme-path DIR] [-- zt-train flags]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("--build", default="build")
ap.add_argument("--np", type=int, default=2)
ap.add_argument("--steps", type=int, default=6)
ap.add_argument("--device-mem", default="48MiB")
ap.add_argument("--nvme-path", default=None, help="folder for the swap files (default: a temporary one)")
ap.add_argument("--only-largest", action="store_true", help="skip the per-tier table")
ap.add_argument("extra", nargs="*")
a = ap.parse_args()
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
zt = os.path.join(root, a.build, "examples", "zt-train")
zt_plan = os.path.join(root, a.build, "examples", "zt-plan")
swap = a.nvme_path or tempfile.mkdtemp(prefix="zt-bench-swap-")
ACT = ["--recompute", "full", "--offload-activations", "cpu"]
TIERS = [("none", []), ("optimizer", ["--offload", "cpu"]),
         ("+ params", ["--offload", "cpu", "--offload-params", "cpu"]),
         ("+ recompute full (no activation offload)", ["--offload", "cpu", "--offload-params", "cpu",
                                                       "--recompute", "full"]),
         ("+ activations", ["--offload", "cpu", "--offload-params", "cpu"] + ACT),
         ("nvme", ["--offload", "nvme", "--offload-params", "nvme", "--nvme-path", swap,
                   "--nvme-block-size", "256KiB"] + ACT)]
COMMON = ["--stage", "3", "--threads", "1", "--quiet", "--trace", "0", "--link", "pcie4"]


def run(flags, d, check=True):
    cmd = [os.path.join(root, "launch", "zt-run"), "-np", str(a.np), zt] + COMMON + flags + ["--log-dir", d]
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def plan_peak(flags, layers):
    p = subprocess.run([zt_plan, "--world", str(a.np), "--json"] + COMMON + flags + ["--layers", str(layers)],
                       capture_output=True, text=True, check=True)
    return json.loads(p.stdout)


def mib(x):
    return f"{x / 2**20:.1f}"


print(f"model: {' '.join(a.extra) or 'zt-train defaults'}; np {a.np}; stage 3; --link pcie4\n")
print("| tier | device peak MiB | host peak MiB | NVMe file MiB | step ms (median) | link transfer ms/step | exposed ms/step "
      "| NVMe read / written MiB/step |")
print("|---|---|---|---|---|---|---|---|")
for name, tier in [] if a.only_largest else TIERS:
    with tempfile.TemporaryDirectory() as d:
        run(tier + ["--steps", str(a.steps)] + a.extra, d)
        s = json.load(open(os.path.join(d, "summary.json")))
        steps = [json.loads(x) for x in open(os.path.join(d, "rank0.jsonl"))][1:]
        ms = statistics.median(x["step_time_s"] for x in steps) * 1e3
        tr = statistics.mean(x["link"]["h2d_transfer_s"] + x["link"]["d2h_transfer_s"] for x in steps) * 1e3
        ex = statistics.mean(x["link"]["h2d_exposed_s"] + x["link"]["d2h_exposed_s"] for x in steps) * 1e3
        nv = steps[-1].get("nvme")
        r = s["ranks"][0]
        io = f"{mib(nv['read_bytes'])} / {mib(nv['write_bytes'])}" if nv else "-"
        print(f"| {name} | {mib(r['peak_bytes'])} | {mib(r['host_peak_bytes'])} | "
              f"{mib(nv['file_bytes']) if nv else '-'} | {ms:.1f} | {tr:.2f} | {ex:.2f} | {io} |", flush=True)

print(f"\nlargest model that fits --mem-limit {a.device_mem} per rank (layers of this width; zt-plan --max-layers, "
      "then trained):\n")
print("| tier | layers (zt-plan) | how | parameters | planned reserved MiB | trains under the cap | one layer more |")
print("|---|---|---|---|---|---|---|")


def trains(flags, layers):
    with tempfile.TemporaryDirectory() as d:
        return run(flags + ["--layers", str(layers), "--steps", "2", "--mem-limit", a.device_mem], d,
                   check=False).returncode


for name, tier in TIERS:
    flags = tier + a.extra
    p = subprocess.run([zt_plan, "--world", str(a.np), "--json", "--max-layers", "--mem-limit", a.device_mem] + COMMON +
                       flags, capture_output=True, text=True)
    if p.returncode not in (0, 1):
        print(f"| {name} | zt-plan failed: {p.stderr.strip()[-200:]} | | | | | |")
        continue
    layers = json.loads(p.stdout)["max_layers"]
    if layers == 0:
        print(f"| {name} | none fits | | | | | |")
        continue
    at = plan_peak(flags + ["--mem-limit", a.device_mem], layers)
    er = at["expected_reserved"]
    rc, over = trains(flags, layers), trains(flags, layers + 1)
    print(f"| {name} | {layers} | {er['how']} | {at['params'] / 1e6:.2f} M | {mib(er['bytes'])} | "
          f"{'yes' if rc == 0 else f'no (exit {rc})'} | {'out of memory (exit 3)' if over == 3 else f'exit {over}'} |",
          flush=True)
