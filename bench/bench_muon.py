#!/usr/bin/env python3
"""zerotrain's Muon against a float64 re-implementation of torch.optim.Muon, step by step.

bench/muon_dump (C) trains the GPT family (examples/gpt/) for K steps with
zerotrain's Muon through the engine, in fp32 at one rank, and writes the
initial parameters, every step's batch, its loss and the parameters after
every step. This script builds the same GPT in float64 PyTorch (written
from examples/gpt/gpt_layers.c and the kernels runtime/cpu/ops_*.inc:
learned positions, pre-LN blocks, LayerNorm eps 1e-5 with the biased
variance, fused qkv [3C, C] with q, k, v stacked by rows, causal attention
scaled by 1/sqrt(head_dim), GELU in its tanh form, weights [out, in] as
y = x W^T + b, untied head without a bias, mean cross-entropy), loads the
same initial fp32 values and steps it on the same batches with:

  ref    Muon re-implemented from torch.optim.Muon's single-tensor step,
         entirely in float64 (Newton-Schulz without its bf16 cast), on the
         hidden matrices, q, k and v of each qkv_w as three parameters;
         torch.optim.AdamW (float64) on the rest, weight decay where
         zerotrain's spec says (the `decay` flags: embeddings, head);
  stock  torch.optim.Muon itself (its Newton-Schulz runs in bf16) with the
         run's momentum, Nesterov, coefficients, eps, steps and adjust_lr_fn,
         on the same matrices; the same torch.optim.AdamW on the rest.

Every hyperparameter is the fp32 value the engine held, widened (the
index's "optimizer"), so the runs differ only in arithmetic.

Reported per step k (the loss of step k is before its update, so step 1
compares the forward alone and step k the effect of k - 1 updates):
  |l_zt - l_ref| / l_ref, and the same against the stock optimizer;
  disp: max over tensors of ||p_zt - p_ref|| / ||p_ref - p_0|| after the
  step, the part of each tensor's displacement since the start on which
  the two disagree (with the tensor that sets it); the key third of each
  qkv_b aside, whose exact gradient is 0 (see `compared`).
After step 1 both optimizers start from the same parameters and zero
state, so the first update is compared tensor by tensor
(||dp_zt - dp_ref|| / ||dp_ref||): a wrong formula shows there at 1e-2 or
more, fp32 rounding at 1e-7 .. 1e-4 (the Newton-Schulz line measures the
transform's own share: fp32 and bf16 against float64 on the same input).
The comparison proves it can fail (the negative twins, always run): each
of MISTAKES, made in the reference, must give a worst loss difference
more than 10 x the correct reference's; the exit status is 1 otherwise.

usage (needs torch >= 2.9 for the stock column; not part of CI):
  python3 -m venv /work/venv-torch && /work/venv-torch/bin/pip install torch numpy
  cmake --build build --target muon_dump
  /work/venv-torch/bin/python bench/bench_muon.py --dump build/bench/muon_dump [--steps 20] [--lr 3e-3]
  /work/venv-torch/bin/python bench/bench_muon.py PREFIX.json ...   (existing dumps)

With --dump it writes and compares one dump per learning-rate rule
(match_rms_adamw, zt-train's default, and original).
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

import torch

RULES = ("match_rms_adamw", "original")
HIDDEN = ("qkv_w", "attproj_w", "fc_w", "fcproj_w")  # what Muon is meant for: the blocks' linear maps
LN_EPS = 1e-5  # ops_layernorm.inc


# ---- the dump ----------------------------------------------------------------

def load_dump(index_path):
    """The index and the snapshots as float64 [K + 1, numel]."""
    with open(index_path) as f:
        d = json.load(f)
    with open(os.path.join(os.path.dirname(index_path), d["bin"]), "rb") as f:
        flat = torch.frombuffer(bytearray(f.read()), dtype=torch.float32).to(torch.float64)
    return d, flat.view(d["steps"] + 1, d["snapshot_numel"])


def unflatten(d, snap):
    """{name: tensor} of one snapshot."""
    return {t["name"]: snap[t["value"]:t["value"] + math.prod(t["shape"])].view(t["shape"]).clone()
            for t in d["tensors"]}


def flatten(d, w):
    return torch.cat([w[t["name"]].reshape(-1) for t in d["tensors"]])


# ---- the model, float64, from the equations ---------------------------------

def layernorm(x, w, b):
    m = x.mean(dim=-1, keepdim=True)
    var = ((x - m) ** 2).mean(dim=-1, keepdim=True)  # biased, eps inside the root
    return (x - m) / torch.sqrt(var + LN_EPS) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def attention(qkv, NH):
    """qkv [B,T,3C], rows [q | k | v], head h on channels h*hs .. h*hs+hs-1 -> [B,T,C]."""
    B, T, C3 = qkv.shape
    C = C3 // 3
    q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in qkv.split(C, dim=-1))
    s = q @ k.transpose(-1, -2) / math.sqrt(C // NH)  # [B,NH,T,T]
    s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1), float("-inf"))
    return (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)


def gpt_loss(s, w, tok, tgt):
    """Mean cross-entropy of examples/gpt over tok, tgt [B,T]; w {name: tensor}."""
    T = tok.shape[1]
    x = w["embedding.wte"][tok] + w["embedding.wpe"][:T]
    for l in range(s["layers"]):
        p = lambda n: w[f"block{l}.{n}"]
        h = layernorm(x, p("ln1_w"), p("ln1_b")) @ p("qkv_w").T + p("qkv_b")
        x = x + attention(h, s["heads"]) @ p("attproj_w").T + p("attproj_b")
        h = gelu_tanh(layernorm(x, p("ln2_w"), p("ln2_b")) @ p("fc_w").T + p("fc_b"))
        x = x + h @ p("fcproj_w").T + p("fcproj_b")
    logits = layernorm(x, w["head.lnf_w"], w["head.lnf_b"]) @ w["head.lm_head"].T
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))


# ---- the parameters as the optimizers see them --------------------------------

class Params:
    """Float64 leaves: each hidden matrix's logical parts (qkv_w as q, k, v) and every other tensor."""

    def __init__(self, d, w0, whole=False):
        self.d = d
        self.leaves, self.parts = {}, {}  # leaf name -> tensor; tensor name -> its part leaves' names
        for t in d["tensors"]:
            name, v = t["name"], w0[t["name"]]
            if t["parts"]:
                parts = [sum(t["parts"])] if whole else t["parts"]  # whole: one matrix, not q, k, v
                rows = [sum(parts[:i]) for i in range(len(parts) + 1)]
                self.parts[name] = [f"{name}[{i}]" for i in range(len(parts))]
                for i, leaf in enumerate(self.parts[name]):
                    self.leaves[leaf] = v[rows[i]:rows[i + 1]].clone().requires_grad_(True)
            else:
                self.leaves[name] = v.clone().requires_grad_(True)

    def tensors(self):
        """{name: tensor}, the parts stacked back (differentiable)."""
        w = {}
        for t in self.d["tensors"]:
            n = t["name"]
            w[n] = torch.cat([self.leaves[p] for p in self.parts[n]]) if n in self.parts else self.leaves[n]
        return w

    def matrices(self):
        return [self.leaves[p] for ps in self.parts.values() for p in ps]

    def others(self, decay):
        return [self.leaves[t["name"]] for t in self.d["tensors"] if not t["parts"] and bool(t["decay"]) == decay]


