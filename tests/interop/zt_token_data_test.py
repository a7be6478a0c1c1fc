#!/usr/bin/env python3
"""Token files as data (--data PATH|GLOB, --data-dtype, --val-data,
docs/data.md): every step's stream position and tokens digest are checked
against what this script computes from the files itself, so a case proves
which tokens each step read.

usage: zt_token_data_test.py CASE ZT_TRAIN ZT_RUN
  formats  llm.c v1 (uint16) shards through a glob, llm.c v7 (uint32), flat
           uint16 and uint32 (--data-dtype): np 1 at micro-batch 4 and np 2
           at micro-batch 2 read the same tokens and train alike
  uneven   np 3 with grad-accum 2 (the row formula's micro-batch term)
  resume   a checkpoint of np 2 resumed at np 2 (bitwise) and at np 3 (the
           stream goes on where np 2 left it)
  epochs   a set shorter than the run: the stream wraps, logged
  eval     --val-data every 2 steps: val losses logged, training bitwise
           unchanged, stage 3 with recomputation
  bad      malformed files and flags (--data and --val-data): a clear
           message naming file and offset, exit 2, and ranks given
           different data refused"""
import json
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mpi"))
import zt_harness as h  # noqa: E402

VOCAB = 96
T = 16
MODEL = ["--layers", "1", "--d-model", "32", "--heads", "4", "--seq-len", str(T), "--vocab", str(VOCAB),
         "--threads", "1", "--quiet", "--warmup", "2"]
M64 = (1 << 64) - 1


def tokens_of(n, seed):
    """A learnable stream: runs of consecutive tokens from seeded starts."""
    out, x = [], seed
    while len(out) < n:
        x = (x * 6364136223846793005 + 1442695040888963407) & M64
        start = (x >> 33) % VOCAB
        out += [(start + i) % VOCAB for i in range(7)]
    return out[:n]


def write_llmc(path, toks, version=1, count=None):
    magic, fmt = (20240520, "H") if version == 1 else (20240801, "I")
    header = [0] * 256
    header[0], header[1], header[2] = magic, version, len(toks) if count is None else count
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{len(toks)}{fmt}", *toks))


def write_flat(path, toks, fmt):
    with open(path, "wb") as f:
        f.write(struct.pack(f"<{len(toks)}{fmt}", *toks))


def token_hash(i, tok):
    """zt_data_token_hash: splitmix64's finalizer, upper half."""
    z = (i ^ (tok * 0xD1B54A32D192ED03)) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    z ^= z >> 31
    return z >> 32


def expected_digest(stream, p, n):
    return sum(token_hash(i, stream[i % len(stream)]) for i in range(p, p + n)) & 0xFFFFFFFF


def rows_digest(stream, p, world, rank, accum, B):
    """One rank's rows of a step by the row rule: inputs at their stream
    index, targets at the next one with the top bit set."""
    n, total = len(stream), 0
    for m in range(accum):
        for b in range(B):
            at = p + ((m * world + rank) * B + b) * T
            for t in range(T):
                total += token_hash(at + t, stream[(at + t) % n])
                total += token_hash((at + t + 1) | (1 << 63), stream[(at + t + 1) % n])
    return total & 0xFFFFFFFF


def check_stream(s, stream, tokens_per_step, first_step=0, first_position=0, accum=1):
    """Every step's position and digests: the world's (the same on every
    rank) and each rank's own rows, against the files."""
    world = len(s["steps"])
    B = tokens_per_step // (world * accum * T)
    for k, line in enumerate(s["steps"][0]):
        p = first_position + k * tokens_per_step
        d = line["data"]
        assert line["step"] == first_step + k + 1, line["step"]
        assert d["position"] == p, (line["step"], d, p)
        assert d["epoch"] == p // len(stream), (d, len(stream))
        want = expected_digest(stream, p, tokens_per_step)
        assert d["tokens_digest"] == f"{want:08x}", (line["step"], d, f"{want:08x}")
        for r, rank_lines in enumerate(s["steps"]):
            theirs = rank_lines[k]["data"]
            assert (theirs["position"], theirs["tokens_digest"]) == (p, d["tokens_digest"]), (r, theirs, d)
            rows = rows_digest(stream, p, world, r, accum, B)
            assert theirs["rows_digest"] == f"{rows:08x}", (line["step"], r, theirs, f"{rows:08x}")


