"""mistake: a streaming IterableDataset shards the data files by rank (`files[rank::world_size]`); 5
files over 2 ranks give rank 0 three files and rank 1 two, so rank 0 runs more batches and its last
DDP all-reduce has no partner (init timeout 10 s). Per-rank log files (`--redirects 3 --log-dir`),
main wrapped in @record.
label: D9
alternates: D22
first_rank: none
launch: rm -rf /tmp/s11c_iter_logs && torchrun --redirects 3 --log-dir /tmp/s11c_iter_logs --nproc-per-node 2 eval/runs/scripts/iterable_shards_uneven.py
source: https://discuss.pytorch.org/t/ddp-with-iterabledataset-hangs-at-end-of-epoch/
written: session 11c, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, IterableDataset

FILES = [f"shard-{i:05d}.jsonl" for i in range(5)]


class Stream(IterableDataset):
    def __init__(self, rank, world_size):
        self.files = FILES[rank::world_size]

    def __iter__(self):
        for name in self.files:
            for j in range(8):  # 8 records a file
                yield torch.randn(6), hash((name, j)) % 2


@record
def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    loader = DataLoader(Stream(rank, world), batch_size=4)
    model = DDP(nn.Linear(6, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = 0
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
    print(f"rank {rank}: epoch done after {steps} steps")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
