"""A Trainer-style loop with callbacks; early stopping is decided on each rank's own eval shard.

Hang class: a rank leaves the training loop on a rank-local decision, the others train on.
Label: D19
Odd ranks: 2
Launch: torchrun 4
Held out: written in session 8 before the engine was changed, measured once

The eval metric is not reduced across ranks: each rank scores its own shard of the eval set. On
rank 2 every eval label is the ignore index, so its eval loss is NaN, never "improves", and
`EarlyStoppingCallback` sets `control.should_training_stop` on rank 2 only after `patience`
evaluations. Rank 2 leaves `train()` and waits in the final barrier of `save_model()`; ranks 0,
1 and 3 go on and wait in DDP's gradient all-reduce inside `backward()`.
"""

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

IGNORE = -100


@dataclass
class TrainerState:
    global_step: int = 0
    best_metric: float = float("inf")
    log_history: list[dict[str, float]] = field(default_factory=list)


@dataclass
class TrainerControl:
    should_training_stop: bool = False
    should_evaluate: bool = False


class TrainerCallback:
    def on_step_end(self, state: TrainerState, control: TrainerControl) -> None:
        pass

    def on_evaluate(self, state: TrainerState, control: TrainerControl, metrics: dict[str, float]) -> None:
        pass


class EvalEveryN(TrainerCallback):
    def __init__(self, every: int) -> None:
        self.every = every

    def on_step_end(self, state: TrainerState, control: TrainerControl) -> None:
        control.should_evaluate = state.global_step % self.every == 0


class EarlyStoppingCallback(TrainerCallback):
    def __init__(self, patience: int) -> None:
        self.patience = patience
        self.bad = 0

    def on_evaluate(self, state: TrainerState, control: TrainerControl, metrics: dict[str, float]) -> None:
        if metrics["eval_loss"] < state.best_metric:
            state.best_metric = metrics["eval_loss"]
            self.bad = 0
        else:
            self.bad += 1
        control.should_training_stop = self.bad >= self.patience


class Trainer:
    def __init__(self, model: nn.Module, eval_labels: list[int], callbacks: list[TrainerCallback]) -> None:
        self.model = DDP(model)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.eval_labels = eval_labels
        self.callbacks = callbacks
        self.state = TrainerState()
        self.control = TrainerControl()

    def evaluate(self) -> dict[str, float]:
        with torch.no_grad():
            logits = self.model.module(torch.ones(len(self.eval_labels), 8))
            labels = torch.tensor(self.eval_labels)
            loss = nn.functional.cross_entropy(logits, labels, ignore_index=IGNORE)
        return {"eval_loss": float(loss)}

    def train(self, max_steps: int) -> None:
        for _ in range(max_steps):
            loss = nn.functional.cross_entropy(self.model(torch.randn(4, 8)), torch.randint(0, 3, (4,)))
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            self.state.global_step += 1
            for cb in self.callbacks:
                cb.on_step_end(self.state, self.control)
            if self.control.should_evaluate:
                metrics = self.evaluate()
                self.state.log_history.append(metrics)
                for cb in self.callbacks:
                    cb.on_evaluate(self.state, self.control, metrics)
            if self.control.should_training_stop:
                break

    def save_model(self) -> None:
        if dist.get_rank() == 0:
            torch.save(self.model.module.state_dict(), "/dev/null")
        dist.barrier()


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    labels = [0, 1, 2, 1, 0, 2, IGNORE, IGNORE, IGNORE, 1, 2, 0]
    shard = labels[rank * 3 : rank * 3 + 3]
    trainer = Trainer(nn.Linear(8, 3), shard, [EvalEveryN(2), EarlyStoppingCallback(patience=2)])
    trainer.train(max_steps=100_000)
    trainer.save_model()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
