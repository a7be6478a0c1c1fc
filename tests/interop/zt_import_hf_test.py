#!/usr/bin/env python3
"""zt-train --init-from DIR (docs/interop_export.md, "Import"), one case per
CTest test.

usage: zt_import_hf_test.py CASE ZT_TRAIN ZT_EXPORT ZT_RUN

The round trips train a tiny model for 2 steps (--save-every 2), export the
checkpoint with --format hf, and then, at np 1 and 3 and ZeRO stages 0 and
3, compare two runs made with --lr 0 (so no step changes a parameter, and
the params digest of summary.json is that of the starting values):
  reference: --resume the checkpoint for one step (its step 3);
  import:    --init-from the export for one step, with another --seed.
Their first losses and params digests must be bitwise equal. Every batch is
the same sequence (a data file of exactly seq-len + 1 bytes: the sampler's
offset is always 0), so step 3's batch and step 1's are one batch. The
negative twin: the family's own init (no --init-from) gives another loss and
digest. The import's log line shows what rank 0 read: its cache is the
largest tensor (as stored and as fp32), and at np 3 stage 3 it reads fewer
tensors than at np 1 (only those its shards overlap). Python's standard
library only."""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

SIZES = ["--layers", "2", "--d-model", "32", "--heads", "4", "--seq-len", "16", "--vocab", "256",
         "--micro-batch", "2"]
PLACES = [(1, 0), (1, 3), (3, 0), (3, 3)]  # (np, stage)


