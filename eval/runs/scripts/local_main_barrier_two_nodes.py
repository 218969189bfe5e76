"""mistake: an Accelerate-style `wait_for_everyone()` (a barrier) is put inside the
`if is_local_main_process:` block that writes the node's cache; with two nodes the local main processes
are ranks 0 and 2, so they wait in the barrier while ranks 1 and 3 go on into DDP's first gradient
all-reduce; the group was created with a 20 s timeout. Two c10d "nodes" on loopback, two processes each.
label: D21
first_rank: none
launch: torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id job13lm eval/runs/scripts/local_main_barrier_two_nodes.py & sleep 1; torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id job13lm eval/runs/scripts/local_main_barrier_two_nodes.py; wait
source: none known
written: session 13, unseen
"""

import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def wait_for_everyone():
    dist.barrier()


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank = dist.get_rank()
    local_rank = int(os.environ["LOCAL_RANK"])
    is_local_main_process = local_rank == 0
    if is_local_main_process:
        os.makedirs(f"/tmp/r13_cache/node{os.environ['GROUP_RANK']}", exist_ok=True)
        torch.save(torch.randn(32, 8), f"/tmp/r13_cache/node{os.environ['GROUP_RANK']}/feats.pt")
        wait_for_everyone()
    model = DDP(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        loss = model(torch.randn(8, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
