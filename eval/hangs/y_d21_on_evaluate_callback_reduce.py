"""An HF-style trainer with a callback handler: after each evaluation the trainer fires
`on_evaluate` on its callbacks, but (as in many hand-rolled copies of the HF loop) only "where it
logs": `if self.is_world_process_zero(): self.callback_handler.on_evaluate(...)`. A user callback
averages the eval loss over the ranks in `on_evaluate` before deciding on the best checkpoint.

Hang class: a collective inside a callback the trainer fires on the main process only (the rank
test is in the trainer, the all_reduce in the callback, dispatched by event name).
Label: D21
Odd ranks: 0
Launch: torchrun 2
Held out: session 13

Rank 0 waits in the callback's `all_reduce`; rank 1 waits in the barrier that ends `evaluate()`.
"""

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn


@dataclass
class TrainerState:
    global_step: int = 0
    best_metric: float = float("inf")
    log_history: list[dict[str, float]] = field(default_factory=list)


class TrainerCallback:
    def on_evaluate(self, state: TrainerState, metrics: dict[str, float]) -> None:
        pass


class GlobalMetricCallback(TrainerCallback):
    """Averages the eval loss across ranks: each rank only saw its own eval shard."""

    def on_evaluate(self, state: TrainerState, metrics: dict[str, float]) -> None:
        t = torch.tensor([metrics["eval_loss"]])
        dist.all_reduce(t)
        metrics["eval_loss"] = t.item() / dist.get_world_size()
        state.best_metric = min(state.best_metric, metrics["eval_loss"])


class CallbackHandler:
    def __init__(self, callbacks: list[TrainerCallback]) -> None:
        self.callbacks = callbacks

    def call_event(self, event: str, state: TrainerState, **kwargs: dict[str, float]) -> None:
        for cb in self.callbacks:
            getattr(cb, event)(state, **kwargs)

    def on_evaluate(self, state: TrainerState, metrics: dict[str, float]) -> None:
        self.call_event("on_evaluate", state, metrics=metrics)


class Trainer:
    def __init__(self, model: nn.Module, callbacks: list[TrainerCallback]) -> None:
        self.model = model
        self.opt = torch.optim.SGD(model.parameters(), lr=0.01)
        self.state = TrainerState()
        self.callback_handler = CallbackHandler(callbacks)

    def is_world_process_zero(self) -> bool:
        return dist.get_rank() == 0

    def evaluate(self) -> dict[str, float]:
        with torch.no_grad():
            loss = self.model(torch.randn(16, 8)).pow(2).mean().item()
        metrics = {"eval_loss": loss}
        if self.is_world_process_zero():
            self.state.log_history.append(metrics)
            self.callback_handler.on_evaluate(self.state, metrics)
        dist.barrier()
        return metrics

    def train(self, steps: int, eval_steps: int) -> None:
        for step in range(steps):
            loss = self.model(torch.randn(8, 8)).pow(2).mean()
            self.opt.zero_grad()
            loss.backward()
            for p in self.model.parameters():
                dist.all_reduce(p.grad)
            self.opt.step()
            self.state.global_step = step + 1
            if self.state.global_step % eval_steps == 0:
                self.evaluate()


def main() -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    Trainer(nn.Linear(8, 1), [GlobalMetricCallback()]).train(steps=100, eval_steps=5)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