def run(cmd, ok=True):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if ok and p.returncode != 0:
        raise AssertionError(f"{cmd} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def zt(ctx, np, name, flags, ok=True):
    """zt-train on np ranks in WORK/name; its summary.json (None when it failed) and the process."""
    log = os.path.join(ctx["work"], name)
    p = run([ctx["zt_run"], "-np", str(np), ctx["zt"]] + SIZES + ["--data", ctx["data"], "--log-dir", log] + flags,
            ok)
    path = os.path.join(log, "summary.json")
    return (json.load(open(path)) if p.returncode == 0 else None), p


def trained(ctx, family_flags, *export_flags):
    """A 2-step checkpoint of the family and its Hugging Face export."""
    save = os.path.join(ctx["work"], "ckpt")
    zt(ctx, 1, "train", family_flags + ["--steps", "2", "--save-every", "2", "--save-dir", save])
    out = os.path.join(ctx["work"], "hf")
    run([ctx["export"], save, out, "--format", "hf"] + list(export_flags))
    return save, out


def largest_tensor_bytes(out):
    """The largest tensor's bytes over the directory's files (fp32 here)."""
    index = os.path.join(out, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    sizes = []
    for f in files:
        header, _ = header_and_data(open(os.path.join(out, f), "rb").read())
        sizes += [t["data_offsets"][1] - t["data_offsets"][0] for k, t in header.items() if k != "__metadata__"]
    return max(sizes)


def first(s):
    return s["losses"][0], s["params_digest"]


def compare_at(ctx, family_flags, save, out, places=PLACES):
    """At each (np, stage): the imported run's first loss and digest equal the resumed run's."""
    reads = {}
    for np, stage in places:
        at = ["--stage", str(stage), "--lr", "0"]
        ref, _ = zt(ctx, np, f"ref-{np}-{stage}", family_flags + at + ["--steps", "3", "--resume", save])
        imp, p = zt(ctx, np, f"imp-{np}-{stage}", family_flags + at + ["--steps", "1", "--seed", "987",
                                                                       "--init-from", out])
        m = re.search(r"init: from .* \(rank 0 read (\d+) tensor\(s\), (\d+) bytes, through a cache of (\d+) bytes",
                      p.stdout)
        assert m, p.stdout[-2000:]
        reads[(np, stage)] = int(m.group(1))
        assert int(m.group(3)) == largest_tensor_bytes(out) * 2, (m.group(0), largest_tensor_bytes(out))
        assert first(imp) == first(ref), (np, stage, first(imp), first(ref))
        print(f"np {np} stage {stage}: loss {first(imp)[0]!r} digest {first(imp)[1]} (as resumed); "
              f"rank 0 read {m.group(1)} tensor(s)")
    if (3, 3) in reads:  # a rank reads only the tensors its shards overlap
        assert reads[(3, 3)] < reads[(1, 0)], reads
    own, _ = zt(ctx, 1, "own-init", family_flags + ["--lr", "0", "--steps", "1"])  # negative twin
    assert first(own)[0] != first(imp)[0] and first(own)[1] != first(imp)[1], (first(own), first(imp))


def roundtrip(ctx, family_flags):
    save, out = trained(ctx, family_flags)
    compare_at(ctx, family_flags, save, out)


def case_roundtrip_gpt(ctx):
    roundtrip(ctx, [])


def case_roundtrip_gpt_tied(ctx):
    roundtrip(ctx, ["--tied", "1"])


def case_roundtrip_llama_gqa(ctx):
    roundtrip(ctx, ["--model", "llama", "--kv-heads", "2"])


def case_sharded(ctx):
    """A sharded export (--max-shard-size 20KB: found through the index)
    imports as the single file does, at np 3 stage 3 and np 1 stage 0."""
    fam = ["--model", "llama", "--kv-heads", "2"]
    save, out = trained(ctx, fam, "--max-shard-size", "20KB")
    assert os.path.exists(os.path.join(out, "model.safetensors.index.json"))
    assert not os.path.exists(os.path.join(out, "model.safetensors"))
    compare_at(ctx, fam, save, out, [(1, 0), (3, 3)])


def case_half(ctx):
    """bf16 and fp16 files: importing an export of dtype D and exporting
    that run's checkpoint in D again gives the same bytes (D -> fp32 -> D is
    exact), at np 3 stage 3; negative twin: the fp32 export's values differ."""
    fam = ["--model", "llama", "--kv-heads", "2"]
    save, _ = trained(ctx, fam)
    for dtype in ("bf16", "fp16"):
        out = os.path.join(ctx["work"], f"hf-{dtype}")
        run([ctx["export"], save, out, "--format", "hf", "--dtype", dtype])
        again = os.path.join(ctx["work"], f"ckpt-{dtype}")
        zt(ctx, 3, f"imp-{dtype}", fam + ["--stage", "3", "--lr", "0", "--steps", "1", "--init-from", out,
                                          "--save-every", "1", "--save-dir", again])
        back = os.path.join(ctx["work"], f"hf-{dtype}-again")
        run([ctx["export"], again, back, "--format", "hf", "--dtype", dtype])
        a = open(os.path.join(out, "model.safetensors"), "rb").read()
        b = open(os.path.join(back, "model.safetensors"), "rb").read()
        assert header_and_data(a)[1] == header_and_data(b)[1], f"{dtype}: values changed through the import"
        fp32 = os.path.join(ctx["work"], f"hf-{dtype}-fp32")
        run([ctx["export"], again, fp32, "--format", "hf"])
        trained_fp32 = os.path.join(ctx["work"], "hf-trained-fp32")
        if not os.path.exists(trained_fp32):
            run([ctx["export"], save, trained_fp32, "--format", "hf"])
        c = open(os.path.join(trained_fp32, "model.safetensors"), "rb").read()
        d = open(os.path.join(fp32, "model.safetensors"), "rb").read()
        assert header_and_data(c)[1] != header_and_data(d)[1], f"{dtype}: the import kept fp32 values"


def header_and_data(blob):
    (n,) = struct.unpack("<Q", blob[:8])
    return json.loads(blob[8:8 + n]), blob[8 + n:]


def write_safetensors(path, header, data):
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def refused(ctx, flags, words, np=1):
    _, p = zt(ctx, np, "refused", flags, ok=False)
    out = p.stdout + p.stderr
    assert p.returncode == 2, (p.returncode, out[-3000:])
    for w in words:
        assert w in out, (w, out[-3000:])
    assert "step     1" not in out, out[-2000:]  # refused before step 1
    return out


def case_mismatch(ctx):
    """config.json against the flags: every mismatch named with both values,
    in one message, exit 2 on every rank before step 1; another family, and
    --resume with --init-from, are refused too. Negative twin: the matching
    flags import."""
    save, out = trained(ctx, [])
    refused(ctx, ["--steps", "1", "--layers", "3", "--heads", "2", "--init-from", out],
            ["--layers 3 but n_layer 2", "--heads 2 but n_head 4"], np=3)
    refused(ctx, ["--steps", "1", "--tied", "1", "--init-from", out], ["--tied 1 but tie_word_embeddings false"])
    refused(ctx, ["--steps", "1", "--model", "llama", "--init-from", out], ["--model llama", "GPT2LMHeadModel"])
    refused(ctx, ["--steps", "3", "--resume", save, "--init-from", out], ["--init-from", "--resume"])
    refused(ctx, ["--steps", "1", "--init-from", os.path.join(ctx["work"], "nowhere")], ["config.json"])
    zt(ctx, 3, "matching", ["--steps", "1", "--init-from", out])


def case_tensors(ctx):
    """A file with a tensor missing, an unknown one, one of the wrong shape
    and one of an unread dtype: refused naming all four. Negative twin: the
    untouched file imports."""
    fam = ["--model", "llama", "--kv-heads", "2"]
    _, out = trained(ctx, fam)
    bad = os.path.join(ctx["work"], "hf-bad")
    shutil.copytree(out, bad)
    path = os.path.join(bad, "model.safetensors")
    header, data = header_and_data(open(path, "rb").read())
    del header["model.layers.1.mlp.up_proj.weight"]
    header["model.layers.0.self_attn.rotary_emb.extra"] = dict(dtype="F32", shape=[1], data_offsets=[0, 4])
    norm = header["model.norm.weight"]
    norm["shape"] = [norm["shape"][0] // 2, 2]
    emb = header["model.embed_tokens.weight"]
    emb["dtype"] = "I32"
    write_safetensors(path, header, data)
    refused(ctx, fam + ["--steps", "1", "--init-from", bad],
            ["missing model.layers.1.mlp.up_proj.weight", "unknown model.layers.0.self_attn.rotary_emb.extra",
             "model.norm.weight has shape [16, 2], the model needs [32]", "model.embed_tokens.weight has dtype I32",
             "4 tensor problem(s)"], np=3)
    zt(ctx, 3, "untouched", fam + ["--steps", "1", "--init-from", out])


def main():
    case = sys.argv[1]
    work = tempfile.mkdtemp(prefix=f"zt-hfimp-{case}-")
    data = os.path.join(work, "seq.bin")
    with open(data, "wb") as f:  # seq-len + 1 bytes: every batch is this one sequence
        f.write(bytes((i * 37 + 11) % 256 for i in range(17)))
    ctx = {"zt": os.path.abspath(sys.argv[2]), "export": os.path.abspath(sys.argv[3]),
           "zt_run": os.path.abspath(sys.argv[4]), "work": work, "data": data}
    try:
        globals()[f"case_{case}"](ctx)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{case}: ok")


if __name__ == "__main__":
    main()
