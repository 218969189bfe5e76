"""An IterableDataset that shards files by rank: one rank's files hold fewer records.

Hang class: ranks run different numbers of batches (uneven shards).
Label: D9
Odd ranks: 2
Launch: torchrun 3
Held out: written after the first fixes, measured once

Rank 2's shard runs out first; it leaves the loop and waits in `all_gather_object` with its
statistics, while ranks 0 and 1 wait in DDP's all-reduce inside `backward()`.
"""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, IterableDataset

RECORDS_PER_FILE = [400, 400, 96]


class ShardedRecords(IterableDataset):
    def __init__(self, rank: int) -> None:
        self.count = RECORDS_PER_FILE[rank]

    def __iter__(self):
        for _ in range(self.count):
            yield torch.randn(12), torch.randn(1)


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    loader = DataLoader(ShardedRecords(rank), batch_size=16)
    model = DDP(nn.Sequential(nn.Linear(12, 24), nn.Tanh(), nn.Linear(24, 1)))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    seen = 0
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        seen += len(x)
    stats = [None] * dist.get_world_size()
    dist.all_gather_object(stats, {"rank": rank, "seen": seen})
    if rank == 0:
        print(stats)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
