"""mistake: wanting "the distributed sampler to do the batching", the user passed
`DistributedSampler(dataset)` as the DataLoader's `batch_sampler=` (with no batch_size); it yields
single indices, not lists of them, so the first batch fails to fetch on every rank. `--tee 3`.
label: none
alternates: D22
first_rank: none
launch: torchrun --tee 3 --nproc-per-node 2 eval/runs/scripts/batch_sampler_is_distributed_sampler.py
source: none known
written: session 13b, unseen
"""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    dist.init_process_group("gloo")
    local_rank = int(os.environ["LOCAL_RANK"])
    ds = TensorDataset(torch.randn(128, 16), torch.randint(0, 4, (128,)))
    sampler = DistributedSampler(ds, shuffle=True)
    loader = DataLoader(ds, batch_sampler=sampler, num_workers=0)
    model = DDP(nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        if local_rank == 0:
            print(f"epoch {epoch} loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