def check_hidden(d):
    """zerotrain's hidden set must be the blocks' four linear maps, qkv_w in three [C, C] parts."""
    C = d["settings"]["d_model"]
    for t in d["tensors"]:
        want = t["name"].split(".")[-1] in HIDDEN and t["name"].startswith("block")
        if bool(t["parts"]) != want:
            sys.exit(f"bench_muon: {t['name']}: hidden {bool(t['parts'])} in zerotrain's spec, expected {want}")
        if t["name"].endswith("qkv_w") and t["parts"] != [C, C, C]:
            sys.exit(f"bench_muon: {t['name']}: parts {t['parts']}, expected q, k, v of {C} rows")


# ---- Muon, torch.optim.Muon's single-tensor step in float64 --------------------

def newton_schulz(g, coef, steps, eps, dtype=torch.float64):
    """_zeropower_via_newtonschulz without the bf16 cast (dtype: where it computes)."""
    a, b, c = coef
    x = g.to(dtype)
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    x = x / x.norm().clamp(min=eps)
    for _ in range(steps):
        A = x @ x.T
        B = b * A + c * (A @ A)
        x = a * x + B @ x
    return (x.T if tall else x).to(g.dtype)


def adjusted_lr(lr, rule, shape):
    A, B = shape
    return lr * (0.2 * math.sqrt(max(A, B)) if rule == "match_rms_adamw" else math.sqrt(max(1.0, A / B)))


