"""mistake: DDP(static_graph=True) (advised to silence a warning) on a model that skips its
refinement stage on some iterations, so the set of used parameters changes between steps.
label: D8
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/ddp_static_graph_varies.py
source: none known
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class TwoStage(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.coarse = torch.nn.Linear(16, 16)
        self.refine = torch.nn.Linear(16, 16)

    def forward(self, x, refine):
        y = torch.relu(self.coarse(x))
        return self.refine(y) if refine else y


def main():
    dist.init_process_group("gloo")
    model = DDP(TwoStage(), static_graph=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for it in range(6):
        out = model(torch.randn(4, 16), refine=(it < 3))
        loss = out.square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"rank {dist.get_rank()} it {it} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
