"""mistake: the whole backbone is frozen for linear probing, but the probe head is created after
`requires_grad_(False)` was applied to the wrapper module, so DDP gets a module with no trainable
parameter.
label: none
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/ddp_all_frozen.py
written: after the log engine was read (session 8, second batch)
source: none known
"""

import torch.distributed as dist
import torch.nn as nn


def build():
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
    model.requires_grad_(False)
    return model


def main():
    dist.init_process_group("gloo")
    model = nn.parallel.DistributedDataParallel(build())
    print(dist.get_rank(), sum(p.numel() for p in model.parameters()))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