class MuonRef:
    def __init__(self, params, o):
        self.params, self.o = params, o
        self.bufs = [torch.zeros_like(p) for p in params]

    @torch.no_grad()
    def step(self):
        o = self.o
        mu, lr, wd = o["momentum"], o["lr"], o["weight_decay"]
        for p, buf in zip(self.params, self.bufs):
            g = p.grad
            buf.lerp_(g, 1 - mu)
            u = g.lerp(buf, mu) if o["nesterov"] else buf
            u = newton_schulz(u, o["ns_coefficients"], o["ns_steps"], o["muon_eps"])
            p.mul_(1 - lr * wd)
            p.add_(u, alpha=-adjusted_lr(lr, o["adjust_lr"], p.shape))

    def zero_grad(self):
        for p in self.params:
            p.grad = None


def make_optimizers(P, o, kind):
    """[Muon on the matrices, AdamW on the rest] of `kind` (ref or stock)."""
    if kind == "ref":
        muon = MuonRef(P.matrices(), o)
    else:
        muon = torch.optim.Muon(P.matrices(), lr=o["lr"], weight_decay=o["weight_decay"], momentum=o["momentum"],
                                nesterov=o["nesterov"], ns_coefficients=tuple(o["ns_coefficients"]),
                                eps=o["muon_eps"], ns_steps=o["ns_steps"], adjust_lr_fn=o["adjust_lr"])
    groups = [{"params": P.others(True), "weight_decay": o["weight_decay"]},
              {"params": P.others(False), "weight_decay": 0.0}]
    adamw = torch.optim.AdamW(groups, lr=o["lr"] * o["adamw_lr_scale"], betas=(o["beta1"], o["beta2"]), eps=o["eps"],
                              foreach=False)
    return [muon, adamw]


# Plausible mistakes the comparison must catch (the negative twins): q, k, v
# orthogonalized as one [3C, C] matrix; the other learning-rate rule; no
# Nesterov blend.
MISTAKES = ("qkv_whole", "other_rule", "no_nesterov")


def train(d, snaps, kind, mistake=None):
    """Losses [K] and parameter snapshots [K + 1, numel] of the float64 run (mistake: one of MISTAKES)."""
    P = Params(d, unflatten(d, snaps[0]), whole=mistake == "qkv_whole")
    o = dict(d["optimizer"])
    if mistake == "other_rule":
        o["adjust_lr"] = RULES[1 - RULES.index(o["adjust_lr"])]
    if mistake == "no_nesterov":
        o["nesterov"] = False
    opts = make_optimizers(P, o, kind)
    B, T = d["B"], d["T"]
    losses, out = [], [snaps[0]]
    for k in range(d["steps"]):
        tok = torch.tensor(d["tokens"][k]).view(B, T)
        tgt = torch.tensor(d["targets"][k]).view(B, T)
        loss = gpt_loss(d["settings"], P.tensors(), tok, tgt)
        for opt in opts:
            opt.zero_grad()
        loss.backward()
        for opt in opts:
            opt.step()
        losses.append(loss.item())
        with torch.no_grad():
            out.append(flatten(d, P.tensors()))
    return losses, out


# ---- comparison ------------------------------------------------------------------

def compared(d, snap):
    """{name: tensor} of a snapshot without the key bias (the middle third of each
    qkv_b), apart under "key_bias". Its exact gradient is 0 (a bias on every key
    adds the same q.b to each score of a row, and the softmax ignores it), so its
    gradient is pure rounding, which AdamW's g / (sqrt(v) + eps) scales up to a
    sizeable step: fp32 rounding moves it, float64's barely; the loss never sees it."""
    w = unflatten(d, snap)
    C, kb = d["settings"]["d_model"], []
    for n in [n for n in w if n.endswith(".qkv_b")]:
        kb.append(w[n][C:2 * C])
        w[n] = torch.cat((w[n][:C], w[n][2 * C:]))
    w["key_bias"] = torch.cat(kb)
    return w


