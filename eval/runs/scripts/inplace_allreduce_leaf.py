"""mistake: a parameter itself (a leaf that requires grad) is all-reduced in place to "sync the
weights" before training.
label: none
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/inplace_allreduce_leaf.py
source: none known
"""

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    model = torch.nn.Linear(8, 8)
    for p in model.parameters():
        dist.all_reduce(p)
        p /= dist.get_world_size()
    print("synced", dist.get_rank())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
