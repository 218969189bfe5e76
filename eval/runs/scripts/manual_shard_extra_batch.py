"""mistake: the data is split by hand with `samples[rank::world_size]`; 5 samples over 2 ranks
give rank 0 three batches and rank 1 two, so rank 0's DDP all-reduce of its last batch has no
partner (rank 1 already finished and left).
label: D9
first_rank: 0
launch: torchrun --nproc-per-node 2 eval/runs/scripts/manual_shard_extra_batch.py
source: none known
"""

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    samples = [torch.randn(4, 6) for _ in range(5)]
    mine = samples[rank::world]
    model = nn.parallel.DistributedDataParallel(nn.Linear(6, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i, batch in enumerate(mine):
        loss = model(batch).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"rank {rank} batch {i + 1}/{len(mine)} loss {loss.item():.4f}", flush=True)
    print(f"rank {rank} finished", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
