"""Distributed checkpointing (`torch.distributed.checkpoint.save`) called on the main process only.

Hang class: a checkpoint API that is itself a collective, called under `if rank == 0`.
Label: D21
Odd ranks: 0
Launch: torchrun 2
Held out: session 9c

The script moved from `torch.save` to DCP for faster saves and kept the old guard: every 5 steps
rank 0 calls `dcp.save`, whose planner gathers every rank's plan, while rank 1 waits in the
barrier after the save.
"""

import os
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

CKPT_DIR = os.path.join(tempfile.gettempdir(), "m_dcp_ckpt")


def save_checkpoint(model: nn.Module, opt: torch.optim.Optimizer, step: int) -> None:
    state = {"model": model.state_dict(), "optim": opt.state_dict(), "step": step}
    dcp.save(state, checkpoint_id=os.path.join(CKPT_DIR, f"step_{step}"))


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(1, 1000):
        x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 5 == 0:
            if rank == 0:
                save_checkpoint(model, opt, step)
                print(f"saved step {step}", flush=True)
            dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
