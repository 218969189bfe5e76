"""mistake: to save padding, each rank groups the indices its DistributedSampler gives it into
length buckets and drops incomplete buckets; the ranks' shards have different length mixes, so
rank 0 gets more batches than rank 1 and is left alone in the gradient all-reduce of its extra
step after rank 1 has finished the epoch and left (the script averages gradients by hand).
label: D22
alternates: D9
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/bucket_sampler_per_rank.py
source: none known
written: session 9b, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DistributedSampler

LENGTHS = [8, 8, 8, 32, 8, 8, 8, 32, 8, 8, 8, 32, 8, 8, 8, 32, 8, 8, 8, 32]
BATCH = 2


def bucketed(indices):
    buckets = {}
    for i in indices:
        buckets.setdefault(LENGTHS[i], []).append(i)
    batches = []
    for idx in buckets.values():
        batches += [idx[k : k + BATCH] for k in range(0, len(idx) - BATCH + 1, BATCH)]
    return batches


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    sampler = DistributedSampler(range(len(LENGTHS)), shuffle=False)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = bucketed(list(sampler))
    print(f"rank {rank}: {len(batches)} batches", flush=True)
    for step, batch in enumerate(batches):
        loss = model(torch.randn(len(batch), 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        print(f"rank {rank} step {step}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
