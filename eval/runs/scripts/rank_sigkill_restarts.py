"""mistake: rank 1's process is killed by SIGKILL a few steps in (as the host OOM killer does: it
builds an in-memory cache of the whole dataset); torchrun runs with --max-restarts 2, so the worker
group is restarted and the same kill repeats on every attempt until the restarts are used up.
label: X3
alternates: D20, MN5
first_rank: 1
launch: torchrun --max-restarts 2 --nproc-per-node 2 eval/runs/scripts/rank_sigkill_restarts.py
source: https://discuss.pytorch.org/t/torchrun-exitcode-9-sigkill/
written: session 12, unseen
"""

import os
import signal
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    rank = dist.get_rank()
    cache = []
    for step in range(10):
        grad = torch.randn(256)
        dist.all_reduce(grad)
        if rank == 1:
            cache.append(torch.randn(1024))
            if step == 3:  # stands for the kernel's OOM killer
                os.kill(os.getpid(), signal.SIGKILL)
        print(f"rank {rank} step {step}", flush=True)
        time.sleep(0.1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
