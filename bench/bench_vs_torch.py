#!/usr/bin/env python3
"""zerotrain's CPU backend against PyTorch on the same model, side by side in
one run, alternating: zerotrain stage 3 against FSDP2 (gloo), zerotrain
stage 0 against DDP (gloo), np 2, one thread per rank, fp32, tied head,
AdamW; median step time and peak RSS per rank, and zerotrain's achieved
GFLOP/s per rank against the single-thread sgemm peak measured in the same
run (bench_sgemm, best of 5 on GPT-2 small's shapes).

Fair to both sides: the same parameter count (asserted) and so the same
FLOPs per step; PyTorch eager with torch.get_num_threads() == 1, causal
SDPA and fused AdamW; the environment's OPENBLAS_CORETYPE for both.

usage: bench/bench_vs_torch.py [--build build] [--venv .venv-torch] [--reps 2]
                               [--steps 12] [--gpt2-steps 4] [--models small,gpt2]
PyTorch is installed from PyPI into the virtual environment --venv when it
is not there yet (not part of CI).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = {  # L, C, NH, T, V, B
    "small": (4, 256, 4, 128, 512, 8),
    "gpt2": (12, 768, 12, 256, 50304, 4),
}


def venv_python(venv):
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    if subprocess.run([py, "-c", "import torch"], capture_output=True).returncode != 0:
        subprocess.run([py, "-m", "pip", "install", "-q", "torch", "numpy"], check=True)
    return py


def zt_params(L, C, T, V):
    return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C


def run_zt(build, stage, shape, steps):
    L, C, NH, T, V, B = shape
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([os.path.join(ROOT, "launch", "zt-run"), "-np", "2", os.path.join(build, "examples", "zt-train"),
                        "--layers", str(L), "--d-model", str(C), "--heads", str(NH), "--seq-len", str(T),
                        "--vocab", str(V), "--micro-batch", str(B), "--tied", "1", "--stage", str(stage),
                        "--threads", "1", "--steps", str(steps), "--quiet", "--trace", "0", "--log-dir", d],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        s = json.load(open(os.path.join(d, "summary.json")))
    return {"step_time_s": s["step_time_s"], "peak_rss_bytes": max(r["os_peak_bytes"] for r in s["ranks"]),
            "params": s["params"]}


def run_torch(py, mode, shape, steps):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([py, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29517",
                        os.path.join(ROOT, "bench", "torch_gpt.py"), mode] + [str(x) for x in shape] + [str(steps)],
                       capture_output=True, text=True, env=env, check=True)
    r = json.loads([line for line in p.stdout.splitlines() if line.startswith("{")][-1])
    assert r["threads"] == 1, r
    return r


def flops_per_step(shape):
    """Forward + backward, per rank: 6 x params in the GEMMs and the head,
    plus attention's scores and weighted sums (12 L T C per token)."""
    L, C, NH, T, V, B = shape
    dense = L * 12 * C * C + V * C
    return B * T * (6 * dense + 12 * L * T * C)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--venv", default=os.path.join(ROOT, ".venv-torch"))
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--gpt2-steps", type=int, default=4)
    ap.add_argument("--models", default="small,gpt2")
    a = ap.parse_args()
    py = venv_python(a.venv)
    sg = subprocess.run([os.path.join(a.build, "bench", "bench_sgemm")], capture_output=True, text=True, check=True)
    peak = float(sg.stdout.strip().splitlines()[-1].split()[-1])
    print(f"sgemm peak (one thread, best of 5): {peak:.1f} GFLOP/s; OPENBLAS_CORETYPE="
          f"{os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    print("| model | zerotrain stage 3 | FSDP2 | ratio | zerotrain stage 0 | DDP | ratio | zt GFLOP/s per rank "
          "(% of sgemm) | peak RSS zt / FSDP2 / DDP (MiB) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in a.models.split(","):
        shape = MODELS[name]
        steps = a.steps if name == "small" else a.gpt2_steps
        runs = {k: [] for k in ("zt3", "fsdp2", "zt0", "ddp")}
        for _ in range(a.reps):  # alternating, so drift hits both sides
            runs["zt3"].append(run_zt(a.build, 3, shape, steps))
            runs["fsdp2"].append(run_torch(py, "fsdp2", shape, steps))
            runs["zt0"].append(run_zt(a.build, 0, shape, steps))
            runs["ddp"].append(run_torch(py, "ddp", shape, steps))
        assert runs["zt3"][0]["params"] == runs["fsdp2"][0]["params"] == zt_params(*shape[:2], *shape[3:5]), \
            (runs["zt3"][0]["params"], runs["fsdp2"][0]["params"])
        t = {k: statistics.median(r["step_time_s"] for r in v) for k, v in runs.items()}
        rss = {k: max(r["peak_rss_bytes"] for r in v) / 2**20 for k, v in runs.items()}
        gf = flops_per_step(shape) / t["zt3"] / 1e9
        print(f"| {name} | {t['zt3']*1e3:.0f} ms | {t['fsdp2']*1e3:.0f} ms | {t['zt3']/t['fsdp2']:.2f} | "
              f"{t['zt0']*1e3:.0f} ms | {t['ddp']*1e3:.0f} ms | {t['zt0']/t['ddp']:.2f} | {gf:.1f} ({gf/peak:.0%}) | "
              f"{rss['zt3']:.0f} / {rss['fsdp2']:.0f} / {rss['ddp']:.0f} |")


if __name__ == "__main__":
    main()
