"""mistake: the two "worker" ranks 1 and 2 get their own group for sharing a lookup table, and the
table is broadcast with src=0 (the author meant "the first rank of the group", but src is a global
rank, and global rank 0 is not in the group).
label: none
first_rank: none
launch: torchrun --nproc-per-node 3 eval/runs/scripts/broadcast_src_outside_group.py
source: none known
written: session 10, unseen
"""

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    workers = dist.new_group([1, 2])
    if rank in (1, 2):
        table = torch.arange(6.0) if rank == 1 else torch.zeros(6)
        dist.broadcast(table, src=0, group=workers)
        print(f"rank {rank} table {table.tolist()}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
