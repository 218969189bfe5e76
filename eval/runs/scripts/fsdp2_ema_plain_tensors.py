"""mistake: an EMA copy of the weights is taken as plain tensors before the model is sharded with
FSDP2's `fully_shard` (CPU/gloo), and the EMA update after each step mixes those plain tensors with
the now-sharded DTensor parameters, which every rank refuses.
label: E6
alternates: none
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/fsdp2_ema_plain_tensors.py
source: none known
written: session 11b, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))
    ema = [p.detach().clone() for p in model.parameters()]
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(3):
        loss = model(torch.randn(4, 16)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        with torch.no_grad():
            for e, p in zip(ema, model.parameters()):
                e.mul_(0.99).add_(p, alpha=0.01)
        print(f"rank {dist.get_rank()} step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
