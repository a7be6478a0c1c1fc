#!/usr/bin/env python3
"""Several hosts, under real mpirun, run by CTest: the collective watchdog
on one host (a rank that stops answering: every rank stops, the message
names the collective and the peer group), and, where root and network
namespaces are available, simulated hosts (launch/sim-hosts): node-aware
ranks and the imbalance by node, and the inter-host link taken down in the
middle of a run. Cases that need namespaces exit 77 (CTest's skip) with the
reason when they are not available.

usage: zt_hosts_test.py CASE ZT_TRAIN ZT_RUN
"""
import json
import os
import subprocess
import sys
import time

from zt_harness import launch, losses, main, plan, train

SMALL = ["--threads", "1", "--quiet", "--trace", "0", "--layers", "2", "--d-model", "64", "--heads", "4",
         "--seq-len", "32", "--vocab", "64", "--stage", "3"]
SKIP = 77


def sim_hosts(ctx):
    return os.path.join(os.path.dirname(ctx["zt_run"]), "sim-hosts")


def hosts_up(ctx, n):
    """n simulated hosts of 2 slots under WORK/hosts, or exit 77 saying why not."""
    if os.geteuid() != 0:
        print("skipped: simulated hosts need root (network namespaces)")
        sys.exit(SKIP)
    d = os.path.join(ctx["work"], "hosts")
    p = subprocess.run([sim_hosts(ctx), "up", str(n), "--dir", d], capture_output=True, text=True)
    if p.returncode != 0:
        subprocess.run([sim_hosts(ctx), "down", "--dir", d], capture_output=True)
        print(f"skipped: cannot make simulated hosts here: {p.stderr.strip()[-300:]}")
        sys.exit(SKIP)
    return os.path.join(d, "hostfile")


def hosts_down(ctx):
    subprocess.run([sim_hosts(ctx), "down", "--dir", os.path.join(ctx["work"], "hosts")], capture_output=True)


def case_watchdog(ctx):
    """One host, np 3: rank 1 stops answering before step 2's optimizer
    (a test hook); with --collective-timeout 3 the others' collective
    fails, each names it and the peer group and aborts the job: exit 1,
    well within 40 s, no process left. The negative twin: the same timeout
    on a healthy run changes nothing (bitwise the run without it)."""
    t0 = time.time()
    p = launch(ctx, 3, SMALL + ["--steps", "4", "--collective-timeout", "3"], expect_rc=None,
               env={"ZT_TEST_STALL": "1:2"})
    took = time.time() - t0
    assert p.returncode != 0 and took < 40, (p.returncode, took)
    assert "collective watchdog: all-gather of the values summed over the ranks" in p.stderr, p.stderr[-1500:]
    assert "over the world (3 rank(s)" in p.stderr and "within 3 s" in p.stderr, p.stderr[-1500:]
    left = subprocess.run(["pgrep", "-f", "collective-timeout 3"], capture_output=True, text=True).stdout.split()
    assert not left, left
    a = train(ctx, 3, SMALL + ["--steps", "3"], "plain")
    b = train(ctx, 3, SMALL + ["--steps", "3", "--collective-timeout", "3"], "watched")
    assert losses(a) == losses(b) and a["params_digest"] == b["params_digest"]
    print(f"ok: a stalled rank stops every rank in {took:.1f} s (exit {p.returncode}), naming the collective; "
          "a healthy run under the watchdog is bitwise the same")


def case_watchdog_cuda_emu(ctx):
    """--device cuda on the emulator, np 2 over (emulated) NCCL: rank 1
    stalls before step 2's forward, so rank 0's all-gather of the
    embedding, queued on a stream, never completes; with
    --collective-timeout 3 rank 0's device sync times out, it names the
    collective still in flight, aborts the NCCL communicator and the job:
    exit non-zero within 40 s."""
    env = {"ZT_EMU_DEVICES": "2", "ZT_TEST_STALL": "1:2:forward"}
    t0 = time.time()
    p = launch(ctx, 2, SMALL + ["--device", "cuda", "--steps", "4", "--collective-timeout", "3"], expect_rc=None,
               env=env)
    took = time.time() - t0
    assert p.returncode != 0 and took < 40, (p.returncode, took)
    assert "collective watchdog: the device's stream did not finish within 3 s" in p.stderr, p.stderr[-1500:]
    assert "waits on all_gather of unit embedding on NCCL over the world (2 rank(s)" in p.stderr, p.stderr[-1500:]
    print(f"ok: cuda emulator: a stalled peer's NCCL all-gather is named and the job aborted in {took:.1f} s")


