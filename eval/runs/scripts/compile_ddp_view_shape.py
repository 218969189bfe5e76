"""mistake: a patch-embedding forward reshapes with a hard-coded `x.view(b, -1, 48)` although the
patch size was changed from 4x4x3 to 8x8x3 (192 values), so the view fails; the model is a DDP
model under torch.compile, so the error comes out through Dynamo's tracing on every rank.
label: none
alternates: E8
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/compile_ddp_view_shape.py
source: none known
written: session 12, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

PATCH = 8


class PatchEmbed(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(48, 64)

    def forward(self, img):
        b = img.shape[0]
        x = img.unfold(2, PATCH, PATCH).unfold(3, PATCH, PATCH)
        x = x.reshape(b, 3, -1, PATCH * PATCH).permute(0, 2, 1, 3)
        x = x.view(b, -1, 48)
        return self.proj(x).mean(1)


def main():
    dist.init_process_group("gloo")
    model = torch.compile(DDP(PatchEmbed()))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(2):
        out = model(torch.randn(2, 3, 32, 32))
        loss = out.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
