"""Validation "every 40k tokens": the interval in steps is worked out once from the first batch
each rank sees (`EVAL_TOKENS // (batch * seq_len)`), with the sequence length of that rank's own
length bucket. The evaluation opens with a barrier so that every rank evaluates the same weights.

Hang class: an interval each rank derives for itself (a rank-local decision) puts one rank in the
evaluation's barrier while the other is still in the training step's collective.
Label: D19
Odd ranks: 1
Launch: mp.spawn 2
Held out: session 12b

Rank 1's bucket holds longer sequences, so its interval is shorter: it waits in the barrier at the
top of `evaluate`; rank 0 waits in DDP's gradient all-reduce inside `backward()`.
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

EVAL_TOKENS = 40_000
BATCH = 8


def bucket_batches(rank: int, steps: int):
    # a length-bucketing sampler hands each rank batches from its own bucket
    seq_len = 96 if rank == 0 else 160
    gen = torch.Generator().manual_seed(rank)
    for _ in range(steps):
        yield torch.randint(0, 256, (BATCH, seq_len), generator=gen)


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(256, 32)
        self.head = nn.Linear(32, 256)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        logits = self.head(self.emb(tokens[:, :-1]))
        return nn.functional.cross_entropy(logits.reshape(-1, 256), tokens[:, 1:].reshape(-1))


def evaluate(model: nn.Module, val: torch.Tensor) -> float:
    dist.barrier()
    model.eval()
    with torch.no_grad():
        loss = model(val)
    model.train()
    return float(loss)


def worker(rank: int, world_size: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ.setdefault("MASTER_PORT", "29571")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = DDP(TinyLM())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    val = torch.randint(0, 256, (16, 128))
    eval_every = None
    for step, tokens in enumerate(bucket_batches(rank, 5_000), start=1):
        if eval_every is None:
            eval_every = max(1, EVAL_TOKENS // tokens.numel())
        loss = model(tokens)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % eval_every == 0:
            print(f"rank {rank} step {step} val {evaluate(model.module, val):.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2, join=True)
