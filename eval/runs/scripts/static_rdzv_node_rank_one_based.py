"""mistake: a two-node job with the static rendezvous (`--rdzv-backend static`; both "nodes" on
loopback here) whose launch scripts number the nodes from 1, as the cluster's host list does:
`--node-rank 1` and `--node-rank 2`; no agent is node 0, so none hosts the store, and node 2 is
past the last node of two.
label: D2
alternates: P1
first_rank: none
launch: torchrun --nnodes 2 --node-rank 1 --nproc-per-node 1 --rdzv-backend static --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-conf timeout=20 eval/runs/scripts/static_rdzv_node_rank_one_based.py & sleep 1; torchrun --nnodes 2 --node-rank 2 --nproc-per-node 1 --rdzv-backend static --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-conf timeout=20 eval/runs/scripts/static_rdzv_node_rank_one_based.py; wait
source: none known
written: session 11b, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    t = torch.ones(2)
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()} of {dist.get_world_size()}: {t.tolist()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
