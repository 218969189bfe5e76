"""mistake: a gradient-norm logger registers `register_full_backward_hook` on the first linear layer of
a model whose next layer is `nn.ReLU(inplace=True)`; the hooked module's output is modified in place,
and every rank fails at its first forward (launched with `python -m torch.distributed.run`).
label: none
first_rank: none
launch: python -m torch.distributed.run --nproc-per-node 2 eval/runs/scripts/backward_hook_inplace_relu.py
source: none known
written: session 13b, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

GRAD_NORMS = {}


def grad_logger(name):
    def hook(module, grad_input, grad_output):
        GRAD_NORMS[name] = grad_output[0].norm().item()

    return hook


def main():
    dist.init_process_group("gloo")
    net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(inplace=True), nn.Linear(32, 4))
    net[0].register_full_backward_hook(grad_logger("fc1"))
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(5):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if dist.get_rank() == 0:
            print(f"step {step} loss {loss.item():.4f} grad-norms {GRAD_NORMS}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