def train(ctx, np_, args, name):
    return h.train(ctx, np_, MODEL + args, name)


def case_formats(ctx):
    w = ctx["work"]
    stream = tokens_of(9000, 1)
    cuts = [0, 2500, 5700, 9000]
    for k in range(3):  # three shards of unequal length, read through a glob
        write_llmc(f"{w}/v1_{k:03d}.bin", stream[cuts[k]:cuts[k + 1]])
    write_llmc(f"{w}/v7.bin", stream, version=7)
    write_flat(f"{w}/flat16.bin", stream, "H")
    write_flat(f"{w}/flat32.bin", stream, "I")
    sets = [(f"{w}/v1_*.bin", []), (f"{w}/v7.bin", []), (f"{w}/flat16.bin", ["--data-dtype", "uint16"]),
            (f"{w}/flat32.bin", ["--data-dtype", "uint32"])]
    reference = None
    for i, (data, extra) in enumerate(sets):
        one = train(ctx, 1, ["--data", data, "--micro-batch", "4", "--steps", "5"] + extra, f"f{i}np1")
        two = train(ctx, 2, ["--data", data, "--micro-batch", "2", "--steps", "5", "--stage", "3"] + extra, f"f{i}np2")
        check_stream(one, stream, 4 * T)
        check_stream(two, stream, 4 * T)
        # the same global batch: np 2 differs from np 1 only in summation order
        for a, b in zip(h.losses(one), h.losses(two)):
            assert abs(a - b) <= 1e-5 * abs(a), (h.losses(one), h.losses(two))
        if reference is None:
            reference = h.losses(one)
        assert h.losses(one) == reference, (data, h.losses(one), reference)  # one stream, four formats
    print(f"formats: 4 formats x np 1, 2 read the stream's tokens; losses {reference[0]:.4f} -> {reference[-1]:.4f}")


def case_uneven(ctx):
    w = ctx["work"]
    stream = tokens_of(20000, 2)
    write_llmc(f"{w}/d.bin", stream)
    s = train(ctx, 3, ["--data", f"{w}/d.bin", "--micro-batch", "2", "--grad-accum", "2", "--steps", "4",
                       "--stage", "3"], "np3")
    check_stream(s, stream, 3 * 2 * 2 * T, accum=2)
    print("uneven: np 3 x grad-accum 2 reads positions p + ((m x 3 + r) x 2 + b) x T")


def case_resume(ctx):
    w = ctx["work"]
    stream = tokens_of(20000, 3)
    write_llmc(f"{w}/d.bin", stream)
    base = ["--data", f"{w}/d.bin", "--micro-batch", "2", "--stage", "2"]
    straight = train(ctx, 2, base + ["--steps", "4"], "straight")
    train(ctx, 2, base + ["--steps", "2", "--save-every", "2", "--save-dir", f"{w}/ck"], "first")
    again = train(ctx, 2, base + ["--steps", "4", "--resume", f"{w}/ck"], "again")
    assert h.losses(again) == h.losses(straight)[2:], (h.losses(again), h.losses(straight))
    check_stream(again, stream, 2 * 2 * T, first_step=2, first_position=2 * 2 * 2 * T)
    wider = train(ctx, 3, base + ["--steps", "4", "--resume", f"{w}/ck"], "wider")
    check_stream(wider, stream, 3 * 2 * T, first_step=2, first_position=2 * 2 * 2 * T)
    print("resume: np 2 -> np 2 bitwise; np 2 -> np 3 goes on at token 128 with 96 tokens per step")


