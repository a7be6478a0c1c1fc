#!/usr/bin/env python3
"""transformers loads zt-export --format hf directories and computes
zerotrain's loss (docs/interop_export.md). Needs a venv with torch and
transformers (not CI: PyPI):

    /work/venv-torch/bin/python bench/bench_hf_export.py [BUILD_DIR]

For each model (GPT untied and tied, Llama with grouped-query attention and
tied) it trains zerotrain for STEPS steps on a data file of T + 1 bytes
(--vocab 256), saving the last step, and evaluates it on the same file
(--val-data, one micro-batch of B rows after step STEPS: zerotrain's eval
loss, docs/data.md). Row b of that batch is the stream's tokens from b x T
(the file repeats), so the script builds the same B rows and transformers
computes their mean cross-entropy from the exported directory (fp32, eager
attention); the relative difference must be <= 1e-5.

Then the other way (zt-train --init-from): for GPT-2 (untied and tied) and
Llama (grouped-query) configs, transformers creates a model (random init,
every parameter then moved by N(0, 0.02) so the norms are not all ones),
saves it with save_pretrained, and computes its loss on the same tokens;
zerotrain imports the directory and logs its loss at step 1 with --lr 0
(the loss of the imported parameters). Same bound."""
import json
import os
import random
import subprocess
import sys
import tempfile

import torch
import transformers
from transformers import AutoModelForCausalLM

STEPS, T = 20, 32
SHAPE = ["--layers", "2", "--d-model", "64", "--heads", "4", "--seq-len", str(T), "--vocab", "256",
         "--micro-batch", "2", "--warmup", "2"]
MODELS = {"gpt": [], "gpt_tied": ["--tied", "1"], "llama_gqa": ["--model", "llama", "--kv-heads", "2"],
          "llama_tied": ["--model", "llama", "--tied", "1"]}


def zt_eval_after(zt, work, name, flags, data):
    """Trains STEPS steps, saving the last, and returns the evaluation loss
    on data after step STEPS (the checkpoint's parameters)."""
    save, log = os.path.join(work, name), os.path.join(work, name + "-log")
    subprocess.run([zt] + SHAPE + flags + ["--data", data, "--steps", str(STEPS), "--save-every", str(STEPS),
                    "--save-dir", save, "--val-data", data, "--eval-every", str(STEPS), "--eval-batches", "1",
                    "--log-dir", log], check=True, capture_output=True)
    with open(os.path.join(log, "rank0.jsonl")) as f:
        rows = [json.loads(line) for line in f if line.startswith("{\"step\"")]
    return save, [r for r in rows if r["step"] == STEPS][0]["val_loss"]


def eval_rows(tokens, rows):
    """zerotrain's evaluation batch on a stream of these tokens: row b's T
    inputs from b x T, its targets one later ([rows, T] each)."""
    n = len(tokens)
    ids = [[tokens[(b * T + t) % n] for t in range(T)] for b in range(rows)]
    targets = [[tokens[(b * T + t + 1) % n] for t in range(T)] for b in range(rows)]
    return ids, targets


def hf_loss(out, tokens, rows=1):
    """transformers' mean cross-entropy over the rows of eval_rows."""
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    ids, targets = eval_rows(tokens, rows)
    with torch.no_grad():
        logits = model(torch.tensor(ids)).logits.double()  # [rows, T, V]
    loss = torch.nn.functional.cross_entropy(logits.reshape(rows * T, -1), torch.tensor(targets).reshape(-1))
    return loss.item(), type(model).__name__


# transformers' configs and the zerotrain flags that build the same model
IMPORTS = {
    "gpt2": (lambda: transformers.GPT2Config(vocab_size=256, n_positions=T, n_embd=64, n_layer=2, n_head=4,
                                             bos_token_id=None, eos_token_id=None, tie_word_embeddings=False), []),
    "gpt2_tied": (lambda: transformers.GPT2Config(vocab_size=256, n_positions=T, n_embd=64, n_layer=2, n_head=4,
                                                  bos_token_id=None, eos_token_id=None, tie_word_embeddings=True), ["--tied", "1"]),
    "llama_gqa": (lambda: transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=160,
                                                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                                   max_position_embeddings=T, rms_norm_eps=1e-6,
                                                   tie_word_embeddings=False),
                  ["--model", "llama", "--kv-heads", "2", "--ffn-dim", "160", "--norm-eps", "1e-6",
                   "--rope-theta", "10000"]),
}


def hf_saved(config, out):
    """A transformers model of config, randomly initialised and moved, saved to out (fp32)."""
    torch.manual_seed(3)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    model.save_pretrained(out)


def zt_first_loss(zt, work, name, flags, data, out):
    log = os.path.join(work, name + "-import-log")
    subprocess.run([zt] + SHAPE + flags + ["--data", data, "--steps", "1", "--lr", "0", "--init-from", out,
                    "--log-dir", log], check=True, capture_output=True)
    with open(os.path.join(log, "rank0.jsonl")) as f:
        rows = [json.loads(line) for line in f if line.startswith("{\"step\"")]
    return rows[0]["loss"]


def import_rows(zt, work, data, tokens):
    worst = 0.0
    print(f"\n{'import':<12} {'class':<18} {'transformers loss':>18} {'zerotrain loss':>15} {'rel diff':>10}")
    for name, (config, flags) in IMPORTS.items():
        out = os.path.join(work, name + "-made-by-transformers")
        hf_saved(config(), out)
        theirs, cls = hf_loss(out, tokens)
        ours = zt_first_loss(zt, work, name, flags, data, out)
        rel = abs(theirs - ours) / abs(theirs)
        worst = max(worst, rel)
        print(f"{name:<12} {cls:<18} {theirs:>18.8f} {ours:>15.8f} {rel:>10.2e}")
    return worst


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    zt, exporter = os.path.join(build, "examples", "zt-train"), os.path.join(build, "checkpointing", "zt-export")
    work = tempfile.mkdtemp(prefix="zt-bench-hf-")
    rng = random.Random(7)
    tokens = [rng.randrange(256) for _ in range(T + 1)]
    data = os.path.join(work, "tokens.bin")
    with open(data, "wb") as f:
        f.write(bytes(tokens))
    worst = 0.0
    print(f"{'model':<12} {'class':<18} {'zerotrain loss':>15} {'transformers loss':>18} {'rel diff':>10}")
    for name, flags in MODELS.items():
        ckpt, ours = zt_eval_after(zt, work, name, flags, data)
        out = os.path.join(work, name + "-hf")
        subprocess.run([exporter, ckpt, out, "--format", "hf"], check=True, capture_output=True)
        theirs, cls = hf_loss(out, tokens, rows=int(SHAPE[SHAPE.index("--micro-batch") + 1]))
        rel = abs(theirs - ours) / abs(ours)
        worst = max(worst, rel)
        print(f"{name:<12} {cls:<18} {ours:>15.8f} {theirs:>18.8f} {rel:>10.2e}")
    worst = max(worst, import_rows(zt, work, data, tokens))
    print(f"worst relative difference {worst:.2e} ({'ok' if worst <= 1e-5 else 'FAIL'}: <= 1e-5)")
    return 0 if worst <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
