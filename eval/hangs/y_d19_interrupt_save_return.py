"""A "graceful stop" pattern: `train()` catches `KeyboardInterrupt`, saves a checkpoint and returns,
so a Ctrl-C (or a stall watchdog that sends SIGINT to its own process when a batch takes too long
to load) never loses the run. The checkpoint save ends with a barrier so that every rank has
written its shard before rank 0 writes the index.

Hang class: one rank takes the interrupt path (its own watchdog fired on a slow read) and leaves
the training loop; the others train on (a rank-local decision to stop, swallowed interrupt).
Label: D19
Odd ranks: 1
Launch: torchrun 2
Held out: session 13

Rank 1's third shard file is on a slow disk: its watchdog sends SIGINT while it reads, it saves
and waits in the checkpoint barrier; rank 0 waits in the gradient all_reduce of that step.
"""

import os
import signal
import threading
import time

import torch
import torch.distributed as dist
from torch import nn

STALL_S = 1.0


class StallWatchdog:
    """Sends SIGINT to this process when a data read takes longer than `limit` seconds."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.reading_since: float | None = None
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            time.sleep(0.1)
            since = self.reading_since
            if since is not None and time.monotonic() - since > self.limit:
                self.reading_since = None
                os.kill(os.getpid(), signal.SIGINT)


def read_batch(rank: int, step: int, dog: StallWatchdog) -> torch.Tensor:
    dog.reading_since = time.monotonic()
    if rank == 1 and step == 2:
        time.sleep(5.0)  # this shard lives on the slow mount
    dog.reading_since = None
    return torch.randn(8, 16)


def save_checkpoint(model: nn.Module, step: int) -> None:
    torch.save(model.state_dict(), f"/tmp/interrupt-demo-rank{dist.get_rank()}.pt")
    dist.barrier()  # every shard written before the index
    if dist.get_rank() == 0:
        print(f"checkpoint at step {step}", flush=True)


def train(model: nn.Module, steps: int) -> None:
    rank = dist.get_rank()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    dog = StallWatchdog(STALL_S)
    step = 0
    try:
        for step in range(steps):
            x = read_batch(rank, step, dog)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            opt.step()
    except KeyboardInterrupt:
        print(f"[rank {rank}] interrupted at step {step}, saving", flush=True)
        save_checkpoint(model, step)
        return
    save_checkpoint(model, step)


def main() -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    train(nn.Linear(16, 4), steps=200)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
