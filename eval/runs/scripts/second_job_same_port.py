"""mistake: a second experiment is started with torchrun on the same machine while the first one is
still training; both use the default rendezvous port, so the second launcher cannot bind it.
label: D4
first_rank: none
launch: (torchrun --nproc-per-node 2 eval/runs/scripts/second_job_same_port.py --lr 0.1 &) ; sleep 6 ; torchrun --nproc-per-node 2 eval/runs/scripts/second_job_same_port.py --lr 0.01 ; sleep 8
source: none known
"""

import argparse
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float, default=0.1)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = nn.parallel.DistributedDataParallel(nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    for step in range(12):
        loss = model(torch.randn(16, 32)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0 and step % 4 == 0:
            print(f"lr={args.lr} step {step} loss {loss.item():.4f}", flush=True)
        time.sleep(1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
