"""A `Speedometer` whose `samples_per_sec` property averages over ranks with an all_gather, read in
the logging line every `log_every` batches; each rank counts the batches it reads, and skips
(without an optimiser step) those that are all padding.

Hang class: one rank skips the step (and its gradient all_reduce) for batches that are all
padding, so its collectives run out of step with the others'; the all_gather hidden in a property
read by the logging line every `log_every` batches meets the others' gradient all_reduce.
Label: D19
Odd ranks: 0
Launch: torchrun 3
Held out: session 11b

Rank 0's shard has one all-padding batch in every nine (`i % 9 == 4`), ranks 1 and 2 have none:
rank 0 reads its 20th batch after only 18 gradient all_reduces and waits in the property's
all_gather; ranks 1 and 2 wait in their 19th gradient all_reduce.
"""

import time

import torch
import torch.distributed as dist
from torch import nn


class Speedometer:
    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size
        self.steps = 0
        self._t0 = time.perf_counter()

    def tick(self) -> None:
        self.steps += 1

    @property
    def samples_per_sec(self) -> float:
        mine = torch.tensor([self.steps * self.batch_size / (time.perf_counter() - self._t0)])
        rates = [torch.zeros(1) for _ in range(dist.get_world_size())]
        dist.all_gather(rates, mine)
        return float(sum(r.item() for r in rates))


def batches(rank: int, n: int) -> list[torch.Tensor]:
    out = []
    for i in range(n):
        tokens = torch.randint(1, 50, (8, 16))
        if rank == 0 and i % 9 == 4:
            tokens.zero_()  # a batch of padding only (short documents on this shard)
        out.append(tokens)
    return out


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(50, 8), nn.Flatten(), nn.Linear(128, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    meter = Speedometer(batch_size=8)
    log_every = 20
    for tokens in batches(rank, 500):
        meter.tick()
        if not tokens.any():
            continue  # nothing to learn from
        model(tokens).pow(2).mean().backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        opt.zero_grad()
        if meter.steps % log_every == 0:
            print(f"[rank {rank}] step {meter.steps} {meter.samples_per_sec:.1f} samples/s", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
