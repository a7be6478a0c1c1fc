#!/usr/bin/env python3
"""Several hosts, simulated: 2 hosts x 2 ranks (launch/sim-hosts, network
namespaces; needs root) with the inter-host links shaped (default 1 Gbit/s
and 1 ms each way), at stage 3: world sharding against --shard-group node and against
--reshard-after-forward node (hpZ).
Per configuration: the median step time, the time the ranks waited in
collectives per step (the JSONL's comm wait_s, every communicator), and the
bytes that crossed between the hosts per step, read from the bridge side of
the hosts' veth interfaces (every packet from one host to the other enters
the bridge once), with mpirun's own traffic in it.

usage: sudo bench/bench_hosts.py [--build build] [--steps 8] [--bw 1gbit] [--delay 1ms] [-- zt-train flags]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("--build", default="build")
ap.add_argument("--steps", type=int, default=8)
ap.add_argument("--bw", default="1gbit")
ap.add_argument("--delay", default="1ms")
ap.add_argument("extra", nargs="*")
a = ap.parse_args()
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
zt = os.path.join(root, a.build, "examples", "zt-train")
sim = os.path.join(root, "launch", "sim-hosts")
hosts_dir = tempfile.mkdtemp(prefix="zt-bench-hosts-")


def bridge_rx():
    """Bytes the bridge has received from the hosts' veths so far."""
    total = 0
    for dev in ("zt-v1", "zt-v2"):
        with open(f"/sys/class/net/{dev}/statistics/rx_bytes") as f:
            total += int(f.read())
    return total


def comm_wait(step):
    return sum(v["wait_s"] for key in ("comm", "comm_shard_group", "comm_replicas") for v in step.get(key, {}).values())


subprocess.run([sim, "up", "2", "--dir", hosts_dir, "--inter-bw", a.bw, "--inter-delay", a.delay], check=True,
               capture_output=True)
try:
    print(f"2 simulated hosts x 2 ranks, links {a.bw}, {a.delay}; stage 3; {' '.join(a.extra) or 'defaults'}\n")
    print("| sharding | step ms (median) | comm wait ms/step (rank 0) | inter-host MB/step |")
    print("|---|---|---|---|")
    for name, flags in (("world", []), ("--shard-group node", ["--shard-group", "node"]),
                        ("--reshard-after-forward node", ["--reshard-after-forward", "node"])):
        with tempfile.TemporaryDirectory() as d:
            before = bridge_rx()
            cmd = [os.path.join(root, "launch", "zt-run"), "-np", "4", "--hostfile", os.path.join(hosts_dir, "hostfile"),
                   zt, "--stage", "3", "--steps", str(a.steps), "--threads", "1", "--quiet", "--trace", "0",
                   "--log-dir", d] + flags + a.extra
            subprocess.run(cmd, check=True, capture_output=True)
            moved = bridge_rx() - before
            steps = [json.loads(x) for x in open(os.path.join(d, "rank0.jsonl"))]
            ms = statistics.median(x["step_time_s"] for x in steps[1:]) * 1e3
            wait = statistics.mean(comm_wait(x) for x in steps[1:]) * 1e3
            print(f"| {name} | {ms:.1f} | {wait:.1f} | {moved / a.steps / 1e6:.2f} |", flush=True)
finally:
    subprocess.run([sim, "down", "--dir", hosts_dir], capture_output=True)
