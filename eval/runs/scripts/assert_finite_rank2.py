"""mistake: rank 2's shard holds a corrupt sample (an inf feature); its loss goes non-finite and
the script's `assert torch.isfinite(loss)` stops rank 2 while ranks 0, 1 and 3 wait for its
gradients (print prefixes per rank).
label: D20
first_rank: 2
launch: torchrun --nproc-per-node 4 eval/runs/scripts/assert_finite_rank2.py
source: none known
"""

import torch
import torch.distributed as dist
import torch.nn as nn


def log(rank, msg):
    print(f"[R{rank}] {msg}", flush=True)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = nn.parallel.DistributedDataParallel(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(6):
        x = torch.randn(16, 8)
        if rank == 2 and step == 3:
            x[5, 2] = float("inf")
        loss = model(x).pow(2).mean()
        assert torch.isfinite(loss), f"non-finite loss at step {step}: {loss.item()}"
        opt.zero_grad()
        loss.backward()
        opt.step()
        log(rank, f"step {step} loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