def displacement_diff(d, p0, pz, pr):
    """Max over tensors of ||pz - pr|| / ||pr - p0|| (the key bias aside), and the tensor."""
    w0, wz, wr = compared(d, p0), compared(d, pz), compared(d, pr)
    worst = (0.0, "")
    for n in w0:
        moved = (wr[n] - w0[n]).norm().item()
        if n != "key_bias" and moved > 0:
            worst = max(worst, ((wz[n] - wr[n]).norm().item() / moved, n))
    return worst


def first_update(d, p0, pz, pr):
    """Per tensor ||dp_zt - dp_ref|| / ||dp_ref|| of step 1 (same start, zero state), the
    key bias aside; and the largest step zerotrain gave a key bias element."""
    w0, wz, wr = compared(d, p0), compared(d, pz), compared(d, pr)
    out = {}
    for n in w0:
        dr = wr[n] - w0[n]
        if n != "key_bias":
            out[n] = (wz[n] - w0[n] - dr).norm().item() / dr.norm().item() if dr.norm() > 0 else 0.0
    return out, (wz["key_bias"] - w0["key_bias"]).abs().max().item()


def negative_twins(d, snaps, real_update, real_loss):
    """Each mistake's worst step-1 update difference (matrices) and worst loss
    difference against zerotrain, in units of the correct reference's."""
    out = {}
    for m in MISTAKES:
        loss, sn = train(d, snaps, "ref", m)
        fu = first_update(d, snaps[0], snaps[1], sn[1])[0]
        upd = max(v for n, v in fu.items() if n.split(".")[-1] in HIDDEN)
        rel = max(abs(lz - lm) / lm for lz, lm in zip(d["loss"], loss))
        out[m] = (upd / real_update, rel / real_loss)
    return out


def ns_check(d, snaps):
    """Newton-Schulz alone, fp32 and bf16 against float64 on step 1's update of each
    matrix part (the float64 gradient, so rounding in the transform is all that differs)."""
    P = Params(d, unflatten(d, snaps[0]))
    B, T = d["B"], d["T"]
    loss = gpt_loss(d["settings"], P.tensors(), torch.tensor(d["tokens"][0]).view(B, T),
                    torch.tensor(d["targets"][0]).view(B, T))
    loss.backward()
    o, worst = d["optimizer"], {torch.float32: 0.0, torch.bfloat16: 0.0}
    for p in P.matrices():
        u = p.grad  # step 1: buf = (1 - mu) g, u = g + mu (buf - g): a multiple of g, orthogonalized alike
        ref = newton_schulz(u, o["ns_coefficients"], o["ns_steps"], o["muon_eps"])
        for dt in worst:
            low = newton_schulz(u, o["ns_coefficients"], o["ns_steps"], o["muon_eps"], dt)
            worst[dt] = max(worst[dt], ((low - ref).norm() / ref.norm()).item())
    return worst


def have_stock_muon():
    return hasattr(torch.optim, "Muon")


