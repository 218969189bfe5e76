"""A k-d tree of each rank's embeddings built recursively, with the split statistics reduced at every level.

Hang class: a collective at each level of a recursion whose depth depends on the rank's own
data; the rank with fewer points stops recursing first and goes on to the next collective.
Label: D19
Odd ranks: 0
Launch: mp.spawn 3
Held out: session 10

To build a shared index over the ranks' embeddings, `split()` all-reduces the mean of the current
node's points so every rank splits on the same global value, then recurses while the node holds
more than `leaf_size` points. Rank 0's shard is the smallest (it also holds the validation
split), so its recursion bottoms out one level earlier; it returns and waits in the barrier
before training, while ranks 1 and 2 wait in the all_reduce of the deeper level.
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def split(points: torch.Tensor, depth: int, leaf_size: int) -> dict[str, object]:
    if len(points) <= leaf_size:
        return {"leaf": points}
    dim = depth % points.shape[1]
    centre = points[:, dim].mean().reshape(1)
    dist.all_reduce(centre)
    centre /= dist.get_world_size()
    left, right = points[points[:, dim] <= centre], points[points[:, dim] > centre]
    return {
        "dim": dim,
        "at": float(centre),
        "left": split(left, depth + 1, leaf_size),
        "right": split(right, depth + 1, leaf_size),
    }


def worker(rank: int, world: int) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", os.environ.get("HANG_MASTER_PORT", "29534"))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    n_points = 2048 - (1024 if rank == 0 else 0)  # rank 0 gave half its shard to validation
    points = torch.randn(n_points, 4, generator=torch.Generator().manual_seed(rank))
    tree = split(points, 0, leaf_size=256)
    dist.barrier()  # the index is complete on every rank
    print(f"rank {rank}: root splits dim {tree.get('dim')}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(3,), nprocs=3, join=True)
