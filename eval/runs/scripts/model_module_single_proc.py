"""mistake: the model is wrapped in DDP only when world_size > 1, but the checkpoint code always
saves `model.module.state_dict()`; a one-process torchrun debug run (nproc 1) fails at the save.
label: none
first_rank: none
launch: torchrun --nproc-per-node 1 eval/runs/scripts/model_module_single_proc.py
source: none known
written: session 9, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    dist.init_process_group("gloo")
    model = nn.Linear(8, 2)
    if dist.get_world_size() > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(torch.randn(4, 8)).sum()
    loss.backward()
    opt.step()
    if dist.get_rank() == 0:
        torch.save(model.module.state_dict(), "/tmp/r9_single.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
