"""mistake: none; a healthy run whose output carries ordinary warnings (a deprecated argument, a
UserWarning from the optimizer scheduler order) that the user pastes asking whether something
is wrong.
label: none
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/clean_run_warnings.py
source: none known
"""

import warnings

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = nn.parallel.DistributedDataParallel(nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2)
    sched.step()
    for step in range(4):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f} lr {sched.get_last_lr()[0]:.3f}", flush=True)
    if rank == 0:
        warnings.warn("`evaluation_strategy` is deprecated, use `eval_strategy` instead", FutureWarning)
        print("training finished", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
