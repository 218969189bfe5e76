"""mistake: gradient accumulation under DDP wraps every micro-step in `model.no_sync()`, including
the last one before optimizer.step() (the condition that should leave the last one out tests the
wrong counter), so gradients are never all-reduced and the replicas drift apart; the script's own
end-of-epoch consistency check (parameter checksums gathered from all ranks) raises on every rank.
label: E12
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/no_sync_every_step.py
source: none known
written: session 10b, unseen
"""

import contextlib

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

ACCUM = 4


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    step = 0
    for micro in range(16):
        x, y = torch.randn(4, 8), torch.randn(4, 1)
        last = (step + 1) % ACCUM == 0
        ctx = model.no_sync() if not last else contextlib.nullcontext()
        with ctx:
            loss = nn.functional.mse_loss(model(x), y) / ACCUM
            loss.backward()
        if (micro + 1) % ACCUM == 0:
            opt.step()
            opt.zero_grad()
            step += 1
    checksum = torch.stack([p.detach().sum() for p in model.parameters()]).sum().reshape(1)
    sums = [torch.zeros(1) for _ in range(dist.get_world_size())]
    dist.all_gather(sums, checksum)
    if not all(torch.allclose(s, sums[0]) for s in sums):
        raise RuntimeError(f"model replicas diverged: checksums {[round(s.item(), 6) for s in sums]}")
    print(f"rank {rank} ok", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
