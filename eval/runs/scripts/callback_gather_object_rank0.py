"""mistake: a Lightning-style callback's on_validation_epoch_end is written to run "only on the
main process" (`if trainer.is_global_zero:`), and inside it gathers every rank's predictions with
dist.all_gather_object; rank 1 skips the callback and goes on into the next epoch's gradient
all-reduce, so the two ranks wait in different collectives (timeout 15 s).
label: D21
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/callback_gather_object_rank0.py
source: https://github.com/Lightning-AI/pytorch-lightning/issues/18803
written: session 12, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn


class Trainer:
    def __init__(self, model, callbacks):
        self.model, self.callbacks = model, callbacks
        self.is_global_zero = dist.get_rank() == 0
        self.preds = []

    def sync_grads(self):
        for p in self.model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()

    def fit(self, epochs):
        opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        for epoch in range(epochs):
            for _ in range(4):
                x, y = torch.randn(8, 10), torch.randint(0, 3, (8,))
                loss = nn.functional.cross_entropy(self.model(x), y)
                opt.zero_grad()
                loss.backward()
                self.sync_grads()
                opt.step()
            with torch.no_grad():
                self.preds = self.model(torch.randn(16, 10)).argmax(1).tolist()
            for cb in self.callbacks:
                cb.on_validation_epoch_end(self, epoch)


class PredictionWriter:
    def on_validation_epoch_end(self, trainer, epoch):
        if trainer.is_global_zero:
            gathered = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, trainer.preds)
            n = sum(len(p) for p in gathered)
            print(f"epoch {epoch}: wrote {n} predictions", flush=True)


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    torch.manual_seed(0)
    Trainer(nn.Linear(10, 3), [PredictionWriter()]).fit(epochs=3)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
