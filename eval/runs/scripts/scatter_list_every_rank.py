"""mistake: the scatter of per-rank work chunks builds `chunks` on every rank and passes it as
`scatter_list` everywhere (as all_gather takes a list on every rank); torch refuses a scatter_list
on a non-source rank.
label: none
first_rank: none
launch: python -m torch.distributed.run --nproc-per-node 2 eval/runs/scripts/scatter_list_every_rank.py
source: https://discuss.pytorch.org/t/dist-scatter-scatter-list-must-not-be-specified/99245
written: session 12b, unseen
"""

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    work = torch.arange(world * 4, dtype=torch.float32)
    chunks = list(work.chunk(world))
    mine = torch.empty(4)
    dist.scatter(mine, scatter_list=chunks, src=0)
    print(f"rank {dist.get_rank()} got {mine.tolist()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
