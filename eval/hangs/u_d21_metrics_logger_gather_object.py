"""A metrics logger that merges every rank's metrics dict before writing a JSON line: the merge
(`all_gather_object`) sits inside `log()`, behind `if self.is_main_process:`, so only the writer
rank calls it.

Hang class: a collective inside a branch only the main process takes.
Label: D21
Odd ranks: 0
Launch: torchrun 4
Held out: session 12

At the end of the first epoch rank 0 waits in `all_gather_object` (its first all_gather of the
pickled sizes) inside `MetricsLogger._merge`; ranks 1-3 wait in the barrier after logging.
"""

import json
import os
import tempfile

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class MetricsLogger:
    def __init__(self, path: str) -> None:
        self.path = path
        self.rank, self.world = dist.get_rank(), dist.get_world_size()

    @property
    def is_main_process(self) -> bool:
        return self.rank == 0

    def _merge(self, metrics: dict[str, float]) -> dict[str, float]:
        everyone: list[dict[str, float] | None] = [None] * self.world
        dist.all_gather_object(everyone, metrics)
        keys = set().union(*(m or {} for m in everyone))
        return {k: sum((m or {}).get(k, 0.0) for m in everyone) / self.world for k in sorted(keys)}

    def log(self, metrics: dict[str, float], step: int) -> None:
        if self.is_main_process:
            merged = self._merge(metrics)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps({"step": step, **merged}) + "\n")


def main() -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 2)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    logger = MetricsLogger(os.path.join(tempfile.gettempdir(), f"u_metrics_{os.getpid()}.jsonl"))
    step = 0
    for epoch in range(10):
        losses = []
        for _ in range(40):
            x = torch.randn(16, 20)
            loss = nn.functional.cross_entropy(model(x), (x[:, 0] > 0).long())
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            step += 1
        logger.log({"train_loss": sum(losses) / len(losses), "epoch": float(epoch)}, step)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
