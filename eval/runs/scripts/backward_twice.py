"""mistake: the loss of the generator is backpropagated a second time for a logging pass, without
retain_graph (a GAN loop run under DDP).
label: none
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/backward_twice.py
source: none known
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    gen = DDP(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 16)))
    opt = torch.optim.Adam(gen.parameters(), lr=2e-4)
    for step in range(3):
        z = torch.randn(8, 16)
        fake = gen(z)
        g_loss = fake.pow(2).mean()
        opt.zero_grad()
        g_loss.backward()
        grad_norm_loss = g_loss * 1.0
        grad_norm_loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
