"""mistake: mixed-precision DDP training on CPU with `torch.autocast("cpu", dtype=torch.bfloat16)` and a
`torch.amp.GradScaler("cpu")`; gradient clipping was moved into a helper that calls
`scaler.unscale_(optimizer)` itself, and the training loop still calls `scaler.unscale_(optimizer)`
before it, so every rank fails on the first step ("unscale_() has already been called"). A plain
Python bug that only shows under torchrun.
label: none
first_rank: none
launch: torchrun --tee 3 --nproc-per-node 2 eval/runs/scripts/gradscaler_unscale_twice.py
source: none known
written: session 13c, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def clip_gradients(scaler, optimizer, model, max_norm=1.0):
    scaler.unscale_(optimizer)
    return torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu")
    for step in range(3):
        x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        norm = clip_gradients(scaler, optimizer, model)
        scaler.step(optimizer)
        scaler.update()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f} grad_norm {norm:.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
