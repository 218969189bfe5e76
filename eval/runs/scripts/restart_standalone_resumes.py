"""mistake: a single-node job is made "fault tolerant" with `torchrun --standalone --max-restarts 2`,
but the script never saves or reloads a checkpoint: after rank 1's one-off error at step 4 the
restarted workers train again from step 0 and the run ends "successfully". (On this torch 2.13
CPU build the restarted gloo group sometimes fails to connect instead, as in
restart_from_step_zero.py; the stored output is a run where the restart went through.)
label: MN5
first_rank: 1
launch: torchrun --standalone --max-restarts 2 --nproc-per-node 2 eval/runs/scripts/restart_standalone_resumes.py
written: after the log engine was read (session 8, second batch)
source: none known
"""

import os

import torch
import torch.distributed as dist
from torch import nn


class Trainer:
    def __init__(self):
        dist.init_process_group("gloo")
        self.rank = dist.get_rank()
        self.attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        self.model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1)))
        self.optim = torch.optim.Adam(self.model.parameters(), lr=1e-3)

    def next_batch(self, step):
        if self.attempt == 0 and self.rank == 1 and step == 4:
            raise ConnectionResetError("[Errno 104] Connection reset by peer (data service)")
        return torch.randn(8, 6), torch.randn(8, 1)

    def fit(self, steps):
        for step in range(steps):
            x, y = self.next_batch(step)
            loss = nn.functional.mse_loss(self.model(x), y)
            self.optim.zero_grad()
            loss.backward()
            self.optim.step()
            if self.rank == 0:
                print(f"step {step} loss {loss.item():.4f}", flush=True)
        dist.destroy_process_group()


if __name__ == "__main__":
    Trainer().fit(8)
