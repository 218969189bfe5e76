"""mistake: a two-node job (torchrun --nnodes 2, c10d rendezvous; both "nodes" on loopback here) whose
script passes `rank=int(os.environ["LOCAL_RANK"])` to init_process_group (fine on the single machine
it was written on): both nodes' workers claim ranks 0 and 1 of a world of 4, ranks 2 and 3 never
join, and the init times out (20 s).
label: D3
alternates: D1
first_rank: none
launch: torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id job7 eval/runs/scripts/local_rank_as_rank_two_nodes.py & sleep 1; torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id job7 eval/runs/scripts/local_rank_as_rank_two_nodes.py; wait
source: none known
written: session 10, unseen
"""

import os
from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    dist.init_process_group(
        "gloo", rank=local_rank, world_size=world_size, timeout=timedelta(seconds=20)
    )
    t = torch.ones(3)
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()} of {world_size}: {t.tolist()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
