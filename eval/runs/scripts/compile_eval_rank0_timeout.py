"""mistake: the evaluation runs on rank 0 only and compiles its own copy of the model with
torch.compile the first time it is called (inductor on CPU, tens of seconds), while rank 1 waits
at the barrier after it; the process group's timeout is 5 s (set low "to fail fast"), so rank 1's
barrier times out before rank 0 has finished compiling.
label: MN3
alternates: E8
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/compile_eval_rank0_timeout.py
source: https://discuss.pytorch.org/t/torch-compile-ddp-timeout-during-compilation/
written: session 12, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def evaluate(model):
    fast = torch.compile(model)
    with torch.no_grad():
        x = torch.randn(64, 32)
        return fast(x).argmax(1).float().mean().item()


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=5))
    rank = dist.get_rank()
    net = nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.LayerNorm(128), nn.Linear(128, 10))
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for _ in range(5):
            loss = model(torch.randn(16, 32)).logsumexp(1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        if rank == 0:
            print(f"epoch {epoch} eval score {evaluate(model.module):.3f}", flush=True)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
