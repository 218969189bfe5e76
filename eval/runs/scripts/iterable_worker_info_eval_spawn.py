"""mistake: a streaming IterableDataset splits its shards between DataLoader workers with
`get_worker_info().id`; training uses num_workers=2, but the evaluation loader was set to
num_workers=0 "to save memory", where get_worker_info() is None, so every rank fails at the first
evaluation (mp.spawn). A plain Python bug inside a distributed run.
label: none
first_rank: none
launch: python eval/runs/scripts/iterable_worker_info_eval_spawn.py
source: none known
written: session 13c, unseen
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class ShardStream(IterableDataset):
    def __init__(self, rank, world, n_shards=8):
        self.shards = list(range(n_shards))[rank::world]

    def __iter__(self):
        info = get_worker_info()
        for shard in self.shards[info.id :: info.num_workers]:
            g = torch.Generator().manual_seed(shard)
            for _ in range(4):
                yield torch.randn(6, generator=g), shard % 2


def run(rank, world):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29561")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = nn.Linear(6, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train = DataLoader(ShardStream(rank, world), batch_size=4, num_workers=2)
    for x, y in train:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
    print(f"rank {rank}: train epoch done, loss {loss.item():.4f}")
    evalset = DataLoader(ShardStream(rank, world), batch_size=4, num_workers=0)
    correct = torch.zeros(1)
    with torch.no_grad():
        for x, y in evalset:
            correct += (model(x).argmax(-1) == y).sum()
    dist.all_reduce(correct)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2,), nprocs=2, join=True)
