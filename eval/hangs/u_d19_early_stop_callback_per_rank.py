"""HF-style early stopping: an `EarlyStoppingCallback` watches the validation loss every
`eval_steps` and sets `control.should_training_stop`; the loop breaks out of both loops when it is
set. Each rank validates on its own slice of the validation set and nobody all-reduces the loss or
the flag, so each rank decides on its own.

Hang class: a per-rank early-stop decision (no agreement between ranks); the rank that stopped
waits for the others at the end, they wait for it in the next step.
Label: D19
Odd ranks: 2
Launch: mp.spawn 3
Held out: session 12

Rank 2's validation slice comes from the last source file, whose targets are on another scale: its
loss gets worse as the model learns, its patience runs out at the third evaluation and it waits
in the barrier before saving; ranks 0 and 1 wait in DDP's gradient all-reduce inside `backward()`.
"""

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


@dataclass
class TrainerControl:
    should_training_stop: bool = False


class EarlyStoppingCallback:
    def __init__(self, patience: int, threshold: float = 0.0) -> None:
        self.patience = patience
        self.threshold = threshold
        self.best: float | None = None
        self.bad_evals = 0

    def on_evaluate(self, metrics: dict[str, float], control: TrainerControl) -> None:
        loss = metrics["eval_loss"]
        if self.best is None or loss < self.best - self.threshold:
            self.best, self.bad_evals = loss, 0
        else:
            self.bad_evals += 1
        if self.bad_evals >= self.patience:
            control.should_training_stop = True


@torch.no_grad()
def evaluate(model: nn.Module, val: tuple[torch.Tensor, torch.Tensor]) -> dict[str, float]:
    x, y = val
    return {"eval_loss": nn.functional.mse_loss(model(x), y).item()}


def worker(rank: int, world_size: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ.setdefault("MASTER_PORT", "29563")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    w = torch.randn(10, 1)
    model = DDP(nn.Sequential(nn.Linear(10, 32), nn.Tanh(), nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.002)
    gen = torch.Generator().manual_seed(100 + rank)
    val_x = torch.randn(256, 10, generator=gen)
    val_y = val_x @ w if rank < world_size - 1 else -3.0 * (val_x @ w)
    control = TrainerControl()
    callback = EarlyStoppingCallback(patience=3)
    eval_steps = 25
    global_step = 0
    for epoch in range(50):
        for _ in range(100):
            x = torch.randn(32, 10, generator=gen)
            loss = nn.functional.mse_loss(model(x), x @ w)
            opt.zero_grad()
            loss.backward()
            opt.step()
            global_step += 1
            if global_step % eval_steps == 0:
                callback.on_evaluate(evaluate(model.module, (val_x, val_y)), control)
            if control.should_training_stop:
                break
        if control.should_training_stop:
            break
    dist.barrier()
    if rank == 0:
        torch.save(model.module.state_dict(), os.path.join(os.environ.get("TMPDIR", "/tmp"), "u_es.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(3,), nprocs=3, join=True)
