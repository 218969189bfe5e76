"""Span-extraction eval: each rank decodes its shard, keeps the predicted spans above a confidence
cut, and `compute_metrics` sums the counts across ranks with `torch.tensor(len(preds))` before
dividing. It starts with the usual guard `if not preds: return {"precision": 0.0, ...}` to avoid
a division by zero, written for one process. After the eval every rank meets at a barrier
before the best checkpoint is chosen.

Hang class: a collective skipped by the rank with zero predictions (an early return ahead of the
all_reduce of the counts).
Label: D21
Odd ranks: 3
Launch: torchrun 4
Held out: session 12c

Rank 3's shard (the last, short documents) yields no span above the cut: it returns early and
waits in the barrier after the eval; ranks 0, 1 and 2 wait in the all_reduce of the counts.
"""

import torch
import torch.distributed as dist
from torch import nn


def compute_metrics(preds: list[tuple[int, int]], gold: set[tuple[int, int]]) -> dict[str, float]:
    if not preds:
        return {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    counts = torch.tensor([len(preds), len(set(preds) & gold), len(gold)], dtype=torch.float64)
    dist.all_reduce(counts)
    n_pred, n_hit, n_gold = counts.tolist()
    p, r = n_hit / max(n_pred, 1), n_hit / max(n_gold, 1)
    return {"precision": p, "recall": r, "f1": 2 * p * r / max(p + r, 1e-9)}


def decode(model: nn.Module, docs: torch.Tensor, cut: float) -> list[tuple[int, int]]:
    spans = []
    with torch.no_grad():
        for i, doc in enumerate(docs):
            start_end = torch.softmax(model(doc), dim=-1)
            score, pos = start_end.max(dim=-1)
            if float(score.min()) > cut:
                spans.append((i, int(pos[0])))
    return spans


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Linear(32, 16)
    sharp = 0.0 if rank == world - 1 else 6.0  # short documents: flat scores
    docs = torch.randn(50, 2, 32) * sharp
    preds = decode(model, docs, cut=0.2)
    gold = {(i, i % 16) for i in range(50)}
    metrics = compute_metrics(preds, gold)
    print(f"rank {rank}: {len(preds)} spans, {metrics}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
