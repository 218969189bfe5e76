"""mistake: the two ranks are started by hand with env:// in two terminals, and the second
command was pasted from the first without changing RANK=0, so two processes claim rank 0 and both
try to host the store on MASTER_PORT.
label: D1
alternates: D4
first_rank: none
launch: MASTER_ADDR=127.0.0.1 RANK=0 WORLD_SIZE=2 python eval/runs/scripts/duplicate_rank_by_hand.py & sleep 2; MASTER_ADDR=127.0.0.1 RANK=0 WORLD_SIZE=2 python eval/runs/scripts/duplicate_rank_by_hand.py; wait
source: none known
written: session 10, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=15))
    rank = dist.get_rank()
    t = torch.ones(2) * (rank + 1)
    dist.all_reduce(t)
    print(f"rank {rank}: {t.tolist()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
