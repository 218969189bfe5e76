"""A batch iterator that averages the token count across ranks inside `__next__`.

Hang class: ranks run out of batches at different steps; the collective hidden in the iterator
is still issued by the ranks that have data.
Label: D9
Odd ranks: 2
Launch: torchrun 3
Held out: session 10

The loss is normalised by the global number of tokens in the step, so `TokenBatches.__next__`
all-reduces the local token count before handing the batch out. Each rank reads its own shard
file; the last shard is shorter (the corpus does not divide evenly by lines), so rank 2 raises
StopIteration first, leaves the epoch and waits in the end-of-epoch barrier, while ranks 0 and 1
wait in the all_reduce inside `__next__` for their next batch.
"""

from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch import nn


class TokenBatches:
    """Yields (tokens, targets, global token count) from one rank's shard."""

    def __init__(self, lines: list[list[int]], batch_size: int) -> None:
        self.lines, self.batch_size, self.pos = lines, batch_size, 0

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, float]]:
        self.pos = 0
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor, float]:
        if self.pos >= len(self.lines):
            raise StopIteration
        chunk = self.lines[self.pos : self.pos + self.batch_size]
        self.pos += self.batch_size
        width = max(len(line) for line in chunk)
        tokens = torch.zeros(len(chunk), width, dtype=torch.long)
        for i, line in enumerate(chunk):
            tokens[i, : len(line)] = torch.tensor(line)
        count = torch.tensor([float((tokens > 0).sum())])
        dist.all_reduce(count)  # global tokens in this step, for the loss normalisation
        return tokens[:, :-1], tokens[:, 1:], float(count)


def shard(rank: int, world: int) -> list[list[int]]:
    corpus = [[1 + (i * 7 + j) % 50 for j in range(5 + i % 9)] for i in range(1010)]
    per_rank = -(-len(corpus) // world)  # ceil: the last shard is the short one
    return corpus[rank * per_rank : (rank + 1) * per_rank]


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    emb, head = nn.Embedding(64, 16), nn.Linear(16, 64)
    params = list(emb.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=1e-3)
    batches = TokenBatches(shard(rank, world), batch_size=8)
    for epoch in range(3):
        for inputs, targets, global_tokens in batches:
            logits = head(emb(inputs))
            loss = nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum")
            (loss * world / global_tokens).backward()
            for p in params:
                dist.all_reduce(p.grad)
                p.grad /= world
            opt.step()
            opt.zero_grad()
        dist.barrier()  # everyone finished the epoch
        if rank == 0:
            print(f"epoch {epoch} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
