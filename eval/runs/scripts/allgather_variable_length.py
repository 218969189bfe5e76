"""mistake: per-rank predictions of different lengths (the last shard is shorter) are collected
with all_gather into buffers shaped like the local tensor; all_gather needs equal shapes on every
rank.
label: D19
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/allgather_variable_length.py
source: https://github.com/pytorch/pytorch/issues/64555
"""

import torch
import torch.distributed as dist


def gather_predictions(preds):
    world = dist.get_world_size()
    out = [torch.empty_like(preds) for _ in range(world)]
    dist.all_gather(out, preds)
    return torch.cat(out)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    n = 10 if rank == 0 else 7
    preds = torch.randint(0, 3, (n,))
    allp = gather_predictions(preds)
    if rank == 0:
        print("gathered", allp.shape)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