def compare_dump(path):
    d, snaps = load_dump(path)
    check_hidden(d)
    o, s = d["optimizer"], d["settings"]
    print(f"== {os.path.basename(path)}: layers {s['layers']} d_model {s['d_model']} heads {s['heads']} "
          f"T {d['T']} V {s['vocab']} B {d['B']} tied {int(s['tied'])}; {d['steps']} steps, lr {o['lr']:.6g} "
          f"(constant), adjust_lr {o['adjust_lr']}, weight_decay {o['weight_decay']:.6g}, momentum "
          f"{o['momentum']:.6g} nesterov {int(o['nesterov'])}, ns_steps {o['ns_steps']}, AdamW betas "
          f"({o['beta1']:.6g}, {o['beta2']:.6g}) eps {o['eps']:.3g}")
    ref_loss, ref_snaps = train(d, snaps, "ref")
    stock_loss = train(d, snaps, "stock")[0] if have_stock_muon() else None
    if stock_loss is None:
        print(f"  torch {torch.__version__} has no torch.optim.Muon: the stock column is left out")
    print("| step | zerotrain loss | float64 ref loss | rel diff (a) | disp diff (a) | worst tensor | "
          "stock Muon loss | rel diff zt vs stock (b) |")
    print("|---|---|---|---|---|---|---|---|")
    rel_a, rel_b = [], []
    for k in range(d["steps"]):
        lz, lr_ = d["loss"][k], ref_loss[k]
        rel_a.append(abs(lz - lr_) / lr_)
        disp, name = displacement_diff(d, snaps[0], snaps[k + 1], ref_snaps[k + 1])
        stock = "-"
        if stock_loss:
            rel_b.append(abs(lz - stock_loss[k]) / stock_loss[k])
            stock = f"{stock_loss[k]:.7f} | {rel_b[-1]:.2e}"
        print(f"| {k + 1} | {lz:.7f} | {lr_:.7f} | {rel_a[-1]:.2e} | {disp:.2e} | {name} | {stock} |")
    summary = {"a_max": max(rel_a), "a_median": statistics.median(rel_a)}
    print(f"  (a) zerotrain vs float64 ref: rel loss diff max {summary['a_max']:.2e}, median "
          f"{summary['a_median']:.2e} over {d['steps']} steps")
    if rel_b:
        summary.update(b_max=max(rel_b), b_median=statistics.median(rel_b))
        print(f"  (b) zerotrain vs stock torch.optim.Muon (bf16 Newton-Schulz): rel loss diff max "
              f"{summary['b_max']:.2e}, median {summary['b_median']:.2e}")
    fu, key_step = first_update(d, snaps[0], snaps[1], ref_snaps[1])
    worst = max(fu.items(), key=lambda kv: kv[1])
    print(f"  step 1 update, ||dp_zt - dp_ref|| / ||dp_ref|| per tensor: worst {worst[1]:.2e} ({worst[0]}); "
          "block 0's: " + ", ".join(f"{n.split('.', 1)[1] if n.startswith('block0') else n} {v:.1e}"
                                    for n, v in fu.items() if n.startswith(("block0", "embedding", "head"))))
    print(f"  key bias (exact gradient 0, left out above): zerotrain's largest step-1 move {key_step:.1e} "
          f"(lr {o['lr']:.3g})")
    ns = ns_check(d, snaps)
    print(f"  Newton-Schulz alone on step 1's float64 updates, worst rel diff vs float64: fp32 "
          f"{ns[torch.float32]:.2e}, bf16 {ns[torch.bfloat16]:.2e}")
    mat = max(v for n, v in fu.items() if n.split(".")[-1] in HIDDEN)
    twins = negative_twins(d, snaps, mat, summary["a_max"])
    print("  negative twins (a mistake made in the reference; its step-1 matrix update diff and worst loss diff, "
          "in units of the correct reference's): "
          + ", ".join(f"{m} {u:.3g} / {l:.3g}" for m, (u, l) in twins.items()))
    # no_nesterov's first update is the correct one (a zero buffer makes both blends a
    # multiple of g, which Newton-Schulz normalizes away): the loss is what must catch each
    summary["caught"] = all(l > 10 for _, l in twins.values())
    if not summary["caught"]:
        print("  NOT ALL MISTAKES STAND OUT: the comparison is too blunt to trust")
    return summary


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dumps", nargs="*", help="PREFIX.json files written by muon_dump")
    ap.add_argument("--dump", help="the muon_dump executable: write and compare one dump per adjust rule")
    ap.add_argument("--workdir", help="where --dump writes (default: a temporary folder)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}; torch.optim.Muon {'present' if have_stock_muon() else 'absent'}")
    paths, tmp = list(args.dumps), None
    if args.dump:
        work = args.workdir or (tmp := tempfile.TemporaryDirectory()).name
        os.makedirs(work, exist_ok=True)
        for rule in RULES:
            prefix = os.path.join(work, f"muon-{rule}")
            subprocess.run([args.dump, "--out", prefix, "--steps", str(args.steps), "--lr", repr(args.lr),
                            "--adjust", rule, "--weight-decay", repr(args.weight_decay), "--seed", str(args.seed)],
                           check=True)
            paths.append(prefix + ".json")
    if not paths:
        ap.error("give dumps or --dump")
    ok = True
    for p in paths:
        ok &= compare_dump(p)["caught"]
    if tmp:
        tmp.cleanup()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
