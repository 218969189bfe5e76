"""mistake: none in the training code: a cleanup cron job on the node kills "stray" python processes
by pattern and sends SIGTERM to rank 1's worker in the middle of training, while rank 0 waits in
the all-reduce.
label: X3
alternates: D20
first_rank: 1
launch: torchrun --nproc-per-node 2 eval/runs/scripts/sigterm_rank1.py
source: none known
written: session 9, unseen
"""

import os
import signal
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = nn.parallel.DistributedDataParallel(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(6):
        if rank == 1 and step == 3:
            os.kill(os.getpid(), signal.SIGTERM)  # stands for the cron job's `pkill -f python`
            time.sleep(1)
        loss = model(torch.randn(4, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"rank {rank} step {step}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
