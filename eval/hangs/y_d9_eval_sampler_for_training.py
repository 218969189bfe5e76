"""Fine-tuning with the popular `DistributedEvalSampler` snippet (a `DistributedSampler` that does
not pad, so that evaluation sees each sample exactly once) reused for the training loader "so no
sample is seen twice". With 25 samples on 3 ranks and batch 4, rank 0 gets 9 samples (3 batches)
and ranks 1 and 2 get 8 (2 batches each).

Hang class: ranks run different numbers of batches (the sampler does not pad the uneven dataset),
so one rank runs an extra step whose gradient all-reduce nobody joins.
Label: D9
Odd ranks: 0
Launch: torchrun 3
Held out: session 13

Rank 0 waits in DDP's gradient all-reduce inside `backward()` of its third batch; ranks 1 and 2
wait in the barrier at the end of the epoch.
"""

import math
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, Sampler, TensorDataset


class DistributedEvalSampler(Sampler[int]):
    """Like DistributedSampler, without the padding: shards may differ in length by one."""

    def __init__(self, dataset: Dataset, num_replicas: int, rank: int, shuffle: bool = False,
                 seed: int = 0) -> None:  # fmt: skip
        self.dataset, self.num_replicas, self.rank = dataset, num_replicas, rank
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0
        self.total_size = len(dataset)  # type: ignore[arg-type]
        indices = list(range(self.total_size))[self.rank : self.total_size : self.num_replicas]
        self.num_samples = len(indices)

    def __iter__(self) -> Iterator[int]:
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            indices = torch.randperm(self.total_size, generator=g).tolist()
        else:
            indices = list(range(self.total_size))
        return iter(indices[self.rank : self.total_size : self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(25, 16), torch.randn(25, 1))
    sampler = DistributedEvalSampler(data, num_replicas=world, rank=rank, shuffle=True)
    loader = DataLoader(data, batch_size=4, sampler=sampler, drop_last=False)
    model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    steps_per_epoch = math.ceil(len(sampler) / 4)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        dist.barrier()
        if rank == 0:
            print(f"epoch {epoch}: {steps_per_epoch} steps", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
