"""mistake: a hand-rolled fp16-style loss scaler with manual gradient averaging: each rank checks its
own local gradients for inf/nan and, when it finds one, halves the scale and skips the step with
`continue`, before the `all_reduce` that averages the gradients; on rank 1 an overflowing batch
skips that all-reduce, so from then on the ranks' all-reduces pair up with different tensors and
rank 0 finally waits for a call rank 1 never makes (timeout 15 s).
label: D21
alternates: D19
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/loss_scale_skip_sync_rank.py
source: none known
written: session 13c, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 20), nn.Tanh(), nn.Linear(20, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scale = 2.0**16
    torch.manual_seed(rank)
    for step in range(6):
        x, y = torch.randn(8, 10), torch.randn(8, 1)
        if rank == 1 and step == 2:
            x[0, 0] = float("inf")  # an overflowing activation on this rank's batch
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        (loss * scale).backward()
        grads = [p.grad for p in model.parameters()]
        if any(not torch.isfinite(g).all() for g in grads):
            scale /= 2
            print(f"rank {rank} step {step}: overflow, scale -> {scale}")
            continue
        for g in grads:
            dist.all_reduce(g)
            g /= world * scale
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.4f}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
