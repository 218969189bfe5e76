"""A training step wrapped in try/except that logs and skips a bad batch.

Hang class: an exception swallowed by the user's `except` on one rank: that rank skips the
step's collectives, so from then on it is one collective ahead of the others.
Label: D19
Odd ranks: 1
Launch: torchrun 3

Rank 1 meets a sample its embedding cannot hold at step 2, catches the IndexError and `continue`s.
Its gradient all-reduces still pair up with the others' (same sizes), until the checkpoint
barrier every 5 steps: rank 1 reaches it one step early and waits there, while ranks 0 and 2
wait in DDP's all-reduce inside `backward()` of step 4.
"""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def get_batch(step: int, rank: int) -> torch.Tensor:
    batch = torch.randint(0, 50, (4, 12))
    if rank == 1 and step == 2:
        batch[0, 3] = 500  # a token id past the vocabulary
    return batch


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Embedding(50, 8), nn.Flatten(), nn.Linear(96, 1)))
    opt = torch.optim.Adam(model.parameters())
    for step in range(1_000):
        try:
            loss = model(get_batch(step, rank)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        except (IndexError, RuntimeError) as err:
            print(f"rank {rank}: skipping batch {step}: {err}", flush=True)
            continue
        if step % 5 == 4:
            dist.barrier()
            if rank == 0:
                print(f"checkpoint at step {step}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
