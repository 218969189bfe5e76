"""A hand-written Trainer with Lightning-style callbacks; the checkpoint callback is enabled from a
per-rank config (only the main process saves), and its `on_validation_end` waits at a barrier so
that every rank has finished validation before the file is written.

Hang class: a collective inside a callback hook that only some ranks have registered; the
collective's rank test is in the config, far from the call.
Label: D21
Odd ranks: 0
Launch: torchrun 2
Held out: session 11b

`build_callbacks(cfg)` adds `ModelCheckpoint` only when `cfg["checkpoint"]["enabled"]`, which
`make_config` sets to `is_main`. The Trainer calls `on_validation_end` on every registered
callback; on rank 0 the checkpoint's hook waits in `dist.barrier()`, rank 1 has no such callback
and has gone on to the next epoch's gradient all_reduce.
"""

import os
import tempfile
from typing import Any

import torch
import torch.distributed as dist
from torch import nn


class Callback:
    def on_train_batch_end(self, trainer: "Trainer", loss: float) -> None:
        pass

    def on_validation_end(self, trainer: "Trainer", metrics: dict[str, float]) -> None:
        pass


class LossLogger(Callback):
    def __init__(self) -> None:
        self.history: list[float] = []

    def on_train_batch_end(self, trainer: "Trainer", loss: float) -> None:
        self.history.append(loss)


class ModelCheckpoint(Callback):
    def __init__(self, dirpath: str, monitor: str) -> None:
        self.dirpath, self.monitor, self.best = dirpath, monitor, float("inf")

    def on_validation_end(self, trainer: "Trainer", metrics: dict[str, float]) -> None:
        dist.barrier()  # every rank done with validation before the file is written
        if metrics[self.monitor] < self.best:
            self.best = metrics[self.monitor]
            torch.save(trainer.model.state_dict(), os.path.join(self.dirpath, "best.pt"))


def make_config(rank: int) -> dict[str, Any]:
    is_main = rank == 0
    return {
        "epochs": 5,
        "steps": 30,
        "checkpoint": {"enabled": is_main, "monitor": "val_loss"},
        "log_every": 10,
    }


def build_callbacks(cfg: dict[str, Any]) -> list[Callback]:
    callbacks: list[Callback] = [LossLogger()]
    if cfg["checkpoint"]["enabled"]:
        callbacks.append(ModelCheckpoint(tempfile.gettempdir(), cfg["checkpoint"]["monitor"]))
    return callbacks


class Trainer:
    def __init__(self, model: nn.Module, cfg: dict[str, Any], callbacks: list[Callback]) -> None:
        self.model, self.cfg, self.callbacks = model, cfg, callbacks
        self.opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def _call(self, hook: str, *args: Any) -> None:
        for callback in self.callbacks:
            getattr(callback, hook)(self, *args)

    def training_step(self) -> float:
        x = torch.randn(16, 8)
        loss = (self.model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        loss.backward()
        for p in self.model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()
        self.opt.step()
        self.opt.zero_grad()
        return loss.item()

    def validate(self) -> dict[str, float]:
        with torch.no_grad():
            x = torch.randn(64, 8)
            loss = (self.model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        return {"val_loss": loss.item()}

    def fit(self) -> None:
        for _epoch in range(self.cfg["epochs"]):
            for _ in range(self.cfg["steps"]):
                self._call("on_train_batch_end", self.training_step())
            self._call("on_validation_end", self.validate())


def main() -> None:
    dist.init_process_group("gloo")
    cfg = make_config(dist.get_rank())
    torch.manual_seed(0)
    trainer = Trainer(nn.Linear(8, 1), cfg, build_callbacks(cfg))
    trainer.fit()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
