"""Resuming mid-epoch from per-rank trainer state, skipping the batches already seen.

Hang class: ranks run different numbers of batches after a resume (each rank skips as many as
its own saved state says, and the states were saved at different steps).
Label: D9
Odd ranks: 1
Launch: torchrun 2
Held out: session 9c

Each rank saved `trainer_state_rank{r}.json` every 10 steps; the previous run was killed after
rank 1 had written its step 30 state but before rank 0 had overwritten its step 20 one. On resume each rank skips its own count
with `if i < resume_step: continue`, so rank 1 has 10 batches fewer left: it reaches the
end-of-epoch barrier while rank 0 waits in a gradient all-reduce.
"""

import json
import os
import tempfile

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

STATE_DIR = os.path.join(tempfile.gettempdir(), "m_resume_state")


def previous_run_state(rank: int) -> None:
    """What the killed run left behind (rank 1 saved once more than rank 0)."""
    os.makedirs(STATE_DIR, exist_ok=True)
    with open(os.path.join(STATE_DIR, f"trainer_state_rank{rank}.json"), "w") as f:
        json.dump({"epoch": 0, "step": 30 if rank == 1 else 20}, f)


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    previous_run_state(rank)
    with open(os.path.join(STATE_DIR, f"trainer_state_rank{rank}.json")) as f:
        state = json.load(f)
    data = TensorDataset(torch.randn(640, 12), torch.randn(640, 1))
    loader = DataLoader(data, batch_size=8, shuffle=False)
    model = DDP(nn.Linear(12, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(state["epoch"], 3):
        resume_step = state["step"] if epoch == state["epoch"] else 0
        for i, (x, y) in enumerate(loader):
            if i < resume_step:
                continue
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