def case_sim_hosts(ctx):
    """2 simulated hosts x 2 ranks through launch/zt-run --hostfile: 2
    nodes, local ranks 0-1 on each, each rank's host named; the imbalance
    grouped by node; losses and parameters bitwise those of np 4 on one
    host (the same world size)."""
    hostfile = hosts_up(ctx, 2)
    try:
        s = train(ctx, 4, SMALL + ["--steps", "3"], "local")
        d = os.path.join(ctx["work"], "two")
        cmd = [ctx["zt_run"], "-np", "4", "--hostfile", hostfile, ctx["zt"]] + SMALL + ["--steps", "3", "--log-dir", d]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
        with open(os.path.join(d, "summary.json")) as f:
            t = json.load(f)
    finally:
        hosts_down(ctx)
    assert t["nodes"] == 2 and s["nodes"] == 1, (t["nodes"], s["nodes"])
    where = [(r["host"], r["node"], r["local_rank"]) for r in t["ranks"]]
    assert where == [("zt-h1", 0, 0), ("zt-h1", 0, 1), ("zt-h2", 1, 0), ("zt-h2", 1, 1)], where
    assert [n["ranks"] for n in t["imbalance_by_node"]] == [[0, 1], [2, 3]], t["imbalance_by_node"]
    assert t["losses"] == s["losses"] and t["params_digest"] == s["params_digest"]
    print("ok: 2 simulated hosts x 2 ranks: 2 nodes, local ranks 0-1 on each, bitwise the one-host run")


def case_hybrid_node(ctx):
    """2 simulated hosts x 2 ranks, --shard-group node (groups of a node's 2
    ranks, replicated across the hosts): fp32 stages 0-3 bitwise equal,
    every rank's stage-3 optimizer state that of a 2-rank group (half the
    world-sharded one's x 2); its checkpoint resumes at np 3 on one host,
    bitwise in parameters."""
    hostfile = hosts_up(ctx, 2)
    ckpt = os.path.join(ctx["work"], "ckpt")
    runs = []
    try:
        for stage in range(4):
            d = os.path.join(ctx["work"], f"node-s{stage}")
            save = ["--save-every", "3", "--save-dir", ckpt] if stage == 3 else []
            cmd = [ctx["zt_run"], "-np", "4", "--hostfile", hostfile, ctx["zt"]] + SMALL + [
                "--stage", str(stage), "--steps", "3", "--shard-group", "node", "--log-dir", d] + save
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            assert p.returncode == 0, p.stderr[-2000:]
            with open(os.path.join(d, "summary.json")) as f:
                runs.append(json.load(f))
    finally:
        hosts_down(ctx)
    for s in runs[1:]:
        assert s["losses"] == runs[0]["losses"] and s["params_digest"] == runs[0]["params_digest"]
    world = train(ctx, 4, SMALL + ["--steps", "1"], "world")
    assert runs[3]["ranks"][0]["peak_by_category"]["optimizer"] == 2 * world["ranks"][0]["peak_by_category"]["optimizer"]
    r = train(ctx, 3, SMALL + ["--steps", "3", "--resume", ckpt], "resumed")
    assert r["params_digest"] == runs[3]["params_digest"], (r["params_digest"], runs[3]["params_digest"])
    print("ok: --shard-group node on 2 simulated hosts x 2: stages 0-3 bitwise, state of a 2-rank group; its "
          "checkpoint resumes at np 3 on one host bitwise in parameters")


def bridge_rx():
    """Bytes the bridge has received from the simulated hosts so far: every
    byte one host sends the other enters the bridge once."""
    total = 0
    for dev in ("zt-v1", "zt-v2"):
        with open(f"/sys/class/net/{dev}/statistics/rx_bytes") as f:
            total += int(f.read())
    return total


