"""mistake: a two-node job (torchrun c10d rendezvous; both "nodes" on loopback here) where the
second node's launch line was kept from a single-node run and says `--nnodes 1`, while the first
says `--nnodes 2`; the second agent completes a rendezvous of one node on its own, and the first
waits for a second node (join timeout 20 s).
label: D2
alternates: P1
first_rank: none
launch: torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id job11 --rdzv-conf join_timeout=20 eval/runs/scripts/nnodes_mismatch_two_agents.py & sleep 2; torchrun --nnodes 1 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id job11 --rdzv-conf join_timeout=20 eval/runs/scripts/nnodes_mismatch_two_agents.py; wait
source: none known
written: session 11, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    t = torch.ones(3)
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()} of {dist.get_world_size()}: {t.tolist()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