def case_epochs(ctx):
    w = ctx["work"]
    stream = tokens_of(300, 4)  # 4.7 steps of 64 tokens
    write_flat(f"{w}/small.bin", stream, "H")
    loud = [a for a in MODEL if a != "--quiet"]  # the epoch lines are rank 0's log
    p = h.launch(ctx, 2, loud + ["--data", f"{w}/small.bin", "--data-dtype", "uint16", "--micro-batch", "2",
                                  "--steps", "11", "--log-dir", f"{w}/log"])
    s = json.load(open(f"{w}/log/summary.json"))
    s["steps"] = [[json.loads(x) for x in open(f"{w}/log/rank{r}.jsonl")] for r in range(2)]
    check_stream(s, stream, 2 * 2 * T)
    for e, step in ((1, 5), (2, 10)):  # token 300 is read in step 5 (256..320), 600 in step 10
        line = f"data: epoch {e} begins in step {step}"
        assert line in p.stdout + p.stderr, (line, p.stdout[-2000:])
    print("epochs: 300 tokens at 64 per step wrap in steps 5 and 10, logged")


def case_eval(ctx):
    w = ctx["work"]
    write_llmc(f"{w}/train.bin", tokens_of(20000, 5))
    write_llmc(f"{w}/val.bin", tokens_of(4000, 6))
    base = ["--data", f"{w}/train.bin", "--micro-batch", "2", "--steps", "6", "--stage", "3", "--recompute", "full",
            "--lr", "3e-3"]
    plain = train(ctx, 2, base, "plain")
    evald = train(ctx, 2, base + ["--val-data", f"{w}/val.bin", "--eval-every", "2", "--eval-batches", "3"], "eval")
    assert h.losses(evald) == h.losses(plain), (h.losses(evald), h.losses(plain))
    assert evald["params_digest"] == plain["params_digest"]
    vals = [(x["step"], x["val_loss"]) for x in evald["steps"][0] if "val_loss" in x]
    assert [st for st, _ in vals] == [2, 4, 6], vals
    assert vals[-1][1] < vals[0][1], vals  # it learns the stream's runs
    assert evald["val"] == {"loss": vals[-1][1], "step": 6}, evald["val"]
    print(f"eval: val loss {vals[0][1]:.4f} -> {vals[-1][1]:.4f}; training bitwise as without evaluation")


def expect_error(ctx, np_, args, *needles, rc=2):
    """A run refused with exit rc (2: bad input; 1: a file that cannot be
    read) and the needles in its output (one rank: the program alone, a
    singleton MPI job, which starts faster)."""
    if np_ == 1:
        p = subprocess.run([ctx["zt"]] + MODEL + args, capture_output=True, text=True, timeout=120)
    else:
        p = h.launch(ctx, np_, MODEL + args, expect_rc=None)
    out = p.stdout + p.stderr
    assert p.returncode == rc, (args, p.returncode, out[-2000:])
    for n in needles:
        assert n in out, (n, args, out[-3000:])


