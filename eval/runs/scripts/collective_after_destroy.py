"""mistake: the training function destroys the process group at its end, and the script then
averages the final metric across ranks.
label: E4
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/collective_after_destroy.py
source: none known
"""

import torch
import torch.distributed as dist


def train():
    dist.init_process_group("gloo")
    acc = torch.tensor([0.8 + 0.05 * dist.get_rank()])
    for _ in range(3):
        dist.all_reduce(torch.ones(1))
    dist.destroy_process_group()
    return acc


def main():
    acc = train()
    dist.all_reduce(acc)
    acc /= dist.get_world_size()
    print("final accuracy", acc.item())


if __name__ == "__main__":
    main()
