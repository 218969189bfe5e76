"""A metric meter whose `global_avg` property syncs across ranks, read in a rank-0 f-string.

Hang class: a collective hidden in a property that only the printing rank reads.
Label: D21
Odd ranks: 0
Launch: mp.spawn 3
Held out: session 9b

Like torchvision's reference MetricLogger, the meter reduces its count and total over the group
when asked for the global average; the epoch summary is printed by rank 0 only, so rank 0 waits
in the property's all_reduce while ranks 1 and 2 wait in the barrier before the next epoch.
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class AverageMeter:
    def __init__(self) -> None:
        self.total = 0.0
        self.count = 0

    def update(self, value: float, n: int = 1) -> None:
        self.total += value * n
        self.count += n

    @property
    def global_avg(self) -> float:
        t = torch.tensor([self.total, float(self.count)], dtype=torch.float64)
        dist.all_reduce(t)
        return (t[0] / t[1]).item()


def worker(rank: int, world: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = os.environ.get("HANG_MASTER_PORT", "29500")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = DDP(nn.Linear(12, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(20):
        meter = AverageMeter()
        for _ in range(15):
            x, y = torch.randn(8, 12), torch.randint(0, 3, (8,))
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            meter.update(loss.item(), len(x))
        if rank == 0:
            print(f"epoch {epoch} train loss {meter.global_avg:.4f}", flush=True)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(3,), nprocs=3)
