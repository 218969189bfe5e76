"""mistake: validation runs on rank 0 only (`val_loss = evaluate(model) if rank == 0 else None`), but the
`ReduceLROnPlateau` scheduler is stepped with `val_loss` on every rank; rank 1 raises on the None while
rank 0 goes on into the next epoch's gradient all-reduce and waits for it until the 15 s process-group
timeout. One `python` per rank with env://.
label: D20
alternates: D21
first_rank: 1
launch: MASTER_ADDR=127.0.0.1 WORLD_SIZE=2 RANK=0 python eval/runs/scripts/plateau_val_loss_rank0_only.py & sleep 0.5; MASTER_ADDR=127.0.0.1 WORLD_SIZE=2 RANK=1 python eval/runs/scripts/plateau_val_loss_rank0_only.py; wait
source: none known
written: session 13, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def evaluate(model):
    model.eval()
    with torch.no_grad():
        loss = model(torch.randn(16, 8)).pow(2).mean().item()
    model.train()
    return loss


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    rank = dist.get_rank()
    model = DDP(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=1)
    for epoch in range(3):
        for _ in range(2):
            loss = model(torch.randn(8, 8)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        val_loss = evaluate(model) if rank == 0 else None
        if rank == 0:
            print(f"epoch {epoch} val_loss {val_loss:.4f}", flush=True)
        sched.step(val_loss)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
