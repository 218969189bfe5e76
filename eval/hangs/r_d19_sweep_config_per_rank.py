"""A Hydra-style multirun: a sweep writes one config per job under `multirun/<job>/config.yaml`,
and the training script finds its job's config from `JOB_NUM`, falling back to the rank "for
local runs". Run by hand with one `python` per rank, each rank reads a different job's config.

Hang class: the ranks disagree on a schedule setting (`val_every`) read from per-rank config, so
they issue different collectives at the same step.
Label: D19
Odd ranks: 1
Launch: python 3
Held out: session 11c

The sweep varies `lr` and `val_every` (2, 3, 2 for jobs 0, 1, 2). At step 2 ranks 0 and 2
validate and wait in the barrier before rank 0 writes the best checkpoint; rank 1 (val_every 3)
waits in step 3's gradient `all_reduce`.
"""

import os
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import yaml
from torch import nn

SWEEP = [
    {"lr": 0.1, "val_every": 2, "steps": 100},
    {"lr": 0.03, "val_every": 3, "steps": 100},
    {"lr": 0.01, "val_every": 2, "steps": 100},
]


def write_sweep(root: Path) -> None:
    for job, params in enumerate(SWEEP):
        path = root / str(job)
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.yaml").write_text(yaml.safe_dump(params))


def job_config(root: Path) -> dict[str, Any]:
    job = os.environ.get("JOB_NUM", os.environ.get("RANK", "0"))
    return yaml.safe_load((root / job / "config.yaml").read_text())


def validate(model: nn.Module, best: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        score = -model(torch.ones(32, 6)).pow(2).mean()
    dist.barrier()  # every rank done with its step before rank 0 writes the checkpoint
    if dist.get_rank() == 0 and bool(score > best):
        torch.save(model.state_dict(), Path(tempfile.gettempdir()) / "h11c-best.pt")
    return torch.maximum(best, score.reshape(1))


def main() -> None:
    root = Path(tempfile.gettempdir()) / "h11c-multirun"
    write_sweep(root)
    cfg = job_config(root)
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Linear(6, 2)
    opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"])
    best = torch.tensor([-float("inf")])
    for step in range(1, cfg["steps"] + 1):
        loss = model(torch.randn(16, 6)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        if step % cfg["val_every"] == 0:
            best = validate(model, best)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
