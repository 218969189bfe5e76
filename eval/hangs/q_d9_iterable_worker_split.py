"""A streaming `IterableDataset` that shards by DataLoader worker AND by rank, with an off-by-one in
the hand-written range split (`n // total + 1` to "round up").

Hang class: ranks run different numbers of batches; the rank that ran out first waits in the
barrier after the epoch while the other waits in the gradient all_reduce.
Label: D9
Odd ranks: 1
Launch: torchrun 2
Held out: session 11b

1000 records, 2 ranks x 2 workers = 4 slices of `1000 // 4 + 1 = 251`, the last cut at the end
(247): rank 0's workers (slices 0, 1) yield 63 + 63 batches of 4, rank 1's (slices 2, 3) 63 + 62.
Rank 1 leaves the loop one step early.
"""

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class Stream(IterableDataset):
    def __init__(self, n: int, rank: int, world: int) -> None:
        self.n, self.rank, self.world = n, rank, world

    def __iter__(self):  # noqa: ANN204
        info = get_worker_info()
        workers = info.num_workers if info else 1
        wid = info.id if info else 0
        total = workers * self.world
        global_id = self.rank * workers + wid
        per = self.n // total + 1  # round up so no record is left out
        start = global_id * per
        end = min(start + per, self.n)
        for i in range(start, end):
            g = torch.Generator().manual_seed(i)
            yield torch.randn(10, generator=g), i % 5


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 5))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = DataLoader(Stream(1000, rank, world), batch_size=4, num_workers=2)
    for epoch in range(3):
        for x, y in loader:
            nn.functional.cross_entropy(model(x), y).backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world
            opt.step()
            opt.zero_grad()
        dist.barrier()  # all ranks finished the epoch
        if rank == 0:
            print(f"epoch {epoch} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
