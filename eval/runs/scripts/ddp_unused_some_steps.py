"""mistake: an auxiliary head only contributes to the loss every other step (an aux loss switched
on by `step % 2`), under DDP without find_unused_parameters: step 1 leaves the head without a
gradient, and the next forward finds the reduction unfinished.
label: D8
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/ddp_unused_some_steps.py
source: https://github.com/pytorch/pytorch/issues/43259
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU())
        self.cls = torch.nn.Linear(32, 4)
        self.aux = torch.nn.Linear(32, 1)

    def forward(self, x, use_aux):
        h = self.encoder(x)
        out = self.cls(h)
        if use_aux:
            return out, self.aux(h)
        return out, None


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(Model())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(6):
        x = torch.randn(8, 16)
        y = torch.randint(0, 4, (8,))
        logits, aux = model(x, use_aux=(step % 2 == 0))
        loss = torch.nn.functional.cross_entropy(logits, y)
        if aux is not None:
            loss = loss + 0.1 * aux.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
