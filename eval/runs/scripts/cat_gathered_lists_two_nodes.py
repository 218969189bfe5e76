"""mistake: the evaluation collects each rank's batch logits in a list and gathers the lists with
`dist.all_gather_object`, then concatenates the result with `torch.cat(gathered)`, a list of lists
of tensors, not a list of tensors; every rank fails after evaluation (two torchrun agents, c10d on
loopback, one process each). A plain Python bug inside a distributed run.
label: none
first_rank: none
launch: torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id job13cg eval/runs/scripts/cat_gathered_lists_two_nodes.py & sleep 1; torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id job13cg eval/runs/scripts/cat_gathered_lists_two_nodes.py; wait
source: none known
written: session 13c, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)
    model = nn.Linear(12, 4).eval()
    logits = []
    with torch.no_grad():
        for _ in range(3):
            logits.append(model(torch.randn(5, 12)))
    gathered = [None] * world
    dist.all_gather_object(gathered, logits)
    all_logits = torch.cat(gathered)
    print(f"rank {rank}: {all_logits.shape[0]} predictions")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
