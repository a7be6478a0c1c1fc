#!/usr/bin/env python3
"""ZeRO++ side by side on 2 simulated hosts x 2 ranks: baseline stage 3,
hpZ (--reshard-after-forward node), qwZ (--quantize-weights int8), qgZ
(--quantize-grads int4) and all three together, in bf16.

Hosts: launch/sim-hosts (network namespaces on a bridge; needs root), the
inter-host links shaped to --bw and --delay (default 1 Gbit/s, 1 ms, as in
docs/hosts.md; where the kernel has no netem qdisc, sim-hosts applies the
rate alone through tbf and warns that the delay is not applied).

Model (chosen so that communication dominates the step): the toy GPT with
2 layers of d_model 768 (12 heads), 16 tokens per sequence and a
micro-batch of 1 per rank, vocab 64: 14.29 M parameters (28.6 MB in
bf16) against 16 tokens of compute per rank per step, so each step is
mostly the stage-3 all-gathers (forward and backward) and the gradient
reduce-scatter over the 1 Gbit/s link. Gradient buckets travel in bf16
(--reduce-dtype bf16, the bf16 baseline ZeRO++ is measured against) unless
qgZ codes them; qgZ runs
without error feedback (--quantize-grads-feedback 0, the default) unless
extra flags say otherwise. Flags after "--" go to every configuration.

The configurations run in --reps interleaved rounds (baseline, hpZ, qwZ,
qgZ, all three, then again), since 4 ranks share 2 cores and step times
drift from run to run. From every rank's JSONL, over the steps after the
first --skip of each run, all rounds pooled:
- step ms: per step the slowest rank's step_time_s; the median;
- exposed comm: per rank and step, the sum of wait_s of every collective of
  every communicator (comm, comm_secondary, comm_shard_group,
  comm_replicas: the time the rank was blocked in collectives), divided by
  its step_time_s; the mean over ranks, then the median over steps (with
  4 ranks on 2 cores, waiting for a peer that is still computing counts
  too);
- inter-node MB/step (logs): the sum over the 4 ranks of inter_node_bytes
  of every collective (what each rank received from the other host, as the
  collectives' logical traffic, i.e. the coded bytes where a collective is
  quantized); the median over steps;
- link MB/step: the bridge's receive counters of the hosts' veths over the
  whole run divided by its steps (every packet from one host to the other
  enters the bridge once; mpirun's traffic and the first steps included),
  a cross-check of the logs;
- wire/uncompressed: the bytes over uncompressed_bytes of every collective,
  rank 0, summed over the measured steps;
- final loss: rank 0's loss at the last step of the last round;
- speed-up: the baseline's step ms over the configuration's.

usage: sudo python3 bench/bench_zeropp.py [--build build] [--steps 12] [--skip 2] [--reps 2]
                                          [--bw 1gbit] [--delay 1ms] [--timeout 300]
                                          [-- zt-train flags]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("--build", default="build")
ap.add_argument("--steps", type=int, default=12)
ap.add_argument("--skip", type=int, default=2, help="first steps of each run left out of the statistics")
ap.add_argument("--reps", type=int, default=2, help="interleaved rounds over the configurations")
ap.add_argument("--bw", default="1gbit")
ap.add_argument("--delay", default="1ms")
ap.add_argument("--timeout", type=int, default=300, help="seconds one zt-train run may take")
ap.add_argument("extra", nargs="*")
a = ap.parse_args()
if a.steps <= a.skip:
    sys.exit("bench_zeropp: --steps must exceed --skip")

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
zt = os.path.join(root, a.build, "examples", "zt-train")
zt_run = os.path.join(root, "launch", "zt-run")
sim = os.path.join(root, "launch", "sim-hosts")
NP = 4
MODEL = ["--layers", "2", "--d-model", "768", "--heads", "12", "--seq-len", "16", "--micro-batch", "1",
         "--reduce-dtype", "bf16"]
CONFIGS = (
    ("baseline", []),
    ("hpZ", ["--reshard-after-forward", "node"]),
    ("qwZ", ["--quantize-weights", "int8"]),
    ("qgZ", ["--quantize-grads", "int4"]),
    ("hpZ + qwZ + qgZ", ["--reshard-after-forward", "node", "--quantize-weights", "int8", "--quantize-grads", "int4"]),
)
COMMS = ("comm", "comm_secondary", "comm_shard_group", "comm_replicas")

if os.geteuid() != 0:
    sys.exit("bench_zeropp: needs root (launch/sim-hosts makes network namespaces)")
if not os.access(zt, os.X_OK):
    sys.exit(f"bench_zeropp: {zt} is missing; build it first (cmake --build {a.build})")
# launch/sim-hosts names its bridge and namespaces the same whatever --dir,
# and its "up" first removes any that exist: two users at once (another
# bench, the hosts tests) tear down each other's hosts mid-run.
if os.path.exists("/sys/class/net/zt-br0"):
    sys.exit("bench_zeropp: simulated hosts are already up (bridge zt-br0): another user of launch/sim-hosts "
             "(a test or bench) is running; its hosts and these would tear each other down. Try again later.")


def bridge_rx():
    """Bytes the bridge has received from the hosts' veths so far."""
    total = 0
    for dev in ("zt-v1", "zt-v2"):
        try:
            with open(f"/sys/class/net/{dev}/statistics/rx_bytes") as f:
                total += int(f.read())
        except FileNotFoundError:
            raise SystemExit(f"bench_zeropp: the simulated hosts' link {dev} is gone: something else ran "
                             "launch/sim-hosts up/down during this bench; no numbers from this invocation")
    return total


