"""mistake: the DataLoader is given both a DistributedSampler and `shuffle=True` (the single-GPU
line kept its shuffle when the sampler was added); every rank raises when the loader is built.
label: none
alternates: D22
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/sampler_with_shuffle.py
source: none known
written: session 9, unseen
"""

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    dist.init_process_group("gloo")
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    loader = DataLoader(data, batch_size=16, shuffle=True, sampler=DistributedSampler(data))
    for x, y in loader:
        pass
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
