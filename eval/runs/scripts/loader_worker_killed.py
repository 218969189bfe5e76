"""mistake: rank 1's DataLoader workers each load a big decoded image cache; the kernel OOM killer
kills one worker (simulated by SIGKILL from inside the worker) while rank 0 waits in all-reduce.
label: X4
alternates: D20
first_rank: 1
launch: torchrun --nproc-per-node 2 eval/runs/scripts/loader_worker_killed.py
source: https://github.com/CompVis/latent-diffusion/issues/76
"""

import os
import signal
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset


class Images(Dataset):
    def __init__(self, rank):
        self.rank = rank

    def __len__(self):
        return 64

    def __getitem__(self, i):
        if self.rank == 1 and i == 20:
            os.kill(os.getpid(), signal.SIGKILL)
        return torch.randn(3, 8, 8), i % 10


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    rank = dist.get_rank()
    loader = DataLoader(Images(rank), batch_size=4, num_workers=2)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(192, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step, (x, y) in enumerate(loader):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0 and step % 4 == 0:
            print(f"step {step} loss {loss.item():.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
