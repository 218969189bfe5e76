"""mistake: a rotary-embedding-style module caches its cos/sin table on first use (a plain attribute,
built lazily); rank 0 alone runs a quick validation under `torch.inference_mode()` before training, so
its cache is built there as an inference tensor, and its first training step fails ("Inference
tensors cannot be saved for backward") while rank 1 waits in DDP's gradient all-reduce.
label: D20
first_rank: 0
launch: torchrun --nproc-per-node 2 eval/runs/scripts/inference_mode_cache_rank0.py
source: none known
written: session 13c, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Rotary(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim
        self.cache = None

    def forward(self, x):
        if self.cache is None or self.cache.size(0) < x.size(1):
            t = torch.arange(x.size(1), dtype=torch.float32)[:, None]
            freqs = t / (10000 ** (torch.arange(self.dim, dtype=torch.float32) / self.dim))
            self.cache = freqs.cos()
        return x * self.cache[: x.size(1)]


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.rot = Rotary(8)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.rot(self.proj(x)).mean(1))


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = Model()
    if rank == 0:
        with torch.inference_mode():
            val = model(torch.randn(4, 12, 8))
        print(f"sanity val logits mean {val.mean().item():.4f}")
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for step in range(3):
        x, y = torch.randn(4, 12, 8), torch.randint(0, 2, (4,))
        loss = nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
