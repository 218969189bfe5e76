"""mistake: gradient accumulation under DDP with `no_sync()`, where the number of micro-steps comes
from each rank's own memory probe (an "auto accumulation" helper: 2 on rank 0, 1 on rank 1); the
ranks then all-reduce gradients on different steps, and rank 1 runs more gradient all-reduces than
rank 0 within the same batches, so the ranks' collectives stop pairing up (init timeout 15 s).
Per-rank log files (`--redirects 3 --log-dir`), main wrapped in @record.
label: E12
alternates: D9
first_rank: none
launch: rm -rf /tmp/r11_accum_logs && torchrun --redirects 3 --log-dir /tmp/r11_accum_logs --nproc-per-node 2 eval/runs/scripts/accum_steps_per_rank.py
source: none known
written: session 11, unseen
"""

import contextlib
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP


def auto_accumulation(rank):
    # stands for a probe of free memory: the smaller card accumulates more micro-steps
    return 2 if rank == 0 else 1


@record
def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    accum = auto_accumulation(rank)
    for micro in range(6):
        x, y = torch.randn(4, 16), torch.randn(4, 1)
        last = (micro + 1) % accum == 0
        ctx = contextlib.nullcontext() if last else model.no_sync()
        with ctx:
            loss = nn.functional.mse_loss(model(x), y) / accum
            loss.backward()
        if last:
            opt.step()
            opt.zero_grad()
            stats = torch.tensor([loss.item(), float(micro)])
            dist.all_reduce(stats)
            print(f"rank {rank} micro {micro} step done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
