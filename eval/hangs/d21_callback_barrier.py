"""A small Trainer whose logging callback is only installed on rank 0 and syncs in a barrier.

Hang class: a barrier in a callback that only rank 0 runs; the rank test is where the callback
list is built, not on any stack.
Label: D21
Odd ranks: 0
Launch: torchrun 2

`CSVLogger.on_epoch_end` calls `dist.barrier()` ("so no rank starts the next epoch before the log
is on disk"), but only rank 0 has a CSVLogger. Rank 0 waits in that barrier; rank 1 starts the
next epoch and waits in DDP's all-reduce inside `backward()`.
"""

import os
import tempfile

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Callback:
    def on_epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        pass


class CSVLogger(Callback):
    def __init__(self, path: str) -> None:
        self.path = path

    def on_epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(f"{epoch},{logs['loss']}\n")
        dist.barrier()


class Trainer:
    def __init__(self, model: nn.Module, callbacks: list[Callback]) -> None:
        self.model = DDP(model)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.callbacks = callbacks

    def fit(self, epochs: int) -> None:
        for epoch in range(epochs):
            loss = self.train_epoch()
            for callback in self.callbacks:
                callback.on_epoch_end(epoch, {"loss": loss})

    def train_epoch(self) -> float:
        total = 0.0
        for _ in range(4):
            loss = self.model(torch.randn(8, 6)).pow(2).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            total += loss.item()
        return total / 4


def main() -> None:
    dist.init_process_group("gloo")
    callbacks: list[Callback] = []
    if dist.get_rank() == 0:
        callbacks.append(CSVLogger(os.path.join(tempfile.gettempdir(), "train_log.csv")))
    Trainer(nn.Linear(6, 1), callbacks).fit(epochs=50)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