def link_bytes(steps, key, kind=None):
    """Inter-node bytes a rank received per step in communicator `key`'s
    collectives (of one kind, or all)."""
    out = []
    for x in steps:
        comm = x.get(key, {})
        out.append(sum(v["inter_node_bytes"] for k, v in comm.items() if kind in (None, k)))
    return out


def case_link_bytes(ctx):
    """2 simulated hosts x 2 ranks at stage 3: with --shard-group node the
    parameter all-gathers move 0 inter-node bytes, and the inter-node bytes
    per step equal the closed form of the replicas' gradient sum (each rank
    receives the other host's sums of its slices: padded / 2 x 4 bytes)
    within 1%; over the whole run the JSONL's inter-node bytes of every rank
    agree with the bridge's counters within 5%. World sharding's are
    reported beside them; zt-plan --nodes 2 gives both per step within 1%."""
    hostfile = hosts_up(ctx, 2)
    runs = {}
    try:
        for name, flags in (("node", ["--shard-group", "node"]), ("world", [])):
            d = os.path.join(ctx["work"], name)
            before = bridge_rx()
            cmd = [ctx["zt_run"], "-np", "4", "--hostfile", hostfile, ctx["zt"]] + SMALL + [
                "--steps", "20", "--log-dir", d] + flags
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            assert p.returncode == 0, p.stderr[-2000:]
            moved = bridge_rx() - before
            steps = []
            for r in range(4):
                with open(os.path.join(d, f"rank{r}.jsonl")) as f:
                    steps.append([json.loads(line) for line in f])
            runs[name] = (moved, steps)
    finally:
        hosts_down(ctx)
    moved, steps = runs["node"]
    padded = sum(units_padded(2))
    want = padded // 2 * 4  # the other replica's sums of this rank's slices, fp32
    for r in range(4):
        gathers = link_bytes(steps[r], "comm_shard_group", "all_gather")
        assert all(b == 0 for b in gathers), gathers
        per_step = [a + b + c for a, b, c in zip(link_bytes(steps[r], "comm_shard_group"),
                                                 link_bytes(steps[r], "comm_replicas"), link_bytes(steps[r], "comm"))]
        assert all(abs(b - want) <= 0.01 * want for b in per_step), (r, per_step[:3], want)
    logged = sum(sum(link_bytes(s, k)) for s in steps for k in ("comm", "comm_shard_group", "comm_replicas"))
    assert abs(moved - logged) <= 0.05 * logged, (moved, logged)
    wmoved, wsteps = runs["world"]
    wlogged = sum(sum(link_bytes(s, "comm")) for s in wsteps)
    # zt-plan --nodes 2: each rank's inter-node bytes per step, both ways of sharding
    for name, flags, got in (("node", ["--shard-group", "2"], per_step[-1]),
                             ("world", [], link_bytes(wsteps[0], "comm")[-1])):
        planned = plan(ctx, 4, ["--nodes", "2"] + SMALL + flags)["inter_node_bytes_per_step"]
        assert abs(planned - got) <= 0.01 * got, (name, planned, got)
    print(f"ok: --shard-group node: 0 inter-node bytes in the parameter all-gathers, {per_step[-1] / 1e6:.3f} MB per "
          f"rank and step (closed form {want / 1e6:.3f}); the run's {logged / 1e6:.1f} MB logged against "
          f"{moved / 1e6:.1f} MB on the bridge. World sharding: {wlogged / 1e6:.1f} MB logged, {wmoved / 1e6:.1f} MB "
          "on the bridge")


