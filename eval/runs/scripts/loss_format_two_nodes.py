"""mistake: the progress line formats the per-sample loss vector (reduction="none", kept for a
weighted loss) with `{loss:.4f}`; a tensor of more than one element has no float format, so every
rank fails at its first log line. Two c10d "nodes" on loopback.
label: none
first_rank: none
launch: torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id fmt9 eval/runs/scripts/loss_format_two_nodes.py & sleep 1; torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id fmt9 eval/runs/scripts/loss_format_two_nodes.py; wait
source: none known
written: session 12, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(nn.Linear(5, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    weights = torch.rand(16)
    for step in range(20):
        x, y = torch.randn(16, 5), torch.randn(16, 1)
        loss = nn.functional.mse_loss(model(x), y, reduction="none").squeeze(1)
        (loss * weights).mean().backward()
        opt.step()
        opt.zero_grad()
        if step % 10 == 0:
            print(f"[rank {rank}] step {step} loss {loss:.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