def kill_session(sid):
    """Ends what is left of a run that timed out: every process of the session
    its zt-run started in (mpirun, and the daemons the remote-shell agent
    started in the namespaces, which outlive mpirun when their link goes)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid:
                os.kill(int(pid), 9)
        except (OSError, IndexError, ValueError):
            pass


def collectives(step):
    for key in COMMS:
        for v in step.get(key, {}).values():
            yield v


def run(flags, log_dir, hostfile):
    """One zt-train run on the simulated hosts; returns (per-rank step lists, link bytes)."""
    before = bridge_rx()
    cmd = [zt_run, "-np", str(NP), "--hostfile", hostfile, zt, "--stage", "3", "--dtype", "bf16",
           "--steps", str(a.steps), "--threads", "1", "--quiet", "--trace", "0", "--log-dir", log_dir] \
        + MODEL + flags + a.extra
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=a.timeout)
    except subprocess.TimeoutExpired:
        kill_session(p.pid)
        out, err = p.communicate()
        sys.stderr.write(out[-4000:] + err[-4000:])
        bridge_rx()  # says so if the hosts went away under the run
        raise SystemExit(f"bench_zeropp: zt-train ran past --timeout {a.timeout} s: {' '.join(cmd)}")
    if p.returncode != 0:
        sys.stderr.write(out[-4000:] + err[-4000:])
        bridge_rx()
        raise SystemExit(f"bench_zeropp: zt-train failed (exit {p.returncode}): {' '.join(cmd)}")
    moved = bridge_rx() - before
    ranks = []
    for r in range(NP):
        with open(os.path.join(log_dir, f"rank{r}.jsonl")) as f:
            ranks.append([json.loads(x) for x in f])
    return ranks, moved


hosts_dir = tempfile.mkdtemp(prefix="zt-bench-zeropp-")
up = subprocess.run([sim, "up", "2", "--dir", hosts_dir, "--inter-bw", a.bw, "--inter-delay", a.delay],
                    capture_output=True, text=True)
if up.returncode != 0:
    sys.stderr.write(up.stdout + up.stderr)
    subprocess.run([sim, "down", "--dir", hosts_dir], capture_output=True)
    raise SystemExit(f"bench_zeropp: launch/sim-hosts up failed (exit {up.returncode}); nothing measured")
shaping = f"{a.bw}, {a.delay}"
if "no netem" in up.stderr:
    shaping = f"{a.bw} by tbf; the {a.delay} delay NOT applied (this kernel has no netem qdisc)"

stats = {name: {"step": [], "exposed": [], "inter": [], "link": [], "wire": 0.0, "raw": 0.0, "loss": None}
         for name, _ in CONFIGS}
try:
    hostfile = os.path.join(hosts_dir, "hostfile")
    for rep in range(a.reps):
        for name, flags in CONFIGS:
            with tempfile.TemporaryDirectory() as d:
                ranks, moved = run(flags, d, hostfile)
            s = stats[name]
            n = min(len(x) for x in ranks)
            for i in range(a.skip, n):
                per_rank = [x[i] for x in ranks]
                s["step"].append(max(st["step_time_s"] for st in per_rank))
                s["exposed"].append(statistics.mean(
                    sum(c["wait_s"] for c in collectives(st)) / st["step_time_s"] for st in per_rank))
                s["inter"].append(sum(c["inter_node_bytes"] for st in per_rank for c in collectives(st)))
                for c in collectives(ranks[0][i]):
                    s["wire"] += c["bytes"]
                    s["raw"] += c["uncompressed_bytes"]
            s["link"].append(moved / n)
            s["loss"] = ranks[0][-1]["loss"]
            print(f"  round {rep + 1}/{a.reps} {name}: step ms (median so far) {statistics.median(s['step']) * 1e3:.1f}",
                  file=sys.stderr, flush=True)
finally:
    subprocess.run([sim, "down", "--dir", hosts_dir], capture_output=True)

print(f"\n2 simulated hosts x 2 ranks, links {shaping}; stage 3, bf16, "
      f"{' '.join(MODEL)}{' ' + ' '.join(a.extra) if a.extra else ''}; "
      f"{a.steps} steps x {a.reps} round(s), first {a.skip} of each run skipped\n")
print("| configuration | flags | step ms (median) | exposed comm | inter-node MB/step (logs) | link MB/step "
      "| wire/uncompressed | final loss | speed-up vs baseline |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
base = statistics.median(stats["baseline"]["step"])
for name, flags in CONFIGS:
    s = stats[name]
    ms = statistics.median(s["step"])
    print(f"| {name} | {' '.join('`' + f + '`' for f in [' '.join(flags)] if f) or '-'} | {ms * 1e3:.1f} "
          f"| {statistics.median(s['exposed']) * 100:.0f}% | {statistics.median(s['inter']) / 1e6:.2f} "
          f"| {statistics.mean(s['link']) / 1e6:.2f} | {s['wire'] / s['raw']:.3f} | {s['loss']:.6f} "
          f"| {base / ms:.2f}x |", flush=True)