def case_bad(ctx):
    w = ctx["work"]
    good = tokens_of(4000, 7)
    write_llmc(f"{w}/good.bin", good)
    with open(f"{w}/short.bin", "wb") as f:
        f.write(struct.pack("<3i", 20240520, 1, 10))  # 12 bytes of a 1024-byte header
    expect_error(ctx, 1, ["--data", f"{w}/short.bin", "--data-dtype", "llmc"], f"{w}/short.bin",
                 "truncated header")
    write_flat(f"{w}/nomagic.bin", good, "H")
    expect_error(ctx, 1, ["--data", f"{w}/nomagic.bin", "--data-dtype", "llmc"], f"{w}/nomagic.bin",
                 "wrong magic", "at offset 0")
    write_llmc(f"{w}/cut.bin", good[:100], count=4000)
    expect_error(ctx, 1, ["--data", f"{w}/cut.bin"], f"{w}/cut.bin", "truncated", "offset 8")
    bad = list(good)
    bad[613] = VOCAB + 5
    write_llmc(f"{w}/big.bin", bad)
    # token 613 is in row 38: step 10 reads rows 36-39
    expect_error(ctx, 1, ["--data", f"{w}/big.bin", "--micro-batch", "4", "--steps", "12"], f"{w}/big.bin",
                 f"token {VOCAB + 5} at byte offset {1024 + 2 * 613}", f"--vocab {VOCAB}")
    with open(f"{w}/odd.bin", "wb") as f:
        f.write(b"\x01\x00\x02")
    expect_error(ctx, 1, ["--data", f"{w}/odd.bin", "--data-dtype", "uint16"], "not a whole number")
    expect_error(ctx, 1, ["--data", f"{w}/none_*.bin"], "no such file", rc=1)
    write_llmc(f"{w}/set_000.bin", good)
    write_flat(f"{w}/set_001.bin", good, "H")  # a second shard without its header
    expect_error(ctx, 1, ["--data", f"{w}/set_*.bin"], f"{w}/set_001.bin", "wrong magic")
    expect_error(ctx, 1, ["--data", f"{w}/good.bin", "--eval-every", "2"], "--eval-every 2 needs --val-data")
    write_llmc(f"{w}/v3.bin", good)
    with open(f"{w}/v3.bin", "r+b") as f:
        f.seek(4)
        f.write(struct.pack("<i", 3))
    expect_error(ctx, 1, ["--data", f"{w}/v3.bin", "--data-dtype", "llmc"], f"{w}/v3.bin",
                 "version 3 at offset 4 does not go with magic 20240520")
    write_llmc(f"{w}/mix_000.bin", good)
    write_llmc(f"{w}/mix_001.bin", good, version=7)
    expect_error(ctx, 1, ["--data", f"{w}/mix_*.bin"], f"{w}/mix_001.bin", "4-byte tokens", "one format")
    write_llmc(f"{w}/one.bin", good[:1])
    expect_error(ctx, 1, ["--data", f"{w}/one.bin"], "1 token(s); training needs at least 2")
    expect_error(ctx, 1, ["--data", f"{w}/good.bin", "--val-data", f"{w}/short.bin", "--data-dtype", "llmc"],
                 "--val-data", f"{w}/short.bin", "truncated header")
    expect_error(ctx, 1, ["--data", f"{w}/good.bin", "--val-data", f"{w}/nomagic.bin"], "--val-data",
                 "is read as bytes (vocabulary 256), but the model's vocabulary is 96")
    write_flat(f"{w}/val32.bin", good, "I")
    expect_error(ctx, 1, ["--data", f"{w}/good.bin", "--val-data", f"{w}/val32.bin", "--data-dtype", "llmc"],
                 f"{w}/val32.bin", "wrong magic")
    # ranks given different data: the agreement names --data
    other = list(good)
    other[3000] = (other[3000] + 1) % VOCAB
    write_llmc(f"{w}/other.bin", other)
    cmd = ["mpirun"] + (["--allow-run-as-root"] if os.geteuid() == 0 else []) + ["--oversubscribe"]
    for i, data in enumerate(("good", "other")):
        cmd += ([":"] if i else []) + ["-np", "1", ctx["zt"]] + MODEL + ["--data", f"{w}/{data}.bin"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "--data" in p.stdout + p.stderr, (p.returncode, (p.stdout + p.stderr)[-2000:])
    print("bad: truncated header, wrong magic, wrong version, short shard, token >= vocab, odd size, no match, "
          "a set of mixed formats or widths, too few tokens, --eval-every alone, bad --val-data, different data per "
          "rank")


if __name__ == "__main__":
    h.main({"formats": case_formats, "uneven": case_uneven, "resume": case_resume, "epochs": case_epochs,
            "eval": case_eval, "bad": case_bad}, "tokens")
