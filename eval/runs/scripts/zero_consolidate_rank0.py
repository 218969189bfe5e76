"""mistake: the optimizer is a ZeroRedundancyOptimizer (state sharded over the ranks) and the
checkpoint code calls `optimizer.consolidate_state_dict(to=0)` inside `if rank == 0:` next to the
save; consolidation is a collective every rank must join, so rank 0 waits in it while rank 1 goes
on to the next step's gradient all-reduce (init timeout 10 s).
label: D21
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/zero_consolidate_rank0.py
source: none known
written: session 10b, unseen
"""

import io
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=10))
    rank = dist.get_rank()
    model = DDP(nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 2)))
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-3)
    for step in range(6):
        loss = model(torch.randn(4, 10)).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if step % 3 == 2 and rank == 0:
            opt.consolidate_state_dict(to=0)
            buf = io.BytesIO()
            torch.save({"model": model.state_dict(), "optim": opt.state_dict()}, buf)
            print(f"checkpoint at step {step}: {buf.tell()} bytes", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
