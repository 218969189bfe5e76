"""A hand-written `Trainer.evaluate()`: the eval set is split by hand (`items[rank::world]`), each
eval batch's logits are gathered across ranks with `all_gather` (`_nested_gather`, as the HF
Trainer does per step) and the predictions are concatenated on every rank; a barrier ends the
evaluation before the metrics are written.

Hang class: ranks run different numbers of eval batches (the hand split leaves one rank a shorter
shard), so one rank leaves the batch loop while the other gathers once more.
Label: D9
Odd ranks: 1
Launch: torchrun 2
Held out: session 12d

Nine eval samples, batch 2: rank 0's shard has 5 (3 batches), rank 1's has 4 (2 batches). Rank 1
waits in the barrier at the end of `evaluate()`; rank 0 waits in the `all_gather` of its third
batch's logits.
"""

import torch
import torch.distributed as dist
from torch import nn


class Trainer:
    def __init__(self, model: nn.Module, eval_x: torch.Tensor, batch_size: int) -> None:
        self.model = model
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.eval_x = eval_x[self.rank :: self.world]
        self.batch_size = batch_size

    def _nested_gather(self, t: torch.Tensor) -> torch.Tensor:
        parts = [torch.empty_like(t) for _ in range(self.world)]
        dist.all_gather(parts, t)
        return torch.cat(parts)

    def evaluate(self) -> dict[str, float]:
        preds = []
        self.model.eval()
        with torch.no_grad():
            for lo in range(0, len(self.eval_x), self.batch_size):
                logits = self.model(self.eval_x[lo : lo + self.batch_size])
                preds.append(self._nested_gather(logits))
        dist.barrier()  # every rank done before the metrics are written
        allp = torch.cat(preds)
        return {"eval_mean_logit": float(allp.mean()), "eval_samples": float(len(allp))}


def main() -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Linear(8, 4)
    trainer = Trainer(model, torch.randn(9, 8), batch_size=2)
    metrics = trainer.evaluate()
    if dist.get_rank() == 0:
        print(metrics, flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
