"""Each rank takes its slice of the file list, then drops the samples that fail a quality filter.

Hang class: the filter runs after the split, so the ranks hold different numbers of batches.
Label: D9
Odd ranks: 1
Launch: python 2
Held out: session 9b

Started once per rank from a shell loop. The corpus is split `files[rank::world]` and each rank
keeps only samples longer than the minimum length: rank 1's slice has more short samples, so it
runs out of batches first and goes on to the end-of-epoch barrier; rank 0 waits in its next
gradient all_reduce.
"""

import os

import torch
import torch.distributed as dist
from torch import nn

MIN_LEN = 8


def load_corpus() -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    lengths = [4 if i % 4 == 1 else 12 for i in range(400)]  # odd-indexed quarter is too short
    return [torch.randint(0, 100, (n,), generator=g).tolist() for n in lengths]


def batches(samples: list[list[int]], size: int):
    for i in range(0, len(samples) - size + 1, size):
        yield torch.tensor([s[:MIN_LEN] for s in samples[i : i + size]])


def main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    shard = load_corpus()[rank::world]
    shard = [s for s in shard if len(s) >= MIN_LEN]
    model = nn.Sequential(nn.Embedding(100, 16), nn.Flatten(), nn.Linear(16 * MIN_LEN, 100))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(10):
        for tokens in batches(shard, 4):
            loss = nn.functional.cross_entropy(model(tokens), tokens[:, 0])
            opt.zero_grad()
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world
            opt.step()
        dist.barrier()
        if rank == 0:
            print(f"epoch {epoch} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
