"""mistake: the data module builds its DataLoader with a DistributedSampler in `build_loaders()`,
which the refactored main() now calls before `init_process_group` (the setup call moved below it).
label: E4
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/sampler_before_init.py
source: none known
written: session 10, unseen
"""

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def build_loaders():
    ds = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    return DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds))


def main():
    train_loader = build_loaders()
    dist.init_process_group("gloo")
    for x, y in train_loader:
        print(x.shape, y.shape)
        break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
