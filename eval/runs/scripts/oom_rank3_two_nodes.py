"""mistake: a two-node job (torchrun --nnodes 2 --nproc-per-node 2, c10d rendezvous; both "nodes" on
loopback here); rank 3 builds a dense feature cache sized from its shard's statistics file, which
holds a corrupt count, and the host allocation fails ("can't allocate memory") while the other three
ranks wait for it in DDP's all-reduce.
label: D20
first_rank: 3
launch: torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id exp42 eval/runs/scripts/oom_rank3_two_nodes.py & sleep 1; torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id exp42 eval/runs/scripts/oom_rank3_two_nodes.py; wait
source: https://discuss.pytorch.org/t/defaultcpuallocator-cant-allocate-memory/
written: session 11c, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def feature_cache(rank):
    n_items = 1_000 if rank != 3 else 1_000_000_000_000  # rank 3's stats file is corrupt
    return torch.zeros(n_items, 64)


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank = dist.get_rank()
    model = DDP(nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        if step == 1:
            cache = feature_cache(rank)
            print(f"rank {rank}: cache {tuple(cache.shape)}", flush=True)
        loss = model(torch.randn(16, 64)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
