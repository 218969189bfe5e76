"""mistake: at the end of the epoch every rank writes its metrics to its own JSON file, but the
metric values are still tensors (`loss.detach()` instead of `loss.item()`), so `json.dump` raises
TypeError on every rank alike. Two c10d "nodes" on loopback, two processes each.
label: none
first_rank: none
launch: torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id job12cm eval/runs/scripts/metrics_json_tensor_all_ranks.py & sleep 1; torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id job12cm eval/runs/scripts/metrics_json_tensor_all_ranks.py; wait
source: none known
written: session 12c, unseen
"""

import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history = []
    for epoch in range(2):
        x = torch.randn(16, 8)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append({"epoch": epoch, "loss": loss.detach()})
    os.makedirs("/tmp/r12c_metrics", exist_ok=True)
    with open(f"/tmp/r12c_metrics/rank{rank}.json", "w") as f:
        json.dump(history, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
