"""mistake: the Dataset seeds its per-sample augmentation with `dist.get_rank()` inside
__getitem__, and the DataLoader uses `multiprocessing_context="spawn"` (copied from a CUDA recipe
that needed it); the spawned workers are fresh processes with no process group, so the first
worker's __getitem__ raises on every rank. main() is wrapped in @record.
label: E4
first_rank: none
launch: python -m torch.distributed.run --nproc-per-node 2 eval/runs/scripts/loader_worker_get_rank_spawn.py
source: none known
written: session 11, unseen
"""

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class Augmented(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(1000 * dist.get_rank() + i)
        x = torch.randn(8, generator=g)
        return x, i % 2


@record
def main():
    dist.init_process_group("gloo")
    ds = Augmented()
    loader = DataLoader(
        ds, batch_size=8, sampler=DistributedSampler(ds), num_workers=2,
        multiprocessing_context="spawn",
    )
    model = torch.nn.Linear(8, 2)
    for step, (x, y) in enumerate(loader):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        print(f"rank {dist.get_rank()} step {step} loss {loss.item():.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
