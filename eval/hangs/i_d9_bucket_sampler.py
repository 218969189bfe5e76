"""A length-bucketing batch sampler written by hand, sharding each bucket across ranks.

Hang class: ranks get different numbers of batches from a custom sampler; the one that runs out
waits at the end of the epoch while the others wait in DDP's all-reduce.
Label: D9
Odd ranks: 2
Launch: torchrun 3
Held out: written in session 8 before the engine was changed, measured once

Unlike DistributedSampler (which pads every rank to the same length when drop_last=False), this
sampler gives each rank the batches of its own slice of each length bucket and drops a rank's
incomplete batch. Rank 2's slice of the middle bucket is one sentence short of a full batch, so it
finishes the epoch one batch early and waits in the barrier before validation; ranks 0 and 1 wait
in DDP's all-reduce of their last batch.
"""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, Sampler


class Sentences(Dataset[torch.Tensor]):
    def __init__(self, lengths: list[int]) -> None:
        self.lengths = lengths

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.ones(8) * self.lengths[i]


class DistributedBucketSampler(Sampler[list[int]]):
    def __init__(self, lengths: list[int], batch_size: int, rank: int, world: int) -> None:
        buckets: dict[int, list[int]] = {}
        for i, n in enumerate(lengths):
            buckets.setdefault(n // 10, []).append(i)
        self.batches: list[list[int]] = []
        for _, idx in sorted(buckets.items()):
            mine = idx[rank::world]
            for s in range(0, len(mine) - batch_size + 1, batch_size):
                self.batches.append(mine[s : s + batch_size])

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    lengths = [5] * 12 + [15] * 11 + [25] * 6
    dataset = Sentences(lengths)
    loader = DataLoader(dataset, batch_sampler=DistributedBucketSampler(lengths, 2, rank, world))
    model = DDP(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    for epoch in range(100):
        for batch in loader:
            loss = model(batch).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        dist.barrier()  # everybody finished the epoch before validation
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
