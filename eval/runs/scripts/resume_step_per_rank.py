"""mistake: on resume every rank reads the global step from "its own latest checkpoint" in a
per-rank directory; rank 1's last save was one interval older (it was killed earlier), so rank 1
resumes at step 6 and rank 0 at step 8, the ranks run different numbers of steps to the end of the
schedule, and rank 1 is left alone in DDP's all-reduce after rank 0 has finished (init timeout 10 s).
label: D9
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/resume_step_per_rank.py
source: none known
written: session 10b, unseen
"""

import os
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

TOTAL_STEPS = 12


def latest_step(ckpt_dir):
    steps = [int(n.split("_")[1].split(".")[0]) for n in os.listdir(ckpt_dir) if n.startswith("step_")]
    return max(steps, default=0)


def fake_previous_run(rank):
    """The per-rank checkpoint folders the interrupted run left behind."""
    ckpt_dir = tempfile.mkdtemp(prefix=f"ckpt_rank{rank}_")
    for step in (2, 4, 6) + ((8,) if rank == 0 else ()):
        open(os.path.join(ckpt_dir, f"step_{step}.pt"), "wb").close()
    return ckpt_dir


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=10))
    rank = dist.get_rank()
    start = latest_step(fake_previous_run(rank))
    print(f"[rank {rank}] resuming from step {start}", flush=True)
    model = DDP(nn.Linear(10, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(start, TOTAL_STEPS):
        loss = model(torch.randn(8, 10)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"[rank {rank}] step {step} loss {loss.item():.4f}", flush=True)
    print(f"[rank {rank}] training finished", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
