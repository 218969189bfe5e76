"""Gather the evaluation's predictions, but only on ranks that produced any.

Hang class: an `all_gather_object` that only some ranks call; the test is on the data, not on
the rank number.
Label: D21
Odd ranks: 3
Launch: torchrun 4

Three validation files over four ranks: rank 3's shard is empty, so it skips the gather
(`if predictions:`) and waits in the barrier before the checkpoint, while ranks 0, 1 and 2 wait
in `all_gather_object`.
"""

import torch
import torch.distributed as dist
from torch import nn

VALIDATION_FILES = ["val-000.jsonl", "val-001.jsonl", "val-002.jsonl"]


def predict(model: nn.Module, files: list[str]) -> list[dict[str, float]]:
    out = []
    with torch.no_grad():
        for name in files:
            out.append({"file": name, "score": float(model(torch.randn(1, 4)).sum())})
    return out


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = nn.Linear(4, 2)
    for epoch in range(100):
        predictions = predict(model, VALIDATION_FILES[rank::world])
        if predictions:
            everyone: list[list[dict[str, float]] | None] = [None] * world
            dist.all_gather_object(everyone, predictions)
            if rank == 0:
                print(f"epoch {epoch}: {sum(len(p or []) for p in everyone)} predictions", flush=True)
        dist.barrier()
        if rank == 0:
            torch.save(model.state_dict(), f"/tmp/_eval_ckpt_{epoch}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
