"""The PyTorch side of bench_vs_torch.py: the toy GPT's exact shape (token and
position embeddings, pre-norm blocks with fused qkv, causal SDPA, GELU tanh,
4C MLP, final layernorm, tied head), trained with AdamW (fused) on random
tokens, fp32, one thread per rank, under FSDP2 (fully_shard) or DDP over
gloo. Launched by torch.distributed.run; prints one JSON line on rank 0:
median step time, peak RSS per rank, parameter count.

usage: torchrun --nproc_per_node 2 torch_gpt.py MODE L C NH T V B STEPS
"""
import json
import resource
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.nh = NH
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fc2 = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.nh, C // self.nh).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, NH, T, V):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()  # tied head
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def main():
    mode = sys.argv[1]
    L, C, NH, T, V, B, steps = (int(a) for a in sys.argv[2:9])
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(1234)
    model = GPT(L, C, NH, T, V)
    nparams = sum(p.numel() for p in model.parameters())
    if mode == "fsdp2":
        from torch.distributed.fsdp import fully_shard
        for b in model.blocks:
            fully_shard(b)
        fully_shard(model)
    else:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.0, fused=True)
    g = torch.Generator().manual_seed(rank)
    times = []
    for step in range(steps):
        idx = torch.randint(0, V, (B, T), generator=g)
        t0 = time.perf_counter()
        loss = model(idx, torch.roll(idx, -1, 1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        dist.barrier()
        times.append(time.perf_counter() - t0)
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0])
    dist.all_reduce(rss, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(json.dumps({"step_time_s": statistics.median(times[1:]), "peak_rss_bytes": rss.item(),
                          "params": nparams, "threads": torch.get_num_threads()}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
