#!/usr/bin/env python3
"""zt-export --format hf (docs/interop_export.md), one case per CTest test.

usage: zt_export_hf_test.py CASE ZT_TRAIN ZT_EXPORT

Each case trains a tiny model for 2 steps at world size 1 with --save-every 2,
exports it with --format hf and checks the directory against `transformers`'
layout as written down here (LAYOUT_GPT, LAYOUT_LLAMA: every name, shape and
dtype), and every value against zt-export's native file of the same
checkpoint, with the transposes (GPT-2's Conv1D) and row splits (Llama's
fused qkv and gate_up) applied here. No rows are permuted for the rotary
embedding: zerotrain's kernel already rotates halves (docs/interop_export.md).
Python's standard library only (ctypes reaches libxxhash to re-seal an edited
manifest)."""
import ctypes
import ctypes.util
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

DTYPES = {"fp32": ("F32", 4), "bf16": ("BF16", 2), "fp16": ("F16", 2)}
SIZES = dict(L=2, C=32, H=4, T=16, V=64)


def layout_gpt(L, C, H, T, V, tied, **_):
    """GPT2LMHeadModel: (name, shape, source) in file order; source is
    (zerotrain name, first row, rows, transposed)."""
    rows = []
    add = lambda n, shape, src, r0=0, nr=None, tr=False: rows.append((n, shape, (src, r0, nr, tr)))
    add("transformer.wte.weight", [V, C], "embedding.wte")
    add("transformer.wpe.weight", [T, C], "embedding.wpe")
    for i in range(L):
        h, b = f"transformer.h.{i}.", f"block{i}."
        add(h + "ln_1.weight", [C], b + "ln1_w")
        add(h + "ln_1.bias", [C], b + "ln1_b")
        add(h + "attn.c_attn.weight", [C, 3 * C], b + "qkv_w", tr=True)  # Conv1D: [in, out]
        add(h + "attn.c_attn.bias", [3 * C], b + "qkv_b")
        add(h + "attn.c_proj.weight", [C, C], b + "attproj_w", tr=True)
        add(h + "attn.c_proj.bias", [C], b + "attproj_b")
        add(h + "ln_2.weight", [C], b + "ln2_w")
        add(h + "ln_2.bias", [C], b + "ln2_b")
        add(h + "mlp.c_fc.weight", [C, 4 * C], b + "fc_w", tr=True)
        add(h + "mlp.c_fc.bias", [4 * C], b + "fc_b")
        add(h + "mlp.c_proj.weight", [4 * C, C], b + "fcproj_w", tr=True)
        add(h + "mlp.c_proj.bias", [C], b + "fcproj_b")
    add("transformer.ln_f.weight", [C], "head.lnf_w")
    add("transformer.ln_f.bias", [C], "head.lnf_b")
    if not tied:
        add("lm_head.weight", [V, C], "head.lm_head")
    return rows


