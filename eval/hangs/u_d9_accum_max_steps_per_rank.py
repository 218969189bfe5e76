"""A hand-written Trainer-style loop (HF's shape) with gradient accumulation: each rank works out
`max_steps = epochs * (len(train_dataloader) // grad_accum)` from its own loader, and an optimizer
step (gradients flattened and all-reduced by hand) happens every `grad_accum` micro-batches or at
the last micro-batch of an epoch.

Hang class: ranks count their optimizer steps from their own shard, so they run different numbers
of synchronising steps.
Label: D9
Odd ranks: 2
Launch: torchrun 3
Held out: session 12

106 samples split in contiguous chunks of 36 (36, 36, 34), batch 1, accumulation 4: ranks 0 and 1
want 27 optimizer steps (9 an epoch), rank 2 wants 24 (34 // 4 = 8 an epoch, while the tail step
makes 9 happen); rank 2 reaches its max_steps in the third epoch and waits in the barrier before
saving, ranks 0 and 1 wait in the gradient all_reduce of their 25th step.
"""

import math
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Subset, TensorDataset


@dataclass
class TrainerState:
    epoch: int = 0
    global_step: int = 0


class Trainer:
    def __init__(self, model: nn.Module, dataset: TensorDataset, grad_accum: int, epochs: int) -> None:
        self.model = model
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        chunk = math.ceil(len(dataset) / self.world)
        shard = Subset(dataset, range(self.rank * chunk, min(len(dataset), (self.rank + 1) * chunk)))
        self.train_dataloader = DataLoader(shard, batch_size=1, shuffle=True)
        self.grad_accum = grad_accum
        self.epochs = epochs
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        self.state = TrainerState()

    def _sync_gradients(self) -> None:
        grads = [p.grad for p in self.model.parameters()]
        flat = torch.cat([g.flatten() for g in grads])
        dist.all_reduce(flat)
        flat /= self.world
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()

    def train(self) -> None:
        num_update_steps_per_epoch = len(self.train_dataloader) // self.grad_accum
        max_steps = self.epochs * num_update_steps_per_epoch
        for epoch in range(self.epochs):
            self.state.epoch = epoch
            steps_in_epoch = len(self.train_dataloader)
            for step, (x, y) in enumerate(self.train_dataloader):
                loss = nn.functional.mse_loss(self.model(x), y) / self.grad_accum
                loss.backward()
                if (step + 1) % self.grad_accum == 0 or step + 1 == steps_in_epoch:
                    self._sync_gradients()
                    self.optimizer.step()
                    self.optimizer.zero_grad()
                    self.state.global_step += 1
                if self.state.global_step >= max_steps:
                    break
            if self.state.global_step >= max_steps:
                break

    def save_model(self, path: str) -> None:
        dist.barrier()
        if self.rank == 0:
            torch.save(self.model.state_dict(), path)


def main() -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    dataset = TensorDataset(torch.randn(106, 16), torch.randn(106, 1))
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 1))
    trainer = Trainer(model, dataset, grad_accum=4, epochs=3)
    trainer.train()
    trainer.save_model(os.path.join(os.environ.get("TMPDIR", "/tmp"), "u_accum_model.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
