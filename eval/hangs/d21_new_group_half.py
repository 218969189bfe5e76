"""A side group of all ranks for logging, created only by the ranks that log.

Hang class: a `new_group` that only some ranks enter (every rank must call it, members or not).
Label: D21
Odd ranks: 0 1
Launch: torchrun 4

The ranks of the first "node" (0 and 1) log metrics, so they create a gloo group of all four ranks
for it; ranks 2 and 3 skip the call. Ranks 0 and 1 wait inside `new_group` for the other two
members; ranks 2 and 3 wait in the first step's all-reduce.
"""

import torch
import torch.distributed as dist


def logging_group(rank: int, world: int):
    if rank < world // 2:
        return dist.new_group(ranks=list(range(world)), backend="gloo")
    return None


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    log_group = logging_group(rank, world)
    for step in range(1_000):
        grad = torch.ones(8) * step
        dist.all_reduce(grad)
        if log_group is not None and step % 10 == 0:
            loss = grad[:1].clone()
            dist.all_reduce(loss, group=log_group)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
