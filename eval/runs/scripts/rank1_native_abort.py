"""mistake: rank 1's shard holds an image the native decoder cannot handle, and the decoder aborts
the process (a C++ assertion calling abort(), here os.abort()); no Python traceback, SIGABRT,
while rank 0 waits in DDP's all-reduce. Output goes to per-rank files (`--redirects 3 --log-dir`).
label: D20
alternates: P6
first_rank: 1
launch: rm -rf /tmp/r9b_logs && torchrun --redirects 3 --log-dir /tmp/r9b_logs --nproc-per-node 2 eval/runs/scripts/rank1_native_abort.py
source: none known
written: session 9b, unseen
"""

import os

import torch
import torch.distributed as dist
import torch.nn as nn


def decode(rank, step):
    if rank == 1 and step == 2:
        os.abort()  # the native decoder's failed assertion
    return torch.randn(4, 8)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = nn.parallel.DistributedDataParallel(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(5):
        loss = model(decode(rank, step)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"rank {rank} step {step}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
