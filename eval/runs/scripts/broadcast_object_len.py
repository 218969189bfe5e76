"""mistake: broadcast_object_list of the vocabulary, where each rank sizes the receiving list from
its own (different) config, so the ranks disagree on the list length.
label: D19
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/broadcast_object_len.py
source: none known
"""

from datetime import timedelta

import torch.distributed as dist


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank = dist.get_rank()
    if rank == 0:
        objs = ["<pad>", "<unk>", "hello", "world"]
    else:
        objs = [None] * 3
    dist.broadcast_object_list(objs, src=0)
    print(rank, objs, flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
