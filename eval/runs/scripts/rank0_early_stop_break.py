"""mistake: early stopping is decided on rank 0 only (it alone computes the validation loss) and
rank 0 breaks out of the epoch loop, while rank 1, which never learns of the decision, starts the
next epoch and waits in DDP's all-reduce for a partner that has left.
label: D9
alternates: D21
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/rank0_early_stop_break.py
source: none known
written: session 9, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=10))
    rank = dist.get_rank()
    model = nn.parallel.DistributedDataParallel(nn.Linear(6, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    best, patience = float("inf"), 0
    for epoch in range(10):
        for _ in range(3):
            loss = model(torch.randn(8, 6)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        if rank == 0:
            val = 1.0 + 0.01 * epoch
            if val < best:
                best, patience = val, 0
            else:
                patience += 1
            print(f"epoch {epoch} val {val:.3f} patience {patience}", flush=True)
            if patience >= 1:
                print("early stopping", flush=True)
                break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
