"""Local SGD: each rank trains alone and the ranks average their weights every few optimizer steps.

Hang class: ranks run different numbers of steps (short sequences are dropped per rank), so the
number of averaging rounds differs and one rank reaches the end of the epoch first.
Label: D9
Odd ranks: 1
Launch: torchrun 3
Held out: session 10b

The step counter counts optimizer steps, i.e. batches kept after dropping sequences shorter than
`MIN_LEN`; `average_weights()` runs at `step % SYNC_EVERY == 0`. Rank 1's shard has more short
sequences: it keeps 37 batches to the others' 40, so it averages 9 times to their 10 and waits in
the end-of-epoch barrier while ranks 0 and 2 wait in the tenth averaging all_reduce.
"""

import torch
import torch.distributed as dist
from torch import nn

MIN_LEN = 8
SYNC_EVERY = 4


def shard(rank: int) -> list[torch.Tensor]:
    short = {0: (), 1: (5, 17, 30), 2: ()}[rank]
    g = torch.Generator().manual_seed(rank)
    return [torch.randn(4 if i in short else 24, 10, generator=g) for i in range(40)]


def average_weights(model: nn.Module, world: int) -> None:
    for p in model.parameters():
        dist.all_reduce(p.data)
        p.data /= world


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = nn.GRU(10, 32, batch_first=True)
    head = nn.Linear(32, 1)
    opt = torch.optim.SGD([*model.parameters(), *head.parameters()], lr=0.01)
    for epoch in range(3):
        step = 0
        for seq in shard(rank):
            if seq.shape[0] < MIN_LEN:
                continue
            out, _ = model(seq.unsqueeze(0))
            loss = head(out[:, -1]).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            step += 1
            if step % SYNC_EVERY == 0:
                average_weights(model, world)
        dist.barrier()  # all ranks done with the epoch before the checkpoint
        if rank == 0:
            print(f"epoch {epoch}: {step} steps", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
