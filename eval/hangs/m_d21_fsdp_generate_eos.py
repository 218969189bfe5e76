"""Sampling from an FSDP model after training, each rank its own prompts, stopping at end-of-text.

Hang class: generation on a sharded model whose length differs per rank (a rank that stops
early skips the forwards, and their parameter all-gathers, the others still issue).
Label: D21
Odd ranks: 0
Launch: torchrun 2
Held out: session 9c

Every rank samples a few continuations of its own prompts with `fully_shard` wrapping each
layer; each forward all-gathers the layers' shards. A rank's samples stop at the end-of-text
token, so rank 0 finishes its prompts first and waits in the barrier before writing the samples,
while rank 1 waits in the all-gather of its next forward.
"""

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard

VOCAB, EOT, MAX_NEW = 32, 0, 48


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 32)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(32, 32), nn.GELU()) for _ in range(2))
        self.head = nn.Linear(32, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids).mean(dim=1)
        for block in self.blocks:
            h = h + block(h)
        return self.head(h)


@torch.no_grad()
def sample(model: nn.Module, prompt: list[int], gen: torch.Generator) -> list[int]:
    ids = list(prompt)
    for _ in range(MAX_NEW):
        logits = model(torch.tensor([ids]))
        next_id = int(torch.multinomial(torch.softmax(logits[0] / 0.7, dim=-1), 1, generator=gen))
        if next_id == EOT:
            break
        ids.append(next_id)
    return ids


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = TinyLM()
    with torch.no_grad():
        model.head.bias[EOT] += 1.5  # trained to end texts
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    gen = torch.Generator().manual_seed(1234 + rank)
    prompts = [[rank + 1, 5, 7], [rank + 2, 9], [3, rank + 4, 11, 2]]
    samples = [sample(model, p, gen) for p in prompts]
    dist.barrier()
    print(f"rank {rank}: {len(samples)} samples, {sum(map(len, samples))} tokens", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
