"""mistake: the job relies on `torchrun --max-restarts 1` to survive a transient failure, but the
script never reloads a checkpoint: after rank 1's one-off error at step 4 the restarted workers
begin again at step 0. (Here, torch 2.13 on gloo, the restarted group then fails to connect in
init_process_group: the restart itself is what the log shows.)
label: MN5
first_rank: 1
launch: torchrun --max-restarts 1 --nproc-per-node 2 eval/runs/scripts/restart_from_step_zero.py
source: none known
"""

import os

import torch
import torch.distributed as dist
import torch.nn as nn


def fetch_batch(rank, step):
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if attempt == 0 and rank == 1 and step == 4:
        raise ConnectionResetError("[Errno 104] Connection reset by peer (data service)")
    return torch.randn(8, 6)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = nn.parallel.DistributedDataParallel(nn.Linear(6, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(8):
        loss = model(fetch_batch(rank, step)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
