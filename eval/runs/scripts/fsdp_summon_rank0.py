"""mistake: to log the full weight norm, only rank 0 enters `FSDP.summon_full_params(model)` (FSDP1,
CPU/gloo) inside `if rank == 0:`; summoning gathers the shards from every rank, so rank 0's gather
pairs with whatever collective rank 1 runs next, and the ranks' collectives drift apart
(timeout 10 s).
label: D21
alternates: D19
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/fsdp_summon_rank0.py
source: none known
written: session 11b, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=10))
    rank = dist.get_rank()
    model = FSDP(nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 8)), device_id=torch.device("cpu"))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(4):
        loss = model(torch.randn(4, 16)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if rank == 0 and step % 2 == 0:
            with FSDP.summon_full_params(model):
                norm = sum(p.norm() ** 2 for p in model.parameters()) ** 0.5
            print(f"step {step} loss {loss.item():.4f} weight norm {norm:.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
