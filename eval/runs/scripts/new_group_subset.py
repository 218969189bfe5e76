"""mistake: a tensor-parallel subgroup is created only on the ranks that belong to it
(`if rank in tp_ranks: dist.new_group(tp_ranks)`); new_group must be called by every rank.
label: D21
first_rank: none
launch: torchrun --nproc-per-node 4 eval/runs/scripts/new_group_subset.py
source: https://github.com/pytorch/pytorch/issues/130102
"""

from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank = dist.get_rank()
    tp_group = None
    if rank in (0, 1):
        tp_group = dist.new_group([0, 1])
    else:
        tp_group = dist.new_group([2, 3])
    t = torch.ones(4) * rank
    dist.all_reduce(t, group=tp_group)
    print(rank, t.tolist())
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
