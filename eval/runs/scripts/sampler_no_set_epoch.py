"""mistake: DistributedSampler(shuffle=True) without sampler.set_epoch(epoch): every epoch sees
the same order. Nothing fails; the log only shows the first indices of each epoch.
label: D22
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/sampler_no_set_epoch.py
source: https://github.com/pytorch/pytorch/issues/31771
"""

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    data = TensorDataset(torch.arange(40))
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=4, sampler=sampler)
    for epoch in range(3):
        first = next(iter(loader))[0].tolist()
        print(f"[rank{rank}] epoch {epoch} first batch {first}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
