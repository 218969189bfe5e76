"""mistake: the epoch loss is averaged across ranks by all-reducing `loss.item()` (a Python float),
not a tensor.
label: none
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/allreduce_python_float.py
source: none known
"""

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    dist.init_process_group("gloo")
    model = nn.parallel.DistributedDataParallel(nn.Linear(8, 1))
    total = 0.0
    for _ in range(3):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        loss.backward()
        total += loss.item()
    epoch_loss = total / 3
    dist.all_reduce(epoch_loss)
    if dist.get_rank() == 0:
        print("epoch loss", epoch_loss / dist.get_world_size())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
