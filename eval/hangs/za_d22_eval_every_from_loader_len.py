"""A click-through-rate model trained with DDP on per-rank shard files (one parquet-like file per
rank, read without a `DistributedSampler`). Evaluation runs "twice per epoch": `eval_every =
len(train_loader) // 2`, worked out on each rank from its own loader. The shards are not the same
size (the last export was cut short), so the last rank's loader is shorter, its `eval_every`
smaller, and it enters evaluation (which gathers every rank's scores for the AUC with
`all_gather_object`) while the others are still in DDP's backward.

Hang class: the loaders' lengths differ between ranks; a step count derived from each rank's own
length puts the ranks in different collectives.
Label: D22
Odd ranks: 2
Launch: mp.spawn 3
Held out: session 13c

Rank 2 waits in `all_gather_object` (in `evaluate()`, called at its step 3); ranks 0 and 1 wait in
`loss.backward()` (DDP's gradient all_reduce) at their step 4.
"""

from __future__ import annotations

import logging
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

log = logging.getLogger("ctr")
WORLD = 3
SHARD_ROWS = {0: 160, 1: 160, 2: 96}
FIELDS, BUCKETS = 6, 100


def shard_dataset(rank: int) -> TensorDataset:
    g = torch.Generator().manual_seed(rank)
    n = SHARD_ROWS[rank]
    ids = torch.randint(0, BUCKETS, (n, FIELDS), generator=g)
    clicks = (torch.rand(n, generator=g) < 0.2).float()
    return TensorDataset(ids, clicks)


class CTRModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(BUCKETS, 8)
        self.mlp = nn.Sequential(nn.Linear(FIELDS * 8, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.emb(ids).flatten(1)).squeeze(-1)


def auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    order = scores.argsort()
    ranks = torch.empty_like(order, dtype=torch.float)
    ranks[order] = torch.arange(1, len(scores) + 1, dtype=torch.float)
    pos = labels.sum()
    neg = len(labels) - pos
    return float((ranks[labels == 1].sum() - pos * (pos + 1) / 2) / (pos * neg).clamp(min=1))


def evaluate(model: nn.Module, loader: DataLoader) -> float:
    model.eval()
    scores, labels = [], []
    with torch.no_grad():
        for ids, y in loader:
            scores.append(torch.sigmoid(model(ids)))
            labels.append(y)
    gathered: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, (torch.cat(scores), torch.cat(labels)))
    model.train()
    s = torch.cat([g[0] for g in gathered if g])
    y = torch.cat([g[1] for g in gathered if g])
    return auc(s, y)


def run(rank: int) -> None:
    logging.basicConfig(level=logging.INFO, format=f"[{rank}] %(message)s")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29673")
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    torch.manual_seed(0)
    model = DDP(CTRModel())
    opt = torch.optim.Adagrad(model.parameters(), lr=0.05)
    train_loader = DataLoader(shard_dataset(rank), batch_size=16, shuffle=True)
    val_loader = DataLoader(shard_dataset(rank), batch_size=64)
    eval_every = len(train_loader) // 2
    step = 0
    for epoch in range(3):
        for ids, y in train_loader:
            loss = nn.functional.binary_cross_entropy_with_logits(model(ids), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step % eval_every == 0:
                score = evaluate(model, val_loader)
                if rank == 0:
                    log.info("step %d auc %.4f", step, score)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, nprocs=WORLD, join=True)