def layout_llama(L, C, H, T, V, tied, KV, F, **_):
    """LlamaForCausalLM: nn.Linear keeps [out, in] as zerotrain does; q, k, v
    and gate, up are row blocks of zerotrain's fused matrices."""
    rows, kv = [], KV * (C // H)
    add = lambda n, shape, src, r0=0, nr=None: rows.append((n, shape, (src, r0, nr, False)))
    add("model.embed_tokens.weight", [V, C], "embedding.wte")
    for i in range(L):
        h, b = f"model.layers.{i}.", f"block{i}."
        add(h + "input_layernorm.weight", [C], b + "attn_norm_w")
        add(h + "self_attn.q_proj.weight", [C, C], b + "qkv_w", 0, C)
        add(h + "self_attn.k_proj.weight", [kv, C], b + "qkv_w", C, kv)
        add(h + "self_attn.v_proj.weight", [kv, C], b + "qkv_w", C + kv, kv)
        add(h + "self_attn.o_proj.weight", [C, C], b + "attproj_w")
        add(h + "post_attention_layernorm.weight", [C], b + "mlp_norm_w")
        add(h + "mlp.gate_proj.weight", [F, C], b + "gate_up_w", 0, F)
        add(h + "mlp.up_proj.weight", [F, C], b + "gate_up_w", F, F)
        add(h + "mlp.down_proj.weight", [C, F], b + "down_w")
    add("model.norm.weight", [C], "head.norm_w")
    if not tied:
        add("lm_head.weight", [V, C], "head.lm_head")
    return rows


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    ends = sorted(t["data_offsets"] for k, t in header.items() if k != "__metadata__")
    at = 0
    for lo, hi in ends:  # the byte ranges tile the data: no gap, no overlap
        assert lo == at and hi >= lo, (path, lo, hi, at)
        at = hi
    assert at == len(data), (path, at, len(data))
    return header, data


def tensor_bytes(header, data, name):
    lo, hi = header[name]["data_offsets"]
    return data[lo:hi]


def expected(native_header, native_data, src, esize):
    """The transformers tensor's bytes made from the native export here."""
    name, r0, nr, transposed = src
    shape = native_header[name]["shape"]
    cols = shape[1] if len(shape) == 2 else 1
    raw = tensor_bytes(native_header, native_data, name)
    nr = shape[0] - r0 if nr is None else nr
    el = [raw[i:i + esize] for i in range(0, len(raw), esize)]  # row-major [R, cols]
    el = el[r0 * cols:(r0 + nr) * cols]
    if transposed:
        el = [el[r * cols + c] for c in range(cols) for r in range(nr)]
    return b"".join(el)


def run(cmd, ok=True):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if ok and p.returncode != 0:
        raise AssertionError(f"{cmd} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def train(ctx, name, flags):
    save = os.path.join(ctx["work"], name)
    s = SIZES
    run([ctx["zt"], "--layers", str(s["L"]), "--d-model", str(s["C"]), "--heads", str(s["H"]), "--seq-len",
         str(s["T"]), "--vocab", str(s["V"]), "--micro-batch", "2", "--steps", "2", "--save-every", "2",
         "--save-dir", save, "--log-dir", save + "-log"] + flags)
    return save


def export(ctx, ckpt, out, *flags, ok=True):
    return run([ctx["export"], ckpt, out] + list(flags), ok)


def check_dir(ctx, ckpt, out, layout, dtype="fp32"):
    """out (single file or shards) holds exactly `layout`, each tensor equal
    to the native export's after the layout's transform."""
    st_dtype, esize = DTYPES[dtype]
    native = os.path.join(ctx["work"], os.path.basename(out) + "-native.safetensors")
    export(ctx, ckpt, native, "--dtype", dtype)
    nh, nd = read_safetensors(native)
    index = os.path.join(out, "model.safetensors.index.json")
    files = ["model.safetensors"]
    if os.path.exists(index):
        files = sorted(set(json.load(open(index))["weight_map"].values()))
    seen = {}
    for fname in files:
        h, d = read_safetensors(os.path.join(out, fname))
        assert h["__metadata__"]["format"] == "pt", h["__metadata__"]  # transformers requires it
        for k in h:
            if k != "__metadata__":
                assert k not in seen, f"{k} in {seen[k]} and {fname}"
                seen[k] = (fname, h, d)
    names = [n for n, _, _ in layout]
    assert list(seen) == names, (sorted(set(seen) ^ set(names)), list(seen)[:4])  # transformers' order too
    for name, shape, src in layout:
        fname, h, d = seen[name]
        t = h[name]
        assert t["shape"] == shape and t["dtype"] == st_dtype, (name, t, shape, st_dtype)
        assert tensor_bytes(h, d, name) == expected(nh, nd, src, esize), f"{name}: values differ from {src}"
    return seen


def config_of(out):
    return json.load(open(os.path.join(out, "config.json")))


def case_gpt_untied(ctx):
    """Untied GPT: GPT2LMHeadModel's names, Conv1D weights transposed,
    lm_head.weight written, config from the manifest."""
    ckpt = train(ctx, "gpt", [])
    out = os.path.join(ctx["work"], "hf-gpt")
    export(ctx, ckpt, out, "--format", "hf")
    check_dir(ctx, ckpt, out, layout_gpt(tied=False, **SIZES))
    c, s = config_of(out), SIZES
    want = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_positions": s["T"], "n_embd": s["C"],
            "n_layer": s["L"], "n_head": s["H"], "vocab_size": s["V"], "activation_function": "gelu_new",
            "tie_word_embeddings": False, "torch_dtype": "float32", "n_inner": 4 * s["C"]}
    assert {k: c.get(k) for k in want} == want, c
    assert abs(c["layer_norm_epsilon"] - 1e-5) < 1e-12, c
    # --dtype fp16: every tensor F16, the native fp16 export's values
    out16 = os.path.join(ctx["work"], "hf-gpt-fp16")
    export(ctx, ckpt, out16, "--format", "hf", "--dtype", "fp16")
    check_dir(ctx, ckpt, out16, layout_gpt(tied=False, **SIZES), "fp16")
    assert config_of(out16)["torch_dtype"] == "float16"


def case_gpt_tied(ctx):
    """Tied GPT: one tensor (transformer.wte.weight) for the embedding and
    the head, no lm_head.weight, tie_word_embeddings true."""
    ckpt = train(ctx, "gpt-tied", ["--tied", "1"])
    out = os.path.join(ctx["work"], "hf-gpt-tied")
    export(ctx, ckpt, out, "--format", "hf")
    seen = check_dir(ctx, ckpt, out, layout_gpt(tied=True, **SIZES))
    assert "lm_head.weight" not in seen and config_of(out)["tie_word_embeddings"] is True
    # negative twin: the untied table does not fit a tied export
    try:
        check_dir(ctx, ckpt, out, layout_gpt(tied=False, **SIZES))
    except (AssertionError, KeyError):
        pass
    else:
        raise AssertionError("the untied layout was accepted for a tied export")


def case_llama_gqa(ctx):
    """Llama with grouped-query attention (4 heads, 2 key/value heads):
    q/k/v and gate/up split by rows, bf16 equal to the native bf16 export."""
    ckpt = train(ctx, "llama", ["--model", "llama", "--kv-heads", "2"])
    man = json.load(open(os.path.join(ckpt, "step-000002", "manifest.json")))["run"]["model"]
    out = os.path.join(ctx["work"], "hf-llama")
    export(ctx, ckpt, out, "--format", "hf", "--dtype", "bf16")
    dims = dict(SIZES, KV=2, F=man["ffn_dim"])
    check_dir(ctx, ckpt, out, layout_llama(tied=False, **dims), "bf16")
    c = config_of(out)
    want = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": dims["C"],
            "intermediate_size": dims["F"], "num_hidden_layers": dims["L"], "num_attention_heads": dims["H"],
            "num_key_value_heads": 2, "max_position_embeddings": dims["T"], "vocab_size": dims["V"],
            "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
    assert {k: c.get(k) for k in want} == want, c
    assert c["rope_theta"] == man["rope_theta"] and abs(c["rms_norm_eps"] - man["norm_eps"]) < 1e-15, (c, man)
    # No rotary permutation: q_proj is qkv's first C rows as they are. Negative
    # twin: the per-head reorder an adjacent-pair (2i, 2i+1) kernel would need
    # (rows 0, 2, 4, ..., 1, 3, 5, ... of each head) gives other bytes.
    h, d = read_safetensors(os.path.join(out, "model.safetensors"))
    nh, nd = read_safetensors(os.path.join(ctx["work"], "hf-llama-native.safetensors"))
    q = expected(nh, nd, ("block0.qkv_w", 0, dims["C"], False), 2)
    width, hd = 2 * dims["C"], dims["C"] // dims["H"]
    rows = [q[r * width:(r + 1) * width] for r in range(dims["C"])]
    order = [h0 + i for h0 in range(0, dims["C"], hd) for i in list(range(0, hd, 2)) + list(range(1, hd, 2))]
    permuted = b"".join(rows[r] for r in order)
    got = tensor_bytes(h, d, "model.layers.0.self_attn.q_proj.weight")
    assert got == q and got != permuted, "q_proj is not qkv's q rows as stored"


def case_llama_tied(ctx):
    """Tied Llama: model.embed_tokens.weight alone serves the head."""
    ckpt = train(ctx, "llama-tied", ["--model", "llama", "--tied", "1"])
    out = os.path.join(ctx["work"], "hf-llama-tied")
    export(ctx, ckpt, out, "--format", "hf")
    F = json.load(open(os.path.join(ckpt, "step-000002", "manifest.json")))["run"]["model"]["ffn_dim"]
    seen = check_dir(ctx, ckpt, out, layout_llama(tied=True, KV=SIZES["H"], F=F, **SIZES))
    assert "lm_head.weight" not in seen and config_of(out)["tie_word_embeddings"] is True


def case_sharded(ctx):
    """--max-shard-size 20KB: model-0000K-of-0000N.safetensors and an index
    whose weight_map names every tensor once, in the file that holds it, and
    whose total_size is the tensors' bytes; no file passes the limit unless
    one tensor alone does. A later unsharded export into the same directory
    removes the index (transformers would read a stale one)."""
    ckpt = train(ctx, "llama-shard", ["--model", "llama", "--kv-heads", "2"])
    F = json.load(open(os.path.join(ckpt, "step-000002", "manifest.json")))["run"]["model"]["ffn_dim"]
    layout = layout_llama(tied=False, KV=2, F=F, **SIZES)
    out = os.path.join(ctx["work"], "hf-shard")
    export(ctx, ckpt, out, "--format", "hf", "--max-shard-size", "20KB")
    index = json.load(open(os.path.join(out, "model.safetensors.index.json")))
    files = sorted(set(index["weight_map"].values()))
    n = len(files)
    assert n > 1 and files == [f"model-{k:05d}-of-{n:05d}.safetensors" for k in range(1, n + 1)], files
    assert not os.path.exists(os.path.join(out, "model.safetensors"))
    seen = check_dir(ctx, ckpt, out, layout)
    assert set(index["weight_map"]) == set(seen) and len(index["weight_map"]) == len(layout)
    total = 0
    for name, (fname, h, d) in seen.items():
        assert index["weight_map"][name] == fname, (name, fname)
        lo, hi = h[name]["data_offsets"]
        total += hi - lo
    assert index["metadata"]["total_size"] == total, (index["metadata"], total)
    for fname in files:
        h, d = read_safetensors(os.path.join(out, fname))
        assert len(d) <= 20000 or len(h) == 2, (fname, len(d))  # over the limit: one tensor alone
    export(ctx, ckpt, out, "--format", "hf")  # 5GB: one file
    assert os.path.exists(os.path.join(out, "model.safetensors"))
    assert not os.path.exists(os.path.join(out, "model.safetensors.index.json"))
    check_dir(ctx, ckpt, out, layout)


def xxh64(data):
    lib = ctypes.CDLL(ctypes.util.find_library("xxhash") or "libxxhash.so.0")
    lib.XXH64.restype = ctypes.c_ulonglong
    lib.XXH64.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_ulonglong]
    return lib.XXH64(data, len(data), 0)


