"""mistake: progressive freezing for fine-tuning: after the first epoch the encoder is frozen with
`requires_grad_(False)` on the DDP-wrapped model's module (DDP default settings); DDP's reducer was
built with the encoder's parameters and still expects their gradients, so the next iteration finds
the previous reduction unfinished. Output collected with `--tee 3` in the second setting.
label: D8
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/ddp_freeze_after_wrap.py
source: https://discuss.pytorch.org/t/freezing-layers-during-training-with-ddp/153426
written: session 11, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(16, 32), nn.ReLU())
        self.head = nn.Linear(32, 3)

    def forward(self, x):
        return self.head(self.encoder(x))


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(Net())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(3):
        if epoch == 1:
            model.module.encoder.requires_grad_(False)
            if rank == 0:
                print("froze encoder", flush=True)
        for step in range(3):
            x, y = torch.randn(8, 16), torch.randint(0, 3, (8,))
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        if rank == 0:
            print(f"epoch {epoch} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