def case_hpz(ctx):
    """2 simulated hosts x 2 ranks, stage 3 with world sharding and
    --reshard-after-forward node (hpZ): bitwise the run without it; the
    backward all-gathers (in the node's secondary group) move 0 inter-node
    bytes while the forward ones (over the world) do, about half of what
    the world's all-gathers move without it."""
    hostfile = hosts_up(ctx, 2)
    runs = {}
    try:
        for name, flags in (("plain", []), ("hpz", ["--reshard-after-forward", "node"])):
            d = os.path.join(ctx["work"], name)
            cmd = [ctx["zt_run"], "-np", "4", "--hostfile", hostfile, ctx["zt"]] + SMALL + [
                "--steps", "4", "--log-dir", d] + flags
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            assert p.returncode == 0, p.stderr[-2000:]
            with open(os.path.join(d, "summary.json")) as f:
                s = json.load(f)
            with open(os.path.join(d, "rank0.jsonl")) as f:
                s["steps"] = [json.loads(line) for line in f]
            runs[name] = s
    finally:
        hosts_down(ctx)
    plain, hpz = runs["plain"], runs["hpz"]
    assert hpz["losses"] == plain["losses"] and hpz["params_digest"] == plain["params_digest"]
    for x, y in zip(hpz["steps"][1:], plain["steps"][1:]):
        back = x["comm_secondary"]["all_gather"]
        assert back["calls"] > 0 and back["inter_node_bytes"] == 0 and back["intra_node_bytes"] > 0, back
        fwd, world = x["comm"]["all_gather"]["inter_node_bytes"], y["comm"]["all_gather"]["inter_node_bytes"]
        assert 0 < fwd < 0.6 * world, (fwd, world)
    print(f"ok: --reshard-after-forward node: bitwise; backward all-gathers 0 inter-node bytes, forward "
          f"{fwd / 1e6:.3f} MB against {world / 1e6:.3f} MB per step without it")


def units_padded(G, layers=2, C=64, T=32, V=64):
    """SMALL's units padded for G-rank groups (numel up to a multiple of G x 16)."""
    units = [V * C + T * C] + [12 * C * C + 13 * C] * layers + [2 * C + V * C]
    q = G * 16 if G > 1 else 1
    return [(n + q - 1) // q * q for n in units]


def case_link_down(ctx):
    """2 simulated hosts x 2 ranks, --collective-timeout 10: the inter-host
    link is taken down in the middle of the run; every rank's process ends
    within 40 s, the ranks name the collective they waited on, the job
    exits non-zero, and once the link is back (so that mpirun can reach
    the other host's daemon to finish) no process is left."""
    hostfile = hosts_up(ctx, 2)
    marker = "--steps 100000"
    cmd = [ctx["zt_run"], "-np", "4", "--hostfile", hostfile, ctx["zt"]] + SMALL + marker.split() + [
        "--collective-timeout", "10"]
    try:
        job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(8)  # past start-up, into the steps
        assert job.poll() is None, job.communicate()[1][-1500:]
        subprocess.run(["ip", "link", "set", "zt-v2", "down"], check=True)
        t0 = time.time()
        while time.time() - t0 < 40:
            ranks = subprocess.run(["pgrep", "-f", f"zt-train .*{marker}"], capture_output=True, text=True).stdout
            if not [x for x in ranks.split() if not _is_mpirun(x)]:
                break
            time.sleep(1)
        gone = time.time() - t0
        subprocess.run(["ip", "link", "set", "zt-v2", "up"], check=True)
        try:
            _, err = job.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            job.kill()
            _, err = job.communicate()
            raise AssertionError("mpirun did not end within 120 s of the link's return")
    finally:
        hosts_down(ctx)
    assert gone < 40, f"ranks still running {gone:.0f} s after the link went down"
    assert job.returncode != 0, job.returncode
    assert "collective watchdog:" in err and "did not complete within 10 s" in err, err[-2000:]
    assert "over the world (4 rank(s)" in err and "over 2 nodes" in err, err[-2000:]
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    assert not left, left
    print(f"ok: with the inter-host link down every rank ended in {gone:.0f} s naming its collective; "
          f"the job exited {job.returncode}; no process left")


def _is_mpirun(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip() in ("mpirun", "orterun")
    except OSError:
        return True  # gone


CASES = {"watchdog": case_watchdog, "watchdog_cuda_emu": case_watchdog_cuda_emu, "sim_hosts": case_sim_hosts, "hybrid_node": case_hybrid_node,
         "link_bytes": case_link_bytes, "hpz": case_hpz, "link_down": case_link_down}

if __name__ == "__main__":
    main(CASES, "hosts")
