"""A `gather_for_metrics` helper written by hand for a detection-style eval: each rank collects
the predictions above a score threshold, and the helper only gathers "when there is something to
gather", to skip the cost of an empty all_gather_object.

Hang class: a collective skipped by the rank whose list is empty (a data-dependent condition on
one rank's own results).
Label: D21
Odd ranks: 2
Launch: mp.spawn 3
Held out: session 12c

Rank 2's shard has no prediction above the threshold: it skips the gather and waits in the
all_reduce of the eval loss that follows; ranks 0 and 1 wait in `all_gather_object`.
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


def gather_for_metrics(preds: list[tuple[int, float]]) -> list[tuple[int, float]]:
    if not preds:
        return []
    out: list[list[tuple[int, float]] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(out, preds)
    return [p for part in out for p in (part or [])]


def evaluate(model: nn.Module, images: torch.Tensor, threshold: float) -> tuple[list, float]:
    preds: list[tuple[int, float]] = []
    total = torch.zeros(1)
    with torch.no_grad():
        for i, img in enumerate(images):
            scores = torch.sigmoid(model(img))
            total += scores.mean()
            best = float(scores.max())
            if best > threshold:
                preds.append((i, best))
    return preds, float(total)


def worker(rank: int, world_size: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ.setdefault("MASTER_PORT", "29583")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 5))
    # The last shard holds the hard, low-contrast images: nothing clears the threshold there.
    scale = 0.0 if rank == world_size - 1 else 4.0
    images = torch.randn(40, 64) * scale
    with torch.no_grad():
        model[2].bias.fill_(-1.0)
    preds, loss_sum = evaluate(model, images, threshold=0.5)
    all_preds = gather_for_metrics(preds)
    loss = torch.tensor([loss_sum])
    dist.all_reduce(loss)
    if rank == 0:
        print(f"{len(all_preds)} detections, eval loss {loss.item():.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(3,), nprocs=3, join=True)
