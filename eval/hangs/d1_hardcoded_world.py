"""A script written for a 4-GPU box, run with torchrun on 2 processes: world_size is hard-coded.

Hang class: the group waits for ranks that nobody started.
Label: D1
Odd ranks: 2 3
Launch: torchrun 2 world 4

`init_process_group(world_size=4)` with RANK from torchrun: ranks 0 and 1 wait in
`init_process_group` for ranks 2 and 3, which do not exist.
"""

import os

import torch
import torch.distributed as dist

WORLD_SIZE = 4


def main() -> None:
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", rank=rank, world_size=WORLD_SIZE)
    x = torch.ones(2)
    dist.all_reduce(x)
    print(rank, x, flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
