"""A streaming `IterableDataset` over data files, the file list split between ranks with
`files[rank::world]`; the files hold different numbers of rows, no `drop_last` can help.

Hang class: ranks run different numbers of batches; the rank whose files ran out first waits in
the end-of-epoch barrier while the other waits in DDP's gradient all-reduce.
Label: D9
Odd ranks: 1
Launch: mp.spawn 2
Held out: session 11d

Files of 300, 280, 300, 200 rows: rank 0 reads files 0 and 2 (600 rows, 38 batches of 16), rank 1
files 1 and 3 (480 rows, 30 batches). Rank 1 leaves the epoch after 30 steps.
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, IterableDataset

FILE_ROWS = [300, 280, 300, 200]


class ShardedFiles(IterableDataset):
    def __init__(self, files: list[int], rank: int, world: int) -> None:
        self.files = files[rank::world]

    def __iter__(self):  # noqa: ANN204
        for index, rows in enumerate(self.files):
            gen = torch.Generator().manual_seed(index)
            for _ in range(rows):
                yield torch.randn(10, generator=gen)


def run(rank: int, world: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DDP(nn.Linear(10, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(ShardedFiles(FILE_ROWS, rank, world), batch_size=16)
    for epoch in range(3):
        for batch in loader:
            loss = (model(batch) - batch).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        dist.barrier()
        if rank == 0:
            print(f"epoch {epoch} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2,), nprocs=2)
