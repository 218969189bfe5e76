"""mistake: the embedding table is kept in half precision to save memory (`.half()` on one
submodule) and the model is then wrapped in DDP.
label: none
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/ddp_mixed_dtype.py
source: none known
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Rec(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(1000, 32).half()
        self.mlp = torch.nn.Linear(32, 1)

    def forward(self, idx):
        return self.mlp(self.emb(idx).float().mean(1))


def main():
    dist.init_process_group("gloo")
    model = DDP(Rec())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        loss = model(torch.randint(0, 1000, (8, 5))).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("ok", dist.get_rank())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
