#!/usr/bin/env python3
"""The Llama family (examples/llama/) checked against float64 PyTorch.

bench/llama_dump (C) runs one fp32 forward and backward through the engine
at one rank and writes the parameters, tokens, targets, mean loss and every
gradient. This script re-implements the same equations in float64 PyTorch
(written here from the equations in examples/llama/llama.h and the kernels
runtime/cpu/ops_{rmsnorm,rope,swiglu,gqa}.inc, not from any library's
model), computes the loss and gradients with autograd, and compares.

usage (needs torch; not part of CI):
  cmake --build build --target llama_dump
  /work/venv-torch/bin/python bench/llama_reference.py --dump build/bench/llama_dump [--hf]
  /work/venv-torch/bin/python bench/llama_reference.py PREFIX.json ...   (existing dumps)

With --dump it writes and checks five dumps: GQA (kv_heads 2 of 4) untied,
tied, untied with the fused attention; plain multi-head (kv_heads 4); GQA
with norm_eps 0.05 (where eps sits in RMSNorm shows clearly only with a
large eps: at 1e-5 the mistake is ~10x the bound, and only because the
embedding's output has a small mean square).

Error metric, per parameter: err = max_i |g32_i - g64_i| / max_i |g64_i|,
zerotrain's fp32 gradient g32 against the float64 one g64 of the same fp32
parameter values. Bound GRAD_TOL = 1e-4. Why: fp32's unit roundoff is
u = 6e-8; one pass is ~10 layers of kernels whose sums run over at most
B*T = 32 rows or 128 columns, so rounding gives errors of order 1e-6 of the
largest entry (measured: see bench/RESULTS.md). 1e-4 is ~1600 u: two orders
of magnitude above that noise, and two below what a wrong equation gives
(1e-2 .. 1). The loss: |l32 - l64| / l64 <= LOSS_TOL = 1e-5 (a few u per op
on a value ~5, the same margin).

The check proves it can fail (the negative twins, always run): each of a
list of plausible mistakes, made in the reference, must be rejected on at
least one dump, and so must zerotrain's gradients scaled by 1 + 10 GRAD_TOL.

--hf also compares against Hugging Face transformers' LlamaForCausalLM in
float64 with the same weights (eager attention), when transformers is
installed; skipped with a note otherwise. HF's model is not pure float64:
its RMSNorm computes in fp32 and its rotary cos/sin come from fp32 angles,
so it agrees with the reference to fp32 rounding, within the same bound.
Its own loss shifts the labels, so its logits go through the same mean
cross-entropy here.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import torch

GRAD_TOL = 1e-4
LOSS_TOL = 1e-5

# The dumps --dump writes: name, llama_dump's options.
VARIANTS = [
    ("gqa-untied", []),
    ("gqa-tied", ["--tied"]),
    ("gqa-fused", ["--fused"]),
    ("mha-untied", ["--kv-heads", "4"]),
    ("gqa-eps0.05", ["--norm-eps", "0.05"]),
]

# Plausible mistakes the check must catch (see mistakes in Reference).
MISTAKES = ["rope_interleaved", "rope_sign", "gqa_modulo", "eps_outside_sqrt", "swiglu_swapped",
            "attention_scale_C", "no_causal_mask"]


# ---- the dump ----------------------------------------------------------------

def load_dump(index_path):
    """Settings, tokens, targets, loss, and {name: (fp32 values, fp32 grads)} as float64 tensors."""
    with open(index_path) as f:
        d = json.load(f)
    with open(os.path.join(os.path.dirname(index_path), d["bin"]), "rb") as f:
        flat = torch.frombuffer(bytearray(f.read()), dtype=torch.float32).to(torch.float64)
    tensors = {}
    for t in d["tensors"]:
        n = math.prod(t["shape"])
        tensors[t["name"]] = (flat[t["value"]:t["value"] + n].view(t["shape"]),
                              flat[t["grad"]:t["grad"] + n].view(t["shape"]))
    return d, tensors


# ---- the model, float64, from the equations ---------------------------------

class Reference:
    """examples/llama's forward, written from its equations; `mistake` names one deliberate error."""

    def __init__(self, s, mistake=None):
        self.L, self.C, self.NH, self.NKV = s["layers"], s["d_model"], s["heads"], s["kv_heads"]
        self.F, self.V, self.tied = s["ffn_dim"], s["vocab"], s["tied"]
        self.eps, self.theta = s["norm_eps"], s["rope_theta"]
        self.HD = self.C // self.NH
        self.mistake = mistake

    def rmsnorm(self, x, w):
        # x / sqrt(mean_c(x^2) + eps) * w: eps inside the square root (ops_rmsnorm.inc)
        ms = (x * x).mean(dim=-1, keepdim=True)
        if self.mistake == "eps_outside_sqrt":
            return x / (ms.sqrt() + self.eps) * w
        return x / torch.sqrt(ms + self.eps) * w

    def rope(self, x):
        """x [B,T,H,HD]: element i pairs with i + HD/2 (rotate-half), angle t * theta^(-2i/HD)."""
        T, HD = x.shape[1], self.HD
        i = torch.arange(HD // 2, dtype=torch.float64)
        f = self.theta ** (-2.0 * i / HD)
        a = torch.arange(T, dtype=torch.float64)[:, None] * f[None, :]  # [T, HD/2]
        c, s = torch.cos(a)[None, :, None, :], torch.sin(a)[None, :, None, :]
        if self.mistake == "rope_sign":
            s = -s
        if self.mistake == "rope_interleaved":  # pairs (2i, 2i+1) instead
            x0, x1 = x[..., 0::2], x[..., 1::2]
            return torch.stack((x0 * c - x1 * s, x1 * c + x0 * s), dim=-1).flatten(-2)
        x0, x1 = x[..., :HD // 2], x[..., HD // 2:]
        return torch.cat((x0 * c - x1 * s, x1 * c + x0 * s), dim=-1)

    def attention(self, q, k, v):
        """q [B,T,NH,HD], k and v [B,T,NKV,HD] -> [B,T,NH*HD]; kv head j serves query heads jG .. jG+G-1."""
        B, T = q.shape[:2]
        G = self.NH // self.NKV
        kv_of = [h % self.NKV if self.mistake == "gqa_modulo" else h // G for h in range(self.NH)]
        k, v = k[:, :, kv_of], v[:, :, kv_of]  # [B,T,NH,HD]
        scale = 1.0 / math.sqrt(self.C if self.mistake == "attention_scale_C" else self.HD)
        scores = torch.einsum("bthd,bshd->bhts", q, k) * scale  # [B,NH,T,T]
        if self.mistake != "no_causal_mask":
            future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
            scores = scores.masked_fill(future, float("-inf"))
        p = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
        p = p / p.sum(dim=-1, keepdim=True)
        return torch.einsum("bhts,bshd->bthd", p, v).reshape(B, T, self.NH * self.HD)

    def block(self, x, w, l):
        B, T = x.shape[:2]
        NH, NKV, HD, F = self.NH, self.NKV, self.HD, self.F
        qkv = self.rmsnorm(x, w[f"block{l}.attn_norm_w"]) @ w[f"block{l}.qkv_w"].T  # [B,T,(NH+2NKV)HD]
        q = qkv[..., :NH * HD].view(B, T, NH, HD)
        k = qkv[..., NH * HD:(NH + NKV) * HD].view(B, T, NKV, HD)
        v = qkv[..., (NH + NKV) * HD:].view(B, T, NKV, HD)
        y = self.attention(self.rope(q), self.rope(k), v)
        x = x + y @ w[f"block{l}.attproj_w"].T
        gu = self.rmsnorm(x, w[f"block{l}.mlp_norm_w"]) @ w[f"block{l}.gate_up_w"].T  # [B,T,2F]
        gate, up = gu[..., :F], gu[..., F:]
        if self.mistake == "swiglu_swapped":
            gate, up = up, gate
        sw = gate * torch.sigmoid(gate) * up  # silu(gate) * up
        return x + sw @ w[f"block{l}.down_w"].T

    def loss(self, w, tokens, targets):
        """Mean softmax cross-entropy over the B*T positions."""
        x = w["embedding.wte"][tokens]  # [B,T,C], no position table
        for l in range(self.L):
            x = self.block(x, w, l)
        head = w["embedding.wte"] if self.tied else w["head.lm_head"]
        logits = self.rmsnorm(x, w["head.norm_w"]) @ head.T  # [B,T,V]
        return mean_xent(logits, targets)


def mean_xent(logits, targets):
    m = logits.amax(dim=-1, keepdim=True)
    lse = (m + torch.log(torch.exp(logits - m).sum(dim=-1, keepdim=True))).squeeze(-1)
    return (lse - logits.gather(-1, targets[..., None]).squeeze(-1)).mean()


def reference_grads(d, tensors, mistake=None):
    w = {n: v.clone().requires_grad_(True) for n, (v, _) in tensors.items()}
    B, T = d["B"], d["T"]
    tok = torch.tensor(d["tokens"]).view(B, T)
    tgt = torch.tensor(d["targets"]).view(B, T)
    loss = Reference(d["settings"], mistake).loss(w, tok, tgt)
    loss.backward()
    return loss.item(), {n: p.grad for n, p in w.items()}


# ---- Hugging Face transformers (optional) ---------------------------------------

def hf_grads(d, tensors):
    """The same model as transformers' LlamaForCausalLM in float64; None when transformers is missing."""
    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError:
        return None
    s = d["settings"]
    C, NH, NKV, F = s["d_model"], s["heads"], s["kv_heads"], s["ffn_dim"]
    HD = C // NH
    cfg = LlamaConfig(vocab_size=s["vocab"], hidden_size=C, intermediate_size=F, num_hidden_layers=s["layers"],
                      num_attention_heads=NH, num_key_value_heads=NKV, head_dim=HD,
                      max_position_embeddings=s["seq_len"], rms_norm_eps=s["norm_eps"], rope_theta=s["rope_theta"],
                      tie_word_embeddings=bool(s["tied"]), attention_bias=False, mlp_bias=False,
                      hidden_act="silu", attn_implementation="eager")
    model = LlamaForCausalLM(cfg).to(torch.float64)
    # zerotrain's name -> (HF parameter, the slice of zerotrain's tensor it is)
    where = {"embedding.wte": [(model.model.embed_tokens.weight, slice(None))],
             "head.norm_w": [(model.model.norm.weight, slice(None))]}
    if not s["tied"]:
        where["head.lm_head"] = [(model.lm_head.weight, slice(None))]
    for l, layer in enumerate(model.model.layers):
        a, m = layer.self_attn, layer.mlp
        where[f"block{l}.attn_norm_w"] = [(layer.input_layernorm.weight, slice(None))]
        where[f"block{l}.qkv_w"] = [(a.q_proj.weight, slice(0, NH * HD)),
                                    (a.k_proj.weight, slice(NH * HD, (NH + NKV) * HD)),
                                    (a.v_proj.weight, slice((NH + NKV) * HD, None))]
        where[f"block{l}.attproj_w"] = [(a.o_proj.weight, slice(None))]
        where[f"block{l}.mlp_norm_w"] = [(layer.post_attention_layernorm.weight, slice(None))]
        where[f"block{l}.gate_up_w"] = [(m.gate_proj.weight, slice(0, F)), (m.up_proj.weight, slice(F, None))]
        where[f"block{l}.down_w"] = [(m.down_proj.weight, slice(None))]
    with torch.no_grad():
        for name, parts in where.items():
            for p, sl in parts:
                p.copy_(tensors[name][0][sl])
    B, T = d["B"], d["T"]
    tok = torch.tensor(d["tokens"]).view(B, T)
    tgt = torch.tensor(d["targets"]).view(B, T)
    loss = mean_xent(model(input_ids=tok).logits, tgt)
    loss.backward()
    grads = {name: torch.cat([p.grad for p, _ in parts], dim=0) for name, parts in where.items()}
    return loss.item(), grads


# ---- comparison ------------------------------------------------------------------

def rel_err(g, ref):
    scale = ref.abs().max().item()
    diff = (g - ref).abs().max().item()
    return diff / scale if scale > 0 else diff


def compare(label, loss32, grads32, loss64, grads64, verbose):
    """Per-parameter errors; returns the worst gradient error and the loss error."""
    worst = 0.0
    for name, g in grads32.items():
        e = rel_err(g, grads64[name])
        worst = max(worst, e)
        if verbose:
            flag = "ok" if e <= GRAD_TOL else "FAIL"
            print(f"  {name:22s} {str(list(g.shape)):11s} max|g64| {grads64[name].abs().max().item():.3e}"
                  f"  err {e:.2e}  {flag}")
    lerr = abs(loss32 - loss64) / abs(loss64)
    if verbose:
        print(f"  loss: zerotrain {loss32:.9f}  {label} {loss64:.12f}  rel diff {lerr:.2e}"
              f"  {'ok' if lerr <= LOSS_TOL else 'FAIL'}")
    return worst, lerr


def check_dump(path, hf):
    d, tensors = load_dump(path)
    s = d["settings"]
    print(f"== {os.path.basename(path)}: layers {s['layers']} d_model {s['d_model']} heads {s['heads']} "
          f"kv_heads {s['kv_heads']} ffn {s['ffn_dim']} T {d['T']} V {s['vocab']} B {d['B']} "
          f"tied {int(s['tied'])} fused {int(s['attention_fused'])} eps {s['norm_eps']:g}")
    grads32 = {n: g for n, (_, g) in tensors.items()}
    loss64, grads64 = reference_grads(d, tensors)
    worst, lerr = compare("float64", d["loss"], grads32, loss64, grads64, verbose=True)
    ok = worst <= GRAD_TOL and lerr <= LOSS_TOL
    print(f"  worst gradient err {worst:.2e} (bound {GRAD_TOL:g}), loss err {lerr:.2e} (bound {LOSS_TOL:g}):"
          f" {'ok' if ok else 'FAIL'}")
    caught = {}
    for mistake in MISTAKES:  # the negative twins
        lm, gm = reference_grads(d, tensors, mistake)
        w, le = compare(mistake, d["loss"], grads32, lm, gm, verbose=False)
        caught[mistake] = max(w / GRAD_TOL, le / LOSS_TOL)
    scaled = {n: g * (1 + 10 * GRAD_TOL) for n, g in grads32.items()}
    caught["grads_scaled"] = compare("scaled", d["loss"], scaled, loss64, grads64, verbose=False)[0] / GRAD_TOL
    print("  negative twins (error / bound): " + ", ".join(f"{k} {v:.3g}" for k, v in caught.items()))
    hf_res = None
    if hf:
        r = hf_grads(d, tensors)
        if r is None:
            print("  --hf: transformers is not installed, skipped")
        else:
            hw, hl = compare("HF", d["loss"], grads32, r[0], r[1], verbose=False)
            rw, rl = compare("HF", loss64, grads64, r[0], r[1], verbose=False)
            hf_res = max(hw, rw) <= GRAD_TOL and max(hl, rl) <= LOSS_TOL
            print(f"  HF LlamaForCausalLM (float64, eager): zerotrain vs HF grad {hw:.2e} loss {hl:.2e};"
                  f" reference vs HF grad {rw:.2e} loss {rl:.2e}: {'ok' if hf_res else 'FAIL'}")
    return ok and hf_res is not False, caught


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dumps", nargs="*", help="PREFIX.json files written by llama_dump")
    ap.add_argument("--dump", help="the llama_dump executable: write and check the standard variants")
    ap.add_argument("--workdir", help="where --dump writes (default: a temporary folder)")
    ap.add_argument("--hf", action="store_true", help="also compare with transformers' LlamaForCausalLM")
    args = ap.parse_args()
    torch.set_num_threads(1)
    paths = list(args.dumps)
    tmp = None
    if args.dump:
        work = args.workdir or (tmp := tempfile.TemporaryDirectory()).name
        os.makedirs(work, exist_ok=True)
        for name, opts in VARIANTS:
            prefix = os.path.join(work, name)
            subprocess.run([args.dump, "--out", prefix] + opts, check=True, stdout=subprocess.DEVNULL)
            paths.append(prefix + ".json")
    if not paths:
        ap.error("give dumps or --dump")
    all_ok, caught = True, {}
    for p in paths:
        ok, c = check_dump(p, args.hf)
        all_ok &= ok
        for k, v in c.items():
            caught[k] = max(caught.get(k, 0.0), v)
    print("== negative twins: each mistake's worst error over the dumps, in units of its bound (must be > 1)")
    for k, v in caught.items():
        print(f"  {k:18s} {v:10.3g}  {'rejected' if v > 1 else 'NOT REJECTED'}")
        all_ok &= v > 1
    print("PASS" if all_ok else "FAIL")
    if tmp:
        tmp.cleanup()
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
