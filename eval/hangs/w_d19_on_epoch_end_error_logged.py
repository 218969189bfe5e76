"""A small callback system (`Callback.on_epoch_end`, a `CallbackList` that calls each one and logs
a callback's error instead of stopping training: "a broken logger must not kill a 3-day run").
The sharded-checkpoint callback has each rank write its own shard, then a barrier so that rank 0
writes the manifest only once every shard is on disk. On rank 1 the shard directory (a read-only
path from that node's config) cannot be written, so it raises before the barrier; the error is
logged and training goes on.

Hang class: a step skipped through an exception caught and logged (a swallowed error in a
callback), so one rank leaves a collective out.
Label: D19
Odd ranks: 1
Launch: torchrun 2
Held out: session 12c

At the end of epoch 0, rank 0 waits in the barrier inside `ShardedCheckpoint.on_epoch_end`;
rank 1 logs the OSError and waits in the next epoch's gradient all_reduce.
"""

import json
import logging
import os

import torch
import torch.distributed as dist
from torch import nn

log = logging.getLogger("train")


class Callback:
    def on_epoch_end(self, epoch: int, logs: dict) -> None:
        pass


class ShardedCheckpoint(Callback):
    def __init__(self, model: nn.Module, shard_dir: str) -> None:
        self.model, self.shard_dir = model, shard_dir

    def on_epoch_end(self, epoch: int, logs: dict) -> None:
        rank = dist.get_rank()
        os.makedirs(self.shard_dir, exist_ok=True)
        torch.save(self.model.state_dict(), os.path.join(self.shard_dir, f"e{epoch}_r{rank}.pt"))
        dist.barrier()
        if rank == 0:
            with open(os.path.join(self.shard_dir, f"e{epoch}.json"), "w") as f:
                json.dump({"epoch": epoch, "shards": dist.get_world_size(), **logs}, f)


class CallbackList:
    def __init__(self, callbacks: list[Callback]) -> None:
        self.callbacks = callbacks

    def on_epoch_end(self, epoch: int, logs: dict) -> None:
        for cb in self.callbacks:
            try:
                cb.on_epoch_end(epoch, logs)
            except Exception:
                log.exception("callback %s failed at epoch %d", type(cb).__name__, epoch)


def main() -> None:
    logging.basicConfig(level=logging.INFO)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    shard_dir = f"/tmp/w_shards_{os.environ['MASTER_PORT']}" if rank == 0 else "/proc/w_shards"
    callbacks = CallbackList([ShardedCheckpoint(model, shard_dir)])
    for epoch in range(20):
        for _ in range(10):
            x = torch.randn(32, 8)
            loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            opt.step()
        with torch.no_grad():
            xv = torch.randn(64, 8)
            val_loss = float(((model(xv) - xv.sum(1, keepdim=True)) ** 2).mean())
        callbacks.on_epoch_end(epoch, {"val_loss": val_loss})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
