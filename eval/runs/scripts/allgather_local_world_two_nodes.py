"""mistake: the metric helper sizes its all_gather output list with LOCAL_WORLD_SIZE (written when
the job ran on one machine); on two nodes (two torchrun agents with c10d rendezvous on loopback
here, one process each) the list holds one tensor for a world of two, and the gather is refused.
label: none
alternates: none
first_rank: none
launch: torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id job11b eval/runs/scripts/allgather_local_world_two_nodes.py & sleep 1; torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id job11b eval/runs/scripts/allgather_local_world_two_nodes.py; wait
source: none known
written: session 11b, unseen
"""

import os
from datetime import timedelta

import torch
import torch.distributed as dist


def gather_scores(scores):
    n = int(os.environ["LOCAL_WORLD_SIZE"])
    out = [torch.zeros_like(scores) for _ in range(n)]
    dist.all_gather(out, scores)
    return torch.cat(out)


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    scores = torch.rand(16)
    allscores = gather_scores(scores)
    print(f"rank {dist.get_rank()}: mean score {allscores.mean().item():.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
