"""mistake: a weight-tied block is applied twice inside torch.utils.checkpoint with
use_reentrant=True, under DDP with the default settings: the recomputation in backward fires the
tied parameters' hooks again ("marked ready twice").
label: D8
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/ddp_ckpt_shared_layer.py
source: https://github.com/microsoft/FocalNet/issues/4
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = torch.nn.Linear(64, 64)
        self.out = torch.nn.Linear(64, 10)

    def _twice(self, x):
        return self.block(torch.tanh(self.block(x)))

    def forward(self, x):
        x = checkpoint(self._twice, x, use_reentrant=True)
        x = checkpoint(self._twice, x, use_reentrant=True)
        return self.out(x)


def main():
    dist.init_process_group("gloo")
    model = DDP(Tied(), find_unused_parameters=True)
    opt = torch.optim.Adam(model.parameters())
    for step in range(3):
        x = torch.randn(8, 64, requires_grad=True)
        loss = model(x).logsumexp(dim=1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("done", dist.get_rank())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
