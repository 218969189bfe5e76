"""mistake: all_gather_into_tensor with an output buffer sized like the input (the author thought
it gathers in place), not world_size times the input.
label: none
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/allgather_into_tensor_size.py
source: none known
"""

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    local_preds = torch.full((4, 3), float(rank))
    gathered = torch.empty_like(local_preds)
    dist.all_gather_into_tensor(gathered, local_preds)
    print(gathered.shape)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