def rewrite_model(step_dir, edit):
    """Edits the manifest's run.model and re-seals its checksum as zerotrain
    writes it (checkpointing/manifest.c: the key last, over every byte before)."""
    path = os.path.join(step_dir, "manifest.json")
    m = json.load(open(path))
    del m["manifest_xxh64"]
    edit(m["run"]["model"])
    head = json.dumps(m, indent=1)[:-2] + ",\n "
    head = head.encode()
    with open(path, "wb") as f:
        f.write(head + b'"manifest_xxh64": "%016x"\n}\n' % xxh64(head))


def case_old_manifest(ctx):
    """A GPT checkpoint whose run.model lacks ffn_dim and norm_eps (as
    zerotrains before this export wrote it): --format hf refuses it naming
    both; resuming it still works (checkpointing/load.c fills them in), and
    its next save records them, so that save exports. Negative twin: a
    norm_eps that differs from the run's is refused at resume."""
    ckpt = train(ctx, "gpt-old", [])
    step = os.path.join(ckpt, "step-000002")
    rewrite_model(step, lambda mo: (mo.pop("ffn_dim"), mo.pop("norm_eps")))
    p = export(ctx, ckpt, os.path.join(ctx["work"], "hf-old"), "--format", "hf", ok=False)
    assert p.returncode == 2 and "ffn_dim" in p.stderr and "norm_eps" in p.stderr, p.stderr
    assert not os.path.exists(os.path.join(ctx["work"], "hf-old", "config.json"))
    s = SIZES
    base = [ctx["zt"], "--layers", str(s["L"]), "--d-model", str(s["C"]), "--heads", str(s["H"]), "--seq-len",
            str(s["T"]), "--vocab", str(s["V"]), "--micro-batch", "2", "--steps", "4", "--save-every", "2",
            "--save-dir", ckpt, "--log-dir", ckpt + "-log2", "--resume", ckpt]
    run(base)
    out = os.path.join(ctx["work"], "hf-resaved")
    export(ctx, ckpt, out, "--format", "hf")
    check_dir(ctx, ckpt, out, layout_gpt(tied=False, **SIZES))
    bad = train(ctx, "gpt-eps", [])
    rewrite_model(os.path.join(bad, "step-000002"), lambda mo: mo.update(norm_eps=1e-6))
    p = run(base[:-1] + [bad], ok=False)
    assert p.returncode != 0 and "norm_eps" in p.stderr + p.stdout, p.stderr


