"""mistake: a Trainer class builds its DataLoader (with a DistributedSampler) in `__init__`, and
the worker function constructs the Trainer before calling `trainer.setup()`, which is where
`init_process_group` happens; every spawned process fails in the sampler (mp.spawn).
label: E4
first_rank: none
launch: python eval/runs/scripts/trainer_sampler_before_setup_spawn.py
source: none known
written: session 12c, unseen
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Trainer:
    def __init__(self, rank, world_size):
        self.rank = rank
        self.world_size = world_size
        ds = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
        self.loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds))

    def setup(self):
        dist.init_process_group("gloo", rank=self.rank, world_size=self.world_size)

    def fit(self):
        for x, _ in self.loader:
            t = x.sum()
            dist.all_reduce(t)
        print(f"rank {self.rank} done", flush=True)


def run(rank, world_size):
    trainer = Trainer(rank, world_size)
    trainer.setup()
    trainer.fit()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29561")
    mp.spawn(run, args=(2,), nprocs=2)
