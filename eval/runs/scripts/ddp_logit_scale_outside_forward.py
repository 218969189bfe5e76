"""mistake: a CLIP-style contrastive model keeps its learnable `logit_scale` on the model, but the
loss reads it as `model.module.logit_scale.exp()` outside forward; DDP runs with
find_unused_parameters=True (added "to be safe"), so it marks logit_scale unused at the end of
forward and then its gradient arrives during backward as well ("marked ready twice").
label: D8
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/ddp_logit_scale_outside_forward.py
source: https://github.com/pytorch/pytorch/pull/19515
written: session 10, unseen
"""

import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class DualEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.image = nn.Linear(32, 16)
        self.text = nn.Linear(24, 16)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))

    def forward(self, img, txt):
        return F.normalize(self.image(img), dim=-1), F.normalize(self.text(txt), dim=-1)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(DualEncoder(), find_unused_parameters=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(4):
        img, txt = torch.randn(8, 32), torch.randn(8, 24)
        zi, zt = model(img, txt)
        logits = model.module.logit_scale.exp() * zi @ zt.t()
        target = torch.arange(8)
        loss = (F.cross_entropy(logits, target) + F.cross_entropy(logits.t(), target)) / 2
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
