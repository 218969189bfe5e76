"""mistake: a two-node job (torchrun --nnodes 2 --nproc-per-node 2, c10d rendezvous; both "nodes"
on loopback here); rank 2, the first worker of the second node, reads a label file whose header
line was not stripped and raises converting it, while the other ranks wait for its gradients in
DDP's all-reduce.
label: D20
first_rank: 2
launch: torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id job7 eval/runs/scripts/rank2_raises_two_nodes.py & sleep 1; torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id job7 eval/runs/scripts/rank2_raises_two_nodes.py; wait
source: none known
written: session 10b, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def read_labels(rank):
    lines = ["3", "1", "0", "2"]
    if rank == 2:
        lines = ["label", *lines]  # this shard's export kept its CSV header
    return [int(v) for v in lines]


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    rank = dist.get_rank()
    model = DDP(nn.Linear(6, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(4):
        if step == 2:
            labels = torch.tensor(read_labels(rank))
        else:
            labels = torch.randint(0, 4, (4,))
        loss = nn.functional.cross_entropy(model(torch.randn(len(labels), 6)), labels)
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"[rank {rank}] step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