def case_refusals(ctx):
    """Bad input: a clear message and exit 2, and nothing written."""
    ckpt = train(ctx, "gpt-ref", [])
    out = os.path.join(ctx["work"], "hf-ref")
    checks = [
        ([os.path.join(ctx["work"], "no-such-ckpt"), out, "--format", "hf"], "no complete checkpoint"),
        ([ckpt, out, "--format", "onnx"], "--format 'onnx' is not native or hf"),
        ([ckpt, out, "--format", "hf", "--dtype", "fp8"], "--dtype 'fp8'"),
        ([ckpt, out, "--format", "hf", "--max-shard-size", "lots"], "--max-shard-size 'lots'"),
        ([ckpt, out, "--format", "hf", "--max-shard-size", "0MB"], "--max-shard-size '0MB'"),
        ([ckpt, ckpt, "--format", "hf"], "holds a zerotrain checkpoint"),
        ([ckpt, os.path.join(ckpt, "step-000002"), "--format", "hf"], "holds a zerotrain checkpoint"),
        ([ckpt, out + ".safetensors", "--max-shard-size", "1MB"], "--format hf only"),
    ]
    for args, words in checks:
        p = run([ctx["export"]] + args, ok=False)
        assert p.returncode == 2 and words in p.stderr, (args, p.returncode, p.stderr)
    assert not os.path.exists(out), "a refused export wrote its directory"
    with open(out + "-file", "w") as f:
        f.write("x")
    p = export(ctx, ckpt, out + "-file", "--format", "hf", ok=False)
    assert p.returncode == 2 and "not a directory" in p.stderr, p.stderr
    # a damaged rank file: refused before anything is written
    damaged = train(ctx, "gpt-dmg", [])
    rank0 = os.path.join(damaged, "step-000002", "rank0.bin")
    with open(rank0, "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    p = export(ctx, damaged, out, "--format", "hf", ok=False)
    assert p.returncode == 2 and "checksum" in p.stderr and not os.path.exists(out), p.stderr
    # negative twin: the same command on a good checkpoint succeeds
    export(ctx, ckpt, out, "--format", "hf")


def main():
    case, zt, exporter = sys.argv[1:4]
    work = tempfile.mkdtemp(prefix=f"zt-hf-{case}-")
    try:
        globals()[f"case_{case}"]({"zt": zt, "export": exporter, "work": work})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{case}: ok")


if __name__ == "__main__":
    main()
