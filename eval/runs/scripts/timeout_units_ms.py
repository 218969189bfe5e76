"""mistake: the collective timeout comes from the run config's `dist_timeout: 1800` (meant as
seconds) but the setup helper passes it as `timedelta(milliseconds=...)` (the config schema's
other timeouts are in ms), so the group's timeout is 1.8 s; the first time rank 0 writes a
checkpoint (a few seconds) while rank 1 waits at the barrier after it, rank 1 times out.
label: MN3
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/timeout_units_ms.py
source: none known
written: session 11, unseen
"""

import time
from datetime import timedelta

import torch
import torch.distributed as dist

CONFIG = {"dist_timeout": 1800, "save_every": 2, "steps": 4}


def setup(cfg):
    dist.init_process_group("gloo", timeout=timedelta(milliseconds=cfg["dist_timeout"]))


def save_checkpoint(model, step):
    time.sleep(4)  # stands for writing a large checkpoint to network storage
    torch.save(model.state_dict(), f"/tmp/r11_ckpt_step{step}.pt")


def main():
    setup(CONFIG)
    rank = dist.get_rank()
    model = torch.nn.Linear(16, 4)
    for step in range(1, CONFIG["steps"] + 1):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        if step % CONFIG["save_every"] == 0:
            if rank == 0:
                save_checkpoint(model, step)
            dist.barrier()
        print(f"rank {rank} step {step}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
